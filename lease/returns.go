package lease

// Returns: units not spent in time go back, in the background.

import (
	"context"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// giveBack returns units to the limiter at key in the background.
func (t *Tier) giveBack(key string, l client.Limit, units int64) {
	if units <= 0 {
		return
	}
	back := func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
		defer cancel()
		t.refund(ctx, key, l, units)
	}
	if !t.spawn(back) { // closed: now, within Timeout
		back()
	}
}

// refund gives units back now, counting them returned or stranded (a
// fixed window's, which cannot go back, stranded with no call).
func (t *Tier) refund(ctx context.Context, key string, l client.Limit, units int64) error {
	if !refunds(l) {
		t.stats.stranded.Add(units)
		return nil
	}
	if _, err := t.c.Take(ctx, key, l, -units); err != nil {
		t.stats.stranded.Add(units)
		return err
	}
	t.stats.returned.Add(units)
	return nil
}

// sweeper gives back lapsed units, renews and gives back slots, and
// forgets idle keys, every Target (at most 250 ms).
func (t *Tier) sweeper() {
	defer close(t.swept)
	tick := time.NewTicker(min(t.o.Target, slotSlack/4)) // often enough to renew the slots held every half slotSlack
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.sweep(t.now())
		}
	}
}

// sweep gives back the units whose lifetime ended at now and forgets keys
// idle for a Lifetime (a hot key for registryLease) that hold nothing, owe
// nothing (a key whose grants fail, once its
// Fallback has passed).
func (t *Tier) sweep(now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, k := range t.all() {
		t.lock(k)
		t.giveBack(key, k.limit, k.expire(now))
		if k.debt > 0 && k.flight == nil && now >= k.pace && now-k.used >= int64(t.o.Target) { // no decision comes to charge it
			t.settle(key, k, now)
		}
		idle := int64(t.o.Lifetime)
		if k.hot { // kept as long as its registry slot: a pause (a stalled process, callers waiting on something else) keeps what it knows of the key, its fallback
			idle = max(idle, int64(registryLease))
		}
		if k.n == 0 && k.flight == nil && k.debt == 0 && now-k.used >= idle && (k.down == 0 || now-k.down >= int64(t.o.Fallback)) { // a key in fallback keeps what it was spending
			t.keys.Delete(key)
			k.hot, k.gone = false, true // a decision holding it takes the key's new entry
		}
		t.unlock(k, now)
	}
	t.sweepPools(now)
}
