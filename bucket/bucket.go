// Package bucket implements the token bucket and the leaky bucket used as a
// shaper, with time passed in.
//
// # Token bucket
//
// A TokenBucket holds up to capacity tokens, starts full, and refills
// continuously at refillTokens per refillPeriod. A take of n tokens succeeds
// when all n are there, and then removes them; otherwise it changes nothing.
// With capacity 10, refilling 1 token per second: 10 requests pass at once,
// then one per second; a take of 3 after 2 s idle from empty waits 1 s more;
// a take of 11 never succeeds.
//
// # Shaper (leaky bucket as a queue)
//
// A Shaper lets requests leave at leakCount per leakPeriod, in arrival order,
// and tells each admitted request how long to wait before it proceeds, so
// that what leaves is perfectly smooth. At most capacity requests may be
// waiting. With an empty queue one request goes at once and capacity more
// may wait — NGINX's limit_req with burst=capacity and no nodelay. With
// capacity 2 and 1 per second, three requests arriving together get delays
// 0, 1 s and 2 s; a fourth is refused and may retry in 1 s, when the first
// waiting one has left.
//
// # One state, one schedule
//
// Both are the virtual schedule GCRA keeps (see package gcra). The state is
// one instant, in nanoseconds since the Unix epoch: when the bucket will be
// full again (token bucket), or when the queue will be empty again (shaper).
// Each unit costs the interval T = period / count, rounded up to a whole
// nanosecond so that the sustained rate never exceeds count per period. A
// token bucket of capacity C is GCRA with a tolerance of C×T (GCRA's
// max_burst C−1); a shaper of capacity C is GCRA with a tolerance of (C+1)×T
// whose reply is the delay instead of the tokens left. The state is stored
// in GCRA's format, so each key expires when its state is full again.
//
// Times are int64 nanoseconds since the Unix epoch; every step is checked for
// 64-bit overflow and reports ErrOverflow rather than wrapping. A cost that
// can never be admitted (more than the bucket holds) is a refusal with
// RetryAfter Never, however large, and a refund beyond full leaves the
// bucket full. A token bucket's debt (Charge) is never refused for its
// size: one whose state would pass the largest instant an int64 holds,
// 9223372036854775807 ns (2262-04-11T23:47:16.854775807Z), leaves the
// state at that instant, and the bucket refuses until then.
//
// # Clock steps
//
// A legitimate state is never further ahead of now than one full refill
// (the tolerance). One further ahead comes from a clock that stepped back:
// it counts as exactly one refill ahead, so the step costs at most that, and
// the Decision asks for the clamped state to be stored (Write), even for a
// refused or zero-cost call.
package bucket

import (
	"errors"
	"math"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"
	"github.com/seed-6b3823f5/ratelimit/internal/schedule"
)

// Never is the RetryAfter of an admitted request, and of a refused one
// whose cost can never be admitted (ratelimit.Never).
const Never = ratelimit.Never

// MaxPeriod is the longest period, in seconds, whose nanoseconds fit an int64
// (ratelimit.MaxSeconds).
const MaxPeriod = ratelimit.MaxSeconds

var (
	// ErrRange means an argument is outside its documented range.
	ErrRange = errors.New("argument out of range: capacity >= 1 (a shaper's >= 0), count >= 1, 1 <= period <= 9223372036, quantity >= 0 for a shaper")
	// ErrRate means the rate is above one unit per nanosecond.
	ErrRate = errors.New("the rate is above one per nanosecond: the count must be at most period x 1000000000")
	// ErrOverflow means the arguments cannot be computed in 64-bit
	// nanoseconds: capacity x period / count overflows, or the state it
	// allows (now plus that) would lie beyond the year 2262.
	ErrOverflow = errors.New("arguments overflow 64-bit nanoseconds: capacity x period / count is too long (the state would lie beyond the year 2262)")
)

