package admit_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/admit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// These tests decide on the shared fake Redis (internal/fakeredis): the
// module's own decision code on keys in memory, at a clock the test moves.

// t0 is the fake's clock: 20 s into a minute.
var t0 = time.Unix(1_700_000_000, 0)

// onFake is a Gate on a fake Redis whose calls fail while down is true
// (the connection refused); calls counts the fake's commands.
func onFake(t *testing.T, o admit.Options) (g *admit.Gate, f *fakeredis.Server, down *atomic.Bool, calls *atomic.Int64) {
	t.Helper()
	f = fakeredis.New()
	f.Clock = func() time.Time { return t0 }
	down, calls = new(atomic.Bool), new(atomic.Int64)
	f.Before = func(redis.Cmder) error {
		calls.Add(1)
		if down.Load() {
			return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return nil
	}
	rdb := f.Client()
	t.Cleanup(func() { rdb.Close() })
	o.Now = f.Now
	g = admit.New(client.New(rdb), o)
	t.Cleanup(func() { g.Close(context.Background()) })
	return g, f, down, calls
}

// wants are a per-IP and a per-key limit of one request, each 2 a minute.
func wants(shadow ...bool) []*admit.Want {
	ws := []*admit.Want{
		{Key: "{ip}:a", Limit: client.FixedWindow(2, time.Minute), Cost: 1, Lease: true},
		{Key: "{key}:a", Limit: client.FixedWindow(2, time.Minute), Cost: 1, Lease: true},
	}
	for i, s := range shadow {
		ws[i].Shadow = s
	}
	return ws
}

// Step by step: two limits of one request are decided all or nothing; the
// third request is refused by both and counts nothing; a shadow limit is
// counted on its own and never refuses.
func TestDecideSteps(t *testing.T) {
	g, f, _, _ := onFake(t, admit.Options{})
	ctx := context.Background()
	for i, want := range []struct {
		limited   bool
		remaining int64
	}{{false, 1}, {false, 0}, {true, 0}} {
		ws := wants()
		out, err := g.Decide(ctx, ws)
		if out != admit.Decided || err != nil {
			t.Fatalf("request %d: %v %v", i+1, out, err)
		}
		for _, w := range ws {
			if w.Known && (w.Result.Limited != want.limited || w.Result.Remaining != want.remaining) {
				t.Fatalf("request %d, %s: %+v, want limited %v, %d remaining", i+1, w.Key, w.Result, want.limited, want.remaining)
			}
		}
		if !ws[0].Known && !ws[1].Known {
			t.Fatalf("request %d: no limit answered", i+1)
		}
	}
	r, err := client.New(f.Client()).Peek(ctx, "{key}:a", client.FixedWindow(2, time.Minute), 0)
	if err != nil || r.Remaining != 0 || r.Limited {
		t.Fatalf("the per-key limit after a refused request: %+v %v, want its 2 taken, no more", r, err)
	}
	// A shadow limit over its own limit: the request is admitted by the
	// enforcing one, the shadow one says refused, Taken false.
	f.Advance(time.Minute)
	for range 3 {
		ws := []*admit.Want{
			{Key: "{s}:a", Limit: client.FixedWindow(1, time.Minute), Cost: 1, Shadow: true},
			{Key: "{e}:a", Limit: client.FixedWindow(10, time.Minute), Cost: 1},
		}
		if out, err := g.Decide(ctx, ws); out != admit.Decided || err != nil || ws[1].Result.Limited {
			t.Fatalf("with a shadow limit: %v %v %+v", out, err, ws[1].Result)
		}
		if ws[0].Taken {
			t.Fatal("a shadow limit is Taken: it would be given back")
		}
	}
	r, _ = client.New(f.Client()).Peek(ctx, "{e}:a", client.FixedWindow(10, time.Minute), 0)
	if r.Remaining != 7 {
		t.Fatalf("the enforcing limit beside a refusing shadow one: %d remaining, want 7", r.Remaining)
	}
}

// A refused key is remembered until its RetryAfter: a request of the same
// cost is refused with no call, one of a smaller cost asks Redis.
func TestDecideRemembers(t *testing.T) {
	var remembered atomic.Int64
	g, f, _, calls := onFake(t, admit.Options{RefusalCache: 10, Event: func(e admit.Event) {
		if e.Kind == admit.Remembered {
			remembered.Add(1)
		}
	}})
	ctx := context.Background()
	g.Decide(ctx, gcra(2))
	if ws := gcra(2); !decide(t, g, ws) || ws[0].Remembered {
		t.Fatalf("the second request: %+v", ws[0])
	}
	n := calls.Load()
	for range 3 {
		if ws := gcra(2); !decide(t, g, ws) || !ws[0].Remembered || ws[0].Result.RetryAfter != time.Minute {
			t.Fatalf("a remembered refusal: %+v", ws[0])
		}
	}
	if calls.Load() != n || remembered.Load() != 3 {
		t.Fatalf("%d calls and %d Remembered events for 3 remembered refusals, want 0 and 3", calls.Load()-n, remembered.Load())
	}
	if ws := gcra(1); !decide(t, g, ws) || ws[0].Remembered || calls.Load() == n {
		t.Fatalf("a smaller request: %+v, %d calls, want Redis's refusal (30 s to one unit)", ws[0], calls.Load()-n)
	}
	f.Advance(time.Minute)
	g.Forget()
	if ws := gcra(2); decide(t, g, ws) {
		t.Fatalf("a minute later: %+v", ws[0])
	}
}

// A refund (a negative cost) gives its units back in Redis and forgets the
// key's remembered refusal, so the next request is asked of Redis and
// admitted; Gate.Refund of a taken want does the same.
func TestRefundForgetsRefusal(t *testing.T) {
	g, _, _, calls := onFake(t, admit.Options{RefusalCache: 10})
	ctx := context.Background()
	g.Decide(ctx, gcra(2))
	if ws := gcra(2); !decide(t, g, ws) || ws[0].Remembered {
		t.Fatalf("refused by Redis: %+v", ws[0])
	}
	back := gcra(-2)
	if decide(t, g, back) || !back[0].Taken || back[0].Result.Remaining != 2 {
		t.Fatalf("the refund: %+v, want taken, 2 remaining", back[0])
	}
	n := calls.Load()
	ws := gcra(2)
	if decide(t, g, ws) || ws[0].Remembered || calls.Load() == n {
		t.Fatalf("after the refund: %+v, %d calls, want admitted by Redis", ws[0], calls.Load()-n)
	}
	if again := gcra(2); !decide(t, g, again) || again[0].Remembered {
		t.Fatalf("refused by Redis again: %+v", again[0])
	}
	g.Refund(ctx, ws) // the admitted request's 2 given back
	n = calls.Load()
	if last := gcra(2); decide(t, g, last) || last[0].Remembered || calls.Load() == n {
		t.Fatalf("after Gate.Refund: %+v, want admitted by Redis", last[0])
	}
}

// gcra is a request of cost on key {k}, a GCRA of 2 at once and 2 a minute.
func gcra(cost int64) []*admit.Want {
	return []*admit.Want{{Key: "{k}", Limit: client.GCRA(1, 2, time.Minute), Cost: cost}}
}

// decide decides ws and reports whether the request was refused.
func decide(t *testing.T, g *admit.Gate, ws []*admit.Want) bool {
	t.Helper()
	out, err := g.Decide(context.Background(), ws)
	if out != admit.Decided || err != nil {
		t.Fatalf("%v %v", out, err)
	}
	for _, w := range ws {
		if w.Known && w.Result.Limited && !w.Shadow {
			return true
		}
	}
	return false
}

// Redis refusing connections: each failure policy's outcome; a breaker of
// 3 failures stops the calls; Local decides here and charges Redis what it
// admitted once Redis answers again.
func TestDecideFailures(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		on   admit.Failure
		want admit.Outcome
	}{{admit.Fail, admit.Failed}, {admit.Open, admit.FailedOpen}, {admit.Closed, admit.FailedClosed}, {admit.Local, admit.Decided}} {
		t.Run(c.on.String(), func(t *testing.T) {
			var opened atomic.Int64
			g, _, down, calls := onFake(t, admit.Options{OnError: c.on, BreakerFailures: 3, BreakerCooldown: time.Minute, Event: func(e admit.Event) {
				if e.Kind == admit.BreakerOpen {
					opened.Add(1)
				}
			}})
			down.Store(true)
			for i := range 5 {
				ws := wants()
				out, err := g.Decide(ctx, ws)
				if out != c.want || (c.on == admit.Local) != (err == nil) {
					t.Fatalf("failure %d: %v %v, want %v", i+1, out, err, c.want)
				}
				if i >= 3 && !errors.Is(err, admit.ErrBreakerOpen) && c.on != admit.Local {
					t.Fatalf("after 3 failures: %v, want the breaker open", err)
				}
				switch c.on {
				case admit.Open:
					if ws[0].Known || ws[1].Known {
						t.Fatal("failed open with figures")
					}
				case admit.Local:
					if !ws[0].Local || ws[0].Result.Limited != (i >= 2) {
						t.Fatalf("local decision %d: %+v", i+1, ws[0])
					}
				}
			}
			if n := calls.Load(); n > 3*4 || opened.Load() != 1 || !g.BreakerOpen() {
				t.Fatalf("%d calls, %d breakers opened, open %v: want the calls of 3 requests, 1", n, opened.Load(), g.BreakerOpen())
			}
			if ra := g.RetryAfter(ctx, []string{"{ip}:a"}); ra < 50*time.Second || ra > time.Minute {
				t.Fatalf("RetryAfter %v, want the minute's cooldown", ra)
			}
		})
	}
}

