// Package client calls the ratelimit module's commands from Go, over any
// go-redis v9 client (single node, Cluster, failover, Ring), and turns
// their five-integer replies into a Result with durations.
//
//	c := client.New(rdb)
//	res, err := c.Take(ctx, "rl:api:key:abc", client.GCRA(9, 10, time.Minute), 1)
//	// 10 requests at once, then 10 per minute: res.Remaining 9, res.RetryAfter -1
//
// Every call asks the module for milliseconds (its MS option), so RetryAfter
// and ResetAfter are exact to the millisecond, rounded up.
//
// # Retries
//
// A limiter call is never retried: go-redis retries a command whose reply
// was lost (a timeout, a dropped connection) three times by default, and a
// limiter call whose reply is lost has already been counted, so a retry
// would charge twice (or take a second slot). Each call here is marked so
// that go-redis sends it once, whatever the client's MaxRetries; a lost
// reply is an error, and the caller's failure policy decides.
//
// A reply saying the command ran nothing is not a failure, and the command
// is sent again within the call's deadline (2 s at most without one):
// redirections in a cluster (MOVED, ASK, which go-redis follows itself),
// TRYAGAIN (a command of several keys, RL.ALL, while their slot migrates
// and some have moved) and CLUSTERDOWN (a failover in progress), after 1
// ms, then twice as long each time up to 32 ms. Only a call still not
// decided at its deadline fails: Unavailable, and Moving when its slot was
// moving all along. Every error names the server the call went to
// (ServerError), so that a breaker per server keeps one node's trouble
// from deciding keys held elsewhere.
//
// # Engines
//
// A server without the module (a managed Redis or Valkey service) runs the
// same commands in Lua (package lua), with the module's replies, errors and
// stored state: New asks each server once whether it has the module
// (COMMAND INFO, per node in a Cluster or Ring) and, where it does not,
// loads the FUNCTION library there (Redis 7 and later, Valkey) and calls it
// with FCALL, or, where the server refuses FUNCTION, runs the same commands
// as EVAL scripts. A key moves between engines without a change.
//
// The library the client loads is this version's edition (lua.Versioned):
// the library and every function named after the version
// (ratelimit_v0_1_0_5c0e…, FCALL gcra_throttle_v0_1_0_5c0e…), loaded with
// FUNCTION LOAD and never replaced, so processes of two versions sharing a
// server (a rolling deploy) each run their own code; DeleteLibraries
// removes the editions of other versions once none runs. In a Cluster, a
// Lua call that go-redis follows to a primary lacking the library or the
// script (ASK while a slot migrates to a new node, MOVED after a failover)
// is sent once more as its script's source (EVAL), which needs nothing
// loaded, and the primaries get the library behind it. On Redis
// 7.0 the module reads the clock in whole milliseconds and Lua's TIME in
// microseconds: a key one engine wrote may look up to 1 ms further along to
// the other. NewEngine forces an engine; Engines reports each server's.
//
// # Deadlines
//
// A call ends when its context does, whatever the server does: refuses
// connections, or accepts them and never answers (a stopped process, a
// full disk, a long GC pause on a proxy). go-redis bounds its socket reads
// by a context's deadline only when the client was built with
// ContextTimeoutEnabled: true; otherwise a stopped server holds a call for
// ReadTimeout (3 s by default). Build it so:
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//
// With any other client, a call whose context has a deadline runs in a
// goroutine of its own and the caller gets context.DeadlineExceeded at the
// deadline; the abandoned call keeps its connection until go-redis's own
// timeout. A caller whose context has already ended costs Redis nothing:
// the call returns its context's error without sending anything.
//
// # Start-up work
//
// Engine probes, library loads and script loads are done once per server
// whatever the number of calls that need them at once (a herd of first
// requests costs one COMMAND INFO and one FUNCTION LOAD, or one SCRIPT
// LOAD), and so is a Cluster's first map; the probe also opens the
// connections the calls waiting for it will take (one PING each, up to
// the pool's size), so that they do not all dial at once when it ends.
// That work is not the calls' to pay for: a call that meets it waits for
// it past its own deadline, the work bounded by its own timeout (2 s), and
// then has the time it had when it began to wait (its deadline pushed
// back by the wait, for every later call made with the same context), so
// that a fresh process's first requests are decided by the limiter, not
// by a failure policy. The same holds when the work comes again: a
// failover to a server without the module (its library loaded), a
// library or scripts flushed. The caller's cancellation (context.Canceled)
// ends the wait at once; a context whose deadline has passed can no longer
// tell when its caller goes, one from WithTimeout can, which is why
// httplimit uses it. A server that never answers (a stopped process) fails
// the calls waiting for its probe with the probe's timeout, not theirs:
// a process's first calls facing a stopped server wait up to 2 s (facing
// one that refuses connections, as long as go-redis's retries last). Once
// start-up work has failed, the calls that meet it again wait only within
// their own deadlines, an outage's fast failures, while it is tried again
// behind them.
//
// # Errors
//
// Unavailable tells a Redis that could not decide (no connection, no
// answer in time, LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, ...) from a
// caller that gave up and from a call Redis refused for its arguments.
//
// With the Module engine, a server without the module answers "unknown
// command": the error wraps ErrNoModule. Bad arguments come back as the
// module's own ERR reply (the scripts' are the same), which names the
// argument and its range.
package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"

	"github.com/seed-6b3823f5/ratelimit/calendar"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// ErrNoModule means the server does not have the ratelimit module loaded.
