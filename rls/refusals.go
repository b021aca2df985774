package rls

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// refusals remembers refused keys until their retry_after: a request of at
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
type refusals struct {
	mu              sync.Mutex
	lru             *simplelru.LRU[string, refusal]
	bytes, maxBytes int64
}

// defaultRefusalBytes bounds the cache when no bound is given.
const defaultRefusalBytes = 16 << 20

// entryBytes is what an entry costs beside its key's bytes: the LRU's list
// element and map slot, and the refusal (TestRefusalBytes measures 131
// bytes an entry on amd64, and fails past 160).
const entryBytes = 160

type refusal struct {
	until time.Time
	cost  int64
}

func newRefusals(size int) *refusals { return newRefusalsBounded(size, defaultRefusalBytes) }

// newRefusalsBounded is a cache of at most size keys and maxBytes bytes
// (counted as entryCost counts them).
func newRefusalsBounded(size int, maxBytes int64) *refusals {
	r := &refusals{maxBytes: maxBytes}
	r.lru, _ = simplelru.NewLRU[string, refusal](size, func(key string, _ refusal) { r.bytes -= entryCost(key) })
	return r
}

// entryCost is what an entry for key counts against maxBytes.
func entryCost(key string) int64 { return int64(len(key)) + entryBytes }

// refuses reports whether key refuses cost at now, and sets *until to when
// it stops.
func (r *refusals) refuses(key string, cost int64, now time.Time, until *time.Time) bool {
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

// add remembers that key refuses units until then.
func (r *refusals) add(key string, units int64, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.lru.Peek(key)
	if ok && e.until.After(until) && e.cost <= units {
		return
	}
	if !ok {
		c := entryCost(key)
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

// size is the entries held and the bytes they count.
func (r *refusals) size() (entries int, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len(), r.bytes
}

func (r *refusals) purge() {
	r.mu.Lock()
	r.lru.Purge()
	r.mu.Unlock()
}
