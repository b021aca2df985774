// Package schedule is the virtual schedule GCRA, the token bucket and the
// shaper keep: units cost Interval nanoseconds each, and the state, the
// instant the limiter is full (or its queue empty) again, may run ahead of
// now by at most Tolerance. Packages gcra and bucket build a Schedule with
// their own interval (GCRA truncates period/count as redis-cell does, the
// buckets round it up) and read their answers off Apply.
package schedule

import (
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
}

// Apply moves the state by units at now (Unix ns). A state further ahead
// than Tolerance can only come from a clock that stepped back (or a
// tolerance that shrank): it counts as exactly Tolerance ahead, and Write
// is set so that the clamped state is stored, even by a refusal. More units
// than Slots are refused with RetryAfter Never, decided before anything is
// multiplied; a refund (units < 0) stops at full. ok is false when the
// state after an admitted call would overflow int64 nanoseconds.
func (s Schedule) Apply(state, now, units int64) (st Step, ok bool) {
	st.Limit, st.RetryAfter = s.Limit, ratelimit.Never
	st.Ahead, st.Write = checked.Ahead(state, now, s.Tolerance)
	if units > s.Slots {
		return s.refuse(st, now), true
	}
	units = max(units, -s.Slots) // a refund beyond full stops at full
	cost := s.Interval * units   // |units| ≤ Slots: |cost| ≤ Tolerance
	next, fits := checked.Add(st.Ahead, cost)
	if !fits || next > s.Tolerance {
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
	st.ResetAfter = time.Duration(st.Next)
	st.Remaining = s.free(st.Next)
	return st, true
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