var ErrNoModule = errors.New("ratelimit: the server does not have the ratelimit module loaded " +
	"(redis-server --loadmodule /path/to/ratelimit.so)")

// Result is a limiter's answer: the five integers of its reply as a
// ratelimit.Verdict (Limited, Limit, Remaining, RetryAfter, ResetAfter;
// times exact to the millisecond, rounded up), and for All the deciding
// limit's position. A fixed window of 10 a minute, 40 s into the minute,
// admitting its sixth request (10 a minute, 6 used: Remaining 4):
//
//	Result{Verdict: ratelimit.Verdict{Limited: false, Limit: 10, Remaining: 4, RetryAfter: ratelimit.Never, ResetAfter: 20 * time.Second}}
//
// and once all 10 are used, an eleventh:
//
//	Result{Verdict: ratelimit.Verdict{Limited: true, Limit: 10, Remaining: 0, RetryAfter: 20 * time.Second, ResetAfter: 20 * time.Second}}
//
// A refused call took nothing. For a concurrency limit RetryAfter is an
// upper bound (a holder may release sooner) and ResetAfter the time until
// every lease has lapsed; for a Shaper, ResetAfter is the delay before this
// request may go.
type Result struct {
	ratelimit.Verdict
	// Policy is, for All and PeekAll, the position of the deciding limit in
	// the call's list; 0 otherwise.
	Policy int
	// Granted is, for a call with UpTo(n), how many of its calls were taken
	// at once: the most in 0..n every limit admitted (ratelimit.Grant), each
	// limit's cost times Granted; 0 is a refusal, the one a call without
	// UpTo gets. 10 a minute, 7 used: Take of cost 2 with UpTo(5) is granted
	// 1 (2 units), Remaining 1. For Acquire with UpTo(n), the slots the id
	// holds after the call (all it held, and those it took). 0 without UpTo.
	Granted int64
}

// Limit is one rate limiter and its parameters, made by GCRA, TokenBucket,
// Shaper, SlidingWindow, FixedWindow or SlidingLog. The zero Limit is not
// valid.
type Limit struct {
	algo   algo
	n, m   int64 // the positional integers before the period
	period time.Duration
	spread bool // SPREAD: each key's windows start at its own offset
	// cal is a calendar window's rule (Calendar), where its Unit is set:
	// calls send SPAN with its bounds.
	cal calendar.Period
	// over is the hash and field its parameters come from (Override),
	// where over[0] is set: calls send LIMITS with them.
	over [2]string
}

// algo is a limit's family in the command table (spec), plus one: the
// zero Limit's is algoNone.
type algo uint8

const (
	algoNone algo = 0
	algoGCRA      = algo(spec.GCRA + 1)
	algoSL        = algo(spec.SL + 1)
)

// family is a's row in the command table, or nil for algoNone and a family
// the client has no Limit of (Family.Go names none).
func (a algo) family() *spec.Family {
	if a == algoNone || int(a) > len(spec.Families) || spec.Families[a-1].Go[0] == "" {
		return nil
	}
	return &spec.Families[a-1]
}

// algos are each limit's commands, its family's name in RL.ALL ("" when
// RL.ALL does not take it) and its fields' names, from the command table.
var algos = func() (as [len(spec.Families) + 1]struct{ take, peek, family, n, m, period string }) {
	for a := range as {
		f := algo(a).family()
		if f == nil {
			continue
		}
		x := &as[a]
		x.take, x.peek = spec.CommandOf(a-1, false).Name, spec.CommandOf(a-1, true).Name
		if f.InAll {
			x.family = f.Name
		}
		x.n, x.m, x.period = f.Go[0], f.Go[1], f.Go[2]
	}
	return as
}()

// The commands of several limits and of the concurrency limiter.
var (
	cmdAll, cmdPeekAll                  = cmdName(spec.OpRLAll), cmdName(spec.OpRLPeek)
	cmdAcquire, cmdRelease, cmdPeekConc = cmdName(spec.OpConcAcquire), cmdName(spec.OpConcRelease), cmdName(spec.OpConcPeek)
	cmdHold, cmdSettle                  = cmdName(spec.OpRLHold), cmdName(spec.OpRLSettle)
)

func cmdName(op spec.Op) string { return spec.Of(op).Name }

// GCRA is GCRA.THROTTLE's limit (redis-cell's CL.THROTTLE): burst+1
// requests at once, then rate per period. GCRA(9, 10, time.Minute) admits
// 10 at once and one more every 6 s.
func GCRA(burst, rate int64, period time.Duration) Limit {
	return Limit{algo: algo(spec.GCRA + 1), n: burst, m: rate, period: period}
}

// PerSecond is n requests per second: n at once from a full state, then
// one every 1/n s, as go-redis/redis_rate's PerSecond means; it is
// GCRA(n-1, n, time.Second). Its RateLimit-Policy states q=n, w=1.
func PerSecond(n int64) Limit { return GCRA(n-1, n, time.Second) }

// PerMinute is n requests per minute: n at once, then one every 60/n s
// (GCRA(n-1, n, time.Minute)). PerMinute(10) admits 10 at once, then one
// every 6 s; its RateLimit-Policy states q=10, w=60.
func PerMinute(n int64) Limit { return GCRA(n-1, n, time.Minute) }

// PerHour is n requests per hour: n at once, then one every 3600/n s
// (GCRA(n-1, n, time.Hour)).
func PerHour(n int64) Limit { return GCRA(n-1, n, time.Hour) }

// TokenBucket is TB.TAKE's limit: a bucket of capacity tokens, starting
// full, refilled continuously with refill tokens per period.
func TokenBucket(capacity, refill int64, period time.Duration) Limit {
	return Limit{algo: algo(spec.TB + 1), n: capacity, m: refill, period: period}
}

