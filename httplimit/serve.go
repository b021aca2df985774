package httplimit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/admit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// noOutcome marks a policy that reports no decision for a request (it
// admitted, but another policy refused the request).
const noOutcome EventKind = -1

// applied is one policy applying to one request: its Want (its Redis key,
// limit, cost and reserve, and once decided its answer; Known when Result
// holds this policy's own figures, Taken when it was admitted in Redis and
// a later refusal gives it back; Local when FailLocal decided it here,
// Remembered when a remembered refusal did).
type applied struct {
	admit.Want
	p       *Policy
	outcome EventKind // what is reported for this policy, or noOutcome
}

// counted reports whether a's take stands in Redis for Count to settle:
// taken (a shadow policy's take is counted on its own), not decided here.
func (a *applied) counted() bool {
	return a.p.Count != nil && !a.Local && !a.Remembered && a.Known && !a.Result.Limited && (a.Taken || a.p.Shadow)
}

// redisKey is Prefix + "{" + the request's key + "}:" + the policy name; a
// key longer than 128 bytes (a header is the client's to write) is hashed.
func (l *Limiter) redisKey(k, name string) (key, tag string) {
	if len(k) > 128 {
		sum := sha256.Sum256([]byte(k))
		k = "sha256:" + hex.EncodeToString(sum[:])
	}
	return l.opt.Prefix + "{" + k + "}:" + name, k
}

// LimitsKey is the hash of limits of a request's key (what a policy's Key
// returned): Prefix + "{" + key + "}:limits", in the Cluster slot of the
// key's limiter keys, whose fields, named after the policies, hold their
// parameters for the key (Policy.Overrides).
func (l *Limiter) LimitsKey(key string) string {
	_, tag := l.redisKey(key, "")
	return l.opt.Prefix + "{" + tag + "}:limits"
}

// shed reports whether the in-flight shedder drops a request of prio
// arriving as the n-th in flight.
func (l *Limiter) shed(prio Priority, n int64) bool {
	at, ok := l.opt.ShedAt[prio]
	if l.opt.ShedAt == nil {
		switch prio {
		case Lowest:
			at, ok = 0.5, true
		case Low:
			at, ok = l.opt.ShedLow, true
		case Default:
			at, ok = l.opt.ShedDefault, true
		}
	}
	return ok && float64(n) > float64(l.opt.MaxInFlight)*at
}

// Handler limits the requests to next.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
}

// serve runs one request through the phases: shed (the in-flight
// shedder), collect (each policy's key and cost), decide the rate
// policies, acquire the concurrency slots; then the handler.
func (l *Limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	prio := Default
	if l.opt.Priority != nil {
		prio = l.opt.Priority(r)
	}
	if l.opt.MaxInFlight > 0 {
		n := l.inFlight.Add(1)
		defer l.inFlight.Add(-1)
		if l.shed(prio, n) {
			l.event(Event{Kind: Shed})
			l.refuse(w, r, Decision{Status: http.StatusServiceUnavailable, RetryAfter: time.Second}, nil)
			return
		}
	}
	rate, conc, ok := l.collect(w, r, prio)
	if !ok {
		return
	}
	defer func() {
		l.report(rate)
		l.report(conc)
	}()
	if l.opt.Headers&IETF != 0 {
		if h := l.policyHeader(rate); h != "" {
			w.Header().Set("RateLimit-Policy", h)
		}
	}
	if !l.decideRates(w, r, rate) {
		return
	}
	if len(conc) > 0 {
		release, ok := l.acquireSlots(w, r, rate, conc)
		defer release()
		if !ok {
			return
		}
	}
	if l.counts && slices.ContainsFunc(rate, func(a applied) bool { return a.counted() }) {
		l.serveCounted(w, r, next, rate)
		return
	}
	next.ServeHTTP(w, r)
}

// policyHeader is the RateLimit-Policy field: the same for every request,
// or, with a LimitFunc, each policy's limit for this one (a policy with no
// limit for it, and a quiet one, left out).
func (l *Limiter) policyHeader(rate []applied) string {
	if !l.perRequest {
		return l.header
	}
	var items []string
	for i := range l.policies {
		p := &l.policies[i]
		lim := p.Limit
		j := slices.IndexFunc(rate, func(a applied) bool { return a.p == p })
		if j >= 0 {
			lim = rate[j].Limit
		}
		item := policyItem(p, lim)
		if j >= 0 && item != "" && overridden(&rate[j]) {
			q, w := quota(&rate[j])
			item = ratelimit.PolicyItem(p.Name, q, w)
		}
		if item != "" {
			items = append(items, item)
		}
	}
	return strings.Join(items, ", ")
}

