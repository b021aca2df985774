package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/internal/clientx"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// watchAttempts bounds a transaction's attempts.
const watchAttempts = 8

// watching is one transaction's limits, of one slot (any number), and
// where their answers go (see clientx.Watch).
type watching struct {
	limits  []Keyed
	each    []Result
	reserve int64
	known   []bool
	taken   []bool
	chunks  [][]int // indexes into limits: at most 16 each, a key's all in one
}

// watched decides w's limits all or nothing in an optimistic transaction,
// as package admit sends a step of more than 16 windows of one slot:
//
//	WATCH k1 … kn
//	RL.PEEK <chunk 1> EACH MS … RL.PEEK <chunk m> EACH MS   (one round trip)
//	MULTI  RL.ALL <chunk 1> EACH MS … RL.ALL <chunk m> EACH MS  EXEC
//
// with chunks of at most 16 limits. When a peek refuses, nothing is
// written and the limits of the chunks that refused are known, refused.
// When every chunk admits, EXEC runs the RL.ALL calls only if no watched
// key changed since WATCH; each chunk then meets the state its peek saw
// and, since no limit grows stricter while time passes, admits what its
// peek admitted: all are counted, or none and the transaction is tried
// again, up to 8 times with a random pause of up to a millisecond per
// attempt; then it fails with clientx.ErrContended, nothing counted. On a
// server without the module the transaction runs the Lua engine the
// client runs there.
func (c *Client) watched(ctx context.Context, w *watching) error {
	ctx = c.resumed(ctx)
	w.chunks = chunkByKey(w.limits)
	keys := make([]string, len(w.limits))
	for i, kl := range w.limits {
		keys[i] = kl.Key
	}
	for attempt := range watchAttempts {
		if attempt > 0 { // a short random pause, so that decisions contending for keys take turns
			select {
			case <-time.After(rand.N(time.Duration(attempt) * time.Millisecond)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var done bool
		var err error
		ctx, done, err = c.watchOnce(ctx, w, keys) // ctx: the call's, after any start-up work
		if err != nil || done {
			return err
		}
	}
	return clientx.ErrContended
}

// chunkByKey splits limits into chunks of at most 16, every limit of one
// key in the chunk of its first (the module refuses a key named twice in
// one call, as it must).
func chunkByKey(limits []Keyed) [][]int {
	var chunks [][]int
	at := map[string]int{}
	for i, kl := range limits {
		c, ok := at[kl.Key]
		if !ok {
			c = len(chunks) - 1
			if c < 0 || len(chunks[c]) >= spec.MaxKeys {
				chunks = append(chunks, nil)
				c++
			}
			at[kl.Key] = c
		}
		chunks[c] = append(chunks[c], i)
	}
	return chunks
}

var (
	iPeekAll = commandIndex[cmdPeekAll]
	iAll     = commandIndex[cmdAll]
)

// watchOnce is one transaction: done reports that the step was decided
// (taken, or refused by a peek); false with no error, that EXEC found a
// watched key changed and nothing ran. It runs on the engine of the keys'
// server, readied first; a server found without the module, or without
// its Lua code, is readied again and the peeks sent again, once. It
// returns the context the call goes on with (see Client.await).
func (c *Client) watchOnce(ctx context.Context, w *watching, keys []string) (_ context.Context, done bool, err error) {
	for attempt := 0; ; attempt++ {
		var e Engine
		var n *node
		var ask doer
		ctx, e, n, ask, err = c.engineFor(ctx, keys[0]) // ctx: the call's, after any start-up work
		if err == nil {
			ctx, e, err = c.readyLua(ctx, e, n, ask)
		}
		if err == nil && e == Scripts {
			if ctx, err = n.load(ctx, c, ask, iPeekAll); err == nil {
				ctx, err = n.load(ctx, c, ask, iAll)
			}
		}
		if err != nil {
			return ctx, false, err
		}
		var lost error
		err = c.rdb.Watch(ctx, func(tx *redis.Tx) error {
			var peeks []*onceCmd
			peeks, lost = c.peekAll(ctx, tx, e, w)
			if lost != nil {
				return lost
			}
			refused := false
			for k, chunk := range w.chunks {
				head, err := w.read(peeks[k], chunk)
				if err != nil {
					return err
				}
				if head.Limited { // refused: nothing written; the chunks whose peeks admitted are not reported
					refused = true
					for _, i := range chunk {
						w.known[i] = true
					}
				}
			}
			if refused {
				done = true
				return nil
			}
			return c.commit(ctx, tx, e, w, &done)
		}, keys...)
		if lost != nil && attempt == 0 && c.lost(e, n, iPeekAll, lost) {
			if e == Scripts {
				n.loads[iAll].done.Store(false) // a flush took both
			}
			continue // readied again, the peeks sent again
		}
		return ctx, done, err
	}
}

// peekAll sends every chunk's RL.PEEK EACH on tx in one round trip, on
// engine e, and returns the commands holding the replies; an error that
// says the server lacks what e runs the peek with is returned as it is.
func (c *Client) peekAll(ctx context.Context, tx *redis.Tx, e Engine, w *watching) ([]*onceCmd, error) {
	peeks := make([]*onceCmd, len(w.chunks))
	for k, chunk := range w.chunks {
		cmd, err := c.chunkCmd(ctx, e, cmdPeekAll, iPeekAll, w, chunk)
		if err != nil {
			return nil, err
		}
		peeks[k] = cmd
	}
	_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range peeks {
			p.Process(ctx, cmd)
		}
		return nil
	})
	return peeks, err
}

// commit sends every chunk's RL.ALL EACH in MULTI/EXEC and reads what ran.
func (c *Client) commit(ctx context.Context, tx *redis.Tx, e Engine, w *watching, done *bool) error {
	takes := make([]*onceCmd, len(w.chunks))
	for k, chunk := range w.chunks {
		cmd, err := c.chunkCmd(ctx, e, cmdAll, iAll, w, chunk)
		if err != nil {
			return err
		}
		takes[k] = cmd
	}
	_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range takes {
			p.Process(ctx, cmd)
		}
		return nil
	})
	switch {
	case errors.Is(err, redis.TxFailedErr):
		return nil // a watched key changed: nothing ran
	case redis.IsExecAbortError(err):
		return err // a command was refused before EXEC: nothing ran
	}
	var errs []error
	ran := false
	for k, cmd := range takes {
		head, rerr := w.read(cmd, w.chunks[k])
		if rerr != nil {
			errs = append(errs, rerr)
			continue
		}
		ran = true
		for _, i := range w.chunks[k] {
			w.known[i], w.taken[i] = true, !head.Limited
		}
	}
	if !ran {
		return err // no reply: whether it ran is not known, as for any lost reply
	}
	*done = true
	return errors.Join(errs...)
}

