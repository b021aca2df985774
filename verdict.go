package ratelimit

import (
	"errors"
	"math"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/checked"
)

// MaxSeconds is the longest period, window or lease, in whole seconds:
// 9223372036, the most whose nanoseconds fit an int64 (about 292 years).
const MaxSeconds = math.MaxInt64 / int64(time.Second)

// Never is the RetryAfter of an admitted call, and of a refused one that no
// wait can admit (a cost above the limit, a reserve of the whole limit).
const Never time.Duration = -1

// Verdict is one limiter's answer to one call.
type Verdict struct {
	// Limited reports a refusal. A refused call changes nothing (but for
	// the clamped state of a clock that stepped back, which the algorithm
	// packages say how to store).
	Limited bool
	// Limit is what the limiter admits at once from a full state: GCRA's
	// max_burst + 1, a bucket's capacity, a window's limit, the most
	// holders at once.
	Limit int64
	// Remaining is what would still be admitted now, after this call if it
	// was admitted; 0 ≤ Remaining ≤ Limit.
	Remaining int64
	// RetryAfter is Never when admitted; when refused, the time until this
	// same call would be admitted, or Never if no wait can admit it.
	RetryAfter time.Duration
	// ResetAfter is the time until the limiter is full again (for a
	// window, until its count is zero; for a concurrency limiter, until
	// every lease has lapsed; for the shaper, until its queue is empty).
	ResetAfter time.Duration
}

// Reserve is the reserve rule every limiter follows (the module's RESERVE
// n): a call of cost ≥ 0 with a reserve above 0 is first decided at cost +
// reserve (saturating). If that is refused, its refusal is the answer:
// RetryAfter is the time until cost + reserve fits. Otherwise the call
// takes cost alone, and Remaining is what truly remains. Reserve returns
// the cost to decide first, and false when there is nothing to decide
// first (no reserve, or a refund). With a limit of 6 and a reserve of 2,
// four unit calls pass at once and the fifth is refused.
func Reserve(cost, reserve int64) (probe int64, first bool) {
	if reserve > 0 && cost >= 0 {
		return checked.SatAdd(cost, reserve), true
	}
	return cost, false
}

// MaxUpTo is the most calls one call may ask for at once (the module's
// UPTO n): 1,000,000.
const MaxUpTo = 1_000_000

// Grant is the grant rule every limiter follows (the module's UPTO n): a
// call asking for up to n calls of cost each takes g, the most in 0..n
// that the limiter admits together now, keeping reserve free: the largest
// g ≤ n with g × cost + reserve ≤ remaining, where remaining is what the
// limiter admits now (the Remaining of a call of cost 0). With 7
// remaining, cost 2 and a reserve of 1, UPTO 5 grants 3 (6 units, 1 left);
// UPTO 2 grants 2. A cost of 0 or less grants n, unless the call itself is
// refused (a reserve, a window already over its limit): a refusal grants 0,
// and its answer is the call's for one cost.
func Grant(remaining, cost, reserve, n int64) int64 {
	switch {
	case n <= 0:
		return 0
	case cost <= 0:
		return n
	}
	free := remaining - max(reserve, 0)
	if free < cost {
		return 0
	}
	return min(n, free/cost)
}

// ErrDebt is a charge (the module's DEBT) that would take a limiter's
// state past what it can hold: a schedule past the year 2262, a count
// past 2^63 − 1, or a sliding log past its limit by more than 100,000
// entries. Nothing is taken.
var ErrDebt = errors.New("DEBT cannot take the charge: the limiter's state would pass the most it can hold (the year 2262, 2^63 - 1 units, or a sliding log's limit plus 100000 entries)")
