package gcra

import (
	"errors"
	"math"
	"math/big"
	"testing"
	"time"
)

// t0 is the virtual clock's origin: 2023-11-14T22:13:20Z in Unix nanoseconds.
const t0 = int64(1_700_000_000) * int64(time.Second)

const ms = int64(time.Millisecond)

type step struct {
	at       int64 // nanoseconds after t0
	quantity int64
	limited  bool
	remain   int64
	retry    time.Duration
	reset    time.Duration
}

// run applies the steps in order to one limiter, carrying the state the way
// the module does: written only when Write is set, and dropped at or before
// now (the key would have expired).
func run(t *testing.T, l Limiter, steps []step) {
	t.Helper()
	var tat int64
	for i, s := range steps {
		now := t0 + s.at
		if tat <= now {
			tat = 0 // the key expired at TAT
		}
		d, err := l.Throttle(tat, now, s.quantity)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Limited != s.limited || d.Remaining != s.remain || d.RetryAfter != s.retry || d.ResetAfter != s.reset || d.Limit != l.Limit() {
			t.Fatalf("step %d (t0+%v, quantity %d): got limited=%v limit=%d remaining=%d retry=%v reset=%v; want limited=%v remaining=%d retry=%v reset=%v",
				i, time.Duration(s.at), s.quantity, d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter,
				s.limited, s.remain, s.retry, s.reset)
		}
		if d.Limited && d.Write && tat <= now+l.s.Tolerance {
			t.Fatalf("step %d: a refused request asks for a write", i)
		}
		if d.Write {
			tat = d.TAT
		}
	}
}

