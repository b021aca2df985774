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