// Shaper is LB.ENQUEUE's limit, a leaky bucket used as a shaper: capacity
// requests may wait, leak leave per period. Its ResetAfter is the delay
// before this request may go. It cannot be part of All.
func Shaper(capacity, leak int64, period time.Duration) Limit {
	return Limit{algo: algo(spec.LB + 1), n: capacity, m: leak, period: period}
}

// SlidingWindow is SW.HIT's limit: limit per trailing window, estimated from
// two fixed windows' counts.
func SlidingWindow(limit int64, window time.Duration) Limit {
	return Limit{algo: algo(spec.SW + 1), n: limit, period: window}
}

// FixedWindow is FW.HIT's limit: limit per window aligned to the Unix epoch
// (up to twice the limit across a boundary).
func FixedWindow(limit int64, window time.Duration) Limit {
	return Limit{algo: algo(spec.FW + 1), n: limit, period: window}
}

// Calendar is FW.HIT's limit on the calendar: limit per window of p, a day,
// week, month or year in p.Location from p.Anchor (a billing day, a time
// of day). Calendar(1_000_000, calendar.Period{Unit: calendar.Month,
// Location: berlin}) admits a million per calendar month in Berlin, the
// count starting afresh at midnight on the 1st, CET or CEST; with
// Anchor{Day: 15} it runs from the 15th. Each call sends the window's
// bounds as the client's clock places them (the module's SPAN: the
// window holding now and the next, so that a clock a little behind the
// server's still counts in the right one). Its Params' period is the
// longest window of the unit a call accepts (a day 2 days, a week 8, a
// month 32, a year 367: room for any zone's clock changes).
func Calendar(limit int64, p calendar.Period) Limit {
	return Limit{algo: algo(spec.FW + 1), n: limit, period: longestSpan[p.Unit], cal: p}
}

// longestSpan is the period a calendar window's calls send, by unit: what
// SPAN checks its spans against.
var longestSpan = map[calendar.Unit]time.Duration{
	calendar.Day: 48 * time.Hour, calendar.Week: 8 * 24 * time.Hour,
	calendar.Month: 32 * 24 * time.Hour, calendar.Year: 367 * 24 * time.Hour,
}

// Period is l's calendar rule and true when l is a Calendar limit.
func (l Limit) Period() (calendar.Period, bool) { return l.cal, l.cal.Unit != 0 }

// SlidingLog is SL.HIT's limit: exactly limit (at most 100000) per trailing
// window, one sorted-set entry per admitted unit.
func SlidingLog(limit int64, window time.Duration) Limit {
	return Limit{algo: algo(spec.SL + 1), n: limit, period: window}
}

// Spread is l with its windows spread per key (the module's SPREAD): each
// key's windows start at an offset of its own, derived from the key (the
// first 52 bits of its SHA-1 modulo the window), rather than at multiples
// of the window since the epoch, so that a limit's keys do not all reset,
// and their clients all retry, at one instant. FixedWindow(100,
// time.Minute).Spread() on "user:42" runs its minutes from hh:mm:55.114.
// Each key's promise is unchanged: its limit per window, in windows of its
// own. Only a FixedWindow or a SlidingWindow of up to 10^9 s spreads; the
// calls of any other limit fail.
func (l Limit) Spread() Limit {
	l.spread = true
	return l
}

// Spreads reports whether l's windows are spread per key (Spread).
func (l Limit) Spreads() bool { return l.spread }

// Override is l with its parameters held in Redis, in field of the hash
// at key (the module's LIMITS key field): each call reads the field in the
// same atomic step as it decides and, when the hash holds it, decides with
// its parameters in place of l's, so that a plan changes without a
// redeploy and every client of the key agrees. Without the hash or the
// field l's own stand. The field holds l's family's parameters as
// integers separated by spaces, what SetLimit writes: "100 60" for a
// FixedWindow of 100 a minute. FixedWindow(100,
// time.Minute).Override("{acme}:plan", "api") with "{acme}:plan" holding
// api = "5000 60" admits 5000 a minute on every key it is called on. The
// hash must be in its keys' Cluster slot: give it their hash tag. A field
// that does not hold l's family's parameters fails the call, with nothing
// taken. The Result's Limit is the one that decided.
func (l Limit) Override(key, field string) Limit {
	l.over = [2]string{key, field}
	return l
}

// Overridden is the hash and field l's parameters come from, and true,
// when l has an Override.
func (l Limit) Overridden() (key, field string, ok bool) {
	return l.over[0], l.over[1], l.over[0] != ""
}

// String describes the limit: "GCRA(burst 9, rate 10, period 1m0s)",
// "FW(limit 100, window 1m0s, spread)".
func (l Limit) String() string {
	a := algos[l.algo]
	if l.algo == algoNone {
		return "Limit(none)"
	}
	name := a.take[:strings.IndexByte(a.take, '.')]
	spread := ""
	switch {
	case l.spread:
		spread = ", spread"
	case l.cal.Unit != 0:
		return fmt.Sprintf("%s(%s %d, %s)", name, a.n, l.n, calendarName(l.cal))
	}
	if a.m == "" {
		return fmt.Sprintf("%s(%s %d, %s %v%s)", name, a.n, l.n, a.period, l.period, spread)
	}
	return fmt.Sprintf("%s(%s %d, %s %d, %s %v%s)", name, a.n, l.n, a.m, l.m, a.period, l.period, spread)
}