// TestRedisCellTable is the table published in redis-cell's own tests
// (max_burst 4, 1 per second), step for step.
func TestRedisCellTable(t *testing.T) {
	l, err := New(4, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	run(t, l, []step{
		{0, 6, true, 5, Never, 0}, // a cost above the limit is never admitted
		{0, 1, false, 4, Never, 1 * s},
		{0, 1, false, 3, Never, 2 * s},
		{0, 1, false, 2, Never, 3 * s},
		{0, 1, false, 1, Never, 4 * s},
		{0, 1, false, 0, Never, 5 * s},
		{0, 1, true, 0, 1 * s, 5 * s},
		{3000 * ms, 1, false, 2, Never, 3000 * time.Millisecond},
		{3100 * ms, 1, false, 1, Never, 3900 * time.Millisecond},
		{4000 * ms, 1, false, 1, Never, 4000 * time.Millisecond},
		{8000 * ms, 1, false, 4, Never, 1000 * time.Millisecond},
		{9500 * ms, 1, false, 4, Never, 1000 * time.Millisecond},
		{9500 * ms, 0, false, 4, Never, 1 * s}, // quantity 0 only reports
		{9500 * ms, 2, false, 2, Never, 3 * s},
		{9500 * ms, 5, true, 2, 3 * s, 3 * s},
	})
}

// TestReadmeExample is redis-cell's README: CL.THROTTLE user123 15 30 60
// replies 0 16 15 -1 2.
func TestReadmeExample(t *testing.T) {
	l, err := New(15, 30, 60)
	if err != nil {
		t.Fatal(err)
	}
	run(t, l, []step{{0, 1, false, 15, Never, 2 * time.Second}})
}

func TestBurstThenSteady(t *testing.T) {
	// 15 max_burst, 30 per 60 s: 16 at once, then one every 2 s.
	l, _ := New(15, 30, 60)
	var steps []step
	for i := int64(0); i < 16; i++ {
		steps = append(steps, step{0, 1, false, 15 - i, Never, time.Duration(2*(i+1)) * time.Second})
	}
	steps = append(steps,
		step{0, 1, true, 0, 2 * time.Second, 32 * time.Second},
		step{1999 * ms, 1, true, 0, 1 * time.Millisecond, 30001 * time.Millisecond},
		step{2000 * ms, 1, false, 0, Never, 32 * time.Second},
		step{2001 * ms, 1, true, 0, 1999 * time.Millisecond, 31999 * time.Millisecond},
		step{34000 * ms, 0, false, 16, Never, 0}, // full again after τ
	)
	run(t, l, steps)
}

func TestRefund(t *testing.T) {
	l, _ := New(4, 1, 1) // limit 5, T = 1 s
	s := time.Second
	run(t, l, []step{
		{0, 3, false, 2, Never, 3 * s},
		{0, -1, false, 3, Never, 2 * s},  // one token back
		{0, -10, false, 5, Never, 0},     // never beyond full
		{0, 5, false, 0, Never, 5 * s},   // the whole bucket is there again
		{0, -10, false, 5, Never, 0},     //
		{0, -1, false, 5, Never, 0},      // refund on a full limiter changes nothing
		{500 * ms, 6, true, 5, Never, 0}, //
	})
}

func TestRefundWrites(t *testing.T) {
	l, _ := New(4, 1, 1)
	// A refund on a full limiter writes nothing.
	if d, _ := l.Throttle(0, t0, -1); d.Write {
		t.Fatalf("refund on full state writes: %+v", d)
	}
	// A refund that empties the debt asks to delete: TAT at now.
	d, _ := l.Throttle(t0+2*int64(time.Second), t0, -5)
	if !d.Write || d.TAT != t0 {
		t.Fatalf("refund to full: got %+v, want Write with TAT=now", d)
	}
	// quantity 0 never writes.
	if d, _ := l.Throttle(t0+2*int64(time.Second), t0, 0); d.Write {
		t.Fatalf("quantity 0 writes: %+v", d)
	}
}

func TestStoredStateInThePastIsFull(t *testing.T) {
	l, _ := New(4, 1, 1)
	d, err := l.Throttle(t0-10*int64(time.Second), t0, 0)
	if err != nil || d.Remaining != 5 || d.ResetAfter != 0 {
		t.Fatalf("got %+v, %v; want remaining 5 reset 0", d, err)
	}
}

func TestParametersChangedOnLiveKey(t *testing.T) {
	// State written by a generous limiter, read by a strict one: TAT is 50 s
	// ahead, further than the strict τ (5 s) allows, so it counts as τ
	// ahead: the strict limiter is empty, a request waits one interval, and
	// the clamped state is to be stored (Write) even by quantity 0.
	wide, _ := New(99, 1, 1)
	tat := t0
	for i := 0; i < 50; i++ {
		d, _ := wide.Throttle(tat, t0, 1)
		tat = d.TAT
	}
	strict, _ := New(4, 1, 1)
	d, _ := strict.Throttle(tat, t0, 0)
	if d.Limited || d.Remaining != 0 || !d.Write || d.TAT != t0+5*int64(time.Second) || d.ResetAfter != 5*time.Second {
		t.Fatalf("quantity 0: got %+v", d)
	}
	d, _ = strict.Throttle(tat, t0, 1)
	if !d.Limited || d.Remaining != 0 || !d.Write || d.TAT != t0+5*int64(time.Second) || d.RetryAfter != time.Second {
		t.Fatalf("quantity 1: got %+v", d)
	}
}

// A clock that steps back by an hour leaves every state an hour further
// ahead than it was written. It counts as τ ahead: one refill at most, not
// the hour, and the clamped state is written once; from there the limiter
// runs as usual.
func TestClockStepBack(t *testing.T) {
	l, _ := New(5, 1, 10) // limit 6, T = 10 s, τ = 60 s
	s := time.Second
	hour := int64(time.Hour)
	d, _ := l.Throttle(0, t0, 2)
	if d.Remaining != 4 || d.TAT != t0+20*int64(s) {
		t.Fatalf("2 of 6: %+v", d)
	}
	tat := d.TAT
	back := t0 - hour // the clock stepped back an hour
	d, _ = l.Throttle(tat, back, 1)
	if !d.Limited || d.RetryAfter != 10*s || d.ResetAfter != 60*s || !d.Write || d.TAT != back+60*int64(s) {
		t.Fatalf("after the step: %+v, want refused, retry 10 s, the clamped state written", d)
	}
	tat = d.TAT
	d, _ = l.Throttle(tat, back+10*int64(s), 1)
	if d.Limited || d.Remaining != 0 || d.TAT != back+70*int64(s) {
		t.Fatalf("one interval later: %+v", d)
	}
	// Had the clamped state not been stored, the next call would clamp
	// again and refuse again: that is why a clamp asks for a write.
	d, _ = l.Throttle(t0+20*int64(s), back+10*int64(s), 1)
	if !d.Limited || !d.Write || d.TAT != back+70*int64(s) {
		t.Fatalf("clamping again: %+v", d)
	}
}

// A cost the limiter can never admit is a refusal, however large; a refund
// beyond full stops at full; neither is an overflow.
func TestHugeCosts(t *testing.T) {
	l, _ := New(5, 1, 1)
	for _, q := range []int64{7, 10_000_000_000, math.MaxInt64} {
		d, err := l.Throttle(0, t0, q)
		if err != nil || !d.Limited || d.RetryAfter != Never || d.Remaining != 6 || d.Write {
			t.Errorf("quantity %d: %+v, %v", q, d, err)
		}
	}
	l60, _ := New(5, 1, 60)
	for _, q := range []int64{-153722868, math.MinInt64} {
		d, err := l60.Throttle(t0+120*int64(time.Second), t0, q)
		if err != nil || d.Limited || d.Remaining != 6 || !d.Write || d.TAT != t0 {
			t.Errorf("refund %d: %+v, %v", q, d, err)
		}
	}
	// One every 7e9 s: the first call is admitted, the second is refused
	// (the state is a whole interval ahead), not an overflow.
	slow, _ := New(0, 1, 7_000_000_000)
	d, err := slow.Throttle(0, t0, 1)
	if err != nil || d.Limited {
		t.Fatalf("first: %+v, %v", d, err)
	}
	d, err = slow.Throttle(d.TAT, t0, 1)
	if err != nil || !d.Limited || d.RetryAfter != 7_000_000_000*time.Second {
		t.Fatalf("second: %+v, %v", d, err)
	}
}

func TestNewErrors(t *testing.T) {
	cases := []struct {
		burst, count, period int64
		want                 error
	}{
		{-1, 1, 1, ErrRange},
		{math.MaxInt64, 1, 1, ErrRange},
		{0, 0, 1, ErrRange},
		{0, 1, 0, ErrRange},
		{0, 1, MaxPeriod + 1, ErrRange},
		{0, 1_000_000_001, 1, ErrRate},
		{math.MaxInt64 - 1, 1, 1, ErrOverflow},
		{9, 1, MaxPeriod, ErrOverflow},
		{0, 1_000_000_000, 1, nil},
		{0, 1, MaxPeriod, nil},
	}
	for _, c := range cases {
		if _, err := New(c.burst, c.count, c.period); !errors.Is(err, c.want) {
			t.Errorf("New(%d, %d, %d) = %v, want %v", c.burst, c.count, c.period, err, c.want)
		}
	}
}

func TestThrottleOverflow(t *testing.T) {
	// τ = 2^63 ns: the state an admitted call writes lies past 2262.
	l, _ := New(0, 1, MaxPeriod)
	if _, err := l.Throttle(0, t0, 1); !errors.Is(err, ErrOverflow) {
		t.Fatalf("now + T beyond int64: %v", err)
	}
	// What is refused or reports needs no state beyond now + ahead.
	for _, q := range []int64{2, 0, -1, math.MinInt64} {
		if _, err := l.Throttle(0, t0, q); err != nil {
			t.Fatalf("quantity %d: %v", q, err)
		}
	}
	half, _ := New(0, 1, MaxPeriod/2)
	if d, err := half.Throttle(math.MaxInt64-5, t0, 1); err != nil || !d.Limited || d.RetryAfter != half.Interval() {
		t.Fatalf("a state at the end of int64: %+v, %v", d, err)
	}
}

// remaining is exact where T is not a whole number of microseconds: 6000
// per second (T = 166666 ns, τ = 6001 T) holds 6001 at once, then 6000 and
// 5999 after one and two calls at one instant. redis-cell's truncated
// microseconds gave 6001 after the first call (issue 12).
func TestRemainingExact(t *testing.T) {
	for _, c := range []struct{ burst, count int64 }{{6000, 6000}, {3000, 3000}} {
		l, _ := New(c.burst, c.count, 1)
		var tat int64
		for i, want := range []int64{c.burst, c.burst - 1, c.burst - 2} {
			d, _ := l.Throttle(tat, t0, 1)
			if d.Limited || d.Remaining != want {
				t.Fatalf("%d per second, call %d: remaining %d, want %d", c.count, i+1, d.Remaining, want)
			}
			tat = d.TAT
		}
	}
	// Where T is whole microseconds, the same as redis-cell's formula.
	l, _ := New(15, 30, 60)
	for ttl := int64(0); ttl <= l.s.Tolerance; ttl += 999_999_937 {
		cell := ((l.s.Tolerance - ttl) / 1000) / (l.s.Interval / 1000)
		if d, _ := l.Throttle(t0+ttl, t0, 0); d.Remaining != cell { // quantity 0: the remaining at ttl
			t.Fatalf("ttl %d: remaining %d, redis-cell's %d", ttl, d.Remaining, cell)
		}
	}
}

func TestSubMicrosecondInterval(t *testing.T) {
	// 2,000,000 per second: T = 500 ns, below redis-cell's microsecond
	// division; remaining still counts the burst exactly.
	l, _ := New(9, 2_000_000, 1)
	d, _ := l.Throttle(0, t0, 1)
	if d.Remaining != 9 || d.ResetAfter != 500 {
		t.Fatalf("got %+v", d)
	}
}

// FuzzThrottle checks Throttle against a big-integer reference of the
// algorithm, and the invariants: no overflow goes unreported, 0 ≤ remaining
// ≤ limit, a refused call never changes the state, and an admitted call of
// positive cost moves TAT ahead of now by at most τ.
func FuzzThrottle(f *testing.F) {
	f.Add(int64(4), int64(1), int64(1), int64(1), int64(0), t0)
	f.Add(int64(15), int64(30), int64(60), int64(6), t0+10*int64(time.Second), t0)
	f.Add(int64(0), int64(3), int64(7), int64(-2), t0+9*int64(time.Second), t0)
	f.Add(int64(math.MaxInt64-1), int64(1), int64(1), int64(1), int64(0), t0)
	f.Add(int64(5), int64(2_000_000), int64(3), int64(0), t0+1234567, t0)
	f.Add(int64(7), int64(1), MaxPeriod, int64(1), int64(0), t0)
	f.Fuzz(func(t *testing.T, burst, count, period, quantity, tat, now int64) {
		if now < 0 {
			now = -now
		}
		if now < 0 {
			now = 0
		}
		l, err := New(burst, count, period)
		refL, refErr := refNew(burst, count, period)
		if (err == nil) != (refErr == nil) || (err != nil && !errors.Is(err, refErr)) {
			t.Fatalf("New(%d,%d,%d) = %v, reference %v", burst, count, period, err, refErr)
		}
		if err != nil {
			return
		}
		d, err := l.Throttle(tat, now, quantity)
		ref, refErr := refL.throttle(tat, now, quantity)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("Throttle(%d,%d,%d) error %v, reference %v", tat, now, quantity, err, refErr)
		}
		if err != nil {
			return
		}
		if d != ref {
			t.Fatalf("Throttle(tat=%d, now=%d, q=%d) with (%d,%d,%d):\n got %+v\nwant %+v", tat, now, quantity, burst, count, period, d, ref)
		}
		if d.Remaining < 0 || d.Remaining > d.Limit {
			t.Fatalf("remaining %d outside [0, %d]", d.Remaining, d.Limit)
		}
		clamped := tat > now && tat-now > l.s.Tolerance // now ≥ 0: tat − now fits
		want := max(tat, now)
		if clamped {
			want = now + l.s.Tolerance // below tat: fits
		}
		if d.Limited && d.TAT != want {
			t.Fatalf("refused call moves the state: %+v", d)
		}
		if d.Write && d.Limited && !clamped {
			t.Fatalf("refused call writes a state that needed no clamp: %+v", d)
		}
		if !d.Limited && quantity > 0 && (!d.Write || d.TAT <= now || d.TAT-now > l.s.Tolerance) {
			t.Fatalf("admitted call leaves TAT %d outside (now, now+τ]: %+v", d.TAT, d)
		}
		if d.ResetAfter < 0 || (d.RetryAfter < 0 && d.RetryAfter != Never) {
			t.Fatalf("negative time: %+v", d)
		}
	})
}