// Local's charge: 2 admitted here while Redis is down are charged with
// DEBT once a call is answered, so Redis refuses the next request.
func TestLocalCharged(t *testing.T) {
	ctx := context.Background()
	var charged atomic.Int64
	g, f, down, _ := onFake(t, admit.Options{OnError: admit.Local, Event: func(e admit.Event) {
		if e.Kind == admit.Charged {
			charged.Add(e.Units)
		}
	}})
	one := func() []*admit.Want {
		return []*admit.Want{{Key: "{k}", Limit: client.FixedWindow(3, time.Minute), Cost: 1}}
	}
	down.Store(true)
	for range 2 {
		if ws := one(); decide(t, g, ws) || !ws[0].Local {
			t.Fatalf("Redis down: %+v", ws[0])
		}
	}
	down.Store(false)
	if ws := one(); decide(t, g, ws) || ws[0].Local {
		t.Fatalf("Redis back: %+v", ws[0])
	}
	deadline := time.Now().Add(5 * time.Second)
	for st := g.Stats(); st.Charged == 0 || st.Charging; st = g.Stats() {
		if time.Now().After(deadline) {
			t.Fatal("nothing charged 5 s after Redis answered")
		}
		time.Sleep(time.Millisecond)
	}
	if st := g.Stats(); st.Charged != 2 || charged.Load() != 2 || st.LocalKeys != 0 {
		t.Fatalf("stats %+v, %d charged by events: want the 2 admitted here", st, charged.Load())
	}
	r, err := client.New(f.Client()).Peek(ctx, "{k}", client.FixedWindow(3, time.Minute), 1)
	if err != nil || !r.Limited {
		t.Fatalf("after the charge: %+v %v, want the 3 taken", r, err)
	}
}

