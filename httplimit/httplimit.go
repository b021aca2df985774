// Package httplimit puts the ratelimit module in front of net/http
// handlers: policies keyed by client address, API key or route, decided in
// Redis in one atomic call where their keys share a slot, answered with the
// IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11), and a
// failure policy that never turns a Redis outage into slow or failed
// requests.
//
//	lim, err := httplimit.New(rdb, httplimit.Options{OnError: httplimit.FailOpen},
//		httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(10, time.Minute), Key: httplimit.ClientIP(httplimit.IPOptions{})})
//	http.ListenAndServe(addr, lim.Handler(mux))
//
// An admitted request gets
//
//	RateLimit-Policy: "per-ip";q=10;w=60
//	RateLimit: "per-ip";r=9;t=60
//
// and a refused one 429 Too Many Requests with r=0, t the seconds until it
// would pass, and Retry-After that many seconds plus a small random spread
// (so refused clients do not all return in the same second), and a short
// problem+json body. A request shed to protect the service — a shared
// concurrency limit, a reserve or the in-flight shedder — gets 503 with
// Retry-After.
//
// A policy can fail its own way (Policy.OnError: open for reads, closed for
// /login), stay hidden (Quiet), answer its refusals itself (Deny: a shadow
// ban), be charged after the handler by the response (Count: only the
// 401s of a login form), and take its limit from the request (LimitFunc:
// the account's plan, with CacheLimits). A concurrency policy keyed per
// client answers 429, one shared by every client (Global, Route) 503.
// Options.Headers adds the X-RateLimit-Limit/Remaining/Reset trio.
//
// # When Redis fails
//
// Every call to Redis has a tight timeout (50 ms by default), which holds
// whatever Redis does: refuses connections, or accepts them and never
// answers (a stopped process), whatever go-redis client is passed (see
// client.Client's Deadlines; build it with ContextTimeoutEnabled: true).
// Only Redis's failures count as failures: no connection, no answer in
// time, LOADING, BUSY, MASTERDOWN, CLUSTERDOWN and the like
// (client.Unavailable). After 5 in a row on one server (a Cluster's
// primary, a Ring's shard) that server's circuit breaker stops calling it
// for a cooldown (5 s), then lets one request probe it; requests whose
// keys live on other servers are not affected. A Cluster's redirections
// (MOVED, ASK, TRYAGAIN while a slot migrates, CLUSTERDOWN during a
// failover) are not failures: the client sends the call again within the
// timeout, and a call whose slot was still moving at the timeout is
// decided by OnError without counting toward any breaker. While Redis
// is failing or the breaker is open, OnError decides: FailOpen serves the
// request, FailClosed answers 503 at once, FailLocal limits in this process
// with a GCRA of each policy's quota (bounded memory).
//
// The client's start-up work is not a failure: the requests that come
// while a fresh process probes a server's engine and loads its library
// (see client's Start-up work) wait for it, up to 2 s, and then have their
// whole timeout, so a herd of first requests is decided in Redis, not by
// OnError. A server that never answers (a stopped process) makes the first
// requests of a process wait those 2 s before OnError decides them (one
// that refuses connections, as long as go-redis's own retries last); once
// that has failed, requests fail fast, within their timeout, and the
// breaker opens as usual.
//
// A client that hangs up is not a Redis failure: a request whose client has
// gone costs Redis nothing, and one that goes mid-call moves no breaker, so
// a flood of hang-ups cannot switch limiting off. An ERR reply to a
// policy's arguments (a limit outside the module's range) is a
// configuration bug: logged at error level, reported as ConfigError, the
// request decided by OnError, the breaker untouched. A Cost outside
// 0..the policy's limit never reaches Redis: the request is answered 400
// (Options.BadRequest) and reported as BadRequest.
//
// # What it reports
//
// Options.Event sees every decision, one event per policy that applied to
// a request (Admitted, Refused, Shed, ShadowRefused, FailedOpen,
// FailedClosed, LocalAdmitted, LocalRefused, BadRequest), every Redis call
// with its duration (RedisCall), failures and the breaker's changes. The
// module github.com/seed-6b3823f5/ratelimit/prom turns them into
// Prometheus metrics (ratelimit_decisions_total and others) for those who
// want them, without making anyone else depend on a metrics library.
// Options.Logger gets what an operator must see: configuration errors and
// bad requests (at most one line a second of each), the breaker opening
// and closing.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/admit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// Policy is one limit a request must pass.
type Policy struct {
	// Name names the policy in the RateLimit fields and in Redis keys:
	// letters, digits, '-', '_' and '.'.
	Name string
	// Limit is a rate limit (any client.Limit but a Shaper); or, when
	// Concurrency is set, none.
	Limit client.Limit
	// Concurrency, when its Limit is set, makes this a concurrency policy:
	// a slot is acquired before the handler and released after it, even if
	// it panics. Refused requests are shed with 503.
	Concurrency client.Concurrency
	// Key says what the policy counts a request against; "" means the
	// policy does not apply to that request.
	Key KeyFunc
	// Cost is what a request costs (1 when nil): 0 up to the limit's quota
	// (client.Limit.Quota's q). Outside that range the request is a bad
	// request (Options.BadRequest), and Redis is not asked.
	Cost func(*http.Request) int64
	// Reserve holds back units for higher priorities: a request of
	// priority p passes only if Reserve[p] units remain after it (the
	// module's RESERVE). A refusal for a reserve is shed with 503.
	Reserve map[Priority]int64
	// Shadow counts and reports the policy (headers, hooks) but never
	// refuses: the dry run before turning a limit on.
	Shadow bool
	// ShedRetryAfter is, for a concurrency policy, the Retry-After of a
	// request it sheds when that is sooner than the earliest lease's end:
	// how long a request usually holds its slot. By default Retry-After is
	// the time until the earliest lease ends (at least a second), which a
	// release usually beats.
	ShedRetryAfter time.Duration

	// OnError, when set, is this policy's failure policy in place of
	// Options.OnError: fail open for reads, closed for /login and the
	// capacity-critical paths, in one Limiter. A request decided by several
	// policies fails by the strictest of its enforcing ones (FailClosed,
	// then FailLocal, then FailOpen); a concurrency policy's slot by its
	// own.
	OnError OnError
	// Quiet hides the policy from the client: it never appears in
	// RateLimit-Policy, RateLimit or the X-RateLimit fields, and a refusal
	// it decides gets a generic body ("too many requests") and Retry-After
	// only: a secondary limit an abuser should not be able to measure. It
	// is reported to Options.Event as any policy.
	Quiet bool
	// Deny, when set, answers the requests this policy refuses in place
	// of Options.Deny (see there): a shadow ban serving a plausible 200
	// without calling the handler.
	Deny func(w http.ResponseWriter, r *http.Request, d Decision)
	// Count, when set, charges the policy after the handler, by its
	// response: before the handler the policy takes its Cost (1 when nil)
	// with the request's other policies, all or nothing, as any policy;
	// after it, Count(status, r) is what the request really costs, and the
	// difference is settled in Redis — more charged with DEBT (past the
	// limit: later requests wait it out), less given back. A /login
	// counting only failures: Count returns 1 for a 401 and 0 otherwise;
	// after 5 failures on a limit of 5 the 6th attempt is refused before
	// its handler runs, and a successful login costs nothing. Report a
	// count of the handler's own (tokens used) with Use and read it here
	// with Used. status is 500 when the handler panicked. Not for a
	// concurrency policy; a request under it is not decided by the local
	// tier (Options.Lease), and one decided in this process (FailLocal)
	// or not at all (FailOpen) is not settled.
	Count func(status int, r *http.Request) int64
	// LimitFunc, when set, gives the limit of each request: a plan looked
	// up from key (what Key returned) or from the request — "your account
	// gets 100 a minute". A zero Limit means the policy's Limit (the
	// default plan), and with no Limit either, that the policy does not
	// apply to the request (an unlimited plan). It runs on every request:
	// wrap a lookup that costs a call in CacheLimits. A Shaper is not a
	// limit here: the policy then does not apply, and a ConfigError is
	// reported. Not for a concurrency policy.
	LimitFunc func(r *http.Request, key string) client.Limit
	// Overrides, when set, names the hash in Redis that may hold this
	// policy's limit for a request (key is what Key returned; "" for
	// none): when the hash holds a field of the policy's Name, its
	// parameters decide in place of Limit's (or LimitFunc's), read in the
	// same atomic step as the decision (the module's LIMITS;
	// client.Limit.Override). A change takes effect on the next request.
	// Limiter.LimitsKey(key) is a hash of the key's own, in its Cluster
	// slot; write it with client.Client.SetLimit(ctx, lim.LimitsKey(key),
	// policy name, limit). The overriding field keeps the policy's family;
	// RateLimit-Policy and X-RateLimit-Limit state its limit (q) over the
	// policy's window (w): override how many, keep over how long. Such a
	// request is decided in Redis, never by the local tier. Not for a
	// concurrency policy.
	Overrides func(r *http.Request, key string) string
}