// calendarName describes a calendar rule: "month in Europe/Berlin from day
// 15", "day in UTC at 02:00".
func calendarName(p calendar.Period) string {
	loc := "UTC"
	if p.Location != nil {
		loc = p.Location.String()
	}
	s := fmt.Sprintf("%v in %s", p.Unit, loc)
	a := p.Anchor
	if a.Month != 0 {
		s += " from " + a.Month.String()
	}
	if a.Day != 0 {
		s += fmt.Sprintf(" from day %d", a.Day)
	}
	if a.Weekday != 0 {
		s += fmt.Sprintf(" from weekday %d", a.Weekday)
	}
	if a.Hour != 0 || a.Minute != 0 {
		s += fmt.Sprintf(" at %02d:%02d", a.Hour, a.Minute)
	}
	return s
}

// Family is the limiter l runs, as the command table names it: "GCRA",
// "TB" (TokenBucket), "LB" (Shaper), "SW" (SlidingWindow), "FW"
// (FixedWindow) or "SL" (SlidingLog); "" for the zero Limit.
// PerSecond(10).Family() is "GCRA".
func (l Limit) Family() string {
	if f := l.algo.family(); f != nil {
		return f.Name
	}
	return ""
}

// Params are the arguments l's command takes after the key: n is GCRA's
// burst, a bucket's or a shaper's capacity, a window's limit; m is GCRA's
// rate, a bucket's refill, a shaper's leak (0 for a window); period is
// GCRA's, a bucket's or a shaper's period, a window's length.
// PerSecond(10).Params() is 9, 10, 1 s.
func (l Limit) Params() (n, m int64, period time.Duration) { return l.n, l.m, l.period }

// Quota is what the limit admits and over how long, as the IETF RateLimit
// fields state a policy (q and w): GCRA(9, 10, time.Minute) is 10 per 60 s;
// a token bucket of 100 refilled 10 a second is 100 per 10 s (the time to
// refill it), rounded up to the second; a window's limit per its window. A
// Shaper's quota is its queue, capacity+1, per the time to drain it.
func (l Limit) Quota() (q int64, w time.Duration) {
	f := l.algo.family()
	switch {
	case f == nil:
		return 0, 0
	case l.cal.Unit != 0: // on the calendar: its limit per the window holding now
		start, end := l.cal.Bounds(time.Now())
		return l.n, end.Sub(start)
	case f.Go[1] == "": // a window: its limit per its length
		return l.n, l.period
	}
	q = l.n + f.LimitPlus // what it admits at once from a full state
	return q, drain(l.period, q, l.m)
}

// drain is the time to admit q at rate per period, rounded up to the
// second (exact, saturating).
func drain(period time.Duration, q, rate int64) time.Duration {
	if rate <= 0 || q <= 0 || period <= 0 {
		return 0
	}
	const most = math.MaxInt64 / int64(time.Second)
	secs, ok := checked.MulDivCeil(int64(period/time.Second), q, rate)
	if !ok || secs > most {
		secs = most
	}
	return time.Duration(secs) * time.Second
}

// appendArgs appends the arguments between the key and the cost.
func (l Limit) appendArgs(args []any) ([]any, error) {
	a := algos[l.algo]
	if l.algo == algoNone {
		return args, errors.New("ratelimit: the zero Limit: make one with GCRA, TokenBucket, ... ")
	}
	if f := l.algo.family(); l.spread && (f == nil || !f.Spread) {
		return args, fmt.Errorf("ratelimit: %v: only a FixedWindow or a SlidingWindow spreads", l)
	}
	if l.cal.Unit != 0 {
		if l.spread {
			return args, fmt.Errorf("ratelimit: %v: a window on the calendar has its own bounds: it does not spread", l)
		}
		if err := l.cal.Check(); err != nil {
			return args, fmt.Errorf("ratelimit: %v: %w", l, err)
		}
	}
	args = append(args, l.n)
	if a.m != "" {
		args = append(args, l.m)
	}
	return appendPeriod(args, a.period, l.period)
}

// appendCost appends the cost of a call of l, then SPREAD when l spreads,
// or SPAN and its window's bounds (with the next window's end) when l is on
// the calendar, and LIMITS key field when l has an Override: where a
// command of one key, RL.ALL and RL.HOLD all take them.
func (l Limit) appendCost(args []any, cost int64) []any {
	args = append(args, cost)
	switch {
	case l.spread:
		args = append(args, "SPREAD")
	case l.cal.Unit != 0:
		start, end := l.cal.Bounds(time.Now())
		_, next := l.cal.Bounds(end)
		args = append(args, "SPAN", start.UnixMilli(), end.UnixMilli(), next.UnixMilli())
	}
	if l.over[0] != "" {
		args = append(args, "LIMITS", l.over[0], l.over[1])
	}
	return args
}

// params is l's parameters as a LIMITS field holds them: its arguments
// between the key and the cost, separated by spaces ("100 60").
func (l Limit) params() (string, error) {
	args, err := l.appendArgs(nil)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, a)
	}
	return b.String(), nil
}

// withParams is l with the parameters s holds (params' form: integers
// separated by spaces, as the module splits them) in place of its own.
func (l Limit) withParams(s string) (Limit, error) {
	words := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' })
	a := algos[l.algo]
	bad := fmt.Errorf("ratelimit: %q is not the parameters of a %s limit", s, l.Family())
	want := 2
	if a.m != "" {
		want = 3
	}
	if l.algo == algoNone || len(words) != want {
		return l, bad
	}
	v := make([]int64, len(words))
	for i, w := range words {
		x, err := strconv.ParseInt(w, 10, 64)
		if err != nil || x < 0 {
			return l, bad
		}
		v[i] = x
	}
	if v[want-1] > math.MaxInt64/int64(time.Second) {
		return l, bad
	}
	l.n, l.period = v[0], time.Duration(v[want-1])*time.Second
	if a.m != "" {
		l.m = v[1]
	}
	return l, nil
}

