package httplimit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/admit"
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

// redisKey is Prefix + "{" + the request's key + "}:" + the policy name; a
// key longer than 128 bytes (a header is the client's to write) is hashed.
func (l *Limiter) redisKey(k, name string) (key, tag string) {
	if len(k) > 128 {
		sum := sha256.Sum256([]byte(k))
		k = "sha256:" + hex.EncodeToString(sum[:])
	}
	return l.opt.Prefix + "{" + k + "}:" + name, k
}

// shed reports whether the in-flight shedder drops a request of prio
// arriving as the n-th in flight.
func (l *Limiter) shed(prio Priority, n int64) bool {
	max := float64(l.opt.MaxInFlight)
	switch prio {
	case Critical:
		return false
	case Low:
		return float64(n) > max*l.opt.ShedLow
	}
	return float64(n) > max*l.opt.ShedDefault
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
			l.refuse(w, r, Decision{Status: http.StatusServiceUnavailable, RetryAfter: time.Second})
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
	w.Header().Set("RateLimit-Policy", l.header)
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
	next.ServeHTTP(w, r)
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
		a := applied{Want: admit.Want{Cost: 1, Reserve: p.Reserve[prio], Shadow: p.Shadow, Lease: true}, p: p, outcome: noOutcome}
		a.Key, _ = l.redisKey(k, p.Name)
		a.Limit = p.Limit
		if p.Concurrency.Limit > 0 {
			conc = append(conc, a)
			continue
		}
		if p.Cost != nil {
			a.Cost = p.Cost(r)
		}
		if q, _ := p.Limit.Quota(); a.Cost < 0 || a.Cost > q {
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
		switch out, _ := l.gate.Decide(r.Context(), wants); out {
		case admit.Gone:
			return false
		case admit.FailedClosed:
			mark(rate, FailedClosed)
			l.refuse(w, r, Decision{Status: http.StatusServiceUnavailable, RetryAfter: l.gate.RetryAfter(r.Context(), keysOf(rate))})
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
	l.refuse(w, r, d)
	return false
}

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
	l.refuse(w, r, d)
	return release, false
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
	var refused *applied
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
		items = append(items, field(a))
	}
	if len(items) > 0 {
		w.Header().Set("RateLimit", strings.Join(items, ", "))
	}
	if refused != nil {
		unmark(rate, Admitted)
		unmark(rate, LocalAdmitted)
	}
	return refused
}

// field is one policy's RateLimit item: remaining and the seconds until
// it resets, or, refused, 0 and the seconds until it would pass.
func field(a *applied) string {
	r, t := a.Result.Remaining, a.Result.ResetAfter
	if a.Result.Limited {
		r = 0
		if a.Result.RetryAfter >= 0 {
			t = a.Result.RetryAfter
		}
	}
	return ratelimit.StateItem(a.p.Name, r, t)
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
		h, out, _ := l.gate.Acquire(r.Context(), &a.Want, a.p.Concurrency, id)
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
				return release, Decision{Status: http.StatusServiceUnavailable, Policy: a.p.Name, RetryAfter: shedRetry(a.p, time.Second)}, false
			}
		case a.p.Shadow:
			a.outcome = ShadowRefused
		default:
			a.outcome = Shed
			return release, Decision{Status: http.StatusServiceUnavailable, Policy: a.p.Name, RetryAfter: shedRetry(a.p, a.Result.RetryAfter)}, false
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
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, d Decision) {
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
	if d.Status == http.StatusTooManyRequests {
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
