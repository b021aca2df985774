// Package window implements three window limiters, with time passed in:
// the sliding window counter, the fixed window and the sliding log. Each
// admits at most limit units per window; they differ in what they store and
// in how far a burst at a window boundary can push them.
//
// Windows are aligned to multiples of the window since the Unix epoch.
// Refused hits are never counted. A negative cost gives units back (a
// return, the module's negative cost): it takes them off the current
// window's count only — the window they were taken in, while it is current
// — never below zero, and is never refused. With limit 10 per 60 s, a count
// of 7 and a cost of −3, the count is 4; a cost of −9 leaves 0. Units taken
// in an earlier window stay where they were: that window's count is what
// the sliding window weighs, and a fixed window's is gone already. The
// sliding log removes its newest entries inside the trailing window. For all three, RetryAfter is the exact
// time until this same hit would be admitted (if nothing else arrives), and
// ResetAfter the time until the count is zero again. A charge (Charge, the
// module's DEBT) is counted even past the limit; the fixed window's and the
// sliding window's counts stop at MaxCount, 2^63 − 1, rather than fail.
//
// # Fixed window
//
// One counter per window. With limit 100 per 60 s, 100 hits at 11:59:59
// and 100 more at 12:00:00 are all admitted: across a boundary a fixed
// window admits up to 2 × limit in an interval much shorter than the window.
// It is the cheapest, and documented as such.
//
// # Sliding window counter
//
// Two counters — the previous window's and the current one's — and the
// estimate previous × (the part of the previous window the trailing window
// still overlaps) + current. Cloudflare's example: 42 hits in the previous
// minute, 18 in the current one, 15 s into it: 42 × 45/60 + 18 = 49.5, so
// with limit 50 one more hit is admitted (49.5 < 50) and a second is
// refused. As in Cloudflare's rule, a hit of cost c is admitted when
// current + ⌊previous × overlap⌋ + c ≤ limit: the weighted part is rounded
// down, which for c = 1 is exactly "estimate < limit". The
// estimate assumes the previous window's hits were spread evenly; the
// double burst at a boundary that doubles a fixed window is refused here
// (its second half weighs the whole first half), and only hits packed at the
// very end of the previous window followed by a steady stream can approach 2
// × limit in one trailing window. On random traffic the estimate is within
// a few percent of the exact count (see the tests for the measured figures).
//
// # Sliding log
//
// The exact count: one entry per admitted unit, kept while it is inside the
// trailing window. Never more than limit in any interval of one window;
// memory grows with the limit, so it is the tool for small limits.
package window

import (
	"errors"
	"math"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"
)

// Never is the RetryAfter of an admitted hit, and of a refused one whose
// cost exceeds the limit (ratelimit.Never).
const Never = ratelimit.Never

// MaxWindow is the longest window, in seconds, whose nanoseconds fit an int64
// (ratelimit.MaxSeconds).
const MaxWindow = ratelimit.MaxSeconds

var (
	// ErrRange means an argument is outside its range.
	ErrRange = errors.New("argument out of range: limit >= 1, 1 <= window <= 9223372036, counts >= 0")
	// ErrOverflow means the window's end overflows 64-bit nanoseconds.
	ErrOverflow = errors.New("the window overflows 64-bit nanoseconds: the window is too long")
)

// Decision is the outcome of one hit: the Verdict (a refused hit is not
// counted; Limit is the limit per window; RetryAfter the exact time until
// this same hit would be admitted, or Never if its cost exceeds Limit;
// ResetAfter the time until the count is zero) and whether to store.
type Decision struct {
	ratelimit.Verdict
	// Write reports that the state changed and must be stored, expiring
	// ResetAfter from now.
	Write bool
}

type params struct {
	limit  int64
	window int64 // ns
}

func newParams(limit, window int64) (params, error) {
	if limit < 1 || window < 1 || window > MaxWindow {
		return params{}, ErrRange
	}
	return params{limit: limit, window: window * int64(time.Second)}, nil
}

// start returns the start of the window holding now.
func (p params) start(now int64) int64 {
	s := now - now%p.window
	if now < 0 && now%p.window != 0 {
		s -= p.window
	}
	return s
}

func (p params) decision() Decision {
	return Decision{Verdict: ratelimit.Verdict{Limit: p.limit, RetryAfter: Never}}
}

