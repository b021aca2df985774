package engine

import (
	"math"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// A key name used by a limiter and by application data is an everyday
// accident. The module refuses what is not its own state, and changes
// nothing, rather than take it over:
//
//   - a limiter key always carries an expiry: one without is not state;
//   - an instant (GCRA, token bucket, shaper, a log's entries) before
//     minState was not written by a limiter, nor one far ahead of now that
//     outlives its own key's expiry;
//   - a sorted set is a sliding log only if its oldest and newest members
//     are the log's own ("<score>-<n>", the score in Unix microseconds).
//
// What cannot be told apart (an instant-shaped string with an expiry, a
// counter with a TTL for a fixed window) is listed in the README.

// minState is the earliest instant a limiter's state may hold,
// 2015-01-01T00:00:00Z: before this module and before redis-cell's first
// release (2016). A smaller number is a count, an ID or a price.
const minState = 1_420_070_400 * int64(time.Second)

// otherData is the error for a key that holds something else than this
// limiter's state.
func otherData(state, why string) string {
	return spec.Fill(spec.TOtherData, state, why)
}

// expiryNs converts the key's expiry in Unix ms to ns, saturating beyond
// the year 2262 (and keeping -1, none, as -1).
func expiryNs(ms int64) int64 {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	if ms < 0 {
		return -1
	}
	return ms * int64(time.Millisecond)
}