// refLimiter is the algorithm written out in arbitrary-precision integers,
// reporting ErrOverflow wherever a value leaves the int64 range.
type refLimiter struct{ interval, tolerance, limit *big.Int }

var (
	bigMax = big.NewInt(math.MaxInt64)
	bigMin = big.NewInt(math.MinInt64)
)

func fits(x *big.Int) bool { return x.Cmp(bigMax) <= 0 && x.Cmp(bigMin) >= 0 }

func refNew(burst, count, period int64) (refLimiter, error) {
	if burst < 0 || count < 1 || period < 1 {
		return refLimiter{}, ErrRange
	}
	limit := new(big.Int).Add(big.NewInt(burst), big.NewInt(1))
	periodNs := new(big.Int).Mul(big.NewInt(period), big.NewInt(int64(time.Second)))
	if !fits(limit) || !fits(periodNs) {
		return refLimiter{}, ErrRange
	}
	// T is defined as redis-cell defines it: float64 division, truncated.
	interval := big.NewInt(int64(float64(periodNs.Int64()) / float64(count)))
	if interval.Sign() < 1 {
		return refLimiter{}, ErrRate
	}
	tol := new(big.Int).Mul(interval, limit)
	if !fits(tol) {
		return refLimiter{}, ErrOverflow
	}
	return refLimiter{interval, tol, limit}, nil
}

