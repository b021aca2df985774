package main

import (
	"math"

	"ratelimit/gcra"
)

// GCRA.THROTTLE / CL.THROTTLE / GCRA.PEEK key max_burst count period [quantity] [MS]
var gcraSyntax = syntax{
	positional: []arg{
		{name: "max_burst", min: 0, max: math.MaxInt64 - 1},
		{name: "count", min: 1, max: math.MaxInt64},
		{name: "period", min: 1, max: gcra.MaxPeriod, seconds: true},
	},
	optional: arg{name: "quantity", min: math.MinInt64, max: math.MaxInt64},
	def:      1,
}

func runGCRA(p *params, r reader, o *outcome, peek bool) {
	l, err := gcra.New(p.v[0], p.v[1], p.v[2])
	if err != nil {
		o.failErr(err)
		return
	}
	st, tat, ok := loadInstant(r, o, gcraState, l.Tolerance())
	if !ok {
		return
	}
	d, err := l.Throttle(tat, st.now, p.v[3])
	if err != nil {
		o.failErr(err)
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, p.ms)
	storeInstant(o, st, d.TAT, d.Write && !peek)
}
