package schedule

import (
	"math"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
)

// A schedule of 5 units a second, 4 at once: each unit costs 200 ms, and
// the state may run 800 ms ahead of now.
var five = Schedule{Limit: 4, Slots: 4, Interval: int64(200 * time.Millisecond), Tolerance: int64(800 * time.Millisecond)}

// TestApply steps one schedule on a virtual clock, t0 = 0: the state is
// the instant the limiter is full again (0 or less: full).
func TestApply(t *testing.T) {
	ms := int64(time.Millisecond)
	never := ratelimit.Never
	state := int64(0)
	for i, c := range []struct {
		now, units int64
		limited    bool
		remaining  int64
		retry      time.Duration
		reset      time.Duration
		write      bool
	}{
		{0, 1, false, 3, never, 200 * time.Millisecond, true},                          // t0: one of four
		{0, 3, false, 0, never, 800 * time.Millisecond, true},                          // the rest of the burst
		{0, 1, true, 0, 200 * time.Millisecond, 800 * time.Millisecond, false},         // full: wait one interval
		{0, 5, true, 0, never, 800 * time.Millisecond, false},                          // more than fits: never
		{100 * ms, 0, false, 0, never, 700 * time.Millisecond, false},                  // a report: nothing moves
		{200 * ms, 1, false, 0, never, 800 * time.Millisecond, true},                   // one interval later: one more
		{200 * ms, -2, false, 2, never, 400 * time.Millisecond, true},                  // a refund of two
		{200 * ms, -10, false, 4, never, 0, true},                                      // a refund past full stops at full
		{2000 * ms, 0, false, 4, never, 0, false},                                      // idle: full, nothing to write
		{2000 * ms, 4, false, 0, never, 800 * time.Millisecond, true},                  // a whole burst again
		{2000 * ms, 2, true, 0, 400 * time.Millisecond, 800 * time.Millisecond, false}, // two wait two intervals
	} {
		st, ok := five.Apply(state, c.now, c.units)
		if !ok || st.Limited != c.limited || st.Remaining != c.remaining || st.RetryAfter != c.retry || st.ResetAfter != c.reset || st.Write != c.write || st.Limit != 4 {
			t.Fatalf("step %d (t=%v, %d units): %+v %v; want limited %v, remaining %d, retry %v, reset %v, write %v",
				i, time.Duration(c.now), c.units, st, ok, c.limited, c.remaining, c.retry, c.reset, c.write)
		}
		if st.State != c.now+st.Next {
			t.Fatalf("step %d: state %d, want now + next = %d", i, st.State, c.now+st.Next)
		}
		if st.Write {
			state = st.State
		}
	}
}

// A state further ahead than Tolerance (a clock that stepped back) counts
// as exactly Tolerance ahead, and is written even by a refusal, so the
// lock-out is one refill, not the step.
func TestApplyClockStepBack(t *testing.T) {
	hour := int64(time.Hour)
	st, ok := five.Apply(hour, 0, 1)
	if !ok || !st.Limited || st.Ahead != five.Tolerance || st.RetryAfter != 200*time.Millisecond || !st.Write || st.State != five.Tolerance {
		t.Fatalf("a state an hour ahead: %+v %v", st, ok)
	}
}

// An admitted call whose state would pass the largest int64 nanosecond
// is refused as an overflow (ok false), not wrapped.
func TestApplyOverflow(t *testing.T) {
	if st, ok := five.Apply(0, math.MaxInt64-int64(100*time.Millisecond), 1); ok {
		t.Fatalf("a state past 2262: %+v, want ok false", st)
	}
}

// TestCharge steps a debt on the schedule of TestApply (4 units, 200 ms
// each): a charge is taken past the tolerance and marked owed; an owed
// state is read as it stands, refusing every call, even of cost 0, until
// it is back within the tolerance; a refund pays some of it back.
func TestCharge(t *testing.T) {
	ms := int64(time.Millisecond)
	never := ratelimit.Never
	state, owed := int64(0), false
	for i, c := range []struct {
		now, units int64
		charge     bool
		limited    bool
		remaining  int64
		retry      time.Duration
		reset      time.Duration
		write      bool
		owed       bool
	}{
		{0, 3, true, false, 1, never, 600 * time.Millisecond, true, false},                          // fits: as Apply
		{0, 3, true, true, 0, 600 * time.Millisecond, 1200 * time.Millisecond, true, true},          // 400 ms over: one unit fits after 600 ms
		{0, 0, false, true, 0, 400 * time.Millisecond, 1200 * time.Millisecond, false, false},       // cost 0 waits out the debt
		{0, 1, false, true, 0, 600 * time.Millisecond, 1200 * time.Millisecond, false, false},       // one unit, one interval more
		{0, 0, true, true, 0, 400 * time.Millisecond, 1200 * time.Millisecond, false, false},        // a charge of 0 is a check
		{100 * ms, -1, false, false, 0, never, 900 * time.Millisecond, true, true},                  // a refund pays 200 ms back
		{300 * ms, 1, false, true, 0, 100 * time.Millisecond, 700 * time.Millisecond, false, false}, // 100 ms early
		{400 * ms, 1, false, false, 0, never, 800 * time.Millisecond, true, false},                  // paid off
	} {
		var st Step
		var ok bool
		if c.charge {
			st, ok = five.Charge(state, c.now, c.units, owed)
		} else {
			st, ok = five.ApplyOwed(state, c.now, c.units, owed)
		}
		if !ok || st.Limited != c.limited || st.Remaining != c.remaining || st.RetryAfter != c.retry || st.ResetAfter != c.reset || st.Write != c.write || st.Owed != c.owed {
			t.Fatalf("step %d (t=%v, %d units, charge %v): %+v; want limited %v, remaining %d, retry %v, reset %v, write %v, owed %v",
				i, time.Duration(c.now), c.units, c.charge, st, c.limited, c.remaining, c.retry, c.reset, c.write, c.owed)
		}
		if st.Write {
			state, owed = st.State, st.Owed
		}
	}
	// Unmarked, the same state is a clock that stepped back: clamped.
	if st, _ := five.Apply(int64(1200*time.Millisecond), 0, 0); st.Ahead != five.Tolerance || !st.Write {
		t.Fatalf("an unmarked state past the tolerance: %+v, want clamped", st)
	}
}

