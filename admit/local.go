package admit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/gcra"
)

// localLimiter limits in this process while Redis cannot (Local): each
// want's quota (q per w) as a GCRA of q at once and q per w, per key. It keeps at most max keys in a
// least-recently-used list: when full, a new key evicts the key used
// longest ago (a key whose limiter is full again is dropped at once), in
// constant time; a heavy user's key, used on every request, stays. Each
// process counts alone, so N processes admit up to N times a limit while
// Redis is away: a floor, not the limit. (Options.Lease's tier decides a
// hot key at its share of the limit instead, for lease.Options.Fallback.)
//
// When Redis answers again, what the local limiter still counts of a key
// (its GCRA's units not yet refilled at the quota's rate) is charged to
// the key's limiter with DEBT (settle), so the limit resumes as if it had
// seen this process's local decisions; the key is then forgotten here.
type localLimiter struct {
	mu   sync.Mutex
	tats *simplelru.LRU[string, localKey] // per key, Unix ns

	owing    atomic.Bool // keys decided here since the last settle
	settling atomic.Bool // a settle is running
	charged  atomic.Int64
}

// remove forgets key; ll.mu is held.
func (ll *localLimiter) remove(key string) { ll.tats.Remove(key) }

// localKey is a rate key decided here: its GCRA's theoretical arrival
// time and the policy's limit, which its charge goes to.
type localKey struct {
	tat   int64
	limit client.Limit
	q, w  int64 // the quota the GCRA runs (w in ns)
}

// owed is what k's local GCRA still counts at now: units not yet refilled.
func (k localKey) owed(now int64) int64 {
	if k.tat <= now || k.q <= 0 {
		return 0
	}
	return min(int64(math.Ceil(float64(k.tat-now)*float64(k.q)/float64(k.w))), k.q) // rounded up: a unit refilled in part is owed whole
}

func newLocal(max int) *localLimiter {
	ll := &localLimiter{}
	tats, err := simplelru.NewLRU[string, localKey](max, nil) // a key evicted for another is not charged
	if err != nil {
		panic(err) // max > 0: New sets it
	}
	ll.tats = tats
	return ll
}

// decide decides the wants locally at now, in order: a refusal by an
// enforcing want leaves the later ones undecided.
func (ll *localLimiter) decide(wants []*Want, now int64) {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	for _, a := range wants {
		q, w := a.Limit.Quota()
		g, err := gcra.New(q-1, q, max(int64(w/time.Second), 1))
		if err != nil {
			continue // no local verdict: the policy is not applied
		}
		k, _ := ll.tats.Peek(a.Key)
		d, err := g.ThrottleReserve(k.tat, now, a.Cost, min(a.Reserve, q))
		if err != nil {
			continue
		}
		if d.Write {
			if d.TAT <= now {
				ll.remove(a.Key)
			} else {
				ll.tats.Add(a.Key, localKey{tat: d.TAT, limit: a.Limit, q: q, w: int64(max(w, time.Second).Truncate(time.Second))})
				ll.owing.Store(true)
			}
		} else {
			ll.tats.Get(a.Key) // used: the key stays
		}
		a.Result = client.Result{Verdict: ratelimit.Verdict{Limited: d.Limited, Limit: d.Limit, Remaining: d.Remaining,
			RetryAfter: max(d.RetryAfter, ratelimit.Never), ResetAfter: d.ResetAfter}}
		a.Known, a.Local = true, true
		if d.Limited && !a.Shadow {
			return // a later policy is not charged
		}
	}
}

// settle charges each key decided here what its local limiter still
// counts, with DEBT, one call per key each bounded by timeout, and forgets
// the keys charged; a key whose charge fails stays, to be charged at the
// next settle. It reports what it charged, in keys and units; the first
// error it met.
func (ll *localLimiter) settle(c Redis, timeout time.Duration) (keys, units int64, err error) {
	type owed struct {
		key string
		k   localKey
	}
	ll.mu.Lock()
	ll.owing.Store(false)
	var all []owed
	for _, key := range ll.tats.Keys() {
		k, _ := ll.tats.Peek(key)
		all = append(all, owed{key, k})
	}
	ll.mu.Unlock()
	for _, o := range all {
		now := time.Now().UnixNano()
		n := o.k.owed(now)
		if n > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			_, cerr := c.Take(ctx, o.key, o.k.limit, n, client.Debt())
			cancel()
			if cerr != nil {
				ll.owing.Store(true)
				if err == nil {
					err = cerr
				}
				continue
			}
			keys++
			units += n
			ll.charged.Add(n)
		}
		ll.mu.Lock()
		if k, ok := ll.tats.Peek(o.key); ok && k.tat == o.k.tat { // not decided here again meanwhile
			ll.remove(o.key)
		} else if ok && n > 0 { // decided here again meanwhile: what was charged (o.k.tat − now of its GCRA's time) is Redis's now
			ll.tats.Add(o.key, localKey{tat: max(k.tat-(o.k.tat-now), now), limit: k.limit, q: k.q, w: k.w})
			ll.owing.Store(true)
		} else if ok {
			ll.owing.Store(true)
		}
		ll.mu.Unlock()
	}
	return keys, units, err
}

// keys is how many rate keys are kept.
func (ll *localLimiter) keys() int {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	return ll.tats.Len()
}

// chargeLocal charges Redis, in the background, what Local decided while
// it was away (localLimiter.settle), once a call is answered again; one
// charge at a time.
func (g *Gate) chargeLocal() {
	ll := g.local
	if ll == nil || !ll.owing.Load() || !ll.settling.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer ll.settling.Store(false)
		timeout := g.o.Timeout
		if timeout <= 0 {
			timeout = time.Second
		}
		keys, units, err := ll.settle(g.c, timeout)
		if units > 0 || err != nil {
			g.event(Event{Kind: Charged, Keys: keys, Units: units, Err: err})
		}
	}()
}