// collect reads what each policy counts the request against: its rate and
// its concurrency policies, or false when a policy cannot count it (the
// request was answered 400).
func (l *Limiter) collect(w http.ResponseWriter, r *http.Request, prio Priority) (rate, conc []applied, ok bool) {
	for i := range l.policies {
		p := &l.policies[i]
		k, err := p.Key(r)
		if err != nil {
			l.badRequest(w, r, p, err)
			return nil, nil, false
		}
		if k == "" {
			continue
		}
		a := applied{Want: admit.Want{Cost: 1, Reserve: p.Reserve[prio], Shadow: p.Shadow, Lease: p.Count == nil}, p: p, outcome: noOutcome}
		a.Key, _ = l.redisKey(k, p.Name)
		a.Limit = p.Limit
		if p.Concurrency.Limit > 0 {
			conc = append(conc, a)
			continue
		}
		if p.LimitFunc != nil {
			if lim := p.LimitFunc(r, k); lim != (client.Limit{}) {
				a.Limit = lim
			}
			if a.Limit.Family() == "LB" {
				l.event(Event{Kind: ConfigError, Policy: p.Name, Err: errShaper})
				l.logOnce(ConfigError, slog.LevelError, "ratelimit: a policy's LimitFunc gave a Shaper; the policy does not apply", "policy", p.Name)
				continue
			}
			if q, _ := a.Limit.Quota(); q == 0 {
				continue // no plan, no default: unlimited
			}
		}
		if p.Overrides != nil {
			if h := p.Overrides(r, k); h != "" && a.Limit != (client.Limit{}) {
				a.Limit = a.Limit.Override(h, p.Name)
			}
		}
		if p.Cost != nil {
			a.Cost = p.Cost(r)
		}
		if q, _ := a.Limit.Quota(); a.Cost < 0 || a.Cost > q {
			l.badRequest(w, r, p, fmt.Errorf("cost %d is outside 0 to %d, the limit", a.Cost, q))
			return nil, nil, false
		}
		rate = append(rate, a)
	}
	return rate, conc, true
}

// decideRates decides the rate policies through the gate (in Redis, the
// local tier, a remembered refusal, or as OnError says), and answers a
// request they refuse: false when the request is answered (or its client
// gone).
func (l *Limiter) decideRates(w http.ResponseWriter, r *http.Request, rate []applied) bool {
	if len(rate) > 0 {
		var buf [8]*admit.Want
		wants := buf[:0]
		for i := range rate {
			wants = append(wants, &rate[i].Want)
		}
		switch out, _ := l.gate.DecideWith(r.Context(), wants, failure(strictest(rate))); out {
		case admit.Gone:
			return false
		case admit.FailedClosed:
			mark(rate, FailedClosed)
			l.refuse(w, r, Decision{Status: http.StatusServiceUnavailable, RetryAfter: l.gate.RetryAfter(r.Context(), keysOf(rate))}, nil)
			return false
		case admit.FailedOpen: // no decision, no RateLimit field
			mark(rate, FailedOpen)
		}
	}
	refused := l.verdict(w, rate)
	if refused == nil {
		return true
	}
	d := Decision{Status: http.StatusTooManyRequests, Policy: refused.p.Name, RetryAfter: refused.Result.RetryAfter}
	if refused.Result.Remaining >= refused.Cost && refused.Reserve > 0 { // refused only for the reserve
		d.Status = http.StatusServiceUnavailable
		refused.outcome = Shed
	}
	l.refuse(w, r, d, refused.p)
	return false
}

// strictest is the failure policy of a request decided by the rate
// policies in rate: the strictest of its enforcing ones' (closed, then
// local, then open).
func strictest(rate []applied) OnError {
	o := FailOpen
	for i := range rate {
		if p := rate[i].p; !p.Shadow && rank(p.OnError) > rank(o) {
			o = p.OnError
		}
	}
	return o
}

// rank orders failure policies by strictness.
func rank(o OnError) int {
	switch o {
	case FailClosed:
		return 2
	case FailLocal:
		return 1
	}
	return 0
}

