// Package schedule is the virtual schedule GCRA, the token bucket and the
// shaper keep: units cost Interval nanoseconds each, and the state, the
// instant the limiter is full (or its queue empty) again, may run ahead of
// now by at most Tolerance. Packages gcra and bucket build a Schedule with
// their own interval (GCRA truncates period/count as redis-cell does, the
// buckets round it up) and read their answers off Apply. A charge
// (Charge) past the largest instant a state holds, Latest (2^63 − 1 ns, in
// 2262), stops there.
package schedule

import (
	"math"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"
)

// Schedule is one limit's parameters.
type Schedule struct {
	Limit     int64 // the verdict's Limit; Remaining never exceeds it
	Slots     int64 // the units that fit: Tolerance / Interval
	Interval  int64 // ns per unit
	Tolerance int64 // ns the state may run ahead of now
}

// Step is one call's outcome.
type Step struct {
	ratelimit.Verdict
	// Ahead is how far the state ran ahead of now before the call, at most
	// Tolerance; Next after it (Ahead when refused).
	Ahead, Next int64
	// State is the state after the call: now + Next.
	State int64
	// Write reports that State must be stored: after an admitted call of
	// non-zero cost, or to store a state clamped to Tolerance.
	Write bool
	// Owed reports a state past Tolerance that a charge left (Charge): the
	// caller stores it marked, and passes owed when it reads it back, so
	// that it is not clamped as a clock that stepped back.
	Owed bool
}

// Apply moves the state by units at now (Unix ns). A state further ahead
// than Tolerance can only come from a clock that stepped back (or a
// tolerance that shrank): it counts as exactly Tolerance ahead, and Write
// is set so that the clamped state is stored, even by a refusal. More units
// than Slots are refused with RetryAfter Never, decided before anything is
// multiplied; a refund (units < 0) stops at full. ok is false when the
// state after an admitted call would overflow int64 nanoseconds.
func (s Schedule) Apply(state, now, units int64) (st Step, ok bool) {
	return s.ApplyOwed(state, now, units, false)
}

// ApplyOwed is Apply on a state that may be owed (a charge left it past
// Tolerance, Charge): an owed state counts as far ahead as it is, so every
// call of cost 0 or more is refused until it is paid off (a call of cost 0
// waits until the state is back within Tolerance), and a refund is always
// admitted, paying it off by at most Slots units.
func (s Schedule) ApplyOwed(state, now, units int64, owed bool) (st Step, ok bool) {
	st.Limit, st.RetryAfter = s.Limit, ratelimit.Never
	if owed {
		st.Ahead = max(state-now, 0) // both positive instants: no overflow
	} else {
		st.Ahead, st.Write = checked.Ahead(state, now, s.Tolerance)
	}
	if units > s.Slots {
		return s.refuse(st, now), true
	}
	units = max(units, -s.Slots) // a refund beyond full stops at full
	cost := s.Interval * units   // |units| ≤ Slots: |cost| ≤ Tolerance
	next, fits := checked.Add(st.Ahead, cost)
	if units >= 0 && (!fits || next > s.Tolerance) {
		// It fits when next ≤ Tolerance: it waits next − Tolerance, written
		// so that it cannot overflow.
		st.RetryAfter = time.Duration(st.Ahead - (s.Tolerance - cost))
		return s.refuse(st, now), true
	}
	st.Next = max(next, 0)
	if st.State, ok = checked.Add(now, st.Next); !ok {
		return Step{}, false
	}
	st.Write = st.Write || units > 0 || (units < 0 && st.Ahead > 0)
	st.Owed = st.Next > s.Tolerance // a refund that left some of a debt
	st.ResetAfter = time.Duration(st.Next)
	st.Remaining = s.free(st.Next)
	return st, true
}

// Latest is the largest instant a state holds: 2^63 − 1 ns since the Unix
// epoch, 9,223,372,036.854775807 s, 2262-04-11T23:47:16.854775807Z. A key
// holding it expires at 9,223,372,036,855 ms (rounded up, as every state's
// expiry is), which Redis and Valkey accept.
const Latest = math.MaxInt64

// Charge takes units ≥ 0 at now whatever remains (the module's DEBT): a
// charge for work already done. A call Apply admits is admitted alike;
// otherwise the state moves on by units × Interval past Tolerance: the
// call is Limited (it left the limiter over its limit) yet taken (Write,
// Owed), Remaining is 0 and RetryAfter the time until one unit fits again.
// With 4 slots of 200 ms, a charge of 6 units from full leaves the state
// 1.2 s ahead: 400 ms over, so one unit fits again after 600 ms. A refund
// (units < 0) and a cost of 0 are ApplyOwed's.
//
// A debt that would take the state past Latest is taken up to Latest: the
// limiter refuses every call until then (and a charge on such a state
// leaves it there). With 5 slots of 12 s and now 1,700,000,200 s, a charge
// of 2^63 − 1 units leaves the state at Latest, 7,523,371,836.854775807 s
// ahead, and one unit fits again 48 s before it. ok is false, as ApplyOwed's
// for an admitted call, when the arguments cannot be computed: the state
// they allow, now + Tolerance, already lies past Latest.
func (s Schedule) Charge(state, now, units int64, owed bool) (st Step, ok bool) {
	st, ok = s.ApplyOwed(state, now, units, owed)
	if !ok || !st.Limited || units <= 0 {
		return st, ok
	}
	cost, ok1 := checked.Mul(s.Interval, units)
	next, ok2 := checked.Add(st.Ahead, cost)
	state, ok3 := checked.Add(now, next)
	if !ok1 || !ok2 || !ok3 {
		if next, state, ok = s.latest(now); !ok {
			return Step{}, false
		}
	}
	st.Next, st.State, st.Write, st.Owed = next, state, true, true
	st.RetryAfter = time.Duration(next - (s.Tolerance - s.Interval)) // next ≥ Tolerance ≥ Interval: no overflow
	st.ResetAfter = time.Duration(next)
	st.Remaining = 0
	return st, true
}

// latest is where a debt past Latest stops: Latest, next ahead of now
// (next ≥ Tolerance). Before the epoch (now < 0, which no server's clock
// reads) it is as far ahead as an int64 holds. ok is false when now +
// Tolerance passes Latest.
func (s Schedule) latest(now int64) (next, state int64, ok bool) {
	if _, ok := checked.Add(now, s.Tolerance); !ok {
		return 0, 0, false
	}
	next, ok = checked.Sub(Latest, now)
	if !ok {
		next = math.MaxInt64
	}
	return next, now + next, true
}

// refuse completes a refusal: the state stays Ahead of now.
func (s Schedule) refuse(st Step, now int64) Step {
	st.Limited = true
	st.Next = st.Ahead
	st.State = now + st.Ahead // at most the stored state: no overflow
	st.ResetAfter = time.Duration(st.Ahead)
	st.Remaining = s.free(st.Ahead)
	return st
}

// free is how many units fit when the state runs ahead of now by ahead,
// at most Limit: ⌊(Tolerance − ahead) / Interval⌋, exact on the
// nanoseconds the state uses.
func (s Schedule) free(ahead int64) int64 {
	return min(max((s.Tolerance-ahead)/s.Interval, 0), s.Limit)
}
