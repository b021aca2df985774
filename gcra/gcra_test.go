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
		if d.Limited && d.Write {
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
	// State written by a generous limiter, read by a strict one: TAT is
	// further ahead than the strict τ, so even quantity 0 reports refused
	// (as redis-cell does), with remaining 0 and no write.
	wide, _ := New(99, 1, 1)
	tat := t0
	for i := 0; i < 50; i++ {
		d, _ := wide.Throttle(tat, t0, 1)
		tat = d.TAT
	}
	strict, _ := New(4, 1, 1)
	d, _ := strict.Throttle(tat, t0, 0)
	if !d.Limited || d.Remaining != 0 || d.Write || d.RetryAfter != 45*time.Second || d.ResetAfter != 50*time.Second {
		t.Fatalf("got %+v", d)
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
	l, _ := New(0, 1, MaxPeriod/2)
	if _, err := l.Throttle(0, t0, 3); !errors.Is(err, ErrOverflow) {
		t.Fatalf("quantity x T overflow: %v", err)
	}
	if _, err := l.Throttle(math.MaxInt64-5, t0, 1); !errors.Is(err, ErrOverflow) {
		t.Fatalf("TAT + increment overflow: %v", err)
	}
	if _, err := l.Throttle(0, t0, math.MinInt64); !errors.Is(err, ErrOverflow) {
		t.Fatalf("negative quantity overflow: %v", err)
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
		if d.Limited && (d.Write || d.TAT != max(tat, now)) {
			t.Fatalf("refused call changes state: %+v", d)
		}
		if !d.Limited && quantity > 0 && (!d.Write || d.TAT <= now || d.TAT-now > l.tolerance) {
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

func bigMax2(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

func (r refLimiter) throttle(tat, now, quantity int64) (Decision, error) {
	bNow := big.NewInt(now)
	inc := new(big.Int).Mul(r.interval, big.NewInt(quantity))
	base := bigMax2(big.NewInt(tat), bNow)
	newTAT := new(big.Int).Add(base, inc)
	if !fits(inc) || !fits(newTAT) {
		return Decision{}, ErrOverflow
	}
	if quantity < 0 {
		newTAT = bigMax2(newTAT, bNow)
	}
	d := Decision{Limit: r.limit.Int64(), RetryAfter: Never}
	ahead := new(big.Int).Sub(newTAT, bNow)
	var ttl *big.Int
	if ahead.Cmp(r.tolerance) > 0 {
		d.Limited = true
		if inc.Cmp(r.tolerance) <= 0 {
			d.RetryAfter = time.Duration(new(big.Int).Sub(ahead, r.tolerance).Int64())
		}
		ttl = new(big.Int).Sub(base, bNow)
		d.TAT = base.Int64()
	} else {
		ttl = ahead
		d.TAT = newTAT.Int64()
		d.Write = quantity > 0 || (quantity < 0 && base.Cmp(bNow) > 0)
	}
	if !fits(ttl) {
		return Decision{}, ErrOverflow
	}
	d.ResetAfter = time.Duration(ttl.Int64())
	// remaining: (τ − ttl) in whole µs over T in whole µs, truncated toward
	// zero (ns when T < 1 µs), only when τ − ttl > −T; within [0, limit].
	next := new(big.Int).Sub(r.tolerance, ttl)
	rem := new(big.Int)
	if next.Cmp(new(big.Int).Neg(r.interval)) > 0 {
		thousand := big.NewInt(1000)
		if r.interval.Cmp(thousand) >= 0 {
			rem.Quo(new(big.Int).Quo(next, thousand), new(big.Int).Quo(r.interval, thousand))
		} else {
			rem.Quo(next, r.interval)
		}
	}
	if rem.Sign() < 0 {
		rem.SetInt64(0)
	}
	if rem.Cmp(r.limit) > 0 {
		rem.Set(r.limit)
	}
	d.Remaining = rem.Int64()
	return d, nil
}