// TestChargeClamped steps debts past Latest (2^63 − 1 ns, in 2262) on the
// schedule of TestApply, its clock 10 s before Latest: the state stops at
// Latest, refuses every call until then, stays there under more charges,
// and is paid off as any debt. A charge whose arguments cannot be computed
// (the tolerance from now passes Latest) is ok false, as Apply's.
func TestChargeClamped(t *testing.T) {
	ms := int64(time.Millisecond)
	never := ratelimit.Never
	t0 := int64(Latest) - 10_000*ms
	state, owed := int64(0), false
	for i, c := range []struct {
		now, units int64
		charge     bool
		limited    bool
		remaining  int64
		retry      time.Duration
		reset      time.Duration
		write      bool
		state      int64 // when written
		owed       bool
	}{
		{t0, 100, true, true, 0, 9400 * time.Millisecond, 10 * time.Second, true, Latest, true},                    // 20 s of debt, 10 s left: stops at Latest
		{t0, 0, false, true, 0, 9200 * time.Millisecond, 10 * time.Second, false, 0, false},                        // a check waits for it
		{t0 + 1000*ms, 1, true, true, 0, 8400 * time.Millisecond, 9 * time.Second, true, Latest, true},             // more debt: still Latest
		{t0 + 1000*ms, math.MaxInt64, true, true, 0, 8400 * time.Millisecond, 9 * time.Second, true, Latest, true}, // units × Interval overflows: Latest
		{t0 + 1000*ms, -2, true, false, 0, never, 8600 * time.Millisecond, true, Latest - 400*ms, true},            // a refund pays 400 ms back
		{Latest - 700*ms, 1, false, false, 1, never, 500 * time.Millisecond, true, Latest - 200*ms, false},         // paid off
		{Latest - 800*ms, 10, true, true, 0, 200 * time.Millisecond, 800 * time.Millisecond, true, Latest, true},   // now + Tolerance is Latest: still computed
	} {
		var st Step
		var ok bool
		if c.charge {
			st, ok = five.Charge(state, c.now, c.units, owed)
		} else {
			st, ok = five.ApplyOwed(state, c.now, c.units, owed)
		}
		if !ok || st.Limited != c.limited || st.Remaining != c.remaining || st.RetryAfter != c.retry || st.ResetAfter != c.reset ||
			st.Write != c.write || st.Owed != c.owed || (c.write && st.State != c.state) {
			t.Fatalf("step %d (now %d, %d units, charge %v): %+v %v; want limited %v, remaining %d, retry %v, reset %v, write %v (state %d), owed %v",
				i, c.now, c.units, c.charge, st, ok, c.limited, c.remaining, c.retry, c.reset, c.write, c.state, c.owed)
		}
		if st.Write {
			state, owed = st.State, st.Owed
		}
	}
	// Before the epoch (no server's clock), as far ahead as an int64 holds.
	if st, ok := five.Charge(0, -1000*ms, math.MaxInt64, false); !ok || !st.Limited || st.State != Latest-1000*ms ||
		st.ResetAfter != math.MaxInt64 || st.RetryAfter != math.MaxInt64-600*time.Millisecond || !st.Owed {
		t.Errorf("a charge before the epoch: %+v %v", st, ok)
	}
	// The state now + Tolerance allows lies past Latest: the arguments
	// cannot be computed, whether the charge is admitted or a debt.
	for _, units := range []int64{3, 5, 100, math.MaxInt64} {
		if st, ok := five.Charge(0, Latest-500*ms, units, false); ok {
			t.Errorf("%d units 500 ms before Latest: %+v, want ok false", units, st)
		}
	}
}