// Decision is the outcome of one call: the Verdict (Limit is the
// capacity; Remaining, for the token bucket, the whole tokens left after
// this call, for the shaper the free places in the queue; ResetAfter the
// time until the bucket is full or the queue empty; a refused call changes
// nothing, unless its state had to be clamped, see Clock steps) and the
// state to store.
type Decision struct {
	ratelimit.Verdict
	// Delay is the shaper's answer: how long an admitted request waits
	// before it proceeds (0: go now). Always 0 for the token bucket and
	// for refused requests.
	Delay time.Duration
	// State is the instant stored after the call (Unix ns).
	State int64
	// Write reports that State must be stored, expiring at State: after an
	// admitted call of non-zero cost, or to store a clamped state. A State
	// at or before now means full (or empty): delete the stored state.
	Write bool
	// Owed reports a bucket in debt (Charge: its tokens below zero): store
	// State marked, and pass owed when reading it back (TakeOwed), so that
	// it is not clamped as a clock that stepped back.
	Owed bool
}

// newSchedule is both buckets' schedule: units cost period/count rounded
// up to a whole nanosecond (so the rate is never exceeded), slots fit.
func newSchedule(limit, slots, count, period int64) (schedule.Schedule, error) {
	if limit < 0 || slots < 1 || count < 1 || period < 1 || period > MaxPeriod {
		return schedule.Schedule{}, ErrRange
	}
	periodNs := period * int64(time.Second)
	if count > periodNs {
		return schedule.Schedule{}, ErrRate
	}
	interval := checked.CeilDiv(periodNs, count)
	tolerance, ok := checked.Mul(interval, slots)
	if !ok {
		return schedule.Schedule{}, ErrOverflow
	}
	return schedule.Schedule{Limit: limit, Slots: slots, Interval: interval, Tolerance: tolerance}, nil
}

// apply moves the state by units at now (see schedule.Schedule.Apply).
func apply(s schedule.Schedule, state, now, units int64) (Decision, schedule.Step, error) {
	st, ok := s.Apply(state, now, units)
	if !ok {
		return Decision{}, st, ErrOverflow
	}
	return decision(st), st, nil
}

func decision(st schedule.Step) Decision {
	return Decision{Verdict: st.Verdict, State: st.State, Write: st.Write, Owed: st.Owed}
}

// TokenBucket holds the parameters of a token bucket; the state is passed
// to and returned from Take.
type TokenBucket struct{ s schedule.Schedule }

// NewTokenBucket returns a bucket of capacity tokens refilled at
// refillTokens per refillPeriod seconds. It fails with ErrRange for a
// capacity or refillTokens below 1 or a period outside [1, MaxPeriod],
// ErrRate above one token per nanosecond, and ErrOverflow when filling the
// whole bucket takes longer than an int64 of nanoseconds.
func NewTokenBucket(capacity, refillTokens, refillPeriod int64) (TokenBucket, error) {
	s, err := newSchedule(capacity, capacity, refillTokens, refillPeriod)
	return TokenBucket{s}, err
}

// Capacity is the most tokens the bucket holds.
func (b TokenBucket) Capacity() int64 { return b.s.Limit }

// Interval is the time one token takes to refill.
func (b TokenBucket) Interval() time.Duration { return time.Duration(b.s.Interval) }

// Tolerance is how far ahead of now the state of an empty bucket lies:
// capacity × Interval, the time a full refill takes.
func (b TokenBucket) Tolerance() time.Duration { return time.Duration(b.s.Tolerance) }

// Take takes tokens at now (Unix ns) from the bucket whose state is full
// (the instant it is full again; 0 when there is none). tokens 0 reports; a
// negative count puts tokens back, never beyond a full bucket.
func (b TokenBucket) Take(full, now, tokens int64) (Decision, error) {
	d, _, err := apply(b.s, full, now, tokens)
	return d, err
}

