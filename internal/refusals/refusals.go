// Package refusals remembers refused keys until their RetryAfter, so that
// a front-end answers a request that would be refused without a call:
// rls (-refusal-cache) and httplimit (Options.RefusalCache) share it.
package refusals

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Cache remembers refused keys until their RetryAfter: a request of at
// least the refused cost against such a key before then would be refused
// by Redis too (no limit admits sooner because of more traffic), so it is
// refused here without a call. The time is taken when the call was sent,
// so a remembered refusal ends no later than Redis's own.
//
// It holds at most size keys and at most maxBytes bytes of them: each entry
// is counted as its key's length plus entryBytes. A bound in entries alone
// let 20,000 refused keys of 16 KiB take 626 MiB; in bytes, the default
// 16 MiB holds 1,000 such keys, or about 80,000 keys of 60 bytes, the
// least recently used leaving first.
type Cache struct {
	mu              sync.Mutex
	lru             *simplelru.LRU[string, refusal]
	bytes, maxBytes int64
}

// DefaultBytes bounds a cache when no bound is given: 16 MiB.
const DefaultBytes = 16 << 20

// EntryBytes is what an entry costs beside its key's bytes: the LRU's list
// element and map slot, and the refusal (TestRefusalBytes measures 131
// bytes an entry on amd64, and fails past 160).
const EntryBytes = 160

type refusal struct {
	until time.Time
	cost  int64
}

// New is a cache of at most size keys (at least 1) and maxBytes bytes
// (DefaultBytes when maxBytes ≤ 0), each entry counted as Cost counts it.
func New(size int, maxBytes int64) *Cache {
	if maxBytes <= 0 {
		maxBytes = DefaultBytes
	}
	r := &Cache{maxBytes: maxBytes}
	r.lru, _ = simplelru.NewLRU[string, refusal](max(size, 1), func(key string, _ refusal) { r.bytes -= Cost(key) })
	return r
}

// Cost is what an entry for key counts against the bound in bytes: its
// length and EntryBytes.
func Cost(key string) int64 { return int64(len(key)) + EntryBytes }

// Refuses reports whether key refuses cost at now, and sets *until to when
// it stops.
func (r *Cache) Refuses(key string, cost int64, now time.Time, until *time.Time) bool {
	if key == "" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.lru.Get(key)
	if !ok {
		return false
	}
	if !now.Before(e.until) {
		r.lru.Remove(key)
		return false
	}
	if cost < e.cost {
		return false // a smaller request may pass sooner: ask Redis
	}
	*until = e.until
	return true
}

// Add remembers that key refuses units (and more) until then.
func (r *Cache) Add(key string, units int64, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.lru.Peek(key)
	if ok && e.until.After(until) && e.cost <= units {
		return
	}
	if !ok {
		c := Cost(key)
		if c > r.maxBytes {
			return // larger than the whole cache
		}
		for r.bytes+c > r.maxBytes {
			r.lru.RemoveOldest()
		}
		r.bytes += c
	}
	r.lru.Add(key, refusal{until: until, cost: units})
}

// Forget drops key's refusal, if remembered: units were given back to it,
// so a request it refused may now pass.
func (r *Cache) Forget(key string) {
	r.mu.Lock()
	r.lru.Remove(key)
	r.mu.Unlock()
}

// Size is the entries held and the bytes they count.
func (r *Cache) Size() (entries int, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len(), r.bytes
}

// Purge forgets every refusal (a limit may have been raised).
func (r *Cache) Purge() {
	r.mu.Lock()
	r.lru.Purge()
	r.mu.Unlock()
}
