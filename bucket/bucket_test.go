package bucket

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// t0 is the virtual clock's origin: 2023-11-14T22:13:20Z in Unix nanoseconds.
const t0 = int64(1_700_000_000) * int64(time.Second)

const (
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

type step struct {
	at      int64 // ns after t0
	n       int64 // tokens / quantity
	limited bool
	remain  int64
	retry   time.Duration
	reset   time.Duration
	delay   time.Duration
}

// run applies the steps, keeping the state as the module does: stored only
// on Write, and gone once the instant it names has passed (the key expired).
func run(t *testing.T, f func(state, now, n int64) (Decision, error), steps []step) {
	t.Helper()
	var state int64
	for i, s := range steps {
		now := t0 + s.at
		if state <= now {
			state = 0
		}
		d, err := f(state, now, s.n)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Limited != s.limited || d.Remaining != s.remain || d.RetryAfter != s.retry || d.ResetAfter != s.reset || d.Delay != s.delay {
			t.Fatalf("step %d (t0+%v, n=%d):\n got limited=%v remaining=%d retry=%v reset=%v delay=%v\nwant limited=%v remaining=%d retry=%v reset=%v delay=%v",
				i, time.Duration(s.at), s.n, d.Limited, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay,
				s.limited, s.remain, s.retry, s.reset, s.delay)
		}
		if d.Limited && d.Write {
			t.Fatalf("step %d: refused but writes", i)
		}
		if d.Write {
			state = d.State
		}
	}
}

func TestTokenBucket(t *testing.T) {
	b, err := NewTokenBucket(10, 1, 1) // 10 tokens, 1 per second
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	run(t, b.Take, []step{
		{0, 11, true, 10, Never, 0, 0}, // more than the capacity: never
		{0, 0, false, 10, Never, 0, 0}, // full at first
		{0, 4, false, 6, Never, 4 * s, 0},
		{0, 6, false, 0, Never, 10 * s, 0}, // the whole bucket
		{0, 1, true, 0, 1 * s, 10 * s, 0},
		{500 * ms, 1, true, 0, 500 * time.Millisecond, 9500 * time.Millisecond, 0},
		{2 * sec, 3, true, 2, 1 * s, 8 * s, 0}, // 2 refilled, 3 wanted: 1 s more
		{3 * sec, 3, false, 0, Never, 10 * s, 0},
		{8 * sec, -2, false, 7, Never, 3 * s, 0}, // 5 refilled, 2 put back
		{8 * sec, -50, false, 10, Never, 0, 0},   // never beyond full
		{20 * sec, 1, false, 9, Never, 1 * s, 0},
	})
}

// A rate that does not divide the period: T = 10 s / 3 rounded up to the
// nanosecond. The capacity is still exact at one instant.
func TestTokenBucketFractionalInterval(t *testing.T) {
	b, _ := NewTokenBucket(3, 3, 10)
	T := time.Duration(3333333334)
	run(t, b.Take, []step{
		{0, 1, false, 2, Never, T, 0},
		{0, 1, false, 1, Never, 2 * T, 0},
		{0, 1, false, 0, Never, 3 * T, 0},
		{0, 1, true, 0, T, 3 * T, 0},
	})
}

func TestShaper(t *testing.T) {
	q, err := NewShaper(2, 1, 1) // 1 per second, 2 may wait
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	run(t, q.Enqueue, []step{
		{0, 0, false, 2, Never, 0, 0},         // empty: 2 free places
		{0, 1, false, 2, Never, 1 * s, 0},     // goes now; the next waits 1 s
		{0, 1, false, 1, Never, 2 * s, 1 * s}, // waits 1 s
		{0, 1, false, 0, Never, 3 * s, 2 * s}, // waits 2 s
		{0, 1, true, 0, 1 * s, 3 * s, 0},      // full: retry when one leaves
		{999 * ms, 1, true, 0, 1 * time.Millisecond, 2001 * time.Millisecond, 0},
		{1 * sec, 1, false, 0, Never, 3 * s, 2 * s}, // a place freed
		{2500 * ms, 1, false, 0, Never, 2500 * time.Millisecond, 1500 * time.Millisecond},
		{10 * sec, 4, true, 2, Never, 0, 0}, // more than 1 + capacity: never
		{10 * sec, 3, false, 0, Never, 3 * s, 0},
	})
}

// Delays 0, T, 2T, … up to capacity×T, then refusal.
func TestShaperDelays(t *testing.T) {
	q, _ := NewShaper(5, 4, 1) // T = 250 ms
	now := t0
	var state int64
	for i := int64(0); i <= 5; i++ {
		d, _ := q.Enqueue(state, now, 1)
		if d.Limited || d.Delay != time.Duration(i*250*ms) || d.Remaining != 5-i {
			t.Fatalf("request %d: %+v", i, d)
		}
		state = d.State
	}
	if d, _ := q.Enqueue(state, now, 1); !d.Limited || d.RetryAfter != 250*time.Millisecond {
		t.Fatalf("7th: %+v", d)
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		cap, n, p int64
		want      error
	}{
		{0, 1, 1, ErrRange}, {1, 0, 1, ErrRange}, {1, 1, 0, ErrRange}, {1, 1, MaxPeriod + 1, ErrRange},
		{1, 1_000_000_001, 1, ErrRate},
		{math.MaxInt64, 1, 1, ErrOverflow},
		{10, 1, MaxPeriod, ErrOverflow},
		{1, 1_000_000_000, 1, nil}, {1, 1, MaxPeriod, nil},
	} {
		if _, err := NewTokenBucket(c.cap, c.n, c.p); !errors.Is(err, c.want) {
			t.Errorf("NewTokenBucket(%d, %d, %d) = %v, want %v", c.cap, c.n, c.p, err, c.want)
		}
	}
	if _, err := NewShaper(math.MaxInt64, 1, 1); !errors.Is(err, ErrRange) {
		t.Errorf("NewShaper(max) = %v", err)
	}
	if _, err := NewShaper(0, 1, MaxPeriod); !errors.Is(err, nil) {
		t.Errorf("NewShaper(0, 1, max) = %v", err)
	}
	q, _ := NewShaper(1, 1, 1)
	if _, err := q.Enqueue(0, t0, -1); !errors.Is(err, ErrRange) {
		t.Errorf("negative quantity: %v", err)
	}
	b, _ := NewTokenBucket(1, 1, MaxPeriod/2)
	if d, err := b.Take(0, t0, 3); err != nil || !d.Limited || d.RetryAfter != Never {
		t.Errorf("tokens x T beyond int64: %+v, %v; want a refusal for good", d, err)
	}
	if _, err := b.Take(math.MaxInt64, t0, 0); !errors.Is(err, nil) {
		t.Errorf("far state, quantity 0: %v", err)
	}
	if _, err := b.Take(t0, math.MaxInt64-5, 1); !errors.Is(err, ErrOverflow) {
		t.Errorf("now + next overflow: %v", err)
	}
}

// Costs the bucket can never admit are refusals, however large; refunds
// beyond full stop at full. The commands in issue 11 replied an overflow
// error for each of these.
func TestHugeCosts(t *testing.T) {
	for _, c := range []struct{ capacity, count, period, n int64 }{
		{5, 1, 1, 10_000_000_000}, {5, 1, 60, 153722868}, {5, 1, 1, math.MaxInt64},
	} {
		b, _ := NewTokenBucket(c.capacity, c.count, c.period)
		d, err := b.Take(0, t0, c.n)
		if err != nil || !d.Limited || d.RetryAfter != Never || d.Remaining != c.capacity || d.Write {
			t.Errorf("TB %v: %+v, %v", c, d, err)
		}
		q, _ := NewShaper(c.capacity, c.count, c.period)
		d, err = q.Enqueue(0, t0, c.n)
		if err != nil || !d.Limited || d.RetryAfter != Never || d.Write {
			t.Errorf("LB %v: %+v, %v", c, d, err)
		}
	}
	b, _ := NewTokenBucket(5, 1, 60)
	for _, n := range []int64{-153722868, math.MinInt64} {
		d, err := b.Take(t0+120*sec, t0, n)
		if err != nil || d.Limited || d.Remaining != 5 || !d.Write || d.State != t0 {
			t.Errorf("refund %d: %+v, %v", n, d, err)
		}
	}
}

// A state an hour ahead (the clock stepped back an hour) counts as one full
// refill ahead; the clamped state is to be stored even by a refusal.
func TestClockStepBack(t *testing.T) {
	b, _ := NewTokenBucket(6, 1, 10) // 6 tokens, one per 10 s: a full refill is 60 s
	d, _ := b.Take(0, t0, 2)
	back := t0 - int64(time.Hour)
	d, _ = b.Take(d.State, back, 1)
	if !d.Limited || d.RetryAfter != 10*time.Second || d.ResetAfter != 60*time.Second || !d.Write || d.State != back+60*sec {
		t.Fatalf("token bucket after the step: %+v", d)
	}
	if d, _ = b.Take(d.State, back+10*sec, 1); d.Limited || d.Remaining != 0 {
		t.Fatalf("one interval later: %+v", d)
	}
	q, _ := NewShaper(2, 1, 1) // one goes, two wait: the queue holds 3 s
	d, _ = q.Enqueue(t0+2*sec, back, 0)
	if d.Limited || !d.Write || d.State != back+3*sec || d.ResetAfter != 3*time.Second || d.Remaining != 0 {
		t.Fatalf("shaper after the step: %+v", d)
	}
}

// Over random arrivals and costs, the token bucket never admits more than
// capacity + rate × W tokens in any interval of length W, and the shaper's
// departures are never closer than the interval, in arrival order, with at
// most capacity waiting.
func TestProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		capacity := 1 + rng.Int64N(20)
		count := 1 + rng.Int64N(10)
		period := 1 + rng.Int64N(5)
		periodNs := period * sec
		b, err := NewTokenBucket(capacity, count, period)
		if err != nil {
			t.Fatal(err)
		}
		q, _ := NewShaper(capacity, count, period)

		type event struct{ at, n int64 }
		var taken []event
		var departures []int64
		var tbState, lbState int64
		now := t0
		for range 400 {
			// Bursts at one instant, short gaps and long idle periods.
			switch rng.IntN(4) {
			case 0:
			case 1:
				now += rng.Int64N(periodNs / count)
			case 2:
				now += rng.Int64N(3 * periodNs)
			case 3:
				now += rng.Int64N(1000)
			}
			n := 1 + rng.Int64N(max(capacity/2, 1))
			if tbState <= now {
				tbState = 0
			}
			if d, _ := b.Take(tbState, now, n); !d.Limited {
				taken = append(taken, event{now, n})
				tbState = d.State
			}
			if lbState <= now {
				lbState = 0
			}
			d, _ := q.Enqueue(lbState, now, 1)
			if !d.Limited {
				dep := now + int64(d.Delay)
				if k := len(departures); k > 0 {
					if dep < departures[k-1]+int64(q.Interval()) {
						t.Fatalf("trial %d: departures %d and %d closer than %v", trial, departures[k-1], dep, q.Interval())
					}
				}
				// Waiting when it arrives: earlier ones not yet gone.
				waiting := 0
				for _, x := range departures {
					if x > now {
						waiting++
					}
				}
				if d.Delay > 0 && waiting+1 > int(capacity) {
					t.Fatalf("trial %d: %d would be waiting, capacity %d", trial, waiting+1, capacity)
				}
				departures = append(departures, dep)
				lbState = d.State
			}
		}
		// Every interval [taken[i].at, taken[j].at] holds at most
		// capacity + W × count / period tokens.
		for i := range taken {
			sum := int64(0)
			for j := i; j < len(taken); j++ {
				sum += taken[j].n
				w := taken[j].at - taken[i].at
				// sum ≤ capacity + w·count/period, in integers.
				if (sum-capacity)*periodNs > w*count {
					t.Fatalf("trial %d: %d tokens in %v (capacity %d, %d per %d s)", trial, sum, time.Duration(w), capacity, count, period)
				}
			}
		}
	}
}