// TakeReserve is Take with a reserve: tokens ≥ 0 are taken only if at least
// reserve tokens remain after them. The decision and RetryAfter are those of
// a take of tokens + reserve; only tokens are taken, and Remaining is what
// truly remains. A put-back (tokens < 0) ignores the reserve.
func (b TokenBucket) TakeReserve(full, now, tokens, reserve int64) (Decision, error) {
	return b.TakeOwed(full, now, tokens, reserve, false)
}

// TakeOwed is TakeReserve on a state that may be owed (stored by a
// Charge that took the bucket below zero): an owed state is read as it
// stands, so the bucket refuses every take, even of 0 tokens, until its
// debt is refilled; a put-back always pays some of it.
func (b TokenBucket) TakeOwed(full, now, tokens, reserve int64, owed bool) (Decision, error) {
	if probe, first := ratelimit.Reserve(tokens, reserve); first {
		st, ok := b.s.ApplyOwed(full, now, probe, owed)
		if !ok {
			return Decision{}, ErrOverflow
		}
		if st.Limited {
			return decision(st), nil
		}
	}
	st, ok := b.s.ApplyOwed(full, now, tokens, owed)
	if !ok {
		return Decision{}, ErrOverflow
	}
	return decision(st), nil
}

// Charge takes tokens ≥ 0 at now whatever the bucket holds (the module's
// DEBT): a charge for work already done. A take the bucket holds is taken
// as Take takes it; a larger one takes the bucket below zero: Limited
// (over its capacity), Remaining 0, Owed, and RetryAfter the time until
// one token is back. With capacity 10 refilled 1 a second, a charge of 15
// on a full bucket leaves it at −5: one token is back after 6 s, the
// bucket full after 15 s. A debt whose state (the instant the bucket is
// full again) would pass the largest instant an int64 holds,
// 9223372036854775807 ns (2262-04-11T23:47:16.854775807Z), leaves the
// state at that instant: the bucket refuses every take until then, and
// its key expires at 9223372036855 ms. ErrOverflow is the only error, as
// Take's: filling the bucket from now already ends past that instant.
func (b TokenBucket) Charge(full, now, tokens int64, owed bool) (Decision, error) {
	st, ok := b.s.Charge(full, now, tokens, owed)
	if !ok {
		return Decision{}, ErrOverflow
	}
	return decision(st), nil
}

// Shaper holds the parameters of a leaky bucket used as a shaper; the state
// is passed to and returned from Enqueue.
type Shaper struct{ s schedule.Schedule }

// NewShaper returns a shaper draining leakCount requests per leakPeriod
// seconds with at most capacity waiting. Errors as for NewTokenBucket.
func NewShaper(capacity, leakCount, leakPeriod int64) (Shaper, error) {
	if capacity == math.MaxInt64 {
		return Shaper{}, ErrRange
	}
	s, err := newSchedule(capacity, capacity+1, leakCount, leakPeriod)
	return Shaper{s}, err
}

// Capacity is the most requests that may wait.
func (q Shaper) Capacity() int64 { return q.s.Limit }

// Interval is the time between two departures.
func (q Shaper) Interval() time.Duration { return time.Duration(q.s.Interval) }

// Tolerance is how far ahead of now the state of a full queue lies:
// (capacity + 1) × Interval.
func (q Shaper) Tolerance() time.Duration { return time.Duration(q.s.Tolerance) }

// Enqueue places a request of cost quantity (≥ 0) at now (Unix ns) in the
// queue whose state is empty (the instant the queue is empty again; 0 when
// there is none). An admitted request learns its Delay; quantity 0 reports.
func (q Shaper) Enqueue(empty, now, quantity int64) (Decision, error) {
	if quantity < 0 {
		return Decision{}, ErrRange
	}
	d, st, err := apply(q.s, empty, now, quantity)
	if err == nil && !d.Limited {
		d.Delay = time.Duration(st.Ahead)
	}
	return d, err
}
