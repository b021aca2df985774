// Package gcra implements the generic cell rate algorithm (GCRA) with the
// semantics of redis-cell's CL.THROTTLE, with time passed in.
//
// A Limiter admits count requests per period with bursts of up to
// max_burst + 1. Requests are spaced by the emission interval
// T = period / count, and a burst may run ahead of that schedule by the
// tolerance τ = T × (max_burst + 1). With max_burst 15, count 30 and period
// 60 s: T = 2 s, τ = 32 s, so 16 requests pass at once from a full state,
// then one every 2 s; after 32 s without requests the limiter is full again.
//
// The whole state is one number, the theoretical arrival time (TAT): the
// instant, in nanoseconds since the Unix epoch, at which the limiter would be
// full again if nothing else arrived. A request of cost q is admitted at time
// now when max(TAT, now) + q×T − τ ≤ now, and then moves TAT to
// max(TAT, now) + q×T. Nothing else is stored and nothing runs in the
// background: between requests the state is full again once now ≥ TAT, which
// is why a key holding it can expire at TAT.
//
// Times are int64 nanoseconds since the Unix epoch. Every step is checked for
// 64-bit overflow: a combination of arguments that cannot be computed
// returns ErrOverflow instead of wrapping. A cost the limiter can never admit
// is a refusal, however large, and a state from a clock that stepped back
// costs at most one full refill (see Throttle). A debt (Charge) is never
// refused for its size: one whose TAT would pass the largest instant an
// int64 holds, 9223372036854775807 ns (2262-04-11T23:47:16.854775807Z),
// leaves TAT at that instant, and the limiter refuses until then.
//
// Compatibility with redis-cell: T is computed as redis-cell computes it
// (float64 division truncated to whole nanoseconds), so the five integers
// match redis-cell's wherever redis-cell's are right. Where redis-cell is
// wrong this package differs: remaining is exact, ⌊(τ − ttl) / T⌋ on
// nanoseconds (redis-cell divides truncated microseconds, which is the same
// only when T is a whole number of microseconds: with 6000 per second it
// reports 6001 twice where the bucket holds 6000, then 5999), a negative cost
// never fills the bucket beyond full, a stored TAT in the past counts as
// "full now", a TAT more than τ ahead counts as τ ahead, and overflow is an
// error rather than a wrapped value.
package gcra

import (
	"errors"
	"math"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"
	"github.com/seed-6b3823f5/ratelimit/internal/schedule"
)

// Never is the RetryAfter of an admitted request, and of a refused request
// whose cost exceeds the limit, so that it can never be admitted
// (ratelimit.Never).
const Never = ratelimit.Never

// MaxPeriod is the longest period, in seconds, whose nanoseconds fit an int64
// (ratelimit.MaxSeconds).
const MaxPeriod = ratelimit.MaxSeconds

var (
	// ErrOverflow means the arguments cannot be computed in 64-bit
	// nanoseconds: the tolerance τ = (max_burst + 1) x period / count
	// overflows, or the state it allows (now + τ) would lie beyond the year
	// 2262.
	ErrOverflow = errors.New("arguments overflow 64-bit nanoseconds: (max_burst + 1) x period / count is too long (the limiter's state would lie beyond the year 2262)")
	// ErrRate means count exceeds the period's nanoseconds, so the emission
	// interval would be under one nanosecond.
	ErrRate = errors.New("count must be at most period x 1000000000 (the interval period/count must be at least 1 ns)")
	// ErrRange means an argument is outside its documented range; the
	// command layer checks ranges first and names the argument.
	ErrRange = errors.New("argument out of range: max_burst >= 0, count >= 1, 1 <= period <= 9223372036")
)

// Limiter holds the parameters of one GCRA limit. The zero value is not
// usable; create one with New. A Limiter holds no state: the state (TAT) is
// passed to and returned from Throttle.
type Limiter struct {
	// s: Interval T (ns between requests at the sustained rate), Tolerance
	// τ = T × limit, Limit and Slots max_burst + 1.
	s schedule.Schedule
}

// New returns a Limiter admitting count requests per period seconds with
// bursts of up to maxBurst+1. It fails with ErrRange for maxBurst < 0,
// count < 1 or a period outside [1, MaxPeriod], ErrRate when the interval
// period/count is under 1 ns, and ErrOverflow when τ overflows.
func New(maxBurst, count, period int64) (Limiter, error) {
	if maxBurst < 0 || maxBurst == math.MaxInt64 || count < 1 || period < 1 || period > MaxPeriod {
		return Limiter{}, ErrRange
	}
	// redis-cell: Duration::nanoseconds((period_ns as f64 / count as f64) as i64).
	interval := int64(float64(period*int64(time.Second)) / float64(count))
	if interval < 1 {
		return Limiter{}, ErrRate
	}
	limit := maxBurst + 1
	tolerance, ok := checked.Mul(interval, limit)
	if !ok {
		return Limiter{}, ErrOverflow
	}
	return Limiter{schedule.Schedule{Limit: limit, Slots: limit, Interval: interval, Tolerance: tolerance}}, nil
}

// Limit is the number of requests admitted at once from a full state:
// max_burst + 1.
func (l Limiter) Limit() int64 { return l.s.Limit }

// Interval is the emission interval T = period / count.
func (l Limiter) Interval() time.Duration { return time.Duration(l.s.Interval) }