// giveBack is count less what a return of cost (< 0) gives back, never
// below zero: 7 and −3 give 4, 7 and −9 give 0.
func giveBack(count, cost int64) int64 {
	if cost <= -count { // count ≥ 0: −count cannot overflow
		return 0
	}
	return count + cost
}

// MaxCount is the most a window's count holds, 2^63 − 1: a charge (DEBT)
// that would count past it counts MaxCount, far past any limit.
const MaxCount = math.MaxInt64

// ---- Fixed window ----

// FixedWindow admits limit units per window aligned to the epoch, or per
// one given span (NewSpanWindow).
type FixedWindow struct {
	p    params
	from int64 // a span's start (Unix ns), where span is set
	span bool
}

// NewFixedWindow returns a fixed window of limit per window seconds.
func NewFixedWindow(limit, window int64) (FixedWindow, error) {
	p, err := newParams(limit, window)
	return FixedWindow{p: p}, err
}

// NewSpanWindow returns a fixed window of limit over the span from start
// to end (Unix ns), whatever the time: a window on the calendar, whose
// bounds package calendar gives (a month in a time zone is 28 to 31 days,
// a day 23 to 25 hours). A hit before start counts in the span (a clock a
// little behind the one that chose it); a hit at or after end is
// ErrRange: it belongs to the next span. With limit 1000 over March in
// Berlin, a count of 999 admits one more until 1 April 00:00 CEST, and
// ResetAfter is the time until then.
func NewSpanWindow(limit, start, end int64) (FixedWindow, error) {
	if limit < 1 || start >= end {
		return FixedWindow{}, ErrRange
	}
	return FixedWindow{p: params{limit: limit, window: end - start}, from: start, span: true}, nil
}

// Hit counts cost units at now (Unix ns) against the stored count, which
// expires at expires (Unix ns; ignored when count is 0), and returns the
// decision, the count to store and the window's end (Unix ns), when it must
// expire.
//
// A count whose expiry is not after the current window's start belongs to
// an earlier window and counts as 0. One that expires after the current
// window's end can only come from a clock that stepped back (or an expiry
// changed behind the limiter's back): it counts as the current window's, so
// the step costs at most one window, and Write is set, even for a refused or
// zero-cost hit, so that it is stored again expiring at the window's end.
//
// A negative cost is a return: the count less −cost, never below zero,
// never Limited; Write when the count changed (a count of 0 need not be
// stored: the key may go).
func (f FixedWindow) Hit(count, expires, now, cost int64) (d Decision, newCount, end int64, err error) {
	if count < 0 {
		return Decision{}, 0, 0, ErrRange
	}
	d = f.p.decision()
	start := f.from
	if !f.span {
		start = f.p.start(now)
	}
	end, ok := checked.Add(start, f.p.window)
	if !ok {
		return Decision{}, 0, 0, ErrOverflow
	}
	if f.span && now >= end { // past the span: the next span's (an aligned window always holds now)
		return Decision{}, 0, 0, ErrRange
	}
	if count > 0 && expires <= start {
		count = 0
	}
	d.Write = count > 0 && expires > end
	left := time.Duration(end - now)
	if cost < 0 {
		newCount = giveBack(count, cost)
		d.Write = d.Write || newCount != count
	} else if newCount, ok = checked.Add(count, cost); cost > f.p.limit || !ok || newCount > f.p.limit {
		d.Limited = true
		if cost <= f.p.limit {
			d.RetryAfter = left // the next window starts empty
		}
		newCount = count
	} else {
		d.Write = d.Write || cost > 0
	}
	d.Remaining = max(f.p.limit-newCount, 0)
	if newCount > 0 {
		d.ResetAfter = left
	}
	return d, newCount, end, nil
}

// HitReserve is Hit with a reserve: cost is admitted only if at least
// reserve units remain after it. The decision and RetryAfter are those of a
// hit of cost + reserve; only cost is counted, and Remaining is what truly
// remains.
func (f FixedWindow) HitReserve(count, expires, now, cost, reserve int64) (d Decision, newCount, end int64, err error) {
	if probe, first := ratelimit.Reserve(cost, reserve); first {
		d, newCount, end, err = f.Hit(count, expires, now, probe)
		if err != nil || d.Limited {
			return d, newCount, end, err
		}
	}
	return f.Hit(count, expires, now, cost)
}

