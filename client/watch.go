package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrContended is a Watched step (see Client.Send) whose keys changed at
// every attempt: nothing of it was counted.
var ErrContended = errors.New("ratelimit: the keys of a decision kept changing: its transaction was not committed")

// watchAttempts bounds a Watched step's transactions.
const watchAttempts = 8

// watched decides wants (one slot's, any number) in an optimistic
// transaction (see Send).
func (c *Client) watched(ctx context.Context, wants []*Want) error {
	ctx = c.resumed(ctx)
	chunks := chunkByKey(wants)
	keys := make([]string, len(wants))
	for i, w := range wants {
		keys[i] = w.Key
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
		ctx, done, err = c.watchOnce(ctx, chunks, keys) // ctx: the call's, after any start-up work
		if err != nil || done {
			return err
		}
	}
	return ErrContended
}

// chunkByKey splits wants into chunks of at most MaxAll, every want of
// one key in the chunk of its first (the module refuses a key named twice
// in one call, as it must).
func chunkByKey(wants []*Want) [][]*Want {
	var chunks [][]*Want
	at := map[string]int{}
	for _, w := range wants {
		c, ok := at[w.Key]
		if !ok {
			c = len(chunks) - 1
			if c < 0 || len(chunks[c]) >= MaxAll {
				chunks = append(chunks, nil)
				c++
			}
			at[w.Key] = c
		}
		chunks[c] = append(chunks[c], w)
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
func (c *Client) watchOnce(ctx context.Context, chunks [][]*Want, keys []string) (_ context.Context, done bool, err error) {
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
			peeks, lost = c.peekAll(ctx, tx, e, chunks)
			if lost != nil {
				return lost
			}
			refused := false
			for k, chunk := range chunks {
				head, err := readChunk(peeks[k], chunk)
				if err != nil {
					return err
				}
				if head.Limited { // refused: nothing written; the chunks whose peeks admitted are not reported
					refused = true
					for _, w := range chunk {
						w.Known = true
					}
				}
			}
			if refused {
				done = true
				return nil
			}
			return c.commit(ctx, tx, e, chunks, &done)
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
func (c *Client) peekAll(ctx context.Context, tx *redis.Tx, e Engine, chunks [][]*Want) ([]*onceCmd, error) {
	peeks := make([]*onceCmd, len(chunks))
	for k, chunk := range chunks {
		cmd, err := c.chunkCmd(ctx, e, cmdPeekAll, iPeekAll, chunk)
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
func (c *Client) commit(ctx context.Context, tx *redis.Tx, e Engine, chunks [][]*Want, done *bool) error {
	takes := make([]*onceCmd, len(chunks))
	for k, chunk := range chunks {
		cmd, err := c.chunkCmd(ctx, e, cmdAll, iAll, chunk)
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
	for k, chunk := range takes {
		head, rerr := readChunk(chunk, chunks[k])
		if rerr != nil {
			errs = append(errs, rerr)
			continue
		}
		ran = true
		for _, w := range chunks[k] {
			w.Known, w.Taken = true, !head.Limited
		}
	}
	if !ran {
		return err // no reply: whether it ran is not known, as for any lost reply
	}
	*done = true
	return errors.Join(errs...)
}

// chunkCmd is RL.ALL's or RL.PEEK's command (name, command i) over chunk,
// with EACH and MS, as engine e runs it.
func (c *Client) chunkCmd(ctx context.Context, e Engine, name string, i int, chunk []*Want) (*onceCmd, error) {
	args, err := allArgs(name, keyedOf(chunk, make([]Keyed, 0, len(chunk))), []Option{Reserve(chunk[0].Reserve)})
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

// readChunk reads an RL.ALL or RL.PEEK EACH reply into its chunk's
// Results (not Known: the caller says which count), and returns the
// call's.
func readChunk(cmd *onceCmd, chunk []*Want) (Result, error) {
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
	for k, w := range chunk {
		w.Result = each[k]
	}
	return head, nil
}
