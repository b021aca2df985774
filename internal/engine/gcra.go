package engine

import (
	"math"

	"github.com/seed-6b3823f5/ratelimit/gcra"
)

// GCRA.THROTTLE / CL.THROTTLE / GCRA.PEEK key max_burst count period [quantity] [MS] [RESERVE n]
var gcraSyntax = syntax{
	positional: []arg{
		{name: "max_burst", min: 0, max: maxLimit - 1},
		{name: "count", min: 1, max: math.MaxInt64},
		{name: "period", min: 1, max: gcra.MaxPeriod, seconds: true},
	},
	optional: arg{name: "quantity", min: math.MinInt64, max: math.MaxInt64},
	def:      1,
	reserve:  true,
}

func runGCRA(l *limit, st *KeyState, ms bool, o *Outcome, rep *[5]int64, w *KeyWrite) bool {
	g, err := gcra.New(l.v[0], l.v[1], l.v[2])
	if err != nil {
		o.failErr(err)
		return false
	}
	tat, ok := loadInstant(st, o, gcraState, g.Tolerance())
	if !ok {
		return false
	}
	d, err := g.ThrottleReserve(tat, st.Now, l.v[3], l.reserve)
	if err != nil {
		o.failErr(err)
		return false
	}
	setReply(rep, d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, ms)
	storeInstant(w, st, d.TAT, d.Write)
	return true
}
