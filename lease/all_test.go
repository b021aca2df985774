package lease

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
)

// All through the tier: four processes ask two limits together — a
// user's PerSecond(1000) and a tenant's PerSecond(600) — at 4× the
// tighter one for 3 s. Each limit stays within its bound in every window
// (the exact limiter's and τ more), both are spent together (the units
// taken from one are taken from the other), the tighter one's allowance
// is used, and the calls stay paced: under 0.02 a decision.
func TestLeasedAll(t *testing.T) {
	o := Options{Target: 50 * time.Millisecond, Lifetime: 200 * time.Millisecond}
	tr := newTier(t, 4, o)
	limits := []client.Keyed{{Key: "{t}:user", Limit: client.PerSecond(1000), Cost: 1}, {Key: "{t}:tenant", Limit: client.PerSecond(600), Cost: 1}}
	start := tr.now()
	var admitted []int64
	decisions, local := 0, 0
	for tr.now()-start < int64(3*time.Second) {
		for _, p := range tr.procs {
			r, err := p.All(ctx, limits)
			if err != nil {
				t.Fatal(err)
			}
			decisions++
			if !r.Limited {
				admitted = append(admitted, tr.now())
			}
		}
		tr.settle()
		tr.advance(400 * time.Microsecond)
	}
	withinBound(t, admitted, 600, 600, o.Lifetime)
	if n := len(admitted); n < int(0.97*(600+3*600)) || n > 600+3*600+120 {
		t.Fatalf("%d admitted over 3 s of PerSecond(600) at 4x demand", n)
	}
	for _, p := range tr.procs {
		local += int(p.Stats().Local)
	}
	if calls := tr.calls.Load(); float64(calls)/float64(decisions) > 0.02 {
		t.Fatalf("%d calls for %d decisions", calls, decisions)
	}
	if local < len(admitted)*2*9/10 {
		t.Fatalf("%d units spent locally for %d admitted decisions of two limits", local, len(admitted))
	}
	t.Logf("%d admitted of %d decisions, %d calls, %d units local", len(admitted), decisions, tr.calls.Load(), local)
}

