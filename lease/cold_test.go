package lease

// A cold key: decided by the limiter, one call at a time, the decisions
// meanwhile sharing the next (keyState cold).

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// A cold key (below Hot decisions in a Target) is exact: one call per
// decision, answered as Client.Take answers.
func TestLeasedColdIsExact(t *testing.T) {
	tr := newTier(t, 1, Options{})
	p := tr.procs[0]
	l := client.GCRA(4, 5, time.Minute)
	for i := range 7 {
		r, err := p.Take(ctx, "user:1", l, 1)
		if err != nil || r.Limited != (i >= 5) {
			t.Fatalf("decision %d: %+v %v", i, r, err)
		}
		tr.advance(20 * time.Millisecond) // 3 decisions per Target of 50 ms
	}
	if s := p.Stats(); s.Exact != 7 || s.Grants != 0 || tr.calls.Load() != 7 {
		t.Fatalf("stats %+v, %d calls; want 7 exact decisions, 7 calls", s, tr.calls.Load())
	}
}

// Concurrent decisions on a cold key share one call in flight: the 39
// that come while the first is in flight go in the next call together
// (UpTo 39), and exactly as many are admitted as 40 calls one after
// another would admit, each answered as its own call would be. A caller
// that leaves before the answer has its unit given back.
func TestLeasedColdCoalesced(t *testing.T) {
	tr := newTier(t, 1, Options{Hot: 1000}) // a key this busy would lease; this one stays cold
	p := tr.procs[0]
	l := client.PerMinute(10)
	hold := make(chan struct{})
	tr.f.Lock()
	tr.f.Hold = hold
	tr.f.Unlock()
	results := make([]client.Result, 41)
	errs := make([]error, 41)
	var wg sync.WaitGroup
	decide := func(i int, ctx context.Context) {
		wg.Go(func() { results[i], errs[i] = p.Take(ctx, "user:1", l, 1) })
	}
	waitFor := func(cond func() bool) {
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("timed out")
			}
		}
	}
	decide(0, ctx)
	waitFor(func() bool {
		v, ok := p.keys.Load("user:1")
		if !ok {
			return false
		}
		k := v.(*leaseKey)
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.calling
	})
	gone, leave := context.WithCancel(ctx)
	left := make(chan struct{})
	go func() { // the first to join leaves before the answer
		defer close(left)
		results[1], errs[1] = p.Take(gone, "user:1", l, 1)
	}()
	waitFor(func() bool { return p.Stats().Coalesced == 1 })
	for i := 2; i < 41; i++ {
		decide(i, ctx)
	}
	waitFor(func() bool { return p.Stats().Coalesced == 40 })
	leave()
	<-left
	tr.f.Lock()
	tr.f.Hold = nil
	tr.f.Unlock()
	close(hold)
	wg.Wait()
	tr.settle()
	if errs[1] != context.Canceled {
		t.Fatalf("the decision that left: %v", errs[1])
	}
	admitted, remaining := 0, map[int64]bool{}
	for i, r := range results {
		if i == 1 {
			continue
		}
		if errs[i] != nil {
			t.Fatalf("decision %d: %v", i, errs[i])
		}
		if !r.Limited {
			admitted++
			remaining[r.Remaining] = true
		} else if r.RetryAfter <= 0 || r.RetryAfter > 6*time.Second {
			t.Errorf("decision %d refused with RetryAfter %v; one unit accrues in 6 s", i, r.RetryAfter)
		}
	}
	// The first call took 1 (9 remained); the shared one (40 joined) took
	// the other 9, the first of them for the one that left, whose unit was
	// given back: the key holds 1.
	if admitted != 9 || len(remaining) != 9 || !remaining[9] || !remaining[0] || remaining[8] {
		t.Fatalf("%d admitted, remaining %v; want 9, each its own: 9, then 7 to 0", admitted, remaining)
	}
	s := p.Stats()
	if s.Exact != 1 || s.Coalesced != 40 || s.Returned != 1 {
		t.Fatalf("stats %+v: want 1 exact call, 40 coalesced decisions, 1 unit given back", s)
	}
	if r, err := p.c.Peek(ctx, "user:1", l, 1); err != nil || r.Limited || r.Remaining != 0 { // one unit left: a peek of 1 fits and leaves 0
		t.Fatalf("the key after: %+v %v; want 1 left", r, err)
	}
}