// appendPeriod appends d in whole seconds; the module takes nothing finer,
// and rounding would change the limit silently.
func appendPeriod(a []any, name string, d time.Duration) ([]any, error) {
	if d <= 0 || d%time.Second != 0 {
		return a, fmt.Errorf("ratelimit: %s must be a positive whole number of seconds, not %v", name, d)
	}
	return append(a, int64(d/time.Second)), nil
}

// Option changes one call.
type Option struct {
	reserve, upto int64
	grant         bool // UpTo: upto is sent, whatever it is
	debt          bool // Debt
}

// Reserve admits the call only if n units (slots, for a concurrency limit)
// remain after it: non-critical traffic passes a reserve, critical traffic
// does not, so the last units stay for it (the module's RESERVE n). Not for
// a Shaper.
func Reserve(n int64) Option { return Option{reserve: n} }

// UpTo asks for up to n calls (1 to 1,000,000) of the call's cost at once
// and takes as many as the limits admit, Result.Granted (the module's UPTO
// n): how a local tier draws units from the global limit in one round trip.
// For Take and All, not for a Shaper, a Peek nor a concurrency limit.
func UpTo(n int64) Option { return Option{upto: n, grant: true} }

// Debt takes the call's whole cost whatever remains (the module's DEBT): a
// charge for work already done, such as an LLM response's tokens counted
// after it was sent. Past its limit the limiter goes into debt: the
// Result is Limited (the charge left it over its limit) yet taken,
// Remaining is 0, RetryAfter the time until one unit passes again, and
// every call, even of cost 0, is refused until the debt is paid off. A
// token bucket of 1,000 refilled 1,000 a minute, 900 used: a charge of 300
// leaves it 200 in debt; a check of cost 0 waits 12 s, one token 12.06 s.
// For Take and
// All on GCRA, token buckets and windows; not with Reserve or UpTo.
func Debt() Option { return Option{debt: true} }

func appendOptions(a []any, opts []Option) []any {
	a = append(a, "MS")
	for _, o := range opts {
		if o.reserve != 0 {
			a = append(a, "RESERVE", o.reserve)
		}
		if o.grant {
			a = append(a, "UPTO", o.upto)
		}
		if o.debt {
			a = append(a, "DEBT")
		}
	}
	return a
}

// upTo reports options that ask for a grant: the reply ends with it.
func upTo(opts []Option) bool {
	for _, o := range opts {
		if o.grant {
			return true
		}
	}
	return false
}

// Client calls the module's commands through a go-redis client. It is safe
// for concurrent use, as the go-redis client is.
type Client struct {
	rdb       redis.UniversalClient
	engine    Engine
	deadlines bool         // rdb bounds each command by its context's deadline
	single    *node        // the one server of a single-node or failover client
	nodes     sync.Map     // a Cluster's or a Ring's servers, by address: *node
	prepared  atomic.Int64 // when a Cluster's primaries were last readied for Lua (prepare), Unix ns
	mapped    flight       // a Cluster's map, read once before the first calls (nodeFor)
	pushed    sync.Map     // contexts whose calls waited for start-up work: their Done channel to the context they go on with (resumed)
	npushed   atomic.Int64 // how many pushed holds
	starting  atomic.Int32 // start-up work running now (warming)
	// prepareTimeout bounds each piece of start-up work (the package's
	// prepareTimeout when the client was made).
	prepareTimeout time.Duration
}

// New returns a client over rdb that runs the module's commands where a
// server has the module and the Lua engine elsewhere (Auto). rdb's retry
// settings do not apply to limiter calls (see Retries); every call ends
// when its context does (see Deadlines).
func New(rdb redis.UniversalClient) *Client { return NewEngine(rdb, Auto) }

// NewEngine returns a client over rdb that runs the limiter commands with
// engine: Auto (as New), Module, Functions or Scripts.
func NewEngine(rdb redis.UniversalClient, engine Engine) *Client {
	addr := ""
	if r, ok := rdb.(*redis.Client); ok {
		addr = r.Options().Addr
	}
	return &Client{rdb: rdb, engine: engine, deadlines: honoursDeadlines(rdb), single: newNode(addr), prepareTimeout: prepareTimeout}
}

// ServerFor is the address of the server that decides key, as ServerError
// names it: its primary in a Cluster (the one the cluster's map, as the
// go-redis client holds it, gives), its shard in a Ring, the client's
// server otherwise; "" where the client does not say.
func (c *Client) ServerFor(ctx context.Context, key string) string {
	_, n, _, err := c.nodeFor(ctx, key)
	if err != nil {
		return ""
	}
	return n.addr
}

// takeName and peekName hold each command's name as an interface value,
// made once: boxing a string on every call would allocate.
var takeName, peekName = func() (take, peek [len(algos)]any) {
	for i, a := range algos {
		take[i], peek[i] = a.take, a.peek
	}
	return take, peek
}()

// Take asks the limiter at key to admit cost units (0 reports, a negative
// cost gives back where the family allows it): GCRA.THROTTLE, TB.TAKE,
// LB.ENQUEUE, SW.HIT, FW.HIT or SL.HIT.
func (c *Client) Take(ctx context.Context, key string, l Limit, cost int64, opts ...Option) (Result, error) {
	return c.one(ctx, takeName[l.algo], key, l, cost, opts)
}

