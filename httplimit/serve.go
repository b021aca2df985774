package httplimit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// applied is one policy applying to one request.
type applied struct {
	p       *Policy
	key     string // the Redis key
	tag     string // its hash tag: policies of one tag share a slot
	cost    int64
	reserve int64
	res     client.Result
	known   bool // res holds this policy's own figures
	taken   bool // admitted: a later refusal refunds it
	id      string
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
	var rate, conc []applied
	for i := range l.policies {
		p := &l.policies[i]
		k, err := p.Key(r)
		if err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if k == "" {
			continue
		}
		a := applied{p: p, cost: 1, reserve: p.Reserve[prio]}
		a.key, a.tag = l.redisKey(k, p.Name)
		if p.Cost != nil {
			a.cost = p.Cost(r)
		}
		if p.Concurrency.Limit > 0 {
			conc = append(conc, a)
		} else {
			rate = append(rate, a)
		}
	}
	w.Header().Set("RateLimit-Policy", l.header)

	// Rate policies: in Redis, or as OnError says.
	if len(rate) > 0 && !l.remote(r, func(ctx context.Context) error { return l.decideRemote(ctx, rate) }) {
		switch l.opt.OnError {
		case FailClosed:
			l.refuse(w, r, Decision{Status: http.StatusServiceUnavailable, RetryAfter: l.breaker.retryAfter()})
			return
		case FailLocal:
			l.local.decide(rate, time.Now().UnixNano())
		default: // FailOpen: no decision, no RateLimit field
			for i := range rate {
				rate[i].known = false
			}
		}
	}
	if refused := l.verdict(w, rate); refused != nil {
		d := Decision{Status: http.StatusTooManyRequests, Policy: refused.p.Name, RetryAfter: refused.res.RetryAfter}
		if refused.res.Remaining >= refused.cost && refused.reserve > 0 { // refused only for the reserve
			d.Status = http.StatusServiceUnavailable
			l.event(Event{Kind: Shed, Policy: refused.p.Name})
		}
		l.refuse(w, r, d)
		return
	}

	// Concurrency policies: a slot each, released after the handler.
	if len(conc) > 0 {
		release, d, ok := l.acquire(r, conc)
		defer release()
		if !ok {
			l.refuse(w, r, d)
			return
		}
	}
	next.ServeHTTP(w, r)
}

// remote runs call against Redis, unless the breaker is open, within the
// call timeout, and tells the breaker how it went; false means Redis did
// not decide and OnError applies.
func (l *Limiter) remote(r *http.Request, call func(ctx context.Context) error) bool {
	if !l.breaker.allow() {
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.opt.Timeout)
	err := call(ctx)
	cancel()
	if err != nil {
		l.breaker.failure(err)
		return false
	}
	l.breaker.success()
	return true
}

// decideRemote decides the rate policies in Redis: the enforcing ones in
// one RL.ALL call when they share a slot and a reserve, else one by one,
// refunding what was taken when a later one refuses; shadow ones each on
// their own.
func (l *Limiter) decideRemote(ctx context.Context, rate []applied) error {
	var enforcing, shadow []int
	for i := range rate {
		if rate[i].p.Shadow {
			shadow = append(shadow, i)
		} else {
			enforcing = append(enforcing, i)
		}
	}
	if len(enforcing) > 1 && l.oneCall(rate, enforcing) {
		var kbuf [maxAll]client.Keyed
		var ebuf [maxAll]client.Result
		keyed, each := kbuf[:len(enforcing)], ebuf[:len(enforcing)]
		for j, i := range enforcing {
			keyed[j] = client.Keyed{Key: rate[i].key, Limit: rate[i].p.Limit, Cost: rate[i].cost}
		}
		res, err := l.c.AllEach(ctx, keyed, each, client.Reserve(rate[enforcing[0]].reserve))
		if err != nil {
			return err
		}
		for j, i := range enforcing {
			rate[i].res, rate[i].known, rate[i].taken = each[j], true, !res.Limited
		}
	} else {
		for _, i := range enforcing {
			a := &rate[i]
			res, err := l.c.Take(ctx, a.key, a.p.Limit, a.cost, client.Reserve(a.reserve))
			if err != nil {
				l.refund(ctx, rate, enforcing)
				return err
			}
			a.res, a.known, a.taken = res, true, !res.Limited
			if res.Limited {
				l.refund(ctx, rate, enforcing)
				break
			}
		}
	}
	for _, i := range shadow {
		a := &rate[i]
		res, err := l.c.Take(ctx, a.key, a.p.Limit, a.cost, client.Reserve(a.reserve))
		if err != nil {
			return err
		}
		a.res, a.known = res, true
	}
	return nil
}

// maxAll is the most limits one RL.ALL call decides (its numkeys).
const maxAll = 16

// oneCall reports whether the enforcing policies can be one RL.ALL call:
// at most maxAll of them, one reserve, and one slot (always, on a single
// node).
func (l *Limiter) oneCall(rate []applied, idx []int) bool {
	if len(idx) > maxAll {
		return false
	}
	first := rate[idx[0]]
	_, single := l.rdb.(*redis.Client)
	for _, i := range idx[1:] {
		if rate[i].reserve != first.reserve || (!single && rate[i].tag != first.tag) {
			return false
		}
	}
	return true
}

