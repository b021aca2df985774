package main

import (
	"math"
	"strconv"
	"strings"

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

// The window families' states, as errors name them.
const (
	counterState = "sliding window state (index:current:previous)"
	fixedState   = "fixed window state (a count)"
	logState     = "a sliding log (members <score>-<n>, scored in Unix microseconds)"
)

// The sliding window counter's state: "<window index>:<current>:<previous>".
func runSlidingWindow(p *params, r reader, o *outcome, peek bool) {
	w, err := window.NewSlidingWindow(p.v[0], p.v[1])
	if err != nil {
		o.failErr(err)
		return
	}
	st, ok := readString(r, o, counterState)
	if !ok {
		return
	}
	var counts window.Counts
	if st.kind == keyString {
		if counts, ok = parseCounts(st.value); !ok {
			o.fail(otherData(counterState, "not three decimal integers"))
			return
		}
	}
	d, next, expire, err := w.Hit(counts, st.now, p.v[2])
	if err != nil {
		o.failErr(err)
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, p.ms)
	if !d.Write || peek {
		return
	}
	if expire <= st.now { // nothing counted: the key has no work left
		if st.kind != keyEmpty {
			o.action = actDel
		}
		return
	}
	b := strconv.AppendInt(o.value[:0], next.Index, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, next.Current, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, next.Previous, 10)
	o.action = actSet
	o.valueLen = len(b)
	o.expireMs = ceilMs(expire)
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
// script on a server whose expiry clock lags the module's) is stale; one
// expiring after the current window's end is the current window's.
func runFixedWindow(p *params, r reader, o *outcome, peek bool) {
	f, err := window.NewFixedWindow(p.v[0], p.v[1])
	if err != nil {
		o.failErr(err)
		return
	}
	st, ok := readString(r, o, fixedState)
	if !ok {
		return
	}
	var count int64
	if st.kind == keyString {
		if count, ok = parseInstant(st.value); !ok {
			o.fail(otherData(fixedState, "not a decimal integer"))
			return
		}
	}
	d, n, end, err := f.Hit(count, expiryNs(st.expireMs), st.now, p.v[2])
	if err != nil {
		o.failErr(err)
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, p.ms)
	if d.Write && !peek {
		o.setInt(n, end)
	}
}

// bytesPerLogEntry is what one sliding-log entry costs the server, rounded
// up: 120 bytes on Redis 7.0 and 8.0, 99 on Valkey 8.1 (MEMORY USAGE of a
// log of 100000 entries, in the skiplist encoding; see the README).
const bytesPerLogEntry = 128

// maxScoreUs bounds a sliding log's scores: 2^53 µs (the year 2255), below
// which a double holds every integer exactly.
const maxScoreUs = 1 << 53

// The sliding log's state: a sorted set, one entry per admitted unit,
// scored with its time in Unix microseconds.
func runSlidingLog(p *params, r reader, o *outcome, peek bool) {
	l, err := window.NewSlidingLog(p.v[0], p.v[1])
	if err != nil {
		o.failErr(err)
		return
	}
	st := r.read()
	switch {
	case st.kind == keyString || st.kind == keyOther:
		o.action = actWrongType
		return
	case st.kind == keyZSet && st.expireMs < 0:
		o.fail(otherData(logState, "it has no expiry, and limiter keys always expire"))
		return
	case st.kind == keyZSet && (!logEntry(st.oldest) || !logEntry(st.newest)):
		o.fail(otherData(logState, "its members are not the log's own"))
		return
	}
	d, err := l.Hit(r.log(), st.now, p.v[2])
	if err != nil {
		o.failErr(err)
		return
	}
	o.setReply(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, p.ms)
	if !d.Write || peek {
		return
	}
	if !d.Limited {
		o.zAdd = p.v[2]
	}
	// deny-oom is checked before a command runs; one log write can add up
	// to 100000 entries, so it is checked against maxmemory here too.
	if o.zAdd > 0 {
		entries := o.zAdd
		if st.zLen <= 128 && st.zLen+o.zAdd > 128 { // leaves the compact encoding
			entries += st.zLen
		}
		if room := r.memoryRoom(); room >= 0 && entries > room/bytesPerLogEntry {
			o.fail(errOOM)
			return
		}
	}
	o.action = actZLog
	o.zRedate = d.Redate
	o.zCutoff = floorDiv(d.Cutoff, 1000)
	o.zScore = floorDiv(st.now, 1000)
	o.expireMs = ceilMs(d.Expire)
}

// errOOM is the server's own reply to a command refused for memory.
const errOOM = "OOM command not allowed when used memory > 'maxmemory'."

// logEntry reports a member the sliding log wrote: "<score>-<n>", the
// score a whole number of Unix microseconds from 2015 to maxScoreUs.
func logEntry(e zEntry) bool {
	if e.length > maxMember || !(e.score >= float64(minState/1000) && e.score < maxScoreUs) || e.score != math.Trunc(e.score) {
		return false
	}
	var buf [24]byte
	prefix := strconv.AppendInt(buf[:0], int64(e.score), 10)
	prefix = append(prefix, '-')
	if len(e.member) <= len(prefix) || e.member[:len(prefix)] != string(prefix) {
		return false
	}
	_, ok := parseInstant(e.member[len(prefix):])
	return ok
}

// floorDiv is ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// scoreNs converts a sorted-set score in Unix microseconds to nanoseconds,
// never converting a double that does not fit: NaN and scores at or below
// -2^53 give math.MinInt64 (none), scores at or above 2^53 saturate.
func scoreNs(us float64) int64 {
	switch {
	case us != us || us <= -maxScoreUs:
		return math.MinInt64
	case us >= maxScoreUs:
		return maxScoreUs * 1000
	}
	return int64(us) * 1000
}