// Priority orders requests for shedding: Lowest goes first, Critical
// never (Options.ShedAt). Stripe's four tiers are Critical (critical
// methods), Default (POSTs), Low (GETs) and Lowest (test mode); any other
// value is a tier of its own for Options.ShedAt.
type Priority int

const (
	Lowest Priority = iota - 2
	Low
	Default
	Critical
)

func (p Priority) String() string {
	switch p {
	case Lowest:
		return "lowest"
	case Low:
		return "low"
	case Default:
		return "default"
	case Critical:
		return "critical"
	}
	return "priority(" + strconv.Itoa(int(p)) + ")"
}

// OnError is what a request meets while Redis cannot decide.
type OnError int

func (o OnError) String() string {
	switch o {
	case 0:
		return "unset"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return fmt.Sprintf("OnError(%d)", int(o))
}

// The zero OnError is unset: FailOpen in Options, the Limiter's in a
// Policy.
const (
	// FailOpen serves the request.
	FailOpen OnError = iota + 1
	// FailClosed answers 503 with Retry-After.
	FailClosed
	// FailLocal limits in this process: each policy's quota as a GCRA per
	// key (and a counter per key for concurrency policies), at most
	// Options.LocalKeys keys.
	FailLocal
)

// Options configures a Limiter; the zero value is usable.
type Options struct {
	// Prefix starts every Redis key ("rl:http:" by default). A key is
	// Prefix + "{" + the policy's key + "}:" + the policy's name, so the
	// policies of one request keyed alike share a cluster slot and are
	// decided in one RL.ALL call. In a cluster or a Ring the prefix must
	// hold no braces: the policy's key must be the key's first hash tag.
	Prefix string
	// OnError is the failure policy (FailOpen when unset); a policy's own
	// OnError overrides it.
	OnError OnError
	// Timeout bounds each call to Redis (50 ms by default), not counting
	// the time a call waits for the client's start-up work (at most 2 s,
	// for a process's first requests: see When Redis fails).
	Timeout time.Duration
	// BreakerFailures failures in a row open the circuit breaker (5 by
	// default); it stays open for BreakerCooldown (5 s by default).
	BreakerFailures int
	BreakerCooldown time.Duration
	// LocalKeys bounds the keys FailLocal keeps (10000 by default).
	LocalKeys int
	// Priority gives a request its priority (Default when nil).
	Priority func(*http.Request) Priority
	// MaxInFlight, when above 0, sheds requests with 503 while this
	// process already serves too many (Stripe's worker utilization
	// shedder): a request of priority p from ShedAt[p] of MaxInFlight on,
	// one of a priority ShedAt does not name never. By default Lowest from
	// half of it, Low from ShedLow (0.7 by default), Default from
	// ShedDefault (0.9), Critical never.
	MaxInFlight          int
	ShedLow, ShedDefault float64
	// ShedAt, when set, is every tier's threshold in place of the
	// defaults: {Lowest: 0.5, Low: 0.7, Default: 0.9} is the default.
	ShedAt map[Priority]float64
	// Refused writes the response to a refused or shed request (a
	// problem+json body when nil); the status and headers are set.
	Refused func(w http.ResponseWriter, r *http.Request, d Decision)
	// Deny, when set, answers every refused or shed request in place of
	// the default (status, Retry-After, body): nothing is written before
	// it, but the RateLimit fields an admitted request would carry. A
	// policy's Deny overrides it. The refusal is reported to Event (and so
	// to metrics) as any other. A shadow ban pairs it with a Quiet policy:
	//
	//	Policy{Name: "abuse", Quiet: true, Limit: client.SlidingWindow(20, time.Minute), Key: httplimit.Account("user"),
	//		Deny: func(w http.ResponseWriter, r *http.Request, d httplimit.Decision) { io.WriteString(w, `{"ok":false}`) }}
	Deny func(w http.ResponseWriter, r *http.Request, d Decision)
	// Headers says which rate limit fields a response carries: IETF (the
	// default), XRateLimit, or both (IETF|XRateLimit).
	Headers Headers
	// BadRequest writes the response to a request a policy cannot count:
	// its Key failed (no client address), or its Cost is outside 0..the
	// limit. By default 400 with a problem+json body naming the policy.
	BadRequest func(w http.ResponseWriter, r *http.Request, err error)
	// Event, when set, sees every decision, every Redis call, failures
	// and the breaker's changes (see EventKind). It is called on the
	// request's goroutine and must not block.
	Event func(Event)
	// Logger gets configuration errors and bad requests (at most one line
	// a second of each kind) and the breaker's changes; slog.Default()
	// when nil.
	Logger *slog.Logger
	// Lease, when set, decides through a local tier (lease.New with
	// these options): a request under enforcing GCRA, token-bucket or
	// fixed-window policies (no Reserve) whose keys are hot on this process
	// is decided from units granted ahead, with no Redis call (several
	// policies all or nothing: lease.Tier.AllHere), and a concurrency policy's
	// slot (no Reserve) is one of the slots this process holds at the key,
	// acquired and released with no call (never more holders than the
	// limit: see lease.Tier.Acquire); every other request as without
	// it. Close the Limiter to give back what the tier holds. Under
	// leasing a response's RateLimit field states what this process holds
	// (r) and the limit's reset as of its last grant (t): a lower bound of
	// what the key admits, not the shared count.
	Lease *lease.Options
	// RefusalCache, when above 0, remembers that many refused keys (at
	// most 16 MiB of them, the least recently used leaving first) until
	// their RetryAfter: a request of at least the refused cost on such a
	// key is refused (Remembered) with no Redis call, as rls's
	// -refusal-cache does. A client hammering a refused login form or key
	// then costs Redis one call per refusal's wait, not one per request.
	// The RateLimit field then states the refusing policy alone.
	RefusalCache int
}

// Decision is why a request was refused, for Options.Refused and Deny.
type Decision struct {
	Status     int           // 429, or 503 when shed
	Policy     string        // the deciding policy ("" for the in-flight shedder or an outage)
	RetryAfter time.Duration // before the request would pass (ratelimit.Never: never)
}

// Headers are the rate limit fields a response carries (Options.Headers).
type Headers int

const (
	// IETF: RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers-11), one item per policy.
	IETF Headers = 1 << iota
	// XRateLimit: the trio most SDKs and dashboards read, for the policy
	// that refused the request, else the one with the least remaining:
	// X-RateLimit-Limit (its quota q), X-RateLimit-Remaining, and
	// X-RateLimit-Reset, the seconds until it resets (until the request
	// would pass, refused) — a delay, as redis-cell's reset and Envoy's
	// field, not a Unix time.
	XRateLimit
)

// EventKind says what happened.
type EventKind int

const (
	// Failure is a Redis call that failed because Redis could not decide
	// (client.Unavailable: Err says why); it counts toward the breaker.
	Failure EventKind = iota
	// BreakerOpen: Redis is no longer called until the cooldown ends.
	BreakerOpen
	// BreakerHalfOpen: one request probes Redis.
	BreakerHalfOpen
	// BreakerClosed: Redis decides again.
	BreakerClosed
	// ShadowRefused: a shadow policy would have refused the request.
	ShadowRefused
	// Shed: the request was shed (503) by a concurrency policy, a reserve,
	// or the in-flight shedder (Policy "").
	Shed
	// Admitted: the policy admitted the request, which was served.
	Admitted
	// Refused: the policy refused the request (429).
	Refused
	// FailedOpen: Redis could not decide and FailOpen served the request.
	FailedOpen
	// FailedClosed: Redis could not decide and FailClosed refused it (503).
	FailedClosed
	// LocalAdmitted and LocalRefused: Redis could not decide and FailLocal
	// admitted or refused the request in this process.
	LocalAdmitted
	LocalRefused
	// BadRequest: the policy could not count the request (its Key failed,
	// or its Cost was outside 0..the limit): 400, Redis not asked.
	BadRequest
	// ConfigError: Redis refused a policy's arguments (Err: its ERR
	// reply). A configuration bug: logged, decided by OnError, never
	// counted toward the breaker.
	ConfigError
	// RedisCall: one decision's calls to Redis ended; Duration is how long
	// they took and Outcome "ok", "error" or "timeout". A call the
	// request's client abandoned is not reported.
	RedisCall
	// Remembered: the policy refused the request (429) from a refusal it
	// remembered (Options.RefusalCache), Redis not asked.
	Remembered
)

var eventNames = [...]string{"failure", "breaker-open", "breaker-half-open", "breaker-closed", "shadow-refused", "shed",
	"admitted", "refused", "failed-open", "failed-closed", "local-admitted", "local-refused", "bad-request",
	"config-error", "redis-call", "remembered"}

func (k EventKind) String() string {
	if k < 0 || int(k) >= len(eventNames) {
		return fmt.Sprintf("EventKind(%d)", int(k))
	}
	return eventNames[k]
}

// Event is one thing that happened to the limiter.
type Event struct {
	Kind EventKind
	// Policy is the policy's name, for decisions and ConfigError.
	Policy string
	// Err is why, for Failure, BreakerOpen, BadRequest and ConfigError.
	Err error
	// Duration and Outcome describe a RedisCall.
	Duration time.Duration
	Outcome  string
	// Server is the Redis server (its address; "" for a client that does
	// not say) whose breaker changed, for Failure and the breaker's
	// events: each server has its own.
	Server string
}

// decider is what the limiter asks Redis through: a *client.Client, or a
// fake in the tests of the verdict logic.
type decider interface {
	admit.Redis // what the gate asks
	Engines() map[string]client.Engine
}

// Limiter is the middleware. It is safe for concurrent use.
type Limiter struct {
	c          decider
	opt        Options
	policies   []Policy
	header     string      // RateLimit-Policy, the same for every response ("" when it varies: perRequest)
	perRequest bool        // a policy has a LimitFunc or Overrides: RateLimit-Policy is made for each request
	overrides  bool        // a policy has Overrides: RateLimit-Policy is made again once decided
	counts     bool        // a policy has a Count
	gate       *admit.Gate // decides the rate policies; its breakers see every call
	inFlight   atomic.Int64
	log        *slog.Logger
	logged     [len(eventNames)]atomic.Int64 // when each kind was last logged, Unix ns
}

// New returns a limiter deciding policies in rdb's Redis: with the
// ratelimit module where a server has it, with the module's Lua scripts
// where it does not (client.New). Build rdb with ContextTimeoutEnabled:
// true, so that go-redis itself ends a call at its deadline; the limiter
// bounds every call by Options.Timeout with any client.
func New(rdb redis.UniversalClient, opt Options, policies ...Policy) (*Limiter, error) {
	if opt.Prefix == "" {
		opt.Prefix = "rl:http:"
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 50 * time.Millisecond
	}
	if opt.BreakerFailures <= 0 {
		opt.BreakerFailures = 5
	}
	if opt.BreakerCooldown <= 0 {
		opt.BreakerCooldown = 5 * time.Second
	}
	if opt.LocalKeys <= 0 {
		opt.LocalKeys = 10000
	}
	if opt.ShedLow <= 0 {
		opt.ShedLow = 0.7
	}
	if opt.ShedDefault <= 0 {
		opt.ShedDefault = 0.9
	}
	if opt.OnError == 0 {
		opt.OnError = FailOpen
	}
	if opt.Headers == 0 {
		opt.Headers = IETF
	}
	if len(policies) == 0 {
		return nil, errors.New("httplimit: no policy")
	}
	seen := map[string]bool{}
	var items []string
	policies = slices.Clone(policies)
	perRequest, counts := false, false
	for i := range policies {
		p := &policies[i]
		if p.OnError == 0 {
			p.OnError = opt.OnError
		}
		if p.OnError < FailOpen || p.OnError > FailLocal {
			return nil, fmt.Errorf("httplimit: policy %s: OnError %d is not FailOpen, FailClosed or FailLocal", p.Name, int(p.OnError))
		}
		perRequest = perRequest || p.LimitFunc != nil || p.Overrides != nil
		counts = counts || p.Count != nil
		if !validName(p.Name) || seen[p.Name] {
			return nil, fmt.Errorf("httplimit: policy name %q: want a unique name of letters, digits, '-', '_', '.'", p.Name)
		}
		seen[p.Name] = true
		if p.Key == nil {
			return nil, fmt.Errorf("httplimit: policy %s has no Key", p.Name)
		}
		isConc := p.Concurrency.Limit > 0
		q, _ := p.Limit.Quota()
		switch {
		case isConc && q > 0:
			return nil, fmt.Errorf("httplimit: policy %s has both a Limit and a Concurrency", p.Name)
		case isConc && (p.LimitFunc != nil || p.Count != nil):
			return nil, fmt.Errorf("httplimit: policy %s: a concurrency policy takes no LimitFunc or Count", p.Name)
		case !isConc && q == 0 && p.LimitFunc == nil:
			return nil, fmt.Errorf("httplimit: policy %s has neither a Limit nor a Concurrency", p.Name)
		case !isConc && p.Limit.Family() == "LB":
			return nil, fmt.Errorf("httplimit: policy %s: a Shaper delays rather than refuses; it is not a policy", p.Name)
		}
		if item := policyItem(p, p.Limit); item != "" {
			items = append(items, item)
		}
	}
	c := client.New(rdb)
	l := &Limiter{c: c, opt: opt, policies: policies, perRequest: perRequest, counts: counts, log: opt.Logger,
		overrides: slices.ContainsFunc(policies, func(p Policy) bool { return p.Overrides != nil })}
	if !perRequest {
		l.header = strings.Join(items, ", ")
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.gate = l.newGate()
	return l, nil
}

// policyItem is p's RateLimit-Policy item under limit lim ("" when quiet,
// or with no limit).
func policyItem(p *Policy, lim client.Limit) string {
	switch {
	case p.Quiet:
		return ""
	case p.Concurrency.Limit > 0:
		return ratelimit.ConcurrencyPolicyItem(p.Name, p.Concurrency.Limit)
	}
	q, w := lim.Quota()
	if q == 0 {
		return ""
	}
	return ratelimit.PolicyItem(p.Name, q, w)
}

// failure is o as the gate's failure policy: FailOpen's for any other
// value, as before the gate.
func failure(o OnError) admit.Failure {
	switch o {
	case FailClosed:
		return admit.Closed
	case FailLocal:
		return admit.Local
	}
	return admit.Open
}

// newGate is the gate deciding through l.c as l.opt says.
func (l *Limiter) newGate() *admit.Gate {
	return admit.New(l.c, admit.Options{
		Timeout:         l.opt.Timeout,
		OnError:         failure(l.opt.OnError),
		LocalKeys:       l.opt.LocalKeys,
		BreakerFailures: l.opt.BreakerFailures,
		BreakerCooldown: l.opt.BreakerCooldown,
		RefusalCache:    l.opt.RefusalCache,
		Lease:           l.opt.Lease,
		Event:           l.gateEvent,
	})
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func (l *Limiter) event(e Event) {
	if l.opt.Event != nil {
		l.opt.Event(e)
	}
}

// gateKinds are the gate's breaker events as the limiter's.
var gateKinds = map[admit.EventKind]EventKind{admit.ServerFailed: Failure, admit.BreakerOpen: BreakerOpen,
	admit.BreakerHalfOpen: BreakerHalfOpen, admit.BreakerClosed: BreakerClosed}

// gateEvent reports and logs what the gate saw.
func (l *Limiter) gateEvent(ge admit.Event) {
	switch ge.Kind {
	case admit.Called:
		outcome := "ok"
		switch {
		case ge.Timeout:
			outcome = "timeout"
		case ge.Err != nil:
			outcome = "error"
		}
		l.event(Event{Kind: RedisCall, Duration: ge.Duration, Outcome: outcome, Err: ge.Err})
	case admit.Rejected:
		l.event(Event{Kind: ConfigError, Err: ge.Err})
		l.logOnce(ConfigError, slog.LevelError, "ratelimit: Redis refused a policy's arguments; "+
			"requests are decided by the failure policy until the policies are fixed", "on_error", l.opt.OnError.String(), "err", ge.Err)
	case admit.Charged:
		if ge.Units > 0 {
			l.log.Info("ratelimit: Redis answers again: charged it what was decided here while it was away",
				"keys", ge.Keys, "units", ge.Units)
		}
		if ge.Err != nil {
			l.log.Warn("ratelimit: a charge of what was decided here while Redis was away failed; it is tried again after the next call Redis answers",
				"err", ge.Err)
		}
	case admit.ServerFailed, admit.BreakerOpen, admit.BreakerHalfOpen, admit.BreakerClosed:
		e := Event{Kind: gateKinds[ge.Kind], Server: ge.Server, Err: ge.Err}
		switch e.Kind {
		case BreakerOpen:
			l.log.Warn("ratelimit: a Redis server is failing; its circuit breaker is open: requests on its keys are decided by the failure policy",
				"server", e.Server, "on_error", l.opt.OnError.String(), "cooldown", l.opt.BreakerCooldown, "err", e.Err)
		case BreakerClosed:
			l.log.Info("ratelimit: a Redis server answers again; its circuit breaker is closed", "server", e.Server)
		}
		l.event(e)
	}
}

// logOnce logs at most one line a second of each kind of event.
func (l *Limiter) logOnce(kind EventKind, level slog.Level, msg string, args ...any) {
	now := time.Now().UnixNano()
	last := l.logged[kind].Load()
	if now-last < int64(time.Second) || !l.logged[kind].CompareAndSwap(last, now) {
		return
	}
	l.log.Log(context.Background(), level, msg, args...)
}

// Close gives back the units the local tier holds (Options.Lease) and
// stops it; later requests are decided as without it. Without Lease it
// does nothing.
func (l *Limiter) Close(ctx context.Context) error { return l.gate.Close(ctx) }

// Leased is the local tier's counts (Options.Lease): grants, units
// granted and given back, decisions made here; zero without Lease.
func (l *Limiter) Leased() lease.Stats { return l.gate.Stats().Lease }

// Leases reports whether l decides through a local tier (Options.Lease).
func (l *Limiter) Leases() bool { return l.gate.Tier() != nil }

// BreakerOpen reports whether a circuit breaker keeps requests from a
// Redis server now (open, or half-open with its one probe in flight).
func (l *Limiter) BreakerOpen() bool { return l.gate.BreakerOpen() }

// Engines reports the engine each Redis server met so far runs (the
// module or its Lua scripts), by address: see client.Client.Engines.
func (l *Limiter) Engines() map[string]client.Engine { return l.c.Engines() }

// Policies lists the policies' names, in order.
func (l *Limiter) Policies() []string {
	names := make([]string, len(l.policies))
	for i, p := range l.policies {
		names[i] = p.Name
	}
	return names
}