// Tolerance is τ = T × (max_burst + 1): how far TAT may run ahead of now.
func (l Limiter) Tolerance() time.Duration { return time.Duration(l.s.Tolerance) }

// Decision is the outcome of one Throttle call: the Verdict (Limit is
// max_burst + 1; RetryAfter is Never when admitted or when the cost exceeds
// Limit; ResetAfter the time until the limiter is full again; a refused
// request changes nothing, unless its state had to be clamped, see
// Throttle) and the state to store.
type Decision struct {
	ratelimit.Verdict
	// TAT is the state after the call, in Unix nanoseconds.
	TAT int64
	// Write reports that TAT must be stored, with an expiry at TAT: after
	// an admitted request of non-zero cost, or to store a clamped state. A
	// TAT at or before now means the limiter is full: delete the stored
	// state.
	Write bool
	// Owed reports a limiter in debt (Charge took TAT past τ ahead):
	// store TAT marked, and pass owed when reading it back (ThrottleOwed),
	// so that it is not clamped as a clock that stepped back.
	Owed bool
}

// Throttle applies a request of cost quantity at time now (Unix ns) to the
// state tat (Unix ns; 0 when there is none) and returns the decision.
//
// quantity 0 reports the state and writes nothing. A negative quantity
// returns tokens: it is always admitted and moves TAT back, never beyond a
// full limiter. A quantity above Limit is refused with RetryAfter Never,
// however large: it is decided before anything is multiplied.
//
// A legitimate TAT is never more than τ ahead of now. One further ahead
// comes from a clock that stepped back (or from a τ that shrank since it
// was written): it counts as exactly τ ahead, so a clock step costs at most
// one full refill, and Write is set, even for a refused or zero-cost
// request, so that the caller stores the clamped state once.
//
// The only error is ErrOverflow, when the state after an admitted request,
// now + τ at most, lies beyond the int64 range (after the year 2262).
func (l Limiter) Throttle(tat, now, quantity int64) (Decision, error) {
	st, ok := l.s.Apply(tat, now, quantity)
	if !ok {
		return Decision{}, ErrOverflow
	}
	return decision(st), nil
}

func decision(st schedule.Step) Decision {
	return Decision{Verdict: st.Verdict, TAT: st.State, Write: st.Write, Owed: st.Owed}
}

// ThrottleReserve is Throttle with a reserve: a request of cost quantity ≥ 0
// is admitted only if at least reserve units remain after it, so that the
// last reserve units stay for requests that pass none (a load shedder's
// share for critical traffic). The decision and RetryAfter are those of a
// request of cost quantity + reserve; only quantity is taken, and Remaining
// is what truly remains. With limit 6 and reserve 2, four unit requests pass
// at once and the fifth is refused. A refund (quantity < 0) ignores the
// reserve.
func (l Limiter) ThrottleReserve(tat, now, quantity, reserve int64) (Decision, error) {
	return l.ThrottleOwed(tat, now, quantity, reserve, false)
}

// ThrottleOwed is ThrottleReserve on a TAT that may be owed (stored by a
// Charge that took it more than τ ahead): an owed TAT is read as it
// stands, so the limiter refuses every request, even of cost 0, until its
// debt is paid off; a negative quantity always pays some of it back.
func (l Limiter) ThrottleOwed(tat, now, quantity, reserve int64, owed bool) (Decision, error) {
	if probe, first := ratelimit.Reserve(quantity, reserve); first {
		st, ok := l.s.ApplyOwed(tat, now, probe, owed)
		if !ok {
			return Decision{}, ErrOverflow
		}
		if st.Limited {
			return decision(st), nil
		}
	}
	st, ok := l.s.ApplyOwed(tat, now, quantity, owed)
	if !ok {
		return Decision{}, ErrOverflow
	}
	return decision(st), nil
}

// Charge takes quantity ≥ 0 at now whatever remains (the module's DEBT): a
// charge for work already done, such as a response's tokens counted after
// it was sent. A request Throttle admits is admitted alike; a larger one
// moves TAT on by quantity × T past τ: the limiter is in debt. The
// decision is then Limited (the charge left it over its limit), Remaining
// is 0, Owed is set and RetryAfter is the time until one request passes
// again. With max_burst 9, count 1 and period 1 s (T = 1 s, τ = 10 s), a
// charge of 15 from full leaves TAT 15 s ahead: one request passes again
// after 6 s, the limiter is full after 15 s.
//
// A debt whose TAT would pass the largest instant an int64 holds,
// 9223372036854775807 ns (2262-04-11T23:47:16.854775807Z), leaves TAT at
// that instant: the limiter refuses every request until then, and the
// key, stored with it, expires at 9223372036855 ms. With max_burst 4,
// count 5 and period 60 s (T = 12 s, τ = 60 s) at 1,700,000,200 s, a
// charge of 10^18 leaves TAT there: RetryAfter 7,523,371,788.854775807 s,
// ResetAfter 7,523,371,836.854775807 s. A charge on a TAT already there
// leaves it there. ErrOverflow is the only error, as Throttle's: the
// arguments' τ from now already lies past that instant.
func (l Limiter) Charge(tat, now, quantity int64, owed bool) (Decision, error) {
	st, ok := l.s.Charge(tat, now, quantity, owed)
	if !ok {
		return Decision{}, ErrOverflow
	}
	return decision(st), nil
}