// FuzzBuckets checks the invariants on arbitrary parameters, states and
// times: no panic, errors instead of overflow, 0 ≤ remaining ≤ limit, a
// refused call never writes, an admitted positive cost moves the state
// ahead of now by at most the tolerance.
func FuzzBuckets(f *testing.F) {
	f.Add(int64(10), int64(1), int64(1), int64(3), int64(0), t0)
	f.Add(int64(2), int64(3), int64(10), int64(-5), t0+9*sec, t0)
	f.Add(int64(0), int64(1), MaxPeriod, int64(1), int64(0), t0)
	f.Add(int64(math.MaxInt64-1), int64(1_000_000_000), int64(1), int64(2), int64(0), t0)
	f.Fuzz(func(t *testing.T, capacity, count, period, n, state, now int64) {
		if now < 0 {
			return
		}
		check := func(kind string, d Decision, err error, tolerance int64) {
			if err != nil {
				return
			}
			if d.Remaining < 0 || d.Remaining > d.Limit {
				t.Fatalf("%s: remaining %d outside [0, %d]", kind, d.Remaining, d.Limit)
			}
			clamped := state > now && state-now > tolerance // now ≥ 0: no overflow
			if d.Limited && ((d.Write && !clamped) || d.Delay != 0) {
				t.Fatalf("%s: refused call writes or waits: %+v", kind, d)
			}
			if clamped && (!d.Write || d.State-now > tolerance) {
				t.Fatalf("%s: a state beyond the tolerance was not clamped: %+v", kind, d)
			}
			if !d.Limited && n > 0 && (!d.Write || d.State <= now || d.State-now > tolerance) {
				t.Fatalf("%s: admitted state %d outside (now, now+τ]: %+v", kind, d.State, d)
			}
			if d.ResetAfter < 0 || d.Delay < 0 || (d.RetryAfter < 0 && d.RetryAfter != Never) {
				t.Fatalf("%s: negative time: %+v", kind, d)
			}
		}
		if b, err := NewTokenBucket(capacity, count, period); err == nil {
			d, err := b.Take(state, now, n)
			check("token bucket", d, err, b.s.Tolerance)
		}
		if q, err := NewShaper(capacity, count, period); err == nil {
			d, err := q.Enqueue(state, now, n)
			if n < 0 && !errors.Is(err, ErrRange) {
				t.Fatalf("negative quantity: %v", err)
			}
			check("shaper", d, err, q.s.Tolerance)
		}
	})
}