// Two leasable limits of one request are decided by the tier, all or
// nothing, with no call once their keys are hot.
func TestDecideLeased(t *testing.T) {
	g, _, _, calls := onFake(t, admit.Options{Lease: &lease.Options{}})
	ctx := context.Background()
	big := func() []*admit.Want {
		ws := wants()
		for _, w := range ws {
			w.Limit = client.GCRA(9999, 10000, time.Second)
		}
		return ws
	}
	for range 2000 {
		if out, err := g.Decide(ctx, big()); out != admit.Decided || err != nil {
			t.Fatal(out, err)
		}
	}
	st := g.Stats().Lease
	if st.Local < 1000 || calls.Load() > 1000 {
		t.Fatalf("2000 requests: %d decided by the tier, %d calls", st.Local, calls.Load())
	}
}

// BenchmarkDecideLeased is one request's decision on hot keys through the
// gate's tier, one limit and two (a per-IP and a per-key), beside
// lease.Tier.Take alone: what the gate adds to the tier's hot path.
func BenchmarkDecideLeased(b *testing.B) {
	f := fakeredis.New()
	rdb := f.Client()
	defer rdb.Close()
	ctx := context.Background()
	big := client.GCRA(1<<40, 1<<40, time.Hour)
	for _, n := range []int{1, 2} {
		b.Run(map[int]string{1: "one", 2: "two"}[n], func(b *testing.B) {
			g := admit.New(client.New(rdb), admit.Options{Lease: &lease.Options{}, Timeout: time.Second})
			defer g.Close(ctx)
			ws := wants()[:n]
			for _, w := range ws {
				w.Limit = big
			}
			b.ReportAllocs()
			for b.Loop() {
				for _, w := range ws {
					w.Known, w.Taken = false, false
				}
				if out, err := g.Decide(ctx, ws); out != admit.Decided || err != nil || ws[0].Result.Limited {
					b.Fatal(out, err)
				}
			}
		})
	}
	b.Run("take", func(b *testing.B) {
		t := lease.New(client.New(rdb), lease.Options{})
		defer t.Close(ctx)
		b.ReportAllocs()
		for b.Loop() {
			if r, err := t.Take(ctx, "{ip}:a", big, 1); err != nil || r.Limited {
				b.Fatal(r, err)
			}
		}
	})
}

