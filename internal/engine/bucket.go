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
