package httplimit

import (
	"sync"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/gcra"
)

// localLimiter limits in this process while Redis cannot: each rate
// policy's quota (q per w) as a GCRA of q at once and q per w, per key, and
// a count of slots per concurrency key. It keeps at most max keys: when
// full, a new key first drops the keys whose limiter is full again, then an
// arbitrary one. Each process counts alone, so N processes admit up to N
// times a limit while Redis is away: a floor, not the limit.
type localLimiter struct {
	max  int
	mu   sync.Mutex
	tats map[string]int64 // GCRA's theoretical arrival time per key, Unix ns
	held map[string]int64 // concurrency slots held per key
}

func newLocal(max int) *localLimiter {
	return &localLimiter{max: max, tats: map[string]int64{}, held: map[string]int64{}}
}

// decide decides every rate policy locally at now.
func (ll *localLimiter) decide(rate []applied, now int64) {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	for i := range rate {
		a := &rate[i]
		q, w := a.p.Limit.Quota()
		g, err := gcra.New(q-1, q, max(int64(w/time.Second), 1))
		if err != nil {
			continue // no local verdict: the policy is not applied
		}
		d, err := g.ThrottleReserve(ll.tats[a.key], now, a.cost, min(a.reserve, q))
		if err != nil {
			continue
		}
		if d.Write {
			ll.store(a.key, d.TAT, now)
		}
		a.res = client.Result{Limited: d.Limited, Limit: d.Limit, Remaining: d.Remaining,
			RetryAfter: max(d.RetryAfter, client.Never), ResetAfter: d.ResetAfter}
		a.known = true
		if d.Limited && !a.p.Shadow {
			return // a later policy is not charged
		}
	}
}

func (ll *localLimiter) store(key string, tat, now int64) {
	if tat <= now {
		delete(ll.tats, key)
		return
	}
	if _, ok := ll.tats[key]; !ok && len(ll.tats) >= ll.max {
		for k, t := range ll.tats {
			if t <= now {
				delete(ll.tats, k)
			}
		}
		for k := range ll.tats {
			if len(ll.tats) < ll.max {
				break
			}
			delete(ll.tats, k)
		}
	}
	ll.tats[key] = tat
}

func (ll *localLimiter) acquire(key string, limit int64) bool {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	if ll.held[key] >= limit {
		return false
	}
	ll.held[key]++
	return true
}

func (ll *localLimiter) release(key string) {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	if ll.held[key]--; ll.held[key] <= 0 {
		delete(ll.held, key)
	}
}