// Charge counts cost units at now whatever the count (the module's DEBT):
// a charge for work already done. A hit Hit admits is admitted alike; a
// larger one is counted past the limit: Limited (it left the window over
// its limit), Remaining 0, Write, and RetryAfter the time until one unit
// passes again, when the next window starts. With limit 10, a count of 8
// and a charge of 5, the count is 13. A count that would pass 2^63 − 1
// (MaxCount) is counted as MaxCount: the window refuses until it ends
// either way, and the next starts empty.
func (f FixedWindow) Charge(count, expires, now, cost int64) (d Decision, newCount, end int64, err error) {
	d, newCount, end, err = f.Hit(count, expires, now, cost)
	if err != nil || !d.Limited || cost == 0 {
		return d, newCount, end, err
	}
	n, ok := checked.Add(newCount, cost) // newCount: the count Hit read
	if !ok {
		n = MaxCount
	}
	d.Write, d.Remaining = true, 0
	d.RetryAfter, d.ResetAfter = time.Duration(end-now), time.Duration(end-now)
	return d, n, end, nil
}

// ---- Sliding window counter ----

// SlidingWindow estimates the trailing window's count from two fixed
// windows' counts.
type SlidingWindow struct{ p params }

// Counts is a sliding window counter's state: the number of the current
// window (its start / window), and the counts of it and the one before.
type Counts struct {
	Index, Current, Previous int64
}

// NewSlidingWindow returns a sliding window counter of limit per window
// seconds.
func NewSlidingWindow(limit, window int64) (SlidingWindow, error) {
	p, err := newParams(limit, window)
	return SlidingWindow{p}, err
}

// Hit counts cost units at now (Unix ns) against the counts c, and returns
// the decision, the counts to store and the instant they expire (when the
// estimate reaches zero). The zero Counts is a limiter with no hits.
//
// Counts of a window later than now's can only come from a clock that
// stepped back: they count as the current window's, so the step costs at
// most one window, and Write is set, even for a refused or zero-cost hit, so
// that they are stored again under the current window's index.
//
// A negative cost is a return: it takes units off the current window's
// count only, never below zero, never Limited; the previous count stays.
// With 42 in the previous minute and 18 in the current one, a return of 5
// leaves 13 current, and 15 s in the estimate is ⌊42 × 45/60⌋ + 13 = 44.
func (s SlidingWindow) Hit(c Counts, now, cost int64) (d Decision, next Counts, expire int64, err error) {
	if c.Current < 0 || c.Previous < 0 {
		return Decision{}, c, 0, ErrRange
	}
	W, L := s.p.window, s.p.limit
	d = s.p.decision()
	start := s.p.start(now)
	idx := start / W
	switch {
	case c.Index == idx:
	case c.Index == idx-1:
		c = Counts{Index: idx, Previous: c.Current}
	case c.Index < idx:
		c = Counts{Index: idx}
	default: // a future window: the clock stepped back
		c.Index = idx
		d.Write = c.Current > 0 || c.Previous > 0
	}
	end, ok1 := checked.Add(start, W)
	end2, ok2 := checked.Add(end, W)
	if !ok1 || !ok2 {
		return Decision{}, c, 0, ErrOverflow
	}
	e := now - start         // elapsed in the current window
	weight := func() int64 { // ⌊previous × (W − e) / W⌋
		v, _ := checked.MulDiv(c.Previous, W-e, W) // ≤ previous
		return v
	}

	next = c
	est, ok := checked.Add(c.Current, weight())
	total, ok2 := checked.Add(est, cost)
	if cost < 0 {
		next.Current = giveBack(c.Current, cost)
		d.Write = d.Write || next.Current != c.Current
	} else if cost > L || !ok || !ok2 || total > L {
		d.Limited = true
		if cost <= L {
			d.RetryAfter = time.Duration(s.retry(c, e, cost))
		}
	} else if cost > 0 {
		next.Current += cost
		d.Write = true
	}
	used, ok := checked.Add(next.Current, weight())
	if !ok {
		used = math.MaxInt64
	}
	d.Remaining = min(max(L-used, 0), L)
	switch {
	case next.Current > 0:
		expire = end2
	case next.Previous > 0:
		expire = end
	default:
		expire = now
	}
	d.ResetAfter = time.Duration(expire - now)
	return d, next, expire, nil
}