var errShaper = errors.New("a Shaper delays rather than refuses; it is not a policy's limit")

// serveCounted runs next for a request under policies with a Count, then
// settles each: what Count says the request cost, less what it took
// before the handler — more charged with DEBT, less given back — in one
// decision after the handler, within the timeout, whether or not the
// client is still there.
func (l *Limiter) serveCounted(w http.ResponseWriter, r *http.Request, next http.Handler, rate []applied) {
	sw := &statusWriter{ResponseWriter: w}
	r = r.WithContext(context.WithValue(r.Context(), usedKey{}, new(atomic.Int64)))
	status := http.StatusInternalServerError // unless the handler returns
	defer func() { l.settle(r, status, rate) }()
	next.ServeHTTP(sw, r)
	status = sw.status
	if status == 0 {
		status = http.StatusOK
	}
}

// settle charges or gives back the difference between each counted
// policy's Count and its take.
func (l *Limiter) settle(r *http.Request, status int, rate []applied) {
	var wants []*admit.Want
	for i := range rate {
		a := &rate[i]
		if !a.counted() {
			continue
		}
		actual := min(max(a.p.Count(status, r), 0), admit.MaxCost)
		if d := actual - a.Cost; d != 0 {
			wants = append(wants, &admit.Want{Key: a.Key, Limit: a.Limit, Cost: d, Debt: d > 0, Shadow: a.p.Shadow})
		}
	}
	if len(wants) > 0 {
		l.gate.DecideWith(context.WithoutCancel(r.Context()), wants, admit.Fail)
	}
}

// usedKey is the context key of the count a handler reports with Use.
type usedKey struct{}

// Use adds n to what the request used, for a policy's Count to read with
// Used: a handler reports the tokens a model call spent, the rows an
// export read. It does nothing to a request that no Count policy decides.
func Use(r *http.Request, n int64) {
	if u, ok := r.Context().Value(usedKey{}).(*atomic.Int64); ok {
		u.Add(n)
	}
}

// Used is what the request's handler reported with Use (0 when nothing):
//
//	Count: func(_ int, r *http.Request) int64 { return httplimit.Used(r) }
func Used(r *http.Request) int64 {
	if u, ok := r.Context().Value(usedKey{}).(*atomic.Int64); ok {
		return u.Load()
	}
	return 0
}

// statusWriter records the status a handler answers (its first final
// one), for Count.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush lets a streaming handler's w.(http.Flusher) work through it.
func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap is for http.ResponseController.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// acquireSlots takes a slot of each concurrency policy, released after
// the handler (release); when one sheds the request, it gives back the
// rate units the request took and answers it: false.
func (l *Limiter) acquireSlots(w http.ResponseWriter, r *http.Request, rate, conc []applied) (release func(), ok bool) {
	release, d, ok := l.acquire(r, conc)
	if ok {
		return release, true
	}
	for _, kind := range [...]EventKind{Admitted, LocalAdmitted} {
		unmark(rate, kind)
		unmark(conc, kind)
	}
	if d.Status == 0 {
		return release, false // the client is gone
	}
	// The request is not served: give back the rate units it took.
	l.gate.Call(r.Context(), keysOf(rate), func(ctx context.Context) error {
		l.refund(ctx, rate)
		return nil
	})
	l.refuse(w, r, d, l.policyNamed(d.Policy))
	return release, false
}

// policyNamed is the policy named name, or nil ("": the shedder, an
// outage).
func (l *Limiter) policyNamed(name string) *Policy {
	for i := range l.policies {
		if l.policies[i].Name == name {
			return &l.policies[i]
		}
	}
	return nil
}

// mark reports kind for every policy in as.
func mark(as []applied, kind EventKind) {
	for i := range as {
		as[i].outcome = kind
	}
}

// unmark takes kind back from the policies in as: they decided, but the
// request was not served.
func unmark(as []applied, kind EventKind) {
	for i := range as {
		if as[i].outcome == kind {
			as[i].outcome = noOutcome
		}
	}
}

// report sends each policy's decision to the Event hook.
func (l *Limiter) report(as []applied) {
	if l.opt.Event == nil {
		return
	}
	for i := range as {
		if as[i].outcome != noOutcome {
			l.opt.Event(Event{Kind: as[i].outcome, Policy: as[i].p.Name})
		}
	}
}

