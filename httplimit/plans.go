package httplimit

import (
	"context"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// CacheLimits makes a Policy.LimitFunc of lookup, a call that finds a
// key's limit (its account's plan in a database), remembering each key's
// answer for ttl, at most size keys (the least recently used leaving
// first; 10,000 when size ≤ 0): a key's plan costs one lookup a ttl, and
// the requests that find it missing at once share that one lookup. A
// lookup that fails is not remembered, and its requests get the policy's
// Limit (the default plan). The lookup gets the first waiting request's
// context.
//
//	plans := map[string]client.Limit{"free": client.PerMinute(60), "pro": client.PerMinute(6000)}
//	httplimit.Policy{Name: "plan", Key: httplimit.APIKey(""), Limit: plans["free"],
//		LimitFunc: httplimit.CacheLimits(func(ctx context.Context, key string) (client.Limit, error) {
//			plan, err := accounts.Plan(ctx, key)
//			return plans[plan], err
//		}, time.Minute, 0)}
func CacheLimits(lookup func(ctx context.Context, key string) (client.Limit, error), ttl time.Duration, size int) func(*http.Request, string) client.Limit {
	if size <= 0 {
		size = 10000
	}
	c := &limitCache{lookup: lookup, ttl: ttl, now: time.Now, pending: map[string]*pendingLimit{}}
	c.lru, _ = simplelru.NewLRU[string, cachedLimit](size, nil)
	return c.limit
}

type cachedLimit struct {
	limit client.Limit
	until time.Time
}

type pendingLimit struct {
	done  chan struct{}
	limit client.Limit
}

type limitCache struct {
	lookup  func(context.Context, string) (client.Limit, error)
	ttl     time.Duration
	now     func() time.Time
	mu      sync.Mutex
	lru     *simplelru.LRU[string, cachedLimit]
	pending map[string]*pendingLimit // lookups running
	lookups int64                    // lookups made, for tests
}

func (c *limitCache) limit(r *http.Request, key string) client.Limit {
	c.mu.Lock()
	if e, ok := c.lru.Get(key); ok && c.now().Before(e.until) {
		c.mu.Unlock()
		return e.limit
	}
	if p, ok := c.pending[key]; ok {
		c.mu.Unlock()
		select {
		case <-p.done:
			return p.limit
		case <-r.Context().Done():
			return client.Limit{}
		}
	}
	p := &pendingLimit{done: make(chan struct{})}
	c.pending[key] = p
	c.lookups++
	c.mu.Unlock()
	lim, err := c.lookup(r.Context(), key)
	c.mu.Lock()
	delete(c.pending, key)
	if err == nil {
		p.limit = lim
		c.lru.Add(key, cachedLimit{limit: lim, until: c.now().Add(c.ttl)})
	}
	c.mu.Unlock()
	close(p.done)
	return p.limit
}

// sharedKeys are the KeyFuncs that key every client alike: a concurrency
// policy keyed by one of them is a cap the service sheds at (503), any
// other is the client's own share (429).
var sharedKeys = []uintptr{reflect.ValueOf(globalKey).Pointer(), reflect.ValueOf(routeKey).Pointer()}

// shared reports whether k is Global or Route.
func shared(k KeyFunc) bool {
	pc := reflect.ValueOf(k).Pointer()
	for _, s := range sharedKeys {
		if pc == s {
			return true
		}
	}
	return false
}