// HitReserve is Hit with a reserve, as FixedWindow.HitReserve.
func (s SlidingWindow) HitReserve(c Counts, now, cost, reserve int64) (d Decision, next Counts, expire int64, err error) {
	if probe, first := ratelimit.Reserve(cost, reserve); first {
		d, next, expire, err = s.Hit(c, now, probe)
		if err != nil || d.Limited {
			return d, next, expire, err
		}
	}
	return s.Hit(c, now, cost)
}

// Charge counts cost units at now whatever the estimate (the module's
// DEBT), as FixedWindow.Charge: a charge past the limit is counted in the
// current window, Limited, Remaining 0, and RetryAfter the time until one
// unit fits again, which may be in the next window, where the charge
// weighs as the previous count. With limit 10 per 60 s, no previous count
// and a charge of 15 at the start of a window, one unit fits again just
// after 20 s into the next window, once ⌊15 × (60 s − e)/60 s⌋ ≤ 9: 80 s
// from now. A current count that would pass 2^63 − 1 (MaxCount) is counted
// as MaxCount: it refuses the rest of this window and weighs in the next
// as MaxCount, which refuses the whole next window too, as the count it
// stands for would, wherever limit × window (in ns) is below 2^63 − 1.
func (s SlidingWindow) Charge(c Counts, now, cost int64) (d Decision, next Counts, expire int64, err error) {
	d, next, expire, err = s.Hit(c, now, cost)
	if err != nil || !d.Limited || cost == 0 {
		return d, next, expire, err
	}
	cur, ok := checked.Add(next.Current, cost) // next: the counts Hit read
	if !ok {
		cur = MaxCount
	}
	next.Current = cur
	start := s.p.start(now)
	expire = start + 2*s.p.window // Hit checked it fits
	d.Write, d.Remaining = true, 0
	d.RetryAfter = time.Duration(s.retry(next, now-start, 1))
	d.ResetAfter = time.Duration(expire - now)
	return d, next, expire, nil
}

// retry is the time from elapsed e in the current window until cost fits,
// when it does not fit now and cost ≤ limit.
func (s SlidingWindow) retry(c Counts, e, cost int64) int64 {
	W, L := s.p.window, s.p.limit
	r := W - e // until the window ends
	// Within this window the previous count's weight falls as time passes:
	// with r' left, it fits once ⌊previous × r' / W⌋ ≤ L − current − cost,
	// that is r' < (L − current − cost + 1) × W / previous.
	if room := L - cost - c.Current; room >= 0 && c.Previous > 0 { // L − cost ≥ 0: no overflow
		q, ok := checked.MulDivCeil(room+1, W, c.Previous)
		if ok && q-1 < r {
			return r - (q - 1)
		}
	}
	// In the next window the current count becomes the previous one: at e'
	// into it, it fits once ⌊current × (W − e') / W⌋ ≤ L − cost.
	if c.Current == 0 {
		return r
	}
	m, ok := checked.MulDivCeil(L-cost+1, W, c.Current)
	if !ok || m > W {
		return r
	}
	return r + W + 1 - m
}

// ---- Sliding log ----

// Log is the stored log as the sliding log reads it: entries are instants
// (Unix ns) of admitted units, several possibly equal.
type Log interface {
	// Count is the number of entries after the instant after.
	Count(after int64) int64
	// Nth is the k-th oldest entry after the instant after (k ≥ 1, at
	// most Count(after)).
	Nth(after, k int64) int64
	// Newest is the newest entry, or math.MinInt64 when there is none.
	Newest() int64
}

// SlidingLog counts exactly the units admitted in the trailing window.
type SlidingLog struct{ p params }

// MaxLogDebt is the most entries a sliding log holds past its limit after
// charges (Charge): a log is read entry by entry, so a debt is bounded.
const MaxLogDebt = 100_000

// NewSlidingLog returns a sliding log of limit per window seconds.
func NewSlidingLog(limit, window int64) (SlidingLog, error) {
	p, err := newParams(limit, window)
	return SlidingLog{p}, err
}

// LogDecision adds what the caller must do to the log.
type LogDecision struct {
	Decision
	// Cutoff: entries at or before it have left the window and may be
	// removed.
	Cutoff int64
	// Expire is when the log is empty again (its newest entry leaves).
	Expire int64
	// Add is how many entries the caller adds at now: the cost, when
	// admitted or charged.
	Add int64
	// Redate: the log holds entries after now, which only a clock that
	// stepped back leaves. They count as entries at now; when Redate is set
	// (and with it Write), the caller moves them to now.
	Redate bool
	// Remove is how many entries a return takes off: the caller removes
	// the newest Remove entries (after moving, when Redate).
	Remove int64
}

