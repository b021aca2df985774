package lease

// Grants failing: the key decides in fallback at its share, for Fallback,
// and what it admitted is charged when Redis answers (keyState failing).

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// Redis fails for 5 s under four processes at 4× PerSecond(1000): each
// spends what it holds, then decides at the limit's rate over the four
// its key's registry counted (or what it spent, when less), so the outage
// admits about the limit's
// allowance (4,754 to 4,992 of 5,000 over 50 runs; at most 5 % more), no
// decision errs, and the first grant that answers ends the fallback,
// after the processes charged what they admitted beyond the refill; an
// outage longer than Fallback returns the error after it.
func TestLeasedRedisAway(t *testing.T) {
	tr := newTier(t, 4, Options{Fallback: 8 * time.Second})
	var failing atomic.Bool
	tr.downWhile(&failing)
	l := client.PerSecond(1000)
	run := func(d time.Duration) (admitted, errs int) {
		for end := tr.now() + int64(d); tr.now() < end; {
			for _, p := range tr.procs {
				r, err := p.Take(ctx, "hot", l, 1)
				switch {
				case err != nil:
					errs++
				case !r.Limited:
					admitted++
				}
			}
			tr.settle()
			tr.advance(time.Millisecond)
		}
		return admitted, errs
	}
	if a, e := run(2 * time.Second); e != 0 || a < 2800 {
		t.Fatalf("before the outage: %d admitted, %d errors", a, e)
	}
	failing.Store(true)
	a, e := run(5 * time.Second)
	if e != 0 || a > 5250 || a < 4500 || tr.procs[0].Stats().Registers == 0 {
		t.Fatalf("a 5 s outage: %d admitted (the limit's allowance is 5000), %d errors", a, e)
	}
	t.Logf("a 5 s outage: %d admitted; first process %+v", a, tr.procs[0].Stats())
	failing.Store(false)
	// The limiter refilled during the outage, but each process charges it
	// (DEBT) what its fallback admitted beyond that refill: the burst that
	// was in use when Redis failed. So the 2 s after admit 2 s of rate, not
	// the burst as well (unrepaid, it was 2800 to 3100).
	if a, e := run(2 * time.Second); e != 0 || a < 1900 || a > 2150 {
		t.Fatalf("after the outage: %d admitted, %d errors", a, e)
	}
	var charged int64
	for _, p := range tr.procs {
		charged += p.Stats().Charged
	}
	if charged < 800 || charged > 1100 {
		t.Fatalf("after the outage: %d units charged, want about the burst (1000)", charged)
	}
	if s := tr.procs[0].Stats(); s.Down < 4500*time.Millisecond || s.Down > 5200*time.Millisecond || s.Fallback == 0 {
		t.Fatalf("stats after the outage: %+v", s)
	}
	// Redis fails again after 2 s of recovery, the limiter not yet drained:
	// the allowance of the 8 s of fallback is its burst and 8 s of rate,
	// and the last 2 s of the outage all err (4 processes, 1000 a second).
	failing.Store(true)
	a, e = run(10 * time.Second)
	if e < 7800 || e > 8000 || a > 9450 {
		t.Fatalf("a 10 s outage with an 8 s fallback: %d admitted, %d errors", a, e)
	}
}

// A key that spent a burst just before Redis failed decides in fallback
// at no more than the limit's own rate: GCRA of a burst of 1000 and 10 a
// second, its burst spent in 100 ms, then 5 s of refused connections
// admit the units held and 50 more, not the burst's pace.
func TestLeasedFallbackAfterBurst(t *testing.T) {
	tr := newTier(t, 1, Options{})
	p := tr.procs[0]
	var failing atomic.Bool
	tr.downWhile(&failing)
	l := client.GCRA(999, 10, time.Second)
	run := func(d, every time.Duration) (admitted int) {
		for end := tr.now() + int64(d); tr.now() < end; {
			if r, err := p.Take(ctx, "k", l, 1); err == nil && !r.Limited {
				admitted++
			}
			tr.settle()
			tr.advance(every)
		}
		return admitted
	}
	if a := run(100*time.Millisecond, 100*time.Microsecond); a < 800 {
		t.Fatalf("the burst: %d admitted", a)
	}
	s := p.Stats()
	held := s.Granted - s.Local
	failing.Store(true)
	if b := run(5*time.Second, time.Millisecond); int64(b) > 50+held+1 || p.Stats().Fallback == 0 {
		t.Fatalf("a 5 s outage after the burst: %d admitted (the limit's rate: 50, and %d held), %+v", b, held, p.Stats())
	}
}

// A key in fallback that goes idle for longer than a Lifetime (the
// callers paused while Redis restarts) keeps what it was spending: its
// decisions after the pause go on in fallback, not the error.
func TestLeasedFallbackSurvivesIdle(t *testing.T) {
	tr := newTierSwept(t, 1, Options{}, false)
	var failing atomic.Bool
	tr.downWhile(&failing)
	p := tr.procs[0]
	l := client.PerSecond(1000)
	run := func(d time.Duration) (admitted, errs int) {
		for end := tr.now() + int64(d); tr.now() < end; {
			r, err := p.Take(ctx, "hot", l, 1)
			switch {
			case err != nil:
				errs++
			case !r.Limited:
				admitted++
			}
			tr.settle()
			tr.advance(250 * time.Microsecond)
		}
		return admitted, errs
	}
	if _, e := run(time.Second); e != 0 {
		t.Fatalf("before: %d errors", e)
	}
	failing.Store(true)
	if a, e := run(200 * time.Millisecond); e != 0 || a == 0 {
		t.Fatalf("in fallback: %d admitted, %d errors", a, e)
	}
	for range 20 { // 1 s without a decision, swept every Target
		tr.advance(50 * time.Millisecond)
		p.sweep(tr.now())
		tr.settle()
	}
	if a, e := run(500 * time.Millisecond); e != 0 || a < 400 || a > 600 {
		t.Fatalf("after the pause, still in fallback: %d admitted (its rate is 1000 a second), %d errors", a, e)
	}
}