// Peek reports what Take would, changing nothing; it runs on read-only
// replicas.
func (c *Client) Peek(ctx context.Context, key string, l Limit, cost int64, opts ...Option) (Result, error) {
	return c.one(ctx, peekName[l.algo], key, l, cost, opts)
}

func (c *Client) one(ctx context.Context, name any, key string, l Limit, cost int64, opts []Option) (Result, error) {
	args, err := oneArgs(name, key, l, cost, opts)
	if err != nil {
		return Result{}, err
	}
	return c.run(ctx, args, 1, upTo(opts))
}

// oneArgs is a command of one limit's arguments.
func oneArgs(name any, key string, l Limit, cost int64, opts []Option) ([]any, error) {
	args := make([]any, 0, 10)
	args = append(args, name, key)
	args, err := l.appendArgs(args)
	if err != nil {
		return nil, err
	}
	return appendOptions(l.appendCost(args, cost), opts), nil
}

// Keyed is one limit of an All call: its key, its limit and the cost to
// take from it.
type Keyed struct {
	Key   string
	Limit Limit
	Cost  int64
}

// All decides every limit in one atomic call (RL.ALL): all admit, or
// nothing is taken from any. Result is the deciding limit's, Policy its
// position in limits: when refused, the limit with the longest RetryAfter;
// when admitted, the one with the fewest Remaining. In a cluster the keys
// must share a slot: give them a hash tag, "{user:42}:rpm",
// "{user:42}:tpm". 1 to 16 limits; a Shaper cannot be one.
func (c *Client) All(ctx context.Context, limits []Keyed, opts ...Option) (Result, error) {
	return c.all(ctx, cmdAll, limits, opts)
}

// PeekAll reports what All would, changing nothing (RL.PEEK).
func (c *Client) PeekAll(ctx context.Context, limits []Keyed, opts ...Option) (Result, error) {
	return c.all(ctx, cmdPeekAll, limits, opts)
}

// AllEach is All that also fills each[i] with limits[i]'s own result (the
// module's EACH): when admitted, what each limit replies; when refused, the
// refusing limits' refusals and the others' state as it stands, untouched.
// each must hold at least len(limits) results.
func (c *Client) AllEach(ctx context.Context, limits []Keyed, each []Result, opts ...Option) (Result, error) {
	if len(each) < len(limits) {
		return Result{}, fmt.Errorf("ratelimit: AllEach: %d results for %d limits", len(each), len(limits))
	}
	args, err := allArgs(cmdAll, limits, opts)
	if err != nil {
		return Result{}, err
	}
	vals, err := c.send(ctx, append(args, "EACH"), 2)
	if err != nil {
		return Result{}, err
	}
	return readEach(vals, each[:len(limits)], upTo(opts))
}

// readEach reads RL.ALL EACH's reply: the call's result, then each limit's
// (then, with upto, the grant).
func readEach(vals []int64, each []Result, upto bool) (Result, error) {
	var granted int64
	if upto && len(vals) > 0 {
		granted, vals = vals[len(vals)-1], vals[:len(vals)-1]
	}
	if len(vals) != 6+5*len(each) {
		return Result{}, fmt.Errorf("ratelimit: RL.ALL EACH replied %d integers for %d limits", len(vals), len(each))
	}
	for i := range each {
		each[i] = result(vals[6+5*i : 11+5*i])
	}
	r := result(vals[:5])
	r.Policy, r.Granted = int(vals[5]), granted
	return r, nil
}

func (c *Client) all(ctx context.Context, name string, limits []Keyed, opts []Option) (Result, error) {
	args, err := allArgs(name, limits, opts)
	if err != nil {
		return Result{}, err
	}
	return c.run(ctx, args, 2, upTo(opts))
}

// allArgs is RL.ALL's or RL.PEEK's arguments.
func allArgs(name string, limits []Keyed, opts []Option) ([]any, error) {
	args := make([]any, 0, 2+len(limits)*6+3)
	args = append(args, name, int64(len(limits)))
	for _, k := range limits {
		args = append(args, k.Key)
	}
	for i, k := range limits {
		f := algos[k.Limit.algo].family
		if f == "" {
			return nil, fmt.Errorf("ratelimit: limit %d: %v cannot be part of All", i, k.Limit)
		}
		var err error
		if args, err = k.Limit.appendArgs(append(args, f)); err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		args = k.Limit.appendCost(args, k.Cost)
	}
	return appendOptions(args, opts), nil
}

// Hold takes estimate units from l at key for work whose cost is known
// only once it is done (an LLM response's tokens, a query's rows), and
// keeps them in a hold named by id (1 to 128 bytes, e.g. the request id)
// for ttl, whole seconds up to a year (RL.HOLD). It is admitted or
// refused as Take(estimate) is, and a refused one holds nothing. Holds
// under one id add up.
//
// Settle the hold when the cost is known. A hold not settled within ttl
// lapses: its estimate stays taken, as if the work had cost exactly that.
// The hold lives in its own key beside key, in key's cluster slot
// (HoldKey). l cannot be a Shaper; estimate runs from 0 to 2^53 - 1.
func (c *Client) Hold(ctx context.Context, key, id string, l Limit, estimate int64, ttl time.Duration) (Result, error) {
	if err := checkHold(key, id); err != nil {
		return Result{}, err
	}
	args := make([]any, 0, 10)
	args, err := appendPeriod(append(args, cmdHold, key, HoldKey(key, id)), "ttl", ttl)
	if err != nil {
		return Result{}, err
	}
	if args, err = holdLimit(args, l, estimate); err != nil {
		return Result{}, err
	}
	return c.run(ctx, args, 1, false)
}

