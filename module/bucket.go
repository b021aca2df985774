package main

import (
	"math"

	"ratelimit/bucket"
)

// TB.TAKE / TB.PEEK key capacity refill_tokens refill_period [tokens] [MS]
var tbSyntax = syntax{
	positional: []arg{
		{name: "capacity", min: 1, max: math.MaxInt64},
		{name: "refill_tokens", min: 1, max: math.MaxInt64},
		{name: "refill_period", min: 1, max: bucket.MaxPeriod, seconds: true},
	},
	optional: arg{name: "tokens", min: math.MinInt64, max: math.MaxInt64},
	def:      1,
}

// LB.ENQUEUE / LB.PEEK key capacity leak_count leak_period [quantity] [MS]
var lbSyntax = syntax{
	positional: []arg{
		{name: "capacity", min: 0, max: math.MaxInt64 - 1},
		{name: "leak_count", min: 1, max: math.MaxInt64},
		{name: "leak_period", min: 1, max: bucket.MaxPeriod, seconds: true},
	},
	optional: arg{name: "quantity", min: 0, max: math.MaxInt64},
	def:      1,
}

func runTokenBucket(p *params, r reader, o *outcome, peek bool) {
	b, err := bucket.NewTokenBucket(p.v[0], p.v[1], p.v[2])
	if err != nil {
		o.failErr(err)
		return
	}
	st, full, ok := loadInstant(r, o, bucketState, b.Tolerance())
	if !ok {
		return
	}
	d, err := b.Take(full, st.now, p.v[3])
	if err != nil {
		o.failErr(err)
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, p.ms)
	storeInstant(o, st, d.State, d.Write && !peek)
}

// The shaper's field 5 is the delay before the request proceeds (0: go
// now, and 0 for a refused request, which does not go at all).
func runShaper(p *params, r reader, o *outcome, peek bool) {
	q, err := bucket.NewShaper(p.v[0], p.v[1], p.v[2])
	if err != nil {
		o.failErr(err)
		return
	}
	st, empty, ok := loadInstant(r, o, shaperState, q.Tolerance())
	if !ok {
		return
	}
	d, err := q.Enqueue(empty, st.now, p.v[3])
	if err != nil {
		o.failErr(err)
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.Delay, p.ms)
	storeInstant(o, st, d.State, d.Write && !peek)
}
