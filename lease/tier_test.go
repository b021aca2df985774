package lease

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// tier is a fake server, a virtual clock both read, and n tiers
// (processes) over it; calls counts every command the tiers sent.
type tier struct {
	f     *fakeredis.Server
	clock atomic.Int64 // Unix ns
	calls atomic.Int64
	procs []*Tier
}

// ctx is the tests' context.
var ctx = context.Background()

func newTier(t *testing.T, n int, o Options) *tier { return newTierSwept(t, n, o, true) }

// newTierSwept is newTier, its tiers sweeping by themselves or, with
// sweeper false, only when the test calls sweep.
func newTierSwept(t *testing.T, n int, o Options, sweeper bool) *tier {
	t.Helper()
	tr := &tier{f: fakeredis.New()}
	tr.clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	now := func() time.Time { return time.Unix(0, tr.clock.Load()) }
	tr.f.Clock = now
	tr.f.Before = func(redis.Cmder) error { tr.calls.Add(1); return nil }
	o.Now = now
	c := client.New(tr.f.Client())
	for range n {
		tr.procs = append(tr.procs, makeTier(c, o, sweeper))
	}
	t.Cleanup(func() {
		for _, p := range tr.procs {
			p.Close(context.Background())
		}
	})
	return tr
}

func (tr *tier) now() int64 { return tr.clock.Load() }

func (tr *tier) advance(d time.Duration) { tr.clock.Add(int64(d)) }

// downWhile makes the fake server refuse every command, as a server that
// is down does, while failing holds; calls counts the commands it serves.
func (tr *tier) downWhile(failing *atomic.Bool) {
	tr.f.Before = func(redis.Cmder) error {
		if failing.Load() {
			return errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
		}
		tr.calls.Add(1)
		return nil
	}
}

// settle waits for the calls the tiers sent by themselves.
func (tr *tier) settle() {
	for _, p := range tr.procs {
		p.calls.Wait()
	}
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one
// has everything.
func jain(xs []int64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// withinBound fails t when admitted (sorted instants) holds more in a
// window of 10 ms, 100 ms or 1 s than a limit of burst and rate a second
// admits in the window and τ more.
func withinBound(t *testing.T, admitted []int64, burst, rate int64, tau time.Duration) {
	t.Helper()
	for _, w := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		most := int(burst + rate*int64(w+tau)/int64(time.Second) + 1)
		j := 0
		for i := range admitted {
			for admitted[i]-admitted[j] >= int64(w) {
				j++
			}
			if n := i - j + 1; n > most {
				t.Fatalf("%d admitted in a window of %v; the exact limiter and τ admit %d", n, w, most)
			}
		}
	}
}

func p0Lifetime(tr *tier) time.Duration { return tr.procs[0].o.Lifetime }

// limitWant is one limit of a decision of several (decide) and, once
// decided, its answer, as package admit keeps it.
type limitWant struct {
	Key    string
	Limit  client.Limit
	Cost   int64
	Result client.Result
	Known  bool
	Taken  bool
}

// decide decides wants all or nothing as package admit does through the
// tier: from the units held (AllHere), each want its own key's answer, a
// refusal here the refusing want's alone; else by the limiter, in one
// RL.ALL (the fake is one server), a refusal answering every want.
func decide(ctx context.Context, p *Tier, wants []*limitWant) error {
	var kb [16]client.Keyed
	var eb [16]client.Result
	limits, each := kb[:0], eb[:len(wants)]
	for _, w := range wants {
		limits = append(limits, client.Keyed{Key: w.Key, Limit: w.Limit, Cost: w.Cost})
	}
	r, here, err := p.AllHere(ctx, limits, each)
	if err != nil {
		return err
	}
	if !here {
		exact := make([]client.Result, len(wants))
		if r, err = p.c.AllEach(ctx, slices.Clone(limits), exact); err != nil {
			return err
		}
		for i, w := range wants {
			w.Result, w.Known, w.Taken = exact[i], true, !r.Limited
		}
		return nil
	}
	for i, w := range wants {
		w.Known, w.Taken, w.Result = !r.Limited || i == r.Policy, !r.Limited, client.Result{}
		if w.Known {
			w.Result = each[i]
		}
	}
	return nil
}

// Whether a limit refunds and leases is what the command table says of
// its family: GCRA and the token bucket both, the fixed window leases
// (its units spent or lost), the others neither; no limit whose
// parameters Redis holds leases.
func TestLeases(t *testing.T) {
	for _, c := range []struct {
		l               client.Limit
		refunds, leases bool
	}{
		{client.PerSecond(10), true, true},
		{client.TokenBucket(100, 10, time.Minute), true, true},
		{client.Shaper(4, 1, time.Second), false, false},
		{client.SlidingWindow(50, time.Minute), false, false},
		{client.FixedWindow(1000, time.Hour), false, true},
		{client.SlidingLog(5, 15*time.Minute), false, false},
		{client.Limit{}, false, false},
		// Its parameters in Redis: decided there, every call.
		{client.PerSecond(10).Override("{t}:plan", "api"), true, false},
		{client.FixedWindow(1000, time.Hour).Override("{t}:plan", "api"), false, false},
	} {
		if refunds(c.l) != c.refunds || Leases(c.l) != c.leases {
			t.Errorf("%v: refunds %v, leases %v; want %v, %v", c.l, refunds(c.l), Leases(c.l), c.refunds, c.leases)
		}
	}
	if !refunds(client.GCRA(1, 1, time.Second)) || refunds(client.SlidingWindow(1, time.Second)) {
		t.Error("refunds")
	}
}