// Settle settles id's hold at key at the work's actual cost (RL.SETTLE),
// in one atomic step: what it cost beyond the estimate is taken whatever
// remains (past the limit the limiter goes into debt, as with Debt, and
// later calls wait it out), what it did not use is given back (exactly by
// GCRA and the token bucket; by a window only while the window the units
// were taken in lasts), and the hold is deleted. So a budget is over its
// limit by at most the under-estimates of the work in flight, and each is
// repaid.
//
// held is the estimate it settled; -1 when there was no hold (it lapsed,
// or was settled already), in which case nothing changes: settling twice
// charges once. Result is the limit's state after the settlement.
// Estimate 1000, actual 1400: 400 more taken; actual 300: 700 given back.
func (c *Client) Settle(ctx context.Context, key, id string, l Limit, actual int64) (res Result, held int64, err error) {
	if err := checkHold(key, id); err != nil {
		return Result{}, 0, err
	}
	args, err := holdLimit(append(make([]any, 0, 9), cmdSettle, key, HoldKey(key, id)), l, actual)
	if err != nil {
		return Result{}, 0, err
	}
	vals, err := c.send(ctx, args, 1)
	if err != nil {
		return Result{}, 0, err
	}
	if len(vals) != 6 {
		return Result{}, 0, fmt.Errorf("ratelimit: %s replied %d integers, want 6", cmdSettle, len(vals))
	}
	return result(vals[:5]), vals[5], nil
}

// holdLimit appends l as RL.HOLD and RL.SETTLE take it (as in RL.ALL),
// with its cost and MS.
func holdLimit(args []any, l Limit, cost int64) ([]any, error) {
	f := algos[l.algo].family
	if f == "" {
		return nil, fmt.Errorf("ratelimit: %v cannot hold", l)
	}
	args, err := l.appendArgs(append(args, f))
	if err != nil {
		return nil, err
	}
	return append(l.appendCost(args, cost), "MS"), nil
}

// HoldKey is the key that holds id's hold on key: key's hash tag and
// ":hold:" and id when key has a tag ("rl:{user:42}:tpm" gives
// "rl:{user:42}:tpm:hold:r1"), else key itself as the tag
// ("{rl:tpm}:hold:r1"), so that both keys are in one cluster slot.
// A key with a "}" but no tag has no such key: Hold and Settle refuse it.
func HoldKey(key, id string) string {
	if hashTagged(key) {
		return key + ":hold:" + id
	}
	return "{" + key + "}:hold:" + id
}

// hashTagged reports whether key has a cluster hash tag: a "{" followed,
// not at once, by a "}".
func hashTagged(key string) bool {
	open := strings.IndexByte(key, '{')
	return open >= 0 && strings.IndexByte(key[open+1:], '}') > 0
}

// checkHold refuses what RL.HOLD and RL.SETTLE would not take from the
// client's hands: an id the module would not take as a holder's, a key
// whose hold could not share its slot.
func checkHold(key, id string) error {
	if len(id) == 0 || len(id) > spec.MaxID {
		return fmt.Errorf("ratelimit: id must be 1 to %d bytes, not %d", spec.MaxID, len(id))
	}
	if !hashTagged(key) && strings.IndexByte(key, '}') >= 0 {
		return fmt.Errorf("ratelimit: key %q has a \"}\" but no hash tag: give it one, so that its hold shares its slot", key)
	}
	return nil
}

// Concurrency is a concurrency limit: at most Limit holders at once (1 to
// 100000), each slot lapsing Lease after its holder's last Acquire unless
// released, so a crashed worker holds it for one lease at most.
type Concurrency struct {
	Limit int64
	Lease time.Duration // whole seconds
}

// Acquire takes a slot at key for the holder id (1 to 128 bytes, e.g. the
// request id): CONC.ACQUIRE. An id that holds a slot renews its lease and
// takes no new one, so acquiring again is idempotent. Release the slot when
// the work ends.
//
// With UpTo(n) the id holds up to n slots: a new id takes as many as are
// free, up to n (refused when none is), one holding some renews them all
// and takes more up to n; Result.Granted is the slots it then holds. With
// limit 10 and 6 slots held by others, Acquire with UpTo(5) grants 4.
func (c *Client) Acquire(ctx context.Context, key string, l Concurrency, id string, opts ...Option) (Result, error) {
	args, err := acquireArgs(key, l, id, opts)
	if err != nil {
		return Result{}, err
	}
	return c.run(ctx, args, 1, upTo(opts))
}

// acquireArgs is CONC.ACQUIRE's arguments.
func acquireArgs(key string, l Concurrency, id string, opts []Option) ([]any, error) {
	args := make([]any, 0, 9)
	args = append(args, cmdAcquire, key, l.Limit)
	args, err := appendPeriod(args, "Lease", l.Lease)
	if err != nil {
		return nil, err
	}
	return appendOptions(append(args, id), opts), nil
}

// Release frees id's slots at key at once (CONC.RELEASE), and reports
// whether id held one (false when it had lapsed or was released already).
func (c *Client) Release(ctx context.Context, key, id string) (bool, error) {
	n, err := c.release(ctx, []any{cmdRelease, key, id})
	return n > 0, err
}

