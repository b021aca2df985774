package client

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Batch sends several limiter calls in one round trip (a go-redis
// pipeline; per node in a Cluster or a Ring), each decided on its own, in
// order, exactly as if sent one by one: one call's refusal takes nothing
// back from another (for all or nothing, use All). Add calls, then Exec;
// each Call then holds its answer.
//
//	b := c.Batch()
//	api := b.Take("rl:{u:42}:api", client.PerMinute(60), 1)
//	slot := b.Acquire("rl:{u:42}:exports", client.Concurrency{Limit: 2, Lease: time.Minute}, reqID)
//	err := b.Exec(ctx)
//	res, err := api.Result()
//
// Each call runs on the engine its server uses (the module, or its script,
// loaded once before the pipeline is sent), is never retried, and the
// whole round trip ends at ctx's deadline. A Batch is for one goroutine;
// Exec may be called once.
type Batch struct {
	c     *Client
	calls []*Call
}

// Call is one call of a Batch. Its answer is there after Exec.
type Call struct {
	args    []any
	keyPos  int8
	release bool     // CONC.RELEASE: an integer reply, not five
	upto    bool     // UpTo: the reply ends with the grant
	each    []Result // RL.ALL EACH: filled with each limit's result
	res     Result
	held    bool
	err     error
}

// Result is the call's answer: its Result, or why there is none.
func (c *Call) Result() (Result, error) { return c.res, c.err }

// Released is a Release call's answer: whether id held a slot.
func (c *Call) Released() (bool, error) { return c.held, c.err }

// Batch returns an empty batch of calls on c.
func (c *Client) Batch() *Batch { return &Batch{c: c} }

func (b *Batch) add(args []any, err error, keyPos int8, opts ...Option) *Call {
	call := &Call{args: args, keyPos: keyPos, err: err, upto: upTo(opts)}
	b.calls = append(b.calls, call)
	return call
}

// Take adds Client.Take's call.
func (b *Batch) Take(key string, l Limit, cost int64, opts ...Option) *Call {
	args, err := oneArgs(takeName[l.algo], key, l, cost, opts)
	return b.add(args, err, 1, opts...)
}

// Peek adds Client.Peek's call.
func (b *Batch) Peek(key string, l Limit, cost int64, opts ...Option) *Call {
	args, err := oneArgs(peekName[l.algo], key, l, cost, opts)
	return b.add(args, err, 1, opts...)
}

// All adds Client.All's call (RL.ALL): all of limits admit, or nothing
// is taken from any.
func (b *Batch) All(limits []Keyed, opts ...Option) *Call {
	args, err := allArgs(cmdAll, limits, opts)
	return b.add(args, err, 2, opts...)
}

// AllEach adds Client.AllEach's call: each[i] holds limits[i]'s own result
// once Exec has returned.
func (b *Batch) AllEach(limits []Keyed, each []Result, opts ...Option) *Call {
	if len(each) < len(limits) {
		return b.add(nil, fmt.Errorf("ratelimit: AllEach: %d results for %d limits", len(each), len(limits)), 2)
	}
	args, err := allArgs(cmdAll, limits, opts)
	if err == nil {
		args = append(args, "EACH")
	}
	call := b.add(args, err, 2, opts...)
	call.each = each[:len(limits)]
	return call
}

// Acquire adds Client.Acquire's call.
func (b *Batch) Acquire(key string, l Concurrency, id string, opts ...Option) *Call {
	args, err := acquireArgs(key, l, id, opts)
	return b.add(args, err, 1, opts...)
}

// Release adds Client.Release's call; its answer is Call.Released.
func (b *Batch) Release(key, id string) *Call {
	call := b.add([]any{cmdRelease, key, id}, nil, 1)
	call.release = true
	return call
}

// sent is one call as the pipeline carries it.
type sent struct {
	call   *Call
	cmd    *onceCmd
	n      *node
	i      int    // the command's position in spec.Commands
	engine Engine // what runs it
}

// Exec sends every call and reads every answer into its Call. It returns
// the first call's error, if any: a call with bad arguments fails alone,
// and is not sent. A call answered that it ran nothing (its server lost
// its Lua code or lacks the module, its slot is moving) is sent again on
// its own, as Client's calls are.
func (b *Batch) Exec(ctx context.Context) error {
	c := b.c
	ctx = c.resumed(ctx)
	var items []sent
	pipe := c.rdb.Pipeline()
	for _, call := range b.calls {
		if call.err != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			call.err = err // the caller is gone: Redis is not asked
			continue
		}
		var it sent
		var err error
		ctx, it, err = c.queue(ctx, pipe, call) // ctx: the call's, after any start-up work
		if err != nil {
			call.err = err
			continue
		}
		items = append(items, it)
	}
	if len(items) > 0 {
		if err := c.within(ctx, func() error { _, err := pipe.Exec(ctx); return err }); ctx.Err() != nil {
			// The pipeline was left to finish alone: its replies are not ours to read.
			for _, it := range items {
				it.call.err = err
			}
			items = nil
		}
	}
	for _, it := range items {
		cmd, err := it.cmd, it.cmd.Err()
		switch {
		case err == nil:
		case c.lost(it.engine, it.n, it.i, err) || c.moving(err):
			cmd, err = c.process(ctx, it.call.args, it.call.keyPos) // it ran nothing: sent again alone
		default:
			err = &ServerError{Server: it.n.addr, Err: wrap(err)}
		}
		it.call.read(cmd, err)
	}
	for _, call := range b.calls {
		if call.err != nil {
			return call.err
		}
	}
	return nil
}

// queue adds call to pipe on the engine its key's server runs, readying
// that engine first (the probe, the library or the script), and returns
// the context the batch goes on with (see Client.await).
func (c *Client) queue(ctx context.Context, pipe redis.Pipeliner, call *Call) (context.Context, sent, error) {
	i, ok := commandIndex[commandName(call.args)]
	if !ok {
		return ctx, sent{}, fmt.Errorf("ratelimit: no command %v", call.args[0])
	}
	key, _ := call.args[call.keyPos].(string)
	ctx, e, n, ask, err := c.engineFor(ctx, key)
	if err == nil {
		ctx, e, err = c.readyLua(ctx, e, n, ask)
	}
	if err == nil && e == Scripts {
		ctx, err = n.load(ctx, c, ask, i)
	}
	if err != nil {
		addr := ""
		if n != nil {
			addr = n.addr
		}
		return ctx, sent{}, &ServerError{Server: addr, Err: err}
	}
	it := sent{call: call, n: n, i: i, engine: e}
	switch e {
	case Scripts:
		it.cmd = luaCmd(ctx, call.args, i, "evalsha")
	case Functions:
		it.cmd = luaCmd(ctx, call.args, i, "fcall")
	default:
		it.cmd = &onceCmd{Cmd: *redis.NewCmd(ctx, call.args...)}
		it.cmd.SetFirstKeyPos(call.keyPos)
	}
	pipe.Process(ctx, it.cmd)
	return ctx, it, nil
}

// read takes the call's answer from cmd, or err.
func (call *Call) read(cmd *onceCmd, err error) {
	if err != nil {
		call.err = err
		return
	}
	if call.release {
		n, err := cmd.Int64()
		call.held, call.err = n > 0, err
		return
	}
	vals, err := cmd.integers(call.args[0])
	switch {
	case err == nil && call.each != nil:
		call.res, err = readEach(vals, call.each, call.upto)
	case err == nil:
		call.res, err = reading(call.args[0], vals, call.upto)
	}
	call.err = err
}