// Hit admits cost units at now (Unix ns) when the log holds at most
// limit − cost entries inside the trailing window (now − window, now]. An
// admitted hit adds cost entries at now (the caller's job: Write).
//
// Entries after now count as entries at now, so a clock that steps back
// costs at most one window; Redate (and Write) is then set, even for a
// refused or zero-cost hit, so that the caller moves them to now.
//
// A negative cost is a return: the newest −cost entries inside the
// trailing window go (Remove, and Write), never more than it holds, and the
// hit is never Limited. Which entries were the returned units the log
// cannot tell; the newest are the latest to leave, so removing them frees
// the units the returned ones would have held longest.
func (l SlidingLog) Hit(log Log, now, cost int64) (LogDecision, error) {
	W, L := l.p.window, l.p.limit
	cutoff, ok := checked.Sub(now, W)
	if !ok {
		return LogDecision{}, ErrOverflow
	}
	d := LogDecision{Decision: l.p.decision(), Cutoff: cutoff}
	live := log.Count(cutoff)
	newest := log.Newest()
	if newest > now {
		newest = now
		d.Redate = true
		d.Write = true
	}
	total, ok := checked.Add(live, cost)
	if cost < 0 {
		total = giveBack(live, cost)
		d.Remove = live - total
		d.Write = d.Write || d.Remove > 0
		if total > 0 { // the newest left: the total-th oldest live entry
			newest = min(log.Nth(cutoff, total), now)
		}
	} else if cost > L || !ok || total > L {
		d.Limited = true
		if cost <= L {
			// Wait until the (live + cost − L)-th oldest entry leaves.
			nth := min(log.Nth(cutoff, live+cost-L), now)
			d.RetryAfter = time.Duration(nth + W - now)
		}
		total = live
	} else if cost > 0 {
		d.Write = true
		d.Add = cost
		newest = now
	}
	d.Remaining = min(max(L-total, 0), L)
	if total > 0 {
		if d.Expire, ok = checked.Add(newest, W); !ok {
			return LogDecision{}, ErrOverflow
		}
		d.ResetAfter = time.Duration(d.Expire - now)
	} else {
		d.Expire = now
	}
	return d, nil
}

// Charge adds cost entries at now whatever the count (the module's DEBT),
// as FixedWindow.Charge: a charge past the limit is added, Limited,
// Remaining 0, and RetryAfter the time until one unit fits again, when
// the oldest entries over the limit have left the window. With limit 10
// per 60 s, an empty log and a charge of 12 at now, one unit fits again
// after 60 s, when all 12 leave. The caller bounds cost (the module adds
// at most 100,000 entries per call); ratelimit.ErrDebt refuses a charge
// that would leave more than limit + MaxLogDebt entries in the window.
func (l SlidingLog) Charge(log Log, now, cost int64) (LogDecision, error) {
	d, err := l.Hit(log, now, cost)
	if err != nil || !d.Limited || cost == 0 {
		return d, err
	}
	W, L := l.p.window, l.p.limit
	live := log.Count(d.Cutoff)
	total, ok := checked.Add(live, cost)
	if !ok || total-L > MaxLogDebt {
		return LogDecision{}, ratelimit.ErrDebt
	}
	// One unit fits once the (total + 1 − L)-th oldest entry has left: an
	// old one, or one of those added now.
	d.RetryAfter = time.Duration(W)
	if k := total + 1 - L; k <= live {
		d.RetryAfter = time.Duration(min(log.Nth(d.Cutoff, k), now) + W - now)
	}
	d.Write, d.Add, d.Remaining = true, cost, 0
	if d.Expire, ok = checked.Add(now, W); !ok {
		return LogDecision{}, ErrOverflow
	}
	d.ResetAfter = time.Duration(W)
	return d, nil
}

// HitReserve is Hit with a reserve, as FixedWindow.HitReserve.
func (l SlidingLog) HitReserve(log Log, now, cost, reserve int64) (LogDecision, error) {
	if probe, first := ratelimit.Reserve(cost, reserve); first {
		d, err := l.Hit(log, now, probe)
		if err != nil || d.Limited {
			return d, err
		}
	}
	return l.Hit(log, now, cost)
}
