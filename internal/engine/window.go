package engine

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/seed-6b3823f5/ratelimit/window"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// The window families' states, as errors name them.
var (
	counterState = spec.Families[spec.SW].State
	fixedState   = spec.Families[spec.FW].State
	logState     = spec.Families[spec.SL].State
)

// The sliding window counter's state: "<window index>:<current>:<previous>".
func runSlidingWindow(l *limit, st *KeyState, ms bool, rep *[5]int64, w *KeyWrite) error {
	p := l.sw()
	sw, err := window.NewSlidingWindow(p.limit, p.window)
	if err != nil {
		return failErr(err)
	}
	if err := checkKey(st, KeyString, counterState); err != nil {
		return err
	}
	var counts window.Counts
	if st.Kind == KeyString {
		var ok bool
		if counts, ok = parseCounts(st.Value); !ok {
			return fail(otherData(counterState, "not three decimal integers"))
		}
	}
	var d window.Decision
	var next window.Counts
	var expire int64
	now := st.Now - l.offset() // SPREAD: the windows on a clock shifted by the key's offset
	if l.debt {
		d, next, expire, err = sw.Charge(counts, now, p.cost)
	} else {
		d, next, expire, err = sw.HitReserve(counts, now, p.cost, l.reserve)
	}
	if err != nil {
		return chargeErr(err, l)
	}
	setReply(rep, d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, ms)
	switch {
	case !d.Write:
	case expire <= now: // nothing counted: the key has no work left
		if st.Kind != KeyEmpty {
			w.Action = WriteDel
		}
	default:
		b := strconv.AppendInt(w.Value[:0], next.Index, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, next.Current, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, next.Previous, 10)
		w.Action = WriteSet
		w.ValueLen = len(b)
		w.ExpireMs = ceilMs(expire + l.offset())
	}
	return nil
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
//
// With SPAN the window is the one of start-end and end-next that holds the
// server's time (start-end before start: a client's clock a little ahead
// chose it), and a time past next is an error.
func runFixedWindow(l *limit, st *KeyState, ms bool, rep *[5]int64, w *KeyWrite) error {
	p := l.fw()
	f, err := window.NewFixedWindow(p.limit, p.window)
	if err != nil {
		return failErr(err)
	}
	if err := checkKey(st, KeyString, fixedState); err != nil {
		return err
	}
	var count int64
	if st.Kind == KeyString {
		var ok bool
		if count, ok = parseInstant(st.Value); !ok {
			return fail(otherData(fixedState, "not a decimal integer"))
		}
	}
	if !l.spread && l.bounds[1] != 0 { // SPAN
		const msNs = int64(time.Millisecond)
		from, to := l.bounds[0], l.bounds[1]
		if st.Now >= to*msNs { // ≤ maxSpanMs: no overflow
			from, to = to, l.bounds[2]
		}
		if st.Now >= to*msNs {
			return fail(spec.Fill(spec.TSpanPast, to, FloorDiv(st.Now, msNs)))
		}
		if f, err = window.NewSpanWindow(p.limit, from*msNs, to*msNs); err != nil {
			return failErr(err)
		}
	}
	var d window.Decision
	var n, end int64
	off := l.offset()
	now, expires := st.Now-off, expiryNs(st.ExpireMs)-off // SPREAD: a clock shifted by the key's offset
	if l.debt {
		d, n, end, err = f.Charge(count, expires, now, p.cost)
	} else {
		d, n, end, err = f.HitReserve(count, expires, now, p.cost, l.reserve)
	}
	if err != nil {
		return chargeErr(err, l)
	}
	setReply(rep, d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, ms)
	switch {
	case !d.Write:
	case n == 0: // a return gave back the whole count: the key has no work left
		if st.Kind != KeyEmpty {
			w.Action = WriteDel
		}
	default:
		w.setInt(n, end+off)
	}
	return nil
}

// bytesPerLogEntry is what one sliding-log entry costs the server, rounded
// up: 120 bytes on Redis 7.0 and 8.0, 99 on Valkey 8.1 (MEMORY USAGE of a
// log of 100000 entries, in the skiplist encoding; see the README).
const bytesPerLogEntry = 128

// A log in debt holds at most its limit and window.MaxLogDebt entries, the
// Lua library's MAX_LOG_ADD (maxLogAdd): one number, or this fails to build.
const _ = uint(window.MaxLogDebt-maxLogAdd) + uint(maxLogAdd-window.MaxLogDebt)

// compactLog is the most entries a sorted set keeps in its compact
// encoding (zset-max-listpack-entries, 128 by default).
const compactLog = 128

// maxScoreUs bounds a sliding log's scores: 2^53 µs (the year 2255), below
// which a double holds every integer exactly.
const maxScoreUs = 1 << 53

// The sliding log's state: a sorted set, one entry per admitted unit,
// scored with its time in Unix microseconds. It is the i-th key.
func runSlidingLog(l *limit, st *KeyState, r Reader, i int, ms bool, rep *[5]int64, w *KeyWrite) error {
	p := l.sl()
	sl, err := window.NewSlidingLog(p.limit, p.window)
	if err != nil {
		return failErr(err)
	}
	if err := checkKey(st, KeyZSet, logState); err != nil {
		return err
	}
	if st.Kind == KeyZSet && (!logEntry(st.Oldest) || !logEntry(st.Newest)) {
		return fail(otherData(logState, "its members are not the log's own"))
	}
	var d window.LogDecision
	if l.debt {
		d, err = sl.Charge(r.Log(i), st.Now, p.cost)
	} else {
		d, err = sl.HitReserve(r.Log(i), st.Now, p.cost, l.reserve)
	}
	if err != nil {
		return chargeErr(err, l)
	}
	setReply(rep, d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, ms)
	if !d.Write {
		return nil
	}
	w.Action = WriteZLog
	if d.Add > 0 {
		w.ZAdd = d.Add
		w.ZGrowth = w.ZAdd
		if st.ZLen <= compactLog && st.ZLen+w.ZAdd > compactLog { // leaves the compact encoding
			w.ZGrowth += st.ZLen
		}
	}
	w.ZRedate = d.Redate
	w.ZRemove = d.Remove
	w.ZCutoff = FloorDiv(d.Cutoff, 1000)
	w.ZScore = FloorDiv(st.Now, 1000)
	w.ExpireMs = ceilMs(d.Expire)
	return nil
}

// logEntry reports a member the sliding log wrote: "<score>-<n>", the
// score a whole number of Unix microseconds from 2015 to maxScoreUs. The
// member's digits are read and compared with the score, not the score
// formatted and compared with them: this runs twice on every log call.
func logEntry(e ZEntry) bool {
	if e.Length > MaxMember || !stateScore(e.Score) {
		return false
	}
	score, n, ok := strings.Cut(e.Member, "-")
	if !ok || score == "" || score[0] == '0' { // the log writes no leading zero
		return false
	}
	us, ok := parseInstant(score)
	if !ok || us != int64(e.Score) {
		return false
	}
	_, ok = parseInstant(n)
	return ok
}

// stateScore reports a score a limiter's sorted set can hold: a whole
// number of Unix microseconds from 2015 (minState) to maxScoreUs.
func stateScore(us float64) bool {
	return us >= float64(minState/1000) && us < maxScoreUs && us == math.Trunc(us)
}

// FloorDiv is ⌊a/b⌋ for b > 0.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// ScoreNs converts a sorted-set score in Unix microseconds to nanoseconds,
// never converting a double that does not fit: NaN and scores at or below
// -2^53 give math.MinInt64 (none), scores at or above 2^53 saturate.
func ScoreNs(us float64) int64 {
	switch {
	case us != us || us <= -maxScoreUs:
		return math.MinInt64
	case us >= maxScoreUs:
		return maxScoreUs * 1000
	}
	return int64(us) * 1000
}
