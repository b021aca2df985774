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
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/breaker"
)

// noOutcome marks a policy that reports no decision for a request (it
// admitted, but another policy refused the request).
const noOutcome EventKind = -1

// applied is one policy applying to one request: its Want (its Redis key,
// limit, cost and reserve, and once decided its answer; Known when Result
// holds this policy's own figures, Taken when it was admitted in Redis and
// a later refusal gives it back).
type applied struct {
	client.Want
	p        *Policy
	local    bool // decided in this process (FailLocal)
	recalled bool // refused by a remembered refusal (Options.RefusalCache)
	id       string
	server   string    // the Redis server holding the key, for a concurrency policy
	outcome  EventKind // what is reported for this policy, or noOutcome
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
	servers := l.serversOf(r, rate)
	if !l.decideRates(w, r, rate, servers) {
		return
	}
	if len(conc) > 0 {
		release, ok := l.acquireSlots(w, r, rate, conc, servers)
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
		a := applied{Want: client.Want{Cost: 1, Reserve: p.Reserve[prio]}, p: p, outcome: noOutcome}
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

// decideRates decides the rate policies, in Redis or as OnError says, and
// answers a request they refuse: false when the request is answered (or
// its client gone).
func (l *Limiter) decideRates(w http.ResponseWriter, r *http.Request, rate []applied, servers []string) bool {
	var now time.Time // for the remembered refusals only: no clock read per request without them
	if l.refusals != nil {
		now = time.Now()
	}
	if len(rate) > 0 && !l.recall(rate, now) {
		switch l.remote(r, servers, func(ctx context.Context) error { return l.decideRemote(ctx, rate) }) {
		case gone:
			return false
		case decided:
			l.remember(rate, now)
		default:
			switch l.opt.OnError {
			case FailClosed:
				mark(rate, FailedClosed)
				l.refuse(w, r, Decision{Status: http.StatusServiceUnavailable, RetryAfter: l.breakers.RetryAfter(servers)})
				return false
			case FailLocal:
				l.local.decide(rate, time.Now().UnixNano())
			default: // FailOpen: no decision, no RateLimit field
				for i := range rate {
					rate[i].Known, rate[i].Taken = false, false
				}
				mark(rate, FailedOpen)
			}
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
func (l *Limiter) acquireSlots(w http.ResponseWriter, r *http.Request, rate, conc []applied, servers []string) (release func(), ok bool) {
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
	l.remote(r, servers, func(ctx context.Context) error {
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

// callResult is how a call to Redis ended, as the limiter sees it.
type callResult int

const (
	decided     callResult = iota // Redis answered
	unavailable                   // Redis could not decide, or the breaker is open
	rejected                      // Redis refused the arguments: a configuration bug
	gone                          // the request's client went away
)

// serversOf lists the servers that hold the keys of as (see
// client.Client.ServerFor), each once: whose breakers a call on them
// passes.
func (l *Limiter) serversOf(r *http.Request, as []applied) []string {
	if len(as) == 0 {
		return nil
	}
	ctx, cancel := client.WithTimeout(r.Context(), l.opt.Timeout) // a Cluster's map may have to be fetched first
	defer cancel()
	servers := make([]string, 0, 1)
	for i := range as {
		if s := l.c.ServerFor(ctx, as[i].Key); !slices.Contains(servers, s) {
			servers = append(servers, s)
		}
	}
	return servers
}

// remote runs call against Redis within the call timeout, unless the
// request's client is already gone (Redis is not asked) or the breaker of
// one of servers, those holding the call's keys, is open. The timeout is
// the call's own: what it waits for the client's start-up work (the
// engine probe, the library load) does not count (client.WithTimeout).
func (l *Limiter) remote(r *http.Request, servers []string, call func(ctx context.Context) error) callResult {
	if r.Context().Err() != nil {
		return gone
	}
	bs, ok := l.breakers.Allow(servers)
	if !ok {
		return unavailable
	}
	ctx, cancel := client.WithTimeout(r.Context(), l.opt.Timeout)
	start := time.Now()
	err := call(ctx)
	cancel()
	return l.settle(r.Context(), bs, err, time.Since(start))
}

// settle tells the breakers of the call's servers and the hooks how a call
// went: parent is the context the call's own timeout was derived from. A
// failure counts toward the breaker of the server that failed (all of
// them when the error does not say which); a call whose slot was moving
// until its deadline counts toward none (client.Moving: the server is
// well, its other slots served).
func (l *Limiter) settle(parent context.Context, bs []*breaker.Breaker, err error, took time.Duration) callResult {
	switch {
	case err == nil:
		l.breakers.Settle(bs, breaker.Succeeded, "", nil)
		l.event(Event{Kind: RedisCall, Duration: took, Outcome: "ok"})
		l.chargeLocal()
		return decided
	case parent.Err() != nil: // the client hung up: not Redis's failure
		l.breakers.Settle(bs, breaker.Gone, "", err)
		return gone
	case client.Unavailable(err):
		outcome := "error"
		if isTimeout(err) {
			outcome = "timeout"
		}
		l.event(Event{Kind: RedisCall, Duration: took, Outcome: outcome, Err: err})
		if client.Moving(err) {
			l.breakers.Settle(bs, breaker.Moving, "", err)
			return unavailable
		}
		l.breakers.Settle(bs, breaker.Failed, client.ServerOf(err), err)
		return unavailable
	default:
		l.event(Event{Kind: RedisCall, Duration: took, Outcome: "error", Err: err})
		l.breakers.Settle(bs, breaker.Rejected, "", err)
		l.event(Event{Kind: ConfigError, Err: err})
		l.logOnce(ConfigError, slog.LevelError, "ratelimit: Redis refused a policy's arguments; "+
			"requests are decided by the failure policy until the policies are fixed", "on_error", l.opt.OnError.String(), "err", err)
		return rejected
	}
}

// recall answers the rate policies from the remembered refusals
// (Options.RefusalCache) at now: true when an enforcing policy's key is
// refused until later for the request's cost, the request then refused
// by it alone, with no call (its other policies not asked, as after a
// refusal in Redis; its shadow policies not counted).
func (l *Limiter) recall(rate []applied, now time.Time) bool {
	if l.refusals == nil {
		return false
	}
	var until time.Time
	for i := range rate {
		a := &rate[i]
		if a.p.Shadow || a.Reserve != 0 || a.Cost <= 0 || !l.refusals.Refuses(a.Key, a.Cost, now, &until) {
			continue
		}
		for j := range rate {
			rate[j].Known, rate[j].Taken = false, false
		}
		q, _ := a.p.Limit.Quota()
		wait := until.Sub(now)
		a.Result = client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: q, RetryAfter: wait, ResetAfter: wait}}
		a.Known, a.recalled = true, true
		return true
	}
	return false
}

// remember keeps what Redis (or the local tier) refused, asked at
// started, until the refusal's RetryAfter: a request of at least that
// cost would be refused until then (no limit admits sooner because of more
// traffic). Shadow policies and reserves are not remembered.
func (l *Limiter) remember(rate []applied, started time.Time) {
	if l.refusals == nil {
		return
	}
	for i := range rate {
		if a := &rate[i]; !a.p.Shadow && a.Reserve == 0 && a.Cost > 0 && !a.local && a.Known && a.Result.Limited && a.Result.RetryAfter > 0 {
			l.refusals.Add(a.Key, a.Cost, started.Add(a.Result.RetryAfter))
		}
	}
}

// isTimeout reports a call that ran out of time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// decideRemote decides the rate policies in Redis: the enforcing ones all
// or nothing (client.Client.Decide: one RL.ALL per slot and reserve, those
// that can give back first, refunds when a later one refuses), the shadow
// ones each on its own (never given back).
func (l *Limiter) decideRemote(ctx context.Context, rate []applied) error {
	var buf [8]*client.Want
	enforcing := buf[:0]
	for i := range rate {
		if !rate[i].p.Shadow {
			enforcing = append(enforcing, &rate[i].Want)
		}
	}
	switch w := enforcing; {
	case len(w) == 1 && l.leased != nil && w[0].Limit.Leasable() && w[0].Cost > 0 && w[0].Reserve == 0 && !w[0].Debt:
		r, err := l.leased.Take(ctx, w[0].Key, w[0].Limit, w[0].Cost) // with the tier's fallback while Redis fails
		if err != nil {
			return err
		}
		w[0].Result, w[0].Known, w[0].Taken = r, true, !r.Limited
	case len(w) > 1 && l.leased != nil: // all or nothing through the tier when every one leases
		if err := l.leased.Decide(ctx, enforcing, nil); err != nil {
			return err
		}
	case len(w) > 0:
		if err := l.c.Decide(ctx, enforcing, nil); err != nil {
			return err
		}
	}
	for i := range rate {
		if a := &rate[i]; a.p.Shadow {
			if err := l.c.Decide(ctx, []*client.Want{&a.Want}, nil); err != nil {
				return err
			}
			a.Taken = false
		}
	}
	return nil
}

// refund gives back what the policies took, where the limit allows it
// (client.Client.Refund).
func (l *Limiter) refund(ctx context.Context, rate []applied) {
	wants := make([]*client.Want, len(rate))
	for i := range rate {
		wants[i] = &rate[i].Want
	}
	l.c.Refund(ctx, wants, nil)
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
		case a.recalled:
			a.outcome = Remembered
		case a.local && a.Result.Limited:
			a.outcome = LocalRefused
		case a.local:
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
	var held, localHeld []*applied
	release = func() {
		for _, a := range localHeld {
			l.local.release(a.Key)
		}
		if l.leased != nil { // the slots the local tier handed out go back to it, with no call, whatever the breaker says
			remote := held[:0:0]
			for _, a := range held {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), l.opt.Timeout) // a call only once the tier closed
				if here, _, _ := l.leased.ReleaseHeld(ctx, a.Key, a.id); !here {
					remote = append(remote, a)
				}
				cancel()
			}
			held = remote
		}
		if len(held) == 0 {
			return
		}
		var servers []string
		for _, a := range held {
			servers = append(servers, a.server)
		}
		bs, ok := l.breakers.Allow(servers)
		if !ok {
			return
		}
		parent := context.WithoutCancel(r.Context())
		ctx, cancel := client.WithTimeout(parent, l.opt.Timeout)
		defer cancel()
		start := time.Now()
		var err error
		for _, a := range held {
			if _, e := l.c.Release(ctx, a.Key, a.id); e != nil && err == nil {
				err = e
			}
		}
		l.settle(parent, bs, err, time.Since(start))
	}
	for i := range conc {
		a := &conc[i]
		a.id = id
		a.server = l.serversOf(r, conc[i:i+1])[0]
		var res client.Result
		switch l.remote(r, []string{a.server}, func(ctx context.Context) (err error) {
			if l.leased != nil && a.Reserve == 0 { // through the local tier, on a key hot on this process
				res, err = l.leased.Acquire(ctx, a.Key, a.p.Concurrency, id)
				return err
			}
			res, err = l.c.Acquire(ctx, a.Key, a.p.Concurrency, id, client.Reserve(a.Reserve))
			return err
		}) {
		case gone:
			return release, Decision{}, false
		case decided:
			switch {
			case !res.Limited:
				held = append(held, a)
				a.outcome = Admitted
				continue
			case a.p.Shadow:
				a.outcome = ShadowRefused
				continue
			}
			a.outcome = Shed
			return release, Decision{Status: http.StatusServiceUnavailable, Policy: a.p.Name, RetryAfter: shedRetry(a.p, res.RetryAfter)}, false
		}
		switch l.opt.OnError {
		case FailClosed:
			a.outcome = FailedClosed
			return release, Decision{Status: http.StatusServiceUnavailable, RetryAfter: l.breakers.RetryAfter([]string{a.server})}, false
		case FailLocal:
			if l.local.acquire(a.Key, a.p.Concurrency.Limit) {
				localHeld = append(localHeld, a)
				a.outcome = LocalAdmitted
			} else if a.outcome = LocalRefused; !a.p.Shadow {
				return release, Decision{Status: http.StatusServiceUnavailable, Policy: a.p.Name, RetryAfter: shedRetry(a.p, time.Second)}, false
			}
		default:
			a.outcome = FailedOpen
		}
	}
	return release, Decision{}, true
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