// ReleaseN frees n of the slots id holds at key (1 to 1000000; all when it
// holds fewer), the last it took first, and returns how many live slots it
// freed: holding 4, ReleaseN of 3 frees 3 and keeps 1 under its lease.
func (c *Client) ReleaseN(ctx context.Context, key, id string, n int64) (int64, error) {
	return c.release(ctx, []any{cmdRelease, key, id, n})
}

func (c *Client) release(ctx context.Context, args []any) (int64, error) {
	cmd, err := c.process(ctx, args, 1)
	if err != nil {
		return 0, err
	}
	n, err := cmd.Int64()
	return n, wrap(err)
}

// PeekConcurrency reports what Acquire by a new holder would, changing
// nothing (CONC.PEEK).
func (c *Client) PeekConcurrency(ctx context.Context, key string, limit int64, opts ...Option) (Result, error) {
	args := make([]any, 0, 6)
	args = append(args, cmdPeekConc, key, limit)
	return c.run(ctx, appendOptions(args, opts), 1, upTo(opts))
}

// onceCmd is a command go-redis sends once: it is never retried after a
// failure that may have reached the server. It is made by copying the
// command NewCmd returns, before anything else refers to it (a command in
// use must never be copied).
type onceCmd struct {
	redis.Cmd
	ints [6]int64 // the reply's integers, when there are six at most
}

// NoRetry tells go-redis not to send the command again.
func (*onceCmd) NoRetry() bool { return true }

// run sends a limiter command whose first key is at position keyPos and
// reads its five integers (six for RL.ALL and RL.PEEK; then, with upto,
// the grant).
func (c *Client) run(ctx context.Context, args []any, keyPos int8, upto bool) (Result, error) {
	vals, err := c.send(ctx, args, keyPos)
	if err != nil {
		return Result{}, err
	}
	return reading(args[0], vals, upto)
}

// send sends a command once and reads its array of integers (in the
// command itself when there are six at most: no allocation).
func (c *Client) send(ctx context.Context, args []any, keyPos int8) ([]int64, error) {
	cmd, err := c.process(ctx, args, keyPos)
	if err != nil {
		return nil, err
	}
	return cmd.integers(args[0])
}

// integers reads the command's reply, an array of integers, into cmd.ints
// when it fits; name names the command in errors.
func (cmd *onceCmd) integers(name any) ([]int64, error) {
	reply, _ := cmd.Val().([]any)
	ints := cmd.ints[:0]
	if len(reply) > len(cmd.ints) {
		ints = make([]int64, 0, len(reply))
	}
	for _, x := range reply {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("ratelimit: %v replied %v, not integers", name, reply)
		}
		ints = append(ints, n)
	}
	return ints, nil
}

// reading reads a limiter's reply of five integers (six for RL.ALL and
// RL.PEEK; then, with upto, the grant) into a Result.
func reading(name any, vals []int64, upto bool) (Result, error) {
	var granted int64
	if upto && len(vals) > 5 {
		granted, vals = vals[len(vals)-1], vals[:len(vals)-1]
	}
	if len(vals) != 5 && len(vals) != 6 {
		return Result{}, fmt.Errorf("ratelimit: %v replied %d integers, want 5 or 6", name, len(vals))
	}
	r := result(vals[:5])
	if len(vals) == 6 {
		r.Policy = int(vals[5])
	}
	r.Granted = granted
	return r, nil
}

// result reads five integers.
func result(v []int64) Result {
	return Result{Verdict: ratelimit.Verdict{Limited: v[0] == 1, Limit: v[1], Remaining: v[2], RetryAfter: millis(v[3]), ResetAfter: millis(v[4])}}
}

// millis converts a reply time in ms; -1 is ratelimit.Never.
func millis(ms int64) time.Duration {
	if ms < 0 {
		return ratelimit.Never
	}
	return time.Duration(ms) * time.Millisecond
}

// wrap marks a server that lacks the module.
func wrap(err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "ERR unknown command") {
		return fmt.Errorf("%w: %v", ErrNoModule, err)
	}
	return err
}

// SetLimit writes l's parameters into field of the hash at key (HSET),
// where the calls of every Limit with Override(key, field) read them on
// their next call: SetLimit(ctx, "{acme}:plan", "api", FixedWindow(5000,
// time.Minute)) writes api = "5000 60". A change takes effect at once,
// and within a window never admits past the larger of the old limit and
// the new: the limiter's state stays, and the next call weighs it against
// the new parameters (a fixed window that counted 80 under a limit of 100 admits
// 20 more under 100, none under 50). Keep one family per field: a field
// read by a limit of another family fails its calls. Only l's parameters
// are written; SPREAD, a calendar and its own Override stay the caller's.
func (c *Client) SetLimit(ctx context.Context, key, field string, l Limit) error {
	v, err := l.params()
	if err != nil {
		return err
	}
	return wrap(c.rdb.HSet(ctx, key, field, v).Err())
}

// GetLimit reads field of the hash at key (HGET) as the parameters of a
// limit of like's family: like with them and true, or like and false when
// the hash does not hold the field (calls then decide with their own).
func (c *Client) GetLimit(ctx context.Context, key, field string, like Limit) (Limit, bool, error) {
	v, err := c.rdb.HGet(ctx, key, field).Result()
	switch {
	case err == redis.Nil:
		return like, false, nil
	case err != nil:
		return like, false, wrap(err)
	}
	l, err := like.withParams(v)
	return l, err == nil, err
}

// ClearLimit deletes field from the hash at key (HDEL): the calls that
// read it decide with their own parameters again, from their next call.
func (c *Client) ClearLimit(ctx context.Context, key, field string) error {
	return wrap(c.rdb.HDel(ctx, key, field).Err())
}
