package engine

import (
	"math"

	"github.com/seed-6b3823f5/ratelimit/bucket"
)

// TB.TAKE / TB.PEEK key capacity refill_tokens refill_period [tokens] [MS] [RESERVE n]
var tbSyntax = syntax{
	positional: []arg{
		{name: "capacity", min: 1, max: maxLimit},
		{name: "refill_tokens", min: 1, max: math.MaxInt64},
		{name: "refill_period", min: 1, max: bucket.MaxPeriod, seconds: true},
	},
	optional: arg{name: "tokens", min: math.MinInt64, max: math.MaxInt64},
	def:      1,
	reserve:  true,
}

// LB.ENQUEUE / LB.PEEK key capacity leak_count leak_period [quantity] [MS]
var lbSyntax = syntax{
	positional: []arg{
		{name: "capacity", min: 0, max: maxLimit},
		{name: "leak_count", min: 1, max: math.MaxInt64},
		{name: "leak_period", min: 1, max: bucket.MaxPeriod, seconds: true},
	},
	optional: arg{name: "quantity", min: 0, max: math.MaxInt64},
	def:      1,
}

func runTokenBucket(l *limit, st *KeyState, ms bool, o *Outcome, rep *[5]int64, w *KeyWrite) bool {
	b, err := bucket.NewTokenBucket(l.v[0], l.v[1], l.v[2])
	if err != nil {
		o.failErr(err)
		return false
	}
	full, ok := loadInstant(st, o, bucketState, b.Tolerance())
	if !ok {
		return false
	}
	d, err := b.TakeReserve(full, st.Now, l.v[3], l.reserve)
	if err != nil {
		o.failErr(err)
		return false
	}
	setReply(rep, d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, ms)
	storeInstant(w, st, d.State, d.Write)
	return true
}

// The shaper's field 5 is the delay before the request proceeds (0: go
// now, and 0 for a refused request, which does not go at all).
func runShaper(l *limit, st *KeyState, ms bool, o *Outcome, rep *[5]int64, w *KeyWrite) bool {
	q, err := bucket.NewShaper(l.v[0], l.v[1], l.v[2])
	if err != nil {
		o.failErr(err)
		return false
	}
	empty, ok := loadInstant(st, o, shaperState, q.Tolerance())
	if !ok {
		return false
	}
	d, err := q.Enqueue(empty, st.Now, l.v[3])
	if err != nil {
		o.failErr(err)
		return false
	}
	setReply(rep, d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.Delay, ms)
	storeInstant(w, st, d.State, d.Write)
	return true
}