// Acquire: a limit of 1 holds one slot; a second holder is refused until
// the first releases; with Redis down, Local counts the slots here and
// releases them here, Closed refuses and Open goes on with no slot.
func TestAcquire(t *testing.T) {
	ctx := context.Background()
	one := client.Concurrency{Limit: 1, Lease: time.Minute}
	for _, on := range []admit.Failure{admit.Local, admit.Closed, admit.Open} {
		t.Run(on.String(), func(t *testing.T) {
			g, _, down, _ := onFake(t, admit.Options{OnError: on})
			w := func() *admit.Want { return &admit.Want{Key: "{c}"} }
			h, out, err := g.Acquire(ctx, w(), one, "a")
			if h == nil || out != admit.Decided || err != nil {
				t.Fatalf("the first holder: %v %v %v", h, out, err)
			}
			second := w()
			if h2, out, _ := g.Acquire(ctx, second, one, "b"); h2 != nil || out != admit.Decided || !second.Result.Limited {
				t.Fatalf("the second holder: %v %v %+v", h2, out, second.Result)
			}
			h.Release(ctx)
			if h, _, _ = g.Acquire(ctx, w(), one, "b"); h == nil {
				t.Fatal("after the release: refused")
			}
			h.Release(ctx)
			down.Store(true)
			first := w()
			h, out, _ = g.Acquire(ctx, first, one, "c")
			switch on {
			case admit.Local:
				second := w()
				if h2, _, _ := g.Acquire(ctx, second, one, "d"); h == nil || !first.Local || h2 != nil || !second.Result.Limited {
					t.Fatalf("Local: %v %+v, then %v %+v", h, first, h2, second)
				}
				h.Release(ctx)
				if h, _, _ := g.Acquire(ctx, w(), one, "e"); h == nil {
					t.Fatal("Local, after the release: refused")
				}
			case admit.Closed:
				if h != nil || out != admit.FailedClosed {
					t.Fatalf("Closed: %v %v", h, out)
				}
			case admit.Open:
				if h != nil || out != admit.FailedOpen {
					t.Fatalf("Open: %v %v", h, out)
				}
			}
		})
	}
}

// With Pipeline, 50 requests at once are decided through the one sender,
// each exactly (a limit of 30 admits 30), each step reported Sent; Close
// stops the sender, and a decision after it fails.
func TestPipeline(t *testing.T) {
	var sent atomic.Int64
	g, _, _, _ := onFake(t, admit.Options{Pipeline: true, StepTimeout: 5 * time.Second, Event: func(e admit.Event) {
		if e.Kind == admit.Sent {
			sent.Add(1)
		}
	}})
	ctx := context.Background()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			ws := []*admit.Want{{Key: "{p}", Limit: client.FixedWindow(30, time.Minute), Cost: 1}}
			if out, err := g.Decide(ctx, ws); out != admit.Decided || err != nil {
				t.Error(out, err)
				return
			}
			if !ws[0].Result.Limited {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 30 || sent.Load() != 50 {
		t.Fatalf("%d admitted, %d steps sent; want 30 of 50, 50", admitted.Load(), sent.Load())
	}
	g.Close(ctx)
	ws := []*admit.Want{{Key: "{p}", Limit: client.FixedWindow(30, time.Minute), Cost: 1}}
	if out, err := g.Decide(ctx, ws); out != admit.Failed || err == nil {
		t.Fatalf("after Close: %v %v", out, err)
	}
}
