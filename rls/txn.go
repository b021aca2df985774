package rls

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// RL.ALL decides at most 16 limits at once. A request with more limits in
// one slot than that, more than 16 of which cannot be given back (windows
// keep their counts), is decided by an optimistic transaction on the
// slot's node:
//
//	WATCH k1 … kn
//	RL.PEEK <chunk 1> EACH MS … RL.PEEK <chunk m> EACH MS   (one round trip)
//	MULTI  RL.ALL <chunk 1> EACH MS … RL.ALL <chunk m> EACH MS  EXEC
//
// with chunks of at most 16 limits. When a peek refuses, nothing is written
// and the request is refused. When every chunk admits, EXEC runs the RL.ALL
// calls only if no watched key changed since WATCH; then each chunk finds
// the state its peek saw, and since no limit grows stricter while time
// passes (a window ends, a bucket refills, a log entry lapses), each admits
// what its peek admitted: all are counted, or (EXEC aborted) none, and the
// transaction is tried again. Keys named twice stay in one chunk, so the
// module refuses them as one RL.ALL does.
//
// The cost is two round trips instead of one, and retries while other
// requests write the same keys: after watchAttempts attempts, or at the
// request's deadline, the request fails with UNAVAILABLE (the gateway's
// failure mode decides) and nothing was counted. The one way this can
// count part of a request is a clock stepped back between the peeks and
// EXEC; what can be given back then is, and the rest is logged.
//
// Without the module the same runs the Lua engine's RL.PEEK and RL.ALL as
// scripts (EVALSHA, the state and replies of the module's), loaded on the
// node once; a module peek answered "unknown command" turns a node to them.
const watchAttempts = 8

// errContended is a transaction whose keys changed at every attempt.
var errContended = errors.New("rls: the keys of the request kept changing: transaction not committed")

// txScripts are the Lua engine's RL.PEEK and RL.ALL, for transactions on a
// node without the module; assembled when first needed (the module's users
// never pay for them).
var txScripts = sync.OnceValues(func() (peek, all lua.Script) { return lua.Must("RL.PEEK"), lua.Must("RL.ALL") })

// nodes remembers which nodes run transactions with scripts (their address
// → true) and where the scripts are loaded (→ loaded).
type nodes struct {
	mu     sync.Mutex
	lua    map[string]bool
	loaded map[string]bool
}

func (n *nodes) get(addr string) (useLua, loaded bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lua[addr], n.loaded[addr]
}

func (n *nodes) set(addr string, useLua, loaded bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lua == nil {
		n.lua, n.loaded = map[string]bool{}, map[string]bool{}
	}
	n.lua[addr], n.loaded[addr] = useLua, loaded
}

// onceCmd is a command go-redis sends once: a transaction whose reply was
// lost may have been committed, and must not be sent again.
type onceCmd struct{ redis.Cmd }

func (*onceCmd) NoRetry() bool { return true }

