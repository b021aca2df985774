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
// problem+json body. A request shed to protect the service — a concurrency
// limit or the in-flight shedder — gets 503 with Retry-After.
//
// # When Redis fails
//
// Every call to Redis has a tight timeout (50 ms by default). After 5
// failures in a row a circuit breaker stops calling Redis for a cooldown
// (5 s), then lets one request probe it. While Redis is failing or the
// breaker is open, OnError decides: FailOpen serves the request,
// FailClosed answers 503 at once, FailLocal limits in this process with a
// GCRA of each policy's quota (bounded memory). Hooks see every failure and
// every change of the breaker's state.
package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
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
	// Cost is what a request costs (1 when nil).
	Cost func(*http.Request) int64
	// Reserve holds back units for higher priorities: a request of
	// priority p passes only if Reserve[p] units remain after it (the
	// module's RESERVE). A refusal for a reserve is shed with 503.
	Reserve map[Priority]int64
	// Shadow counts and reports the policy (headers, hooks) but never
	// refuses: the dry run before turning a limit on.
	Shadow bool
}

// Priority orders requests for shedding: Low goes first, Critical never.
type Priority int

const (
	Low Priority = iota - 1
	Default
	Critical
)

func (p Priority) String() string {
	switch p {
	case Low:
		return "low"
	case Critical:
		return "critical"
	}
	return "default"
}

// OnError is what a request meets while Redis cannot decide.
type OnError int

const (
	// FailOpen serves the request.
	FailOpen OnError = iota
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
	// OnError is the failure policy.
	OnError OnError
	// Timeout bounds each call to Redis (50 ms by default).
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
	// process already serves too many: Low ones from ShedLow of it (0.7 by
	// default), Default ones from ShedDefault (0.9), Critical never.
	MaxInFlight          int
	ShedLow, ShedDefault float64
	// Refused writes the response to a refused or shed request (a
	// problem+json body when nil); the status and headers are set.
	Refused func(w http.ResponseWriter, r *http.Request, d Decision)
	// Event, when set, sees failures, breaker changes, shadow refusals
	// and sheds. It must not block.
	Event func(Event)
}

// Decision is why a request was refused, for Options.Refused.
type Decision struct {
	Status     int           // 429, or 503 when shed
	Policy     string        // the deciding policy ("" for the in-flight shedder or an outage)
	RetryAfter time.Duration // before the request would pass (client.Never: never)
}

// EventKind says what happened.
type EventKind int

const (
	// Failure is a Redis call that failed or timed out (Err says why).
	Failure EventKind = iota
	// BreakerOpen: Redis is no longer called until the cooldown ends.
	BreakerOpen
	// BreakerHalfOpen: one request probes Redis.
	BreakerHalfOpen
	// BreakerClosed: Redis decides again.
	BreakerClosed
	// ShadowRefused: a shadow policy would have refused the request.
	ShadowRefused
	// Shed: a request was shed by the in-flight shedder, a concurrency
	// policy or a reserve.
	Shed
)

func (k EventKind) String() string {
	return [...]string{"failure", "breaker-open", "breaker-half-open", "breaker-closed", "shadow-refused", "shed"}[k]
}

// Event is one thing that happened to the limiter.
type Event struct {
	Kind   EventKind
	Policy string
	Err    error
}

// Limiter is the middleware. It is safe for concurrent use.
type Limiter struct {
	c        *client.Client
	rdb      redis.UniversalClient
	opt      Options
	policies []Policy
	header   string // RateLimit-Policy, the same for every response
	breaker  breaker
	local    *localLimiter
	inFlight atomic.Int64
}

// New returns a limiter deciding policies in rdb's Redis, which must have
// the ratelimit module loaded.
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
	if len(policies) == 0 {
		return nil, errors.New("httplimit: no policy")
	}
	seen := map[string]bool{}
	var items []string
	for _, p := range policies {
		if !validName(p.Name) || seen[p.Name] {
			return nil, fmt.Errorf("httplimit: policy name %q: want a unique name of letters, digits, '-', '_', '.'", p.Name)
		}
		seen[p.Name] = true
		if p.Key == nil {
			return nil, fmt.Errorf("httplimit: policy %s has no Key", p.Name)
		}
		isConc := p.Concurrency.Limit > 0
		q, w := p.Limit.Quota()
		switch {
		case isConc && q > 0:
			return nil, fmt.Errorf("httplimit: policy %s has both a Limit and a Concurrency", p.Name)
		case !isConc && q == 0:
			return nil, fmt.Errorf("httplimit: policy %s has neither a Limit nor a Concurrency", p.Name)
		case !isConc && strings.HasPrefix(p.Limit.String(), "LB"):
			return nil, fmt.Errorf("httplimit: policy %s: a Shaper delays rather than refuses; it is not a policy", p.Name)
		case isConc:
			items = append(items, fmt.Sprintf("%q;q=%d;qu=\"concurrent-requests\"", p.Name, clamp(p.Concurrency.Limit)))
		default:
			items = append(items, fmt.Sprintf("%q;q=%d;w=%d", p.Name, clamp(q), clamp(int64(w/time.Second))))
		}
	}
	l := &Limiter{c: client.New(rdb), rdb: rdb, opt: opt, policies: policies, header: strings.Join(items, ", ")}
	l.breaker.failures, l.breaker.cooldown, l.breaker.event = opt.BreakerFailures, opt.BreakerCooldown, l.event
	if opt.OnError == FailLocal {
		l.local = newLocal(opt.LocalKeys)
	}
	return l, nil
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

// clamp keeps an integer within 15 digits (RFC 9651).
func clamp(v int64) int64 { return min(max(v, 0), 999_999_999_999_999) }

func (l *Limiter) event(e Event) {
	if l.opt.Event != nil {
		l.opt.Event(e)
	}
}
