package main

import (
	"math"
	"strconv"
	"strings"
	"time"

	"ratelimit/window"
)

// SW.HIT / SW.PEEK / FW.HIT / FW.PEEK key limit window [cost] [MS]
var windowSyntax = syntax{
	positional: []arg{
		{name: "limit", min: 1, max: math.MaxInt64},
		{name: "window", min: 1, max: window.MaxWindow, seconds: true},
	},
	optional: arg{name: "cost", min: 0, max: math.MaxInt64},
	def:      1,
}

// maxLogLimit bounds the sliding log: one sorted-set entry per admitted
// unit, so memory and the work of one call grow with the limit.
const maxLogLimit = 100000

// SL.HIT / SL.PEEK key limit window [cost] [MS]
var logSyntax = syntax{
	positional: []arg{
		{name: "limit", min: 1, max: maxLogLimit},
		{name: "window", min: 1, max: window.MaxWindow, seconds: true},
	},
	optional: arg{name: "cost", min: 0, max: math.MaxInt64},
	def:      1,
}

const (
	errNotCounterState = "ERR the key holds a string that is not sliding window state (index:current:previous)"
	errNotFixedState   = "ERR the key holds a string that is not fixed window state (a count)"
)

// The sliding window counter's state: "<window index>:<current>:<previous>".
func runSlidingWindow(p *params, r reader, o *outcome, peek bool) {
	w, err := window.NewSlidingWindow(p.v[0], p.v[1])
	if err != nil {
		o.failErr(err)
		return
	}
	st, ok := readString(r, o, false)
	if !ok {
		return
	}
	var counts window.Counts
	if st.kind == keyString {
		if counts, ok = parseCounts(st.value); !ok {
			o.fail(errNotCounterState)
			return
		}
	}
	d, next, expire, err := w.Hit(counts, st.now, p.v[2])
	if err != nil {
		o.failErr(err)
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, p.ms)
	if d.Write && !peek {
		b := strconv.AppendInt(o.value[:0], next.Index, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, next.Current, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, next.Previous, 10)
		o.action = actSet
		o.valueLen = len(b)
		o.expireMs = ceilMs(expire)
	}
}

func parseCounts(s string) (window.Counts, bool) {
	a, rest, ok1 := strings.Cut(s, ":")
	b, c, ok2 := strings.Cut(rest, ":")
	idx, ok3 := parseInstant(a)
	cur, ok4 := parseInstant(b)
	prev, ok5 := parseInstant(c)
	return window.Counts{Index: idx, Current: cur, Previous: prev}, ok1 && ok2 && ok3 && ok4 && ok5
}

// The fixed window's state: the count, in a key expiring at the window's
// end. A count whose expiry is not after the current window's start (a
// script on a server whose expiry clock lags the module's) is stale.
func runFixedWindow(p *params, r reader, o *outcome, peek bool) {
	f, err := window.NewFixedWindow(p.v[0], p.v[1])
	if err != nil {
		o.failErr(err)
		return
	}
	st, ok := readString(r, o, true)
	if !ok {
		return
	}
	var count int64
	if st.kind == keyString {
		if count, ok = parseInstant(st.value); !ok {
			o.fail(errNotFixedState)
			return
		}
		if st.expireMs >= 0 && st.expireMs*int64(time.Millisecond) <= f.Start(st.now) {
			count = 0
		}
	}
	d, n, end, err := f.Hit(count, st.now, p.v[2])
	if err != nil {
		o.failErr(err)
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, p.ms)
	if d.Write && !peek {
		o.setInt(n, end)
	}
}

// The sliding log's state: a sorted set, one entry per admitted unit,
// scored with its time in Unix microseconds.
func runSlidingLog(p *params, r reader, o *outcome, peek bool) {
	l, err := window.NewSlidingLog(p.v[0], p.v[1])
	if err != nil {
		o.failErr(err)
		return
	}
	st := r.read(false)
	if st.kind == keyString || st.kind == keyOther {
		o.action = actWrongType
		return
	}
	d, err := l.Hit(r.log(), st.now, p.v[2])
	if err != nil {
		o.failErr(err)
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, p.ms)
	if d.Write && !peek {
		o.action = actZLog
		o.zCutoff = floorDiv(d.Cutoff, 1000)
		o.zAdd = p.v[2]
		o.zScore = floorDiv(st.now, 1000)
		o.expireMs = ceilMs(d.Expire)
	}
}

// floorDiv is ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// usToNs converts a sorted-set score in microseconds to nanoseconds,
// keeping math.MinInt64 for "none".
func usToNs(us int64) int64 {
	if us <= math.MinInt64/1000 {
		return math.MinInt64
	}
	return us * 1000
}