// badRequest answers a request that policy p cannot count.
func (l *Limiter) badRequest(w http.ResponseWriter, r *http.Request, p *Policy, err error) {
	l.event(Event{Kind: BadRequest, Policy: p.Name, Err: err})
	l.logOnce(BadRequest, slog.LevelWarn, "ratelimit: a request that a policy cannot count was answered 400",
		"policy", p.Name, "err", err)
	if l.opt.BadRequest != nil {
		l.opt.BadRequest(w, r, err)
		return
	}
	problem(w, http.StatusBadRequest, fmt.Sprintf("policy %q: %v", p.Name, err))
}

// refund gives back what the policies took, where the limit allows it
// (admit.Gate.Refund).
func (l *Limiter) refund(ctx context.Context, rate []applied) {
	wants := make([]*admit.Want, len(rate))
	for i := range rate {
		wants[i] = &rate[i].Want
	}
	l.gate.Refund(ctx, wants)
}

// verdict sets the RateLimit field and each policy's outcome, and returns
// the refusing enforcing policy (nil when admitted). Shadow refusals are
// reported, not enforced.
func (l *Limiter) verdict(w http.ResponseWriter, rate []applied) *applied {
	if l.overrides && l.opt.Headers&IETF != 0 { // the limits Redis gave are known now
		if h := l.policyHeader(rate); h != "" {
			w.Header().Set("RateLimit-Policy", h)
		}
	}
	var refused, least *applied // least: the shown policy with the least remaining, for XRateLimit
	var leastR int64
	var items []string
	for i := range rate {
		a := &rate[i]
		if !a.Known {
			continue
		}
		switch {
		case a.Result.Limited && a.p.Shadow:
			a.outcome = ShadowRefused
		case a.Result.Limited: // the refusal with the longest wait decides (-1, never, longest of all)
			a.outcome = Refused
			if refused == nil || a.Result.RetryAfter < 0 || (refused.Result.RetryAfter >= 0 && a.Result.RetryAfter > refused.Result.RetryAfter) {
				refused = a
			}
		default:
			a.outcome = Admitted
		}
		switch {
		case a.Remembered:
			a.outcome = Remembered
		case a.Local && a.Result.Limited:
			a.outcome = LocalRefused
		case a.Local:
			a.outcome = LocalAdmitted
		}
		if a.p.Quiet {
			continue
		}
		if l.opt.Headers&IETF != 0 {
			items = append(items, field(a))
		}
		if r, _ := figures(a); least == nil || r < leastR {
			least, leastR = a, r
		}
	}
	if len(items) > 0 {
		w.Header().Set("RateLimit", strings.Join(items, ", "))
	}
	if l.opt.Headers&XRateLimit != 0 {
		shown := least
		if refused != nil && !refused.p.Quiet {
			shown = refused
		}
		if shown != nil {
			q, _ := quota(shown)
			r, t := figures(shown)
			h := w.Header()
			h.Set("X-RateLimit-Limit", strconv.FormatInt(ratelimit.FieldInt(q), 10))
			h.Set("X-RateLimit-Remaining", strconv.FormatInt(ratelimit.FieldInt(r), 10))
			h.Set("X-RateLimit-Reset", strconv.FormatInt(ratelimit.FieldInt(ratelimit.FieldSeconds(t)), 10))
		}
	}
	if refused != nil {
		unmark(rate, Admitted)
		unmark(rate, LocalAdmitted)
	}
	return refused
}

// overridden reports a policy whose limit Redis may have given this
// request (Overrides), decided: its reply states the limit.
func overridden(a *applied) bool {
	_, _, over := a.Limit.Overridden()
	return over && a.Known
}

// quota is what a policy's fields state as its quota: the limit's, or,
// where Redis gave another (Overrides), the reply's limit over the
// policy's window.
func quota(a *applied) (int64, time.Duration) {
	q, w := a.Limit.Quota()
	if overridden(a) {
		q = a.Result.Limit
	}
	return q, w
}

// field is one policy's RateLimit item: remaining and the seconds until
// it resets, or, refused, 0 and the seconds until it would pass.
func field(a *applied) string {
	r, t := figures(a)
	return ratelimit.StateItem(a.p.Name, r, t)
}

// figures are what a policy's fields state: remaining and the time until
// it resets, or, refused, 0 and the time until it would pass.
func figures(a *applied) (remaining int64, reset time.Duration) {
	r, t := a.Result.Remaining, a.Result.ResetAfter
	if a.Result.Limited {
		r = 0
		if a.Result.RetryAfter >= 0 {
			t = a.Result.RetryAfter
		}
	}
	return r, t
}

