package admit

import (
	"context"
	"sync"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// Held is a concurrency slot a request holds, wherever it came from: the
// local tier, the limiter in Redis, or Local while Redis was away. Release
// frees it there.
type Held struct {
	g     *Gate
	key   string
	id    string
	local bool // counted by Local in this process
}

// Acquire takes a slot of the concurrency limit l at w's key for the
// holder id (w.Reserve slots kept for others; w.Shadow changes nothing
// here: the caller decides what a shadow refusal means): through the local
// tier on a key hot on this process (w.Lease, no Reserve), else at the limiter in
// Redis, within Timeout and the breakers, as Decide's calls. Decided, w's
// Result says whether a slot was free, and the Held (nil when refused) is
// released after the request, whatever happens to it. When Redis cannot
// decide, OnError says what happens: under Local a count of slots per key
// in this process decides (w.Local), under Open the request goes on with
// no slot (FailedOpen), under Closed or Fail it does not.
func (g *Gate) Acquire(ctx context.Context, w *Want, l client.Concurrency, id string) (*Held, Outcome, error) {
	return g.AcquireWith(ctx, w, l, id, g.o.OnError)
}

// AcquireWith is Acquire with onError in place of Options.OnError for this
// slot.
func (g *Gate) AcquireWith(ctx context.Context, w *Want, l client.Concurrency, id string, onError Failure) (*Held, Outcome, error) {
	var res client.Result
	err := g.run(ctx, func() []string { return []string{w.Key} }, func(ctx context.Context) (err error) {
		if g.leased != nil && w.Lease && w.Reserve == 0 {
			res, err = g.leased.Acquire(ctx, w.Key, l, id)
			return err
		}
		return g.traced(ctx, "CONC.ACQUIRE", func() (err error) {
			if g.pipe != nil {
				c := &concCall{acquire: true, key: w.Key, id: id, limit: l, reserve: w.Reserve}
				if err = g.piped(ctx, c); err == nil { // else the sender may still write c
					res = c.res
				}
				return err
			}
			res, err = g.c.Acquire(ctx, w.Key, l, id, client.Reserve(w.Reserve))
			return err
		})
	})
	switch {
	case err == nil:
		w.Result, w.Known = res, true
		if res.Limited {
			return nil, Decided, nil
		}
		return &Held{g: g, key: w.Key, id: id}, Decided, nil
	case ctx.Err() != nil:
		return nil, Gone, err
	}
	switch onError {
	case Open:
		return nil, FailedOpen, err
	case Closed:
		return nil, FailedClosed, err
	case Local:
		w.Known, w.Local = true, true
		if !g.slots.acquire(w.Key, l.Limit) {
			w.Result = client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: l.Limit, RetryAfter: ratelimit.Never}}
			return nil, Decided, nil
		}
		w.Result = client.Result{Verdict: ratelimit.Verdict{Limit: l.Limit, RetryAfter: ratelimit.Never}}
		return &Held{g: g, key: w.Key, id: id, local: true}, Decided, nil
	}
	return nil, Failed, err
}

// Release frees the slot id holds at key, taken by an Acquire without
// Lease, of this Gate or of another process's (Envoy's second call when a
// request's stream ends, which another replica may answer): at the limiter
// within Timeout and the breakers, as Decide's calls. It reports whether a
// live slot was freed (false: none held, or its lease had lapsed).
func (g *Gate) Release(ctx context.Context, key, id string) (bool, error) {
	var freed bool
	err := g.run(ctx, func() []string { return []string{key} }, func(ctx context.Context) error {
		return g.traced(ctx, "CONC.RELEASE", func() (err error) {
			freed, err = g.release(ctx, key, id)
			return err
		})
	})
	return freed, err
}

// release is CONC.RELEASE of id's slot at key: pipelined with the
// decisions' steps under Pipeline, else on its own.
func (g *Gate) release(ctx context.Context, key, id string) (bool, error) {
	if g.pipe == nil {
		return g.c.Release(ctx, key, id)
	}
	c := &concCall{key: key, id: id}
	if err := g.piped(ctx, c); err != nil {
		return false, err // the sender may still write c
	}
	return c.freed, nil
}

// piped sends c with the pipeline, within StepTimeout as a step is.
func (g *Gate) piped(ctx context.Context, c *concCall) error {
	if g.o.StepTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.o.StepTimeout)
		defer cancel()
	}
	return g.pipe.slot(ctx, c)
}

// Release frees the slot: in this process when Local or the local tier
// counted it (with no call, whatever the breakers say), else at the
// limiter within Timeout, unless its server's breaker is open (the slot
// then lapses with its lease). ctx is the request's: its cancellation does
// not stop the release. A nil Held does nothing.
func (h *Held) Release(ctx context.Context) {
	if h == nil {
		return
	}
	g := h.g
	if h.local {
		g.slots.release(h.key)
		return
	}
	ctx = context.WithoutCancel(ctx)
	if g.leased != nil {
		tctx, cancel := ctx, context.CancelFunc(func() {})
		if g.o.Timeout > 0 {
			tctx, cancel = context.WithTimeout(ctx, g.o.Timeout) // a call only once the tier closed
		}
		here, _, _ := g.leased.ReleaseHeld(tctx, h.key, h.id)
		cancel()
		if here {
			return
		}
	}
	g.run(ctx, func() []string { return []string{h.key} }, func(ctx context.Context) error {
		return g.traced(ctx, "CONC.RELEASE", func() error {
			_, err := g.release(ctx, h.key, h.id)
			return err
		})
	})
}

// localSlots counts Local's concurrency slots per key, in this process:
// at most one per request in flight.
type localSlots struct {
	mu   sync.Mutex
	held map[string]int64
}

func (ls *localSlots) acquire(key string, limit int64) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.held[key] >= limit {
		return false
	}
	if ls.held == nil {
		ls.held = map[string]int64{}
	}
	ls.held[key]++
	return true
}

func (ls *localSlots) release(key string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.held[key]--; ls.held[key] <= 0 {
		delete(ls.held, key)
	}
}