// A fixed window through the tier while Redis fails: four processes at
// 4× and 1.3× FixedWindow(1000, 1 s) for 6 s, Redis refusing connections
// for 300 ms within a window (recovering in it) and for 2.5 s from 2.x s
// (recovering two windows later), at several phases of the window (the
// faster exhaust the window before some of them begin). Every
// window admits at most its 1000, outage or not: the fallback spends at
// most the process's share of what its window had left, nothing of the
// next window; what it admitted is charged when Redis answers within that
// window (and the grants leave the others' shares until it ends), and
// counted Uncharged when its window has ended.
func TestLeasedFixedWindowOutage(t *testing.T) {
	for _, every := range []int{1, 3} {
		for _, phase := range []time.Duration{100, 400, 700, 950} {
			phase *= time.Millisecond
			tr := newTierSwept(t, 4, Options{}, false) // swept every 50 ms of the virtual clock, as the sweeper would
			var failing atomic.Bool
			tr.downWhile(&failing)
			l := client.FixedWindow(1000, time.Second)
			start := tr.now()
			perWindow := map[int64]int{}
			inFallback := map[int64]int64{}
			errs := 0
			for step := 0; tr.now()-start < int64(6*time.Second); step++ {
				if step%50 == 0 {
					for _, p := range tr.procs {
						p.sweep(tr.now())
					}
				}
				at := time.Duration(tr.now() - start)
				failing.Store(at >= time.Second+phase && at < time.Second+phase+300*time.Millisecond ||
					at >= 2*time.Second+phase && at < 4*time.Second+phase+500*time.Millisecond)
				for i, p := range tr.procs {
					if (step+i)%every != 0 {
						continue
					}
					before := p.stats.fallback.Load()
					r, err := p.Take(ctx, "fw", l, 1)
					switch {
					case err != nil:
						errs++
					case !r.Limited:
						w := (tr.now() - start) / int64(time.Second)
						perWindow[w]++
						if p.stats.fallback.Load() > before {
							inFallback[w]++
						}
					}
				}
				tr.settle()
				tr.advance(time.Millisecond)
			}
			for w, n := range perWindow {
				if n > 1000 {
					t.Fatalf("every %d ms, outages at +%v: window %d admitted %d of its 1000 (%d of them in fallback); per window %v",
						every, phase, w, n, inFallback[w], perWindow)
				}
			}
			var s Stats
			for _, p := range tr.procs {
				ps := p.Stats()
				s.Fallback += ps.Fallback
				s.Charged += ps.Charged
				s.Uncharged += ps.Uncharged
			}
			if errs != 0 || perWindow[3] != 0 || (inFallback[1] > 0) != (s.Charged > 0) || (inFallback[2] > 0) != (s.Uncharged > 0) {
				t.Fatalf("every %d ms, outages at +%v: %d errors; charged %d, uncharged %d; per window %v, in fallback %v",
					every, phase, errs, s.Charged, s.Uncharged, perWindow, inFallback)
			}
			t.Logf("every %d ms, outages at +%v: admitted per window %v, in fallback %v; %d units charged, %d uncharged",
				every, phase, perWindow, inFallback, s.Charged, s.Uncharged)
		}
	}
}

// A key that decided in fallback and then went idle is charged by the
// sweep once Redis answers, with no decision to carry the charge: a fixed
// window (charged whole within its window), 40 admitted in fallback, the
// callers gone, Redis back: the sweep charges the 40 (a peek first), and
// the key, owing nothing, is forgotten once idle.
func TestLeasedIdleDebtCharged(t *testing.T) {
	tr := newTierSwept(t, 1, Options{}, false)
	var failing atomic.Bool
	tr.downWhile(&failing)
	p := tr.procs[0]
	l := client.FixedWindow(100_000, time.Minute)
	tr.clock.Store(time.Unix(1_700_000_040, 0).UnixNano()) // 20 s before the window ends
	for range 400 {
		if _, err := p.Take(ctx, "fw", l, 1); err != nil {
			t.Fatal(err)
		}
		tr.settle()
		tr.advance(250 * time.Microsecond)
	}
	failing.Store(true)
	fallback := 0
	for range 2000 {
		before := p.stats.fallback.Load()
		if r, err := p.Take(ctx, "fw", l, 1); err == nil && !r.Limited && p.stats.fallback.Load() > before {
			fallback++
		}
		tr.settle()
		tr.advance(250 * time.Microsecond)
	}
	if fallback == 0 {
		t.Fatalf("nothing admitted in fallback: %+v", p.Stats())
	}
	failing.Store(false)
	for range 20 { // 1 s with no decision, swept every Target
		tr.advance(50 * time.Millisecond)
		p.sweep(tr.now())
		tr.settle()
	}
	s := p.Stats()
	if s.Charged != int64(fallback) || s.Uncharged != 0 {
		t.Fatalf("%d admitted in fallback; %+v", fallback, s)
	}
	tr.advance(registryLease)
	p.sweep(tr.now())
	if _, ok := p.keys.Load("fw"); ok {
		t.Fatal("the key, idle and owing nothing, is kept")
	}
}
