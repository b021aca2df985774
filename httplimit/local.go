package httplimit

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/gcra"
)

// localLimiter limits in this process while Redis cannot: each rate
// policy's quota (q per w) as a GCRA of q at once and q per w, per key, and
// a count of slots per concurrency key. It keeps at most max keys in a
// least-recently-used list: when full, a new key evicts the key used
// longest ago (a key whose limiter is full again is dropped at once), in
// constant time; a heavy user's key, used on every request, stays. Each
// process counts alone, so N processes admit up to N times a limit while
// Redis is away: a floor, not the limit. (Options.Lease's tier decides a
// hot key at its share of the limit instead, for LeaseOptions.Fallback.)
type localLimiter struct {
	mu   sync.Mutex
	tats *simplelru.LRU[string, int64] // GCRA's theoretical arrival time per key, Unix ns
	held map[string]int64              // concurrency slots held per key: at most one per request in flight
}

func newLocal(max int) *localLimiter {
	tats, err := simplelru.NewLRU[string, int64](max, nil)
	if err != nil {
		panic(err) // max > 0: New sets it
	}
	return &localLimiter{tats: tats, held: map[string]int64{}}
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
		tat, _ := ll.tats.Get(a.Key)
		d, err := g.ThrottleReserve(tat, now, a.Cost, min(a.Reserve, q))
		if err != nil {
			continue
		}
		if d.Write {
			if d.TAT <= now {
				ll.tats.Remove(a.Key)
			} else {
				ll.tats.Add(a.Key, d.TAT)
			}
		}
		a.Result = client.Result{Verdict: ratelimit.Verdict{Limited: d.Limited, Limit: d.Limit, Remaining: d.Remaining,
			RetryAfter: max(d.RetryAfter, client.Never), ResetAfter: d.ResetAfter}}
		a.Known, a.local = true, true
		if d.Limited && !a.p.Shadow {
			return // a later policy is not charged
		}
	}
}

// keys is how many rate keys are kept.
func (ll *localLimiter) keys() int {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	return ll.tats.Len()
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