func (r refLimiter) throttle(tat, now, quantity int64) (Decision, error) {
	bNow := big.NewInt(now)
	var d Decision
	d.Limit, d.RetryAfter = r.limit.Int64(), Never
	// How far the state runs ahead of now, at most τ (a clock step).
	ahead := new(big.Int).Sub(big.NewInt(tat), bNow)
	if ahead.Sign() < 0 {
		ahead.SetInt64(0)
	}
	if ahead.Cmp(r.tolerance) > 0 {
		ahead.Set(r.tolerance)
		d.Write = true
	}
	q := big.NewInt(quantity)
	if neg := new(big.Int).Neg(r.limit); q.Cmp(neg) < 0 {
		q = neg
	}
	inc := new(big.Int).Mul(r.interval, q)
	next := new(big.Int).Add(ahead, inc)
	if next.Sign() < 0 {
		next.SetInt64(0)
	}
	var ttl *big.Int
	if next.Cmp(r.tolerance) > 0 {
		d.Limited = true
		if q.Cmp(r.limit) <= 0 {
			d.RetryAfter = time.Duration(new(big.Int).Sub(next, r.tolerance).Int64())
		}
		ttl = ahead
	} else {
		ttl = next
		d.Write = d.Write || quantity > 0 || (quantity < 0 && ahead.Sign() > 0)
	}
	state := new(big.Int).Add(bNow, ttl)
	if !fits(state) {
		return Decision{}, ErrOverflow
	}
	d.TAT = state.Int64()
	d.ResetAfter = time.Duration(ttl.Int64())
	// remaining: ⌊(τ − ttl) / T⌋, ttl within [0, τ].
	rem := new(big.Int).Quo(new(big.Int).Sub(r.tolerance, ttl), r.interval)
	d.Remaining = rem.Int64()
	return d, nil
}

