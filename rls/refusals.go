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
type refusals struct {
	mu  sync.Mutex
	lru *simplelru.LRU[string, refusal]
}

type refusal struct {
	until time.Time
	cost  int64
}

func newRefusals(size int) *refusals {
	lru, _ := simplelru.NewLRU[string, refusal](size, nil)
	return &refusals{lru: lru}
}

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

// add remembers that key refuses cost until then.
func (r *refusals) add(key string, cost int64, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.lru.Peek(key); ok && e.until.After(until) && e.cost <= cost {
		return
	}
	r.lru.Add(key, refusal{until: until, cost: cost})
}

func (r *refusals) purge() {
	r.mu.Lock()
	r.lru.Purge()
	r.mu.Unlock()
}