// takeWatched decides items (one slot's, any number) all or nothing in an
// optimistic transaction, as described above.
func (s *Service) takeWatched(ctx context.Context, items []*item) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	chunks := chunkByKey(items)
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.key
	}
	addr := s.nodeOf(ctx, items[0].key)
	for attempt := range watchAttempts {
		if attempt > 0 { // a short random pause, so that requests contending for keys take turns
			select {
			case <-time.After(rand.N(time.Duration(attempt) * time.Millisecond)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		start, now := time.Now(), s.now()
		for _, it := range items {
			it.started = now
		}
		done, err := s.watchOnce(ctx, addr, chunks, keys)
		s.m.redisCall(time.Since(start), err)
		if err != nil {
			s.refund(ctx, []step{{items: items}}) // what an EXEC that failed in part took
			return err
		}
		if done {
			if slices.ContainsFunc(items, func(it *item) bool { return it.known && it.res.Limited }) {
				s.refund(ctx, []step{{items: items}}) // refused (in part, if at EXEC): give back what was taken
			}
			return nil
		}
	}
	return errContended
}

// chunkByKey splits items into chunks of at most maxAll, every item of one
// key in the chunk of its first.
func chunkByKey(items []*item) [][]*item {
	var chunks [][]*item
	at := map[string]int{}
	for _, it := range items {
		c, ok := at[it.key]
		if !ok {
			c = len(chunks) - 1
			if c < 0 || len(chunks[c]) >= maxAll {
				chunks = append(chunks, nil)
				c++
			}
			at[it.key] = c
		}
		chunks[c] = append(chunks[c], it)
	}
	return chunks
}

// nodeOf is the address of key's node, as client.Client.Engines names it.
func (s *Service) nodeOf(ctx context.Context, key string) string {
	switch r := s.rdb.(type) {
	case *redis.Client:
		return r.Options().Addr
	case *redis.ClusterClient:
		if n, err := r.MasterForKey(ctx, key); err == nil {
			return n.Options().Addr
		}
	}
	return ""
}

// luaFor reports whether transactions on the node at addr run the Lua
// engine's scripts: the engine forced, or the one the client found there.
func (s *Service) luaFor(addr string) bool {
	switch s.opts.Engine {
	case client.Module:
		return false
	case client.Scripts, client.Functions:
		return true
	}
	if useLua, _ := s.txNodes.get(addr); useLua {
		return true
	}
	e := s.c.Engines()[addr]
	return e == client.Scripts || e == client.Functions
}

// watchOnce is one attempt: done reports that the request was decided
// (taken, or refused by a peek); false with no error, that EXEC found a
// watched key changed and nothing ran.
func (s *Service) watchOnce(ctx context.Context, addr string, chunks [][]*item, keys []string) (done bool, err error) {
	useLua := s.luaFor(addr)
	err = s.rdb.Watch(ctx, func(tx *redis.Tx) error {
		peeks, err := s.peekAll(ctx, tx, addr, chunks, &useLua)
		if err != nil {
			return err
		}
		refused := false
		for c, chunk := range chunks {
			each, head, err := readAll(peeks[c], len(chunk))
			if err != nil {
				return err
			}
			if head.Limited {
				refused = true
				for k, it := range chunk {
					it.res, it.known = each[k], true
				}
			}
		}
		if refused {
			done = true // refused: nothing written; chunks that admitted are not reported
			return nil
		}
		takes := make([]*onceCmd, len(chunks))
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for c, chunk := range chunks {
				takes[c] = allCmd(ctx, "RL.ALL", chunk, useLua)
				p.Process(ctx, takes[c])
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
		ran, partial := false, false
		for c, chunk := range chunks {
			each, head, rerr := readAll(takes[c], len(chunk))
			if rerr != nil {
				errs = append(errs, rerr)
				continue
			}
			ran = true
			for k, it := range chunk {
				it.res, it.known, it.taken = each[k], true, !head.Limited
			}
			partial = partial || head.Limited
		}
		if !ran {
			return err // no reply: whether it ran is not known, as for any lost reply
		}
		done = true
		if partial || len(errs) > 0 {
			s.log.Warn("rls: a transaction admitted by its peeks was refused in part at EXEC (a clock stepped back?)", "keys", len(keys), "err", errors.Join(errs...))
		}
		return errors.Join(errs...)
	}, keys...)
	return done, err
}

// peekAll sends every chunk's peek on tx in one round trip (with the
// scripts loaded first on a node that runs them) and returns the commands
// holding the replies. A node found without the module turns to the
// scripts (*useLua) and is remembered.
func (s *Service) peekAll(ctx context.Context, tx *redis.Tx, addr string, chunks [][]*item, useLua *bool) ([]*onceCmd, error) {
	for attempt := 0; ; attempt++ {
		if *useLua {
			if _, loaded := s.txNodes.get(addr); !loaded {
				peek, all := txScripts()
				for _, sc := range []lua.Script{peek, all} {
					if err := tx.ScriptLoad(ctx, sc.Source).Err(); err != nil {
						return nil, err
					}
				}
				s.txNodes.set(addr, true, true)
			}
		}
		peeks := make([]*onceCmd, len(chunks))
		var exists *redis.BoolSliceCmd
		_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			if *useLua {
				peek, all := txScripts()
				exists = p.ScriptExists(ctx, all.SHA1, peek.SHA1)
			}
			for c, chunk := range chunks {
				peeks[c] = allCmd(ctx, "RL.PEEK", chunk, *useLua)
				p.Process(ctx, peeks[c])
			}
			return nil
		})
		if attempt > 0 {
			return peeks, err
		}
		switch {
		case err != nil && !*useLua && s.opts.Engine == client.Auto && strings.HasPrefix(err.Error(), "ERR unknown command"):
			*useLua = true // a node without the module
			s.txNodes.set(addr, true, false)
			continue
		case *useLua && (err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") || exists != nil && !allTrue(exists.Val())):
			s.txNodes.set(addr, true, false) // the node lost its scripts: load them again
			continue
		}
		return peeks, err
	}
}

func allTrue(b []bool) bool {
	for _, x := range b {
		if !x {
			return false
		}
	}
	return len(b) > 0
}

// allCmd is RL.ALL's or RL.PEEK's command over chunk, with EACH and MS: the
// module's, or its script's (EVALSHA, the same arguments after the keys).
func allCmd(ctx context.Context, name string, chunk []*item, useLua bool) *onceCmd {
	args := make([]any, 0, 3+len(chunk)*7+2)
	if useLua {
		peek, all := txScripts()
		sha := all.SHA1
		if name == "RL.PEEK" {
			sha = peek.SHA1
		}
		args = append(args, "EVALSHA", sha)
	} else {
		args = append(args, name)
	}
	args = append(args, len(chunk))
	for _, it := range chunk {
		args = append(args, it.key)
	}
	for _, it := range chunk {
		args = appendLimiter(args, it.r)
		args = append(args, it.cost)
	}
	args = append(args, "MS", "EACH")
	cmd := &onceCmd{Cmd: *redis.NewCmd(ctx, args...)}
	if useLua {
		cmd.SetFirstKeyPos(3)
	} else {
		cmd.SetFirstKeyPos(2)
	}
	return cmd
}

// appendLimiter appends a rule's limiter as RL.ALL takes it (its family and
// arguments, the cost after), the limit limitOf makes for the client.
func appendLimiter(args []any, r *rule) []any {
	n, period := r.perUnit, int64(r.unit/time.Second)
	switch r.algorithm {
	case SlidingWindow:
		return append(args, "SW", n, period)
	case SlidingLog:
		return append(args, "SL", n, period)
	case GCRA:
		return append(args, "GCRA", n-1, n, period)
	case TokenBucket:
		return append(args, "TB", n, n, period)
	}
	return append(args, "FW", n, period)
}

// readAll reads an RL.ALL or RL.PEEK EACH MS reply of n limits: each
// limit's result, and the call's.
func readAll(cmd *onceCmd, n int) ([]client.Result, client.Result, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return nil, client.Result{}, err
	}
	if len(vals) != 6+5*n {
		return nil, client.Result{}, fmt.Errorf("rls: %v replied %d values for %d limits", cmd.Args()[0], len(vals), n)
	}
	ints := make([]int64, len(vals))
	for i, v := range vals {
		x, ok := v.(int64)
		if !ok {
			return nil, client.Result{}, fmt.Errorf("rls: %v replied %v, not integers", cmd.Args()[0], vals)
		}
		ints[i] = x
	}
	each := make([]client.Result, n)
	for i := range each {
		each[i] = fiveOf(ints[6+5*i : 11+5*i])
	}
	return each, fiveOf(ints[:5]), nil
}

// fiveOf reads five reply integers, times in milliseconds (-1: never), as
// the client reads them.
func fiveOf(v []int64) client.Result {
	ms := func(x int64) time.Duration {
		if x < 0 {
			return client.Never
		}
		return time.Duration(x) * time.Millisecond
	}
	return client.Result{Verdict: ratelimit.Verdict{Limited: v[0] == 1, Limit: v[1], Remaining: v[2], RetryAfter: ms(v[3]), ResetAfter: ms(v[4])}}
}