// A reserve on the token bucket: tokens are taken only if the reserve
// remains after them; the refusal is that of a take of tokens + reserve.
func TestTakeReserve(t *testing.T) {
	b, _ := NewTokenBucket(5, 1, 1)
	var state int64
	for i := range 3 {
		d, _ := b.TakeReserve(state, t0, 1, 2)
		if d.Limited || d.Remaining != int64(4-i) {
			t.Fatalf("take %d: %+v", i+1, d)
		}
		state = d.State
	}
	d, _ := b.TakeReserve(state, t0, 1, 2)
	if !d.Limited || d.Remaining != 2 || d.RetryAfter != time.Second {
		t.Fatalf("past the reserve: %+v", d)
	}
	if d, _ = b.TakeReserve(state, t0, 2, 0); d.Limited || d.Remaining != 0 {
		t.Fatalf("without it: %+v", d)
	}
}

// TestChargePast2262: a debt whose state (when the bucket is full again)
// would pass the largest instant an int64 holds (2^63 − 1 ns, in 2262)
// leaves the state at that instant, owed; every take is refused until
// then, and more charges leave it there. Capacity 4, one token a second,
// on a virtual clock at t0 + 200 s. A bucket whose full refill from now
// already ends past it cannot be computed: ErrOverflow.
func TestChargePast2262(t *testing.T) {
	const latest = math.MaxInt64
	b, _ := NewTokenBucket(4, 1, 1)
	now := t0 + 200*sec
	left := time.Duration(latest - now)
	d, err := b.Charge(0, now, 1_000_000_000_000, false) // 10^12 tokens: 31,688 years of refill
	if err != nil || !d.Limited || d.Remaining != 0 || d.RetryAfter != left-3*time.Second || d.ResetAfter != left ||
		!d.Write || !d.Owed || d.State != latest {
		t.Fatalf("a charge past 2262: %+v %v", d, err)
	}
	for i, c := range []struct {
		at, n        int64
		charge       bool
		retry, reset time.Duration
		write        bool
	}{
		{0, 0, false, left - 4*time.Second, left, false},                           // a check waits for it
		{0, 1, false, left - 3*time.Second, left, false},                           // a take too
		{sec, 2, true, left - 4*time.Second, left - time.Second, true},             // more debt: still there
		{sec, math.MaxInt64, true, left - 4*time.Second, left - time.Second, true}, // tokens × interval overflows: still there
		{sec, math.MaxInt64, false, Never, left - time.Second, false},              // more than the bucket holds, without DEBT
		{latest - now - 5*sec, 1, false, 2 * time.Second, 5 * time.Second, false},  // a second over: two to wait
		{latest - now - 5*sec, 0, true, 1 * time.Second, 5 * time.Second, false},   // a charge of 0 is a check
	} {
		var got Decision
		if c.charge {
			got, err = b.Charge(d.State, now+c.at, c.n, true)
		} else {
			got, err = b.TakeOwed(d.State, now+c.at, c.n, 0, true)
		}
		if err != nil || !got.Limited || got.Remaining != 0 || got.RetryAfter != c.retry || got.ResetAfter != c.reset ||
			got.Write != c.write || (c.write && (got.State != latest || !got.Owed)) {
			t.Fatalf("step %d (t+%v, %d tokens, charge %v): %+v %v; want retry %v, reset %v, write %v",
				i, time.Duration(c.at), c.n, c.charge, got, err, c.retry, c.reset, c.write)
		}
	}
	slow, _ := NewTokenBucket(2, 1, MaxPeriod/2) // a full refill takes 292 years
	for _, n := range []int64{2, 3, math.MaxInt64} {
		if _, err := slow.Charge(0, t0, n, false); !errors.Is(err, ErrOverflow) {
			t.Errorf("a refill past 2262, a charge of %d: %v, want ErrOverflow", n, err)
		}
	}
}