// refund gives back what the policies taken so far took, where the
// limit allows it (GCRA and token bucket; a window's count stays).
func (l *Limiter) refund(ctx context.Context, rate []applied, idx []int) {
	for _, i := range idx {
		a := &rate[i]
		if !a.taken || !a.p.Limit.Refundable() {
			continue
		}
		if _, err := l.c.Take(ctx, a.key, a.p.Limit, -a.cost); err == nil {
			a.taken = false
		}
	}
}

// verdict sets the RateLimit field and returns the refusing enforcing
// policy (nil when admitted). Shadow refusals are reported, not enforced.
func (l *Limiter) verdict(w http.ResponseWriter, rate []applied) *applied {
	var refused *applied
	var items []string
	for i := range rate {
		a := &rate[i]
		if !a.known {
			continue
		}
		switch {
		case a.res.Limited && a.p.Shadow:
			l.event(Event{Kind: ShadowRefused, Policy: a.p.Name})
		case a.res.Limited: // the refusal with the longest wait decides (-1, never, longest of all)
			if refused == nil || a.res.RetryAfter < 0 || (refused.res.RetryAfter >= 0 && a.res.RetryAfter > refused.res.RetryAfter) {
				refused = a
			}
		}
		items = append(items, field(a))
	}
	if len(items) > 0 {
		w.Header().Set("RateLimit", strings.Join(items, ", "))
	}
	return refused
}

// field is one policy's RateLimit item: remaining and the seconds until
// it resets, or, refused, 0 and the seconds until it would pass.
func field(a *applied) string {
	r, t := a.res.Remaining, seconds(a.res.ResetAfter)
	if a.res.Limited {
		r = 0
		if a.res.RetryAfter >= 0 {
			t = seconds(a.res.RetryAfter)
		}
	}
	return fmt.Sprintf("%q;r=%d;t=%d", a.p.Name, clamp(r), clamp(t))
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// acquire takes a slot of every concurrency policy; on a refusal (or a
// failure under FailClosed) it gives back what it took. release gives back
// the rest; it runs after the handler, even when the handler panics.
func (l *Limiter) acquire(r *http.Request, conc []applied) (release func(), d Decision, ok bool) {
	var buf [12]byte
	rand.Read(buf[:])
	id := hex.EncodeToString(buf[:])
	var held []*applied
	var localHeld []*applied
	release = func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), l.opt.Timeout)
		defer cancel()
		for _, a := range held {
			if _, err := l.c.Release(ctx, a.key, a.id); err != nil {
				l.event(Event{Kind: Failure, Policy: a.p.Name, Err: err})
			}
		}
		for _, a := range localHeld {
			l.local.release(a.key)
		}
	}
	for i := range conc {
		a := &conc[i]
		a.id = id
		var res client.Result
		if l.remote(r, func(ctx context.Context) (err error) {
			res, err = l.c.Acquire(ctx, a.key, a.p.Concurrency, id, client.Reserve(a.reserve))
			return err
		}) {
			if !res.Limited {
				held = append(held, a)
				continue
			}
			if a.p.Shadow {
				l.event(Event{Kind: ShadowRefused, Policy: a.p.Name})
				continue
			}
			l.event(Event{Kind: Shed, Policy: a.p.Name})
			return release, Decision{Status: http.StatusServiceUnavailable, Policy: a.p.Name, RetryAfter: max(res.RetryAfter, time.Second)}, false
		}
		switch l.opt.OnError {
		case FailClosed:
			return release, Decision{Status: http.StatusServiceUnavailable, RetryAfter: l.breaker.retryAfter()}, false
		case FailLocal:
			if l.local.acquire(a.key, a.p.Concurrency.Limit) {
				localHeld = append(localHeld, a)
			} else if !a.p.Shadow {
				return release, Decision{Status: http.StatusServiceUnavailable, Policy: a.p.Name, RetryAfter: time.Second}, false
			}
		}
	}
	return release, Decision{}, true
}

// refuse answers a refused or shed request: the status, Retry-After (the
// wait rounded up plus a random spread of up to a tenth of it, at least a
// second), and the body.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, d Decision) {
	h := w.Header()
	if d.RetryAfter >= 0 {
		s := seconds(d.RetryAfter)
		spread := mrand.Int64N(max(1, s/10) + 1)
		h.Set("Retry-After", strconv.FormatInt(clamp(s+spread), 10))
	}
	if l.opt.Refused != nil {
		w.WriteHeader(d.Status)
		l.opt.Refused(w, r, d)
		return
	}
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(d.Status)
	detail := "the service is shedding load"
	if d.Status == http.StatusTooManyRequests {
		detail = fmt.Sprintf("policy %q refused the request", d.Policy)
	}
	json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(d.Status), "status": d.Status, "detail": detail,
	})
}