// acquire takes a slot of every concurrency policy; on a refusal (or a
// failure under FailClosed) it gives back what it took. release gives back
// the rest; it runs after the handler, even when the handler panics, within
// the call timeout (and not at all while the breaker is open: the slots
// then lapse with their lease). A Decision of status 0 means the client
// went away.
func (l *Limiter) acquire(r *http.Request, conc []applied) (release func(), d Decision, ok bool) {
	var buf [12]byte
	rand.Read(buf[:])
	id := hex.EncodeToString(buf[:])
	var held []*admit.Held
	release = func() {
		for _, h := range held {
			h.Release(r.Context())
		}
	}
	for i := range conc {
		a := &conc[i]
		h, out, _ := l.gate.AcquireWith(r.Context(), &a.Want, a.p.Concurrency, id, failure(a.p.OnError))
		switch out {
		case admit.Gone:
			return release, Decision{}, false
		case admit.FailedClosed:
			a.outcome = FailedClosed
			return release, Decision{Status: http.StatusServiceUnavailable, RetryAfter: l.gate.RetryAfter(r.Context(), []string{a.Key})}, false
		case admit.FailedOpen, admit.Failed:
			a.outcome = FailedOpen
			continue
		}
		switch {
		case h != nil:
			held = append(held, h)
			a.outcome = Admitted
			if a.Local {
				a.outcome = LocalAdmitted
			}
		case a.Local:
			if a.outcome = LocalRefused; !a.p.Shadow {
				return release, Decision{Status: concStatus(a.p), Policy: a.p.Name, RetryAfter: shedRetry(a.p, time.Second)}, false
			}
		case a.p.Shadow:
			a.outcome = ShadowRefused
		default:
			d := Decision{Status: concStatus(a.p), Policy: a.p.Name, RetryAfter: shedRetry(a.p, a.Result.RetryAfter)}
			if a.outcome = Shed; d.Status == http.StatusTooManyRequests {
				a.outcome = Refused
			}
			return release, d, false
		}
	}
	return release, Decision{}, true
}

// keysOf lists the policies' Redis keys.
func keysOf(as []applied) []string {
	keys := make([]string, len(as))
	for i := range as {
		keys[i] = as[i].Key
	}
	return keys
}

// concStatus is the status of a request concurrency policy p refuses:
// 429 when p is keyed per client (the client runs more than its share),
// 503 when it is one cap shared by every client (Global, Route: the
// service sheds load).
func concStatus(p *Policy) int {
	if shared(p.Key) {
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// shedRetry is the Retry-After of a request p sheds: until the earliest
// lease ends (at least a second), or p's ShedRetryAfter when sooner.
func shedRetry(p *Policy, earliest time.Duration) time.Duration {
	if earliest >= 0 {
		earliest = max(earliest, time.Second)
	}
	if p.ShedRetryAfter > 0 && (earliest < 0 || p.ShedRetryAfter < earliest) {
		return p.ShedRetryAfter
	}
	return earliest
}

// refuse answers a refused or shed request: the status, Retry-After (the
// wait rounded up plus a random spread of up to a tenth of it, at least a
// second), and the body.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, d Decision, p *Policy) {
	switch {
	case p != nil && p.Deny != nil:
		p.Deny(w, r, d)
		return
	case l.opt.Deny != nil:
		l.opt.Deny(w, r, d)
		return
	}
	h := w.Header()
	if d.RetryAfter >= 0 {
		s := ratelimit.FieldSeconds(d.RetryAfter)
		spread := mrand.Int64N(max(1, s/10) + 1)
		h.Set("Retry-After", strconv.FormatInt(ratelimit.FieldInt(s+spread), 10))
	}
	if l.opt.Refused != nil {
		w.WriteHeader(d.Status)
		l.opt.Refused(w, r, d)
		return
	}
	detail := "the service is shedding load"
	switch {
	case p != nil && p.Quiet:
		detail = "too many requests"
	case d.Status == http.StatusTooManyRequests:
		detail = fmt.Sprintf("policy %q refused the request", d.Policy)
	}
	problem(w, d.Status, detail)
}

// problem writes a problem+json body (RFC 9457).
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	})
}