// RESERVE: with limit 6 and 2 in reserve, four unit requests pass at once
// and the fifth is refused as a request of 3 would be; a request without
// the reserve then takes what is left. A refund ignores the reserve.
func TestThrottleReserve(t *testing.T) {
	l, _ := New(5, 1, 1) // limit 6, T = 1 s
	var tat int64
	for i := range 4 {
		d, _ := l.ThrottleReserve(tat, t0, 1, 2)
		if d.Limited || d.Remaining != int64(5-i) {
			t.Fatalf("call %d: %+v", i+1, d)
		}
		tat = d.TAT
	}
	d, _ := l.ThrottleReserve(tat, t0, 1, 2)
	if !d.Limited || d.Remaining != 2 || d.RetryAfter != time.Second || d.TAT != tat {
		t.Fatalf("past the reserve: %+v", d)
	}
	if d, _ = l.ThrottleReserve(tat, t0, 5, 2); !d.Limited || d.RetryAfter != Never {
		t.Fatalf("cost + reserve above the limit: %+v", d)
	}
	if d, _ = l.ThrottleReserve(tat, t0, 2, 0); d.Limited || d.Remaining != 0 {
		t.Fatalf("without the reserve: %+v", d)
	}
	if d, _ = l.ThrottleReserve(d.TAT, t0, -1, 6); d.Limited || d.Remaining != 1 {
		t.Fatalf("a refund with a reserve: %+v", d)
	}
}