// All is all or nothing through the tier too: four processes ask a
// user's PerMinute(100) and a tenant's PerMinute(6) together for 150 ms.
// Exactly the tenant's 6 are admitted, and once the tiers close (giving
// back what they hold) the user's limit has lost those 6 and nothing for
// the refusals, though its key leased.
func TestLeasedAllAtomic(t *testing.T) {
	tr := newTier(t, 4, Options{Hot: 2})
	limits := []client.Keyed{{Key: "{t}:user", Limit: client.PerMinute(100), Cost: 1}, {Key: "{t}:tenant", Limit: client.PerMinute(6), Cost: 1}}
	start := tr.now()
	admitted := 0
	for tr.now()-start < int64(150*time.Millisecond) { // less than τ: the units granted first are still held at the end
		for _, p := range tr.procs {
			r, err := p.All(ctx, limits)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Limited {
				admitted++
			} else if r.Policy != 1 {
				t.Fatalf("refused by limit %d: %+v", r.Policy, r)
			}
		}
		tr.settle()
		tr.advance(time.Millisecond)
	}
	if admitted != 6 {
		t.Fatalf("%d admitted; the tenant's limit admits 6", admitted)
	}
	// What the user's limit lost is the 6 admitted and the units the
	// processes hold: none went to a refusal.
	tr.settle()
	var grants, held int64
	for _, p := range tr.procs {
		grants += p.Stats().Grants
		if k, ok := p.keys.Load("{t}:user"); ok {
			k := k.(*leaseKey)
			p.lock(k)
			held += k.units()
			p.unlock(k, tr.now())
		}
	}
	if grants == 0 {
		t.Fatal("no key leased")
	}
	r, err := tr.procs[0].c.Peek(ctx, "{t}:user", limits[0].Limit, 1)
	if err != nil {
		t.Fatal(err)
	}
	if left := r.Remaining + 1 + held; left != 100-6 { // Peek's Remaining is after one more; 150 ms accrue 0.25
		t.Fatalf("the user's limit has %d left and the processes hold %d, after 6 admitted", r.Remaining, held)
	}
	for _, p := range tr.procs {
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r, err = tr.procs[0].c.Peek(ctx, "{t}:user", limits[0].Limit, 1); err != nil || r.Remaining+1 != 100-6 {
		t.Fatalf("after Close the user's limit has %d left: %v", r.Remaining, err)
	}
	t.Logf("%d grants; the processes held %d of the user's units before Close", grants, held)
}

// All recovers from an outage: Redis fails for 300 ms under one process
// deciding two limits at 10,000 a second, then answers again; within the
// next second the keys lease again (calls per decision back under 0.02),
// though no Take or sweep touches them.
func TestLeasedAllRecovers(t *testing.T) {
	tr := newTier(t, 1, Options{})
	var failing atomic.Bool
	tr.downWhile(&failing)
	p := tr.procs[0]
	limits := []client.Keyed{{Key: "{t}:a", Limit: client.PerSecond(100_000), Cost: 1}, {Key: "{t}:b", Limit: client.PerSecond(100_000), Cost: 1}}
	run := func(d time.Duration) (decisions, errs int, calls int64) {
		c0 := tr.calls.Load()
		for end := tr.now() + int64(d); tr.now() < end; {
			if _, err := p.All(ctx, limits); err != nil {
				errs++
			}
			decisions++
			tr.settle()
			tr.advance(100 * time.Microsecond)
		}
		return decisions, errs, tr.calls.Load() - c0
	}
	if d, e, c := run(time.Second); e != 0 || float64(c)/float64(d) > 0.02 {
		t.Fatalf("before: %d calls for %d decisions, %d errors", c, d, e)
	}
	failing.Store(true)
	if _, e, _ := run(300 * time.Millisecond); e == 0 {
		t.Fatal("no decision saw the outage")
	}
	failing.Store(false)
	run(200 * time.Millisecond)
	if d, e, c := run(time.Second); e != 0 || float64(c)/float64(d) > 0.02 {
		t.Fatalf("after: %d calls for %d decisions, %d errors; %+v", c, d, e, p.Stats())
	}
}

// Decide through the tier: four processes decide a per-IP PerSecond(1000)
// and a per-key PerSecond(600), keys of two slots, at 4× the tighter one
// for 3 s. As with All, each limit stays within its bound in every window,
// the tighter one's allowance is used, and the calls stay under 0.02 a
// decision; each admitted want gets its own key's answer, and a refusal
// leaves the refusing want alone Known. A want that does not lease (a
// sliding window) sends every decision to the limiter.
func TestLeasedDecide(t *testing.T) {
	o := Options{Target: 50 * time.Millisecond, Lifetime: 200 * time.Millisecond}
	tr := newTier(t, 4, o)
	if protocol.Slot("ip:10.0.0.1") == protocol.Slot("key:abc") {
		t.Fatal("the keys share a slot")
	}
	wants := func(key string, second client.Limit) []*limitWant {
		return []*limitWant{{Key: "ip:10.0.0.1", Limit: client.PerSecond(1000), Cost: 1}, {Key: key, Limit: second, Cost: 1}}
	}
	start := tr.now()
	var admitted []int64
	decisions, refusals := 0, 0
	for tr.now()-start < int64(3*time.Second) {
		for _, p := range tr.procs {
			ws := wants("key:abc", client.PerSecond(600))
			if err := decide(ctx, p, ws); err != nil {
				t.Fatal(err)
			}
			decisions++
			switch a, b := ws[0], ws[1]; {
			case a.Known && b.Known && !a.Result.Limited && !b.Result.Limited && a.Taken && b.Taken:
				if a.Result.Limit != 1000 || b.Result.Limit != 600 || a.Result.Remaining < 0 || b.Result.Remaining < 0 {
					t.Fatalf("admitted: %+v %+v", a.Result, b.Result)
				}
				admitted = append(admitted, tr.now())
			case a.Known != b.Known && (a.Known && a.Result.Limited || b.Known && b.Result.Limited) && !a.Taken && !b.Taken:
				refusals++
			case a.Known && b.Known && !a.Taken && !b.Taken && (a.Result.Limited || b.Result.Limited):
				refusals++ // decided by the limiter: a refusal answers every limit it asked
			default:
				t.Fatalf("neither admitted nor refused: %+v %+v", *a, *b)
			}
		}
		tr.settle()
		tr.advance(400 * time.Microsecond)
	}
	withinBound(t, admitted, 600, 600, o.Lifetime)
	if n := len(admitted); n < int(0.97*(600+3*600)) || n > 600+3*600+120 || refusals == 0 {
		t.Fatalf("%d admitted, %d refused over 3 s of PerSecond(600) at 4x demand", n, refusals)
	}
	if calls := tr.calls.Load(); float64(calls)/float64(decisions) > 0.02 {
		t.Fatalf("%d calls for %d decisions", calls, decisions)
	}
	t.Logf("%d admitted, %d refused of %d decisions, %d calls", len(admitted), refusals, decisions, tr.calls.Load())

	c0, n := tr.calls.Load(), 0
	for range 50 {
		ws := wants("key:sw", client.SlidingWindow(1_000_000, time.Second))
		if err := decide(ctx, tr.procs[0], ws); err != nil {
			t.Fatal(err)
		}
		if ws[0].Known && ws[1].Known && ws[0].Taken && ws[1].Taken {
			n++
		}
		tr.advance(time.Millisecond)
	}
	if c := tr.calls.Load() - c0; c < 50 || n == 0 {
		t.Fatalf("with a sliding window: %d calls for 50 decisions, %d admitted", c, n)
	}
}

// Decide falls back as Take does: one process decides a per-IP
// PerSecond(100) and a per-key PerSecond(1000), keys of two slots, at 10×
// the tighter one for 1 s; Redis then refuses connections for 3 s (less
// than the Fallback of 10 s) and answers again for 2 s. No decision errs;
// the outage admits about the tighter limit's rate (its 300, the units
// held, and a Target more), all or nothing, each want its own answer; once
// Redis answers, what the fallback admitted is charged and the calls are
// paced again. All, which has no fallback, errs in the same outage
// (TestLeasedAllRecovers).
func TestLeasedDecideFallback(t *testing.T) {
	tr := newTier(t, 1, Options{})
	var failing atomic.Bool
	tr.downWhile(&failing)
	p := tr.procs[0]
	run := func(d time.Duration) (admitted, errs, decisions int, calls int64) {
		c0 := tr.calls.Load()
		for end := tr.now() + int64(d); tr.now() < end; {
			ws := []*limitWant{{Key: "ip:10.0.0.1", Limit: client.PerSecond(100), Cost: 1}, {Key: "key:abc", Limit: client.PerSecond(1000), Cost: 1}}
			err := decide(ctx, p, ws)
			decisions++
			switch a, b := ws[0], ws[1]; {
			case err != nil:
				errs++
			case a.Taken != b.Taken:
				t.Fatalf("not all or nothing: %+v %+v", *a, *b)
			case a.Taken:
				if a.Result.Limited || b.Result.Limited || !a.Known || !b.Known {
					t.Fatalf("admitted: %+v %+v", *a, *b)
				}
				admitted++
			}
			tr.settle()
			tr.advance(time.Millisecond)
		}
		return admitted, errs, decisions, tr.calls.Load() - c0
	}
	if a, e, d, c := run(time.Second); e != 0 || a < 180 || float64(c)/float64(d) > 0.1 {
		t.Fatalf("before: %d admitted, %d errors, %d calls for %d decisions", a, e, c, d)
	}
	s := p.Stats()
	held := s.Granted - s.Local
	failing.Store(true)
	a, e, _, _ := run(3 * time.Second)
	if most := 300 + held + 5 + 2; e != 0 || int64(a) > most || a < 250 || p.Stats().Fallback == 0 {
		t.Fatalf("a 3 s outage: %d admitted (at most %d), %d errors; %+v", a, most, e, p.Stats())
	}
	t.Logf("the outage: %d admitted, %d held before it; %+v", a, held, p.Stats())
	failing.Store(false)
	run(time.Second)
	a, e, d, c := run(time.Second)
	if e != 0 || a < 90 || a > 130 || float64(c)/float64(d) > 0.1 || p.Stats().Charged == 0 {
		t.Fatalf("after: %d admitted in 1 s, %d errors, %d calls for %d decisions; %+v", a, e, c, d, p.Stats())
	}
}