// chunkCmd is RL.ALL's or RL.PEEK's command (name, command i) over w's
// chunk, with EACH and MS, as engine e runs it.
func (c *Client) chunkCmd(ctx context.Context, e Engine, name string, i int, w *watching, chunk []int) (*onceCmd, error) {
	limits := make([]Keyed, len(chunk))
	for k, at := range chunk {
		limits[k] = w.limits[at]
	}
	args, err := allArgs(name, limits, []Option{Reserve(w.reserve)})
	if err != nil {
		return nil, err
	}
	args = append(args, "EACH")
	switch e {
	case Scripts:
		return luaCmd(ctx, args, i, "evalsha"), nil
	case Functions:
		return luaCmd(ctx, args, i, "fcall"), nil
	}
	cmd := &onceCmd{Cmd: *redis.NewCmd(ctx, args...)}
	cmd.SetFirstKeyPos(2)
	return cmd, nil
}

// read reads an RL.ALL or RL.PEEK EACH reply into its chunk's Results
// (not known: the caller says which count), and returns the call's.
func (w *watching) read(cmd *onceCmd, chunk []int) (Result, error) {
	if err := cmd.Err(); err != nil {
		return Result{}, err
	}
	vals, err := cmd.integers(cmd.Args()[0])
	if err != nil {
		return Result{}, err
	}
	each := make([]Result, len(chunk))
	head, err := readEach(vals, each, false)
	if err != nil {
		return Result{}, err
	}
	for k, i := range chunk {
		w.each[i] = each[k]
	}
	return head, nil
}
