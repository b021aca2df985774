package main

import (
	"math"
	"strconv"

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

const errNotGCRAState = "ERR the key holds a string that is not GCRA state (a Unix time in nanoseconds)"

func runGCRA(p *params, r reader, o *outcome, peek bool) {
	l, err := gcra.New(p.v[0], p.v[1], p.v[2])
	if err != nil {
		o.fail("ERR " + err.Error())
		return
	}
	st := r.read()
	var tat int64
	switch st.kind {
	case keyOther:
		o.action = actWrongType
		return
	case keyString:
		v, ok := parseTAT(st.value)
		if !ok {
			o.fail(errNotGCRAState)
			return
		}
		tat = v
	}
	d, err := l.Throttle(tat, st.now, p.v[3])
	if err != nil {
		o.fail("ERR " + err.Error())
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, p.ms)
	if peek || !d.Write {
		return
	}
	if d.TAT > st.now {
		o.setInt(d.TAT, d.TAT)
	} else if st.kind != keyEmpty {
		o.action = actDel // given back to full: the key's work is done
	}
}

// parseTAT reads the state as redis-cell writes it: a decimal count of
// nanoseconds since the Unix epoch, digits only.
func parseTAT(s string) (int64, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}