// TestChargePast2262 steps debts whose TAT would pass the largest instant
// an int64 holds (latest, 2^63 − 1 ns, in 2262), on a virtual clock from
// t0 + 200 s, max_burst 4, count 5, period 60 s (T = 12 s, τ = 60 s): the
// TAT stops at latest, owed, and every request is refused until then;
// more charges leave it there; a refund pays some of it back as any debt's;
// near latest it is paid off as any debt is.
func TestChargePast2262(t *testing.T) {
	const latest = math.MaxInt64
	sec := int64(time.Second)
	l, _ := New(4, 5, 60)
	now := t0 + 200*sec
	left := time.Duration(latest - now) // 7,523,371,836.854775807 s
	var tat int64
	owed := false
	for i, c := range []struct {
		now, quantity int64
		charge        bool
		limited       bool
		remain        int64
		retry, reset  time.Duration
		write         bool
		tat           int64 // when written
	}{
		{now, 1_000_000_000_000_000_000, true, true, 0, left - 48*time.Second, left, true, latest},         // 10^18 × 12 s: stops at latest
		{now, 0, false, true, 0, left - 60*time.Second, left, false, 0},                                    // a check waits for it
		{now, 1, false, true, 0, left - 48*time.Second, left, false, 0},                                    // a request too
		{now + sec, 5, true, true, 0, left - 49*time.Second, left - time.Second, true, latest},             // a charge that still overflows: latest
		{now + sec, math.MaxInt64, true, true, 0, left - 49*time.Second, left - time.Second, true, latest}, // quantity × T overflows: latest
		{now + sec, -3, true, false, 0, Never, left - 37*time.Second, true, latest - 36*sec},               // a refund of 3 pays 36 s back
		{latest - 100*sec, 1, false, true, 0, 16 * time.Second, 64 * time.Second, false, 0},                // 4 s over τ
		{latest - 84*sec, 1, false, false, 0, Never, 60 * time.Second, true, latest - 24*sec},              // paid off: admitted
	} {
		var d Decision
		var err error
		if c.charge {
			d, err = l.Charge(tat, c.now, c.quantity, owed)
		} else {
			d, err = l.ThrottleOwed(tat, c.now, c.quantity, 0, owed)
		}
		if err != nil || d.Limited != c.limited || d.Remaining != c.remain || d.RetryAfter != c.retry || d.ResetAfter != c.reset ||
			d.Write != c.write || (c.write && d.TAT != c.tat) || d.Limit != 5 {
			t.Fatalf("step %d (latest - %v, quantity %d, charge %v): %+v %v; want limited %v, remaining %d, retry %v, reset %v, write %v (TAT %d)",
				i, time.Duration(latest-c.now), c.quantity, c.charge, d, err, c.limited, c.remain, c.retry, c.reset, c.write, c.tat)
		}
		if d.Write {
			tat, owed = d.TAT, d.Owed
		}
	}
	if owed || tat != latest-24*sec {
		t.Fatalf("paid off: TAT %d owed %v, want latest - 24 s unowed", tat, owed)
	}
	// τ = 2^63 ns: the TAT a full limiter allows lies past latest already,
	// so a charge is an overflow of the arguments, as an admitted request is.
	huge, _ := New(0, 1, MaxPeriod)
	for _, q := range []int64{1, 2, math.MaxInt64} {
		if _, err := huge.Charge(0, t0, q, false); !errors.Is(err, ErrOverflow) {
			t.Errorf("τ past 2262, a charge of %d: %v, want ErrOverflow", q, err)
		}
	}
}
