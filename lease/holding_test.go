package lease

// A hot key holding units: its decisions spend them here, with no call and
// no allocation, and unspent units go back after Lifetime (keyState holding).

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// A hot key with room decides locally: at 100,000 decisions a second on
// one process, under 0.01 calls per decision, every one admitted.
func TestLeasedHotIsLocal(t *testing.T) {
	tr := newTier(t, 1, Options{})
	p := tr.procs[0]
	l := client.GCRA(999_999, 1_000_000, time.Second)
	const decisions = 200_000
	for i := range decisions {
		r, err := p.Take(ctx, "api", l, 1)
		if err != nil || r.Limited {
			t.Fatalf("decision %d: %+v %v", i, r, err)
		}
		tr.advance(10 * time.Microsecond)
		if i%1000 == 0 {
			tr.settle()
		}
	}
	tr.settle()
	s := p.Stats()
	if per := float64(tr.calls.Load()) / decisions; per > 0.01 || s.Local < decisions-int64(p.o.Hot) {
		t.Fatalf("%d calls for %d decisions (%.4f each), stats %+v", tr.calls.Load(), decisions, per, s)
	}
	t.Logf("%d calls for %d decisions, stats %+v", tr.calls.Load(), decisions, p.Stats())
}

// Units not spent within their lifetime go back by themselves (the
// sweep), and the key, idle, is forgotten: a hot key once idle for as
// long as its registry slot lasts (2 s), so that a process that pauses
// (stalled on a busy machine, its callers waiting elsewhere) keeps what
// it knows of the key, its fallback among it.
func TestLeasedLifetime(t *testing.T) {
	tr := newTier(t, 1, Options{Hot: 2})
	p := tr.procs[0]
	l := client.TokenBucket(100, 10, time.Second)
	for range 4 {
		p.Take(ctx, "tb", l, 1)
		tr.settle()
	}
	held := p.Stats().Granted - p.Stats().Local
	tr.advance(p.o.Lifetime)
	p.sweep(tr.now())
	tr.settle()
	keys := func() (n int) {
		for range p.all() {
			n++
		}
		return n
	}
	if s := p.Stats(); s.Returned != held || keys() != 1 {
		t.Fatalf("after a lifetime: %+v, %d keys; want %d returned, the key kept", s, keys(), held)
	}
	// 4 spent, 2 of them refilled in the 200 ms since: 98 left.
	if r, err := client.New(tr.f.Client()).Peek(ctx, "tb", l, 0); err != nil || r.Remaining != 98 {
		t.Fatalf("after the return: %+v %v, want 98", r, err)
	}
	tr.advance(registryLease - p.o.Lifetime)
	p.sweep(tr.now())
	if keys() != 0 {
		t.Fatalf("idle for %v: %d keys kept", registryLease, keys())
	}
}

// Eight goroutines deciding on one key of one process at once, the clock
// moving 1 µs per decision: never more admitted than the exact limiter's
// burst and rate over the run and τ, no decision lost or stuck.
func TestLeasedConcurrent(t *testing.T) {
	tr := newTier(t, 1, Options{})
	p := tr.procs[0]
	l := client.PerSecond(100_000)
	start := tr.now()
	var admitted, refused atomic.Int64
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 20_000 {
				r, err := p.Take(ctx, "hot", l, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Limited {
					refused.Add(1)
				} else {
					admitted.Add(1)
				}
				tr.advance(time.Microsecond)
			}
		}()
	}
	for range 8 {
		<-done
	}
	elapsed := time.Duration(tr.now() - start)
	most := 100_000 + int64(100_000*(elapsed+p.o.Lifetime)/time.Second)
	if admitted.Load()+refused.Load() != 160_000 || admitted.Load() > most {
		t.Fatalf("%d admitted, %d refused over %v; at most %d", admitted.Load(), refused.Load(), elapsed, most)
	}
	t.Logf("%d admitted, %d refused over %v, %d calls, %+v", admitted.Load(), refused.Load(), elapsed, tr.calls.Load(), p.Stats())
}

// A decision from units held allocates nothing.
func TestLeasedAllocatesNothing(t *testing.T) {
	tr := newTier(t, 1, Options{Hot: 1})
	p := tr.procs[0]
	l := client.GCRA(999_999, 1_000_000, time.Second)
	for range 20_000 { // a demand of 20,000 a Target: grants of 20,000
		p.Take(ctx, "api", l, 1)
		tr.settle()
	}
	tr.advance(p.o.Target)
	p.Take(ctx, "api", l, 1)
	tr.settle()
	if n := testing.AllocsPerRun(1000, func() {
		if r, err := p.Take(ctx, "api", l, 1); err != nil || r.Limited {
			t.Fatal(r, err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per leased decision (%+v)", n, p.Stats())
	}
}

// Decisions on one hot key with room, from every CPU at once: the local
// tier's own cost (the fake server answers its few grants).
func BenchmarkLeasedTake(b *testing.B) {
	f := fakeredis.New()
	p := New(client.New(f.Client()), Options{})
	defer p.Close(context.Background())
	l := client.GCRA(999_999_999, 1_000_000_000, time.Second) // never reached: every decision is admitted
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r, err := p.Take(ctx, "api", l, 1); err != nil || r.Limited {
				b.Fatal(r, err)
			}
		}
	})
	s := p.Stats()
	b.ReportMetric(float64(s.Grants+s.Exact)/float64(b.N), "calls/op")
}

// Decide on two hot keys with room allocates nothing either: two policies
// cost what one does, but for the second key.
func TestLeasedDecideAllocatesNothing(t *testing.T) {
	tr := newTier(t, 1, Options{Hot: 1})
	p := tr.procs[0]
	l := client.GCRA(999_999, 1_000_000, time.Second)
	a, b := &limitWant{Key: "ip:1", Limit: l, Cost: 1}, &limitWant{Key: "key:2", Limit: l, Cost: 1}
	wants := []*limitWant{a, b}
	for range 20_000 {
		decide(ctx, p, wants)
		tr.settle()
	}
	tr.advance(p.o.Target)
	decide(ctx, p, wants)
	tr.settle()
	if n := testing.AllocsPerRun(1000, func() {
		if err := decide(ctx, p, wants); err != nil || !a.Taken || !b.Taken {
			t.Fatal(*a, *b, err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per leased decision of two limits (%+v)", n, p.Stats())
	}
}

// Decisions on two hot keys with room, from every CPU at once.
func BenchmarkLeasedDecide(b *testing.B) {
	f := fakeredis.New()
	p := New(client.New(f.Client()), Options{})
	defer p.Close(context.Background())
	l := client.GCRA(999_999_999, 1_000_000_000, time.Second)
	b.RunParallel(func(pb *testing.PB) {
		x, y := &limitWant{Key: "ip:1", Limit: l, Cost: 1}, &limitWant{Key: "key:2", Limit: l, Cost: 1}
		wants := []*limitWant{x, y}
		for pb.Next() {
			if err := decide(ctx, p, wants); err != nil || !x.Known {
				b.Fatal(err)
			}
		}
	})
}
