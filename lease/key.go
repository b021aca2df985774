package lease

// A key's state on this process: the units held, in segments that
// lapse, and its lock.

import (
	"sync"
	"sync/atomic"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// segment is units granted together, spent until expires (Unix ns).
type segment struct{ units, expires int64 }

// leaseKey is one key's pool and demand.
//
// The pool is spent without the lock: avail is the units spendable now,
// taken by compare-and-swap, while the instant is before gate (the oldest
// units' expiry, the demand bucket's end; 0 for a key that does not
// lease). A spend that leaves fewer than low takes the lock to refill
// ahead. Until paced, a decision the pool cannot cover is refused without
// the lock. Under the lock, sync folds what was spent and refused into the
// segments and the counts, and publish sets these again.
type leaseKey struct {
	avail            atomic.Int64
	_                [56]byte // avail's cache line is its own: every spend writes it
	gate, low, paced atomic.Int64
	limitV, resetV   atomic.Int64 // the last grant's Limit and ResetAfter
	_                [24]byte
	refusedN         atomic.Int64 // decisions refused without the lock since sync
	refusedU         atomic.Int64 // and the units they asked: demand
	_                [48]byte
	mu               sync.Mutex
	synced           int64 // avail as publish left it
	gone             bool  // the sweep forgot it
	limit            client.Limit
	segs             [4]segment // oldest first
	n                int
	// Demand: units asked in the Target-long bucket starting at bucket,
	// decisions in it, and the units per Target smoothed over buckets.
	bucket, asked, seen int64
	rate                float64
	hot                 bool
	used                int64  // the last decision, Unix ns
	calling             bool   // a cold decision's call is in flight
	queue               *batch // the decisions that share the next
	flight              chan struct{}
	last                client.Result // the last grant's answer
	pace                int64         // no grant before this instant (Unix ns), after a short one
	near                bool          // a grant was short or left less than it granted, and the limit has not held a pace span's accrual since
	// Near the limit each grant is this process's share since the last:
	// the limit's rate over procs, the processes the key's registry last
	// counted (registration), and what the last fell short by (owed).
	sentAt, owed int64
	registration
	// What it spends: units admitted in the current bucket, and per Target
	// smoothed; while grants fail (since down, the last error err), a
	// bucket of fb units refilled at that rate since fbAt decides.
	spent     int64
	spentRate float64
	down      int64
	err       error
	fb        float64
	fbAt      int64
	// What the fallback owes (see owed): units it admitted and the
	// limiter has not been charged for (debt); the instant the limiter was
	// last seen full again (fullAt: a grant's answer plus its ResetAfter);
	// a fixed window's end as its last grant saw it (winEnd) and what the
	// fallback may still spend of that window (fwLeft).
	debt, fullAt, winEnd, fwLeft int64
	fwOthers                     int64 // what the other processes may have taken of the window since the last grant: at least what they took between the last two
	keep, keepEnd                int64 // after a fallback, grants leave keep units (RESERVE) until keepEnd: the others' fallback shares of that window, until they can have charged them
	settled                      int64 // when its last charge was sent: refills before are accounted for
}

// keyState names what a key is doing on this process, as a decision finds
// it: under the key's lock, once its lapsed units went back. Each
// decision's path is its key's state (Take, Acquire).
type keyState uint8

const (
	holding keyState = iota // it holds the units (slots) asked: they are spent here, with no call
	closed                  // the tier was closed: the limiter decides
	cold                    // not hot on this process: the limiter decides, one call at a time, the decisions meanwhile sharing the next
	failing                 // its grants fail: it decides in fallback, for Fallback, then returns the error
	paced                   // near the limit between grants, or it waited a Timeout already: refused here until the next grant
	waiting                 // short of units: a grant is in flight, or sent now, and the decision waits for it
)

var stateNames = [...]string{holding: "holding", closed: "closed", cold: "cold", failing: "failing", paced: "paced", waiting: "waiting"}

func (s keyState) String() string { return stateNames[s] }

// state is k's state for a decision of cost at now (late: it waited a
// Timeout already; shut: the tier is closed); k.mu is held.
func (k *leaseKey) state(now, cost int64, late, shut bool) keyState {
	switch {
	case k.units() >= cost:
		return holding
	case shut:
		return closed
	case !k.hot:
		return cold
	case k.down != 0:
		return failing
	case now < k.pace || late:
		return paced
	}
	return waiting
}

func (k *leaseKey) units() int64 {
	var u int64
	for i := range k.n {
		u += k.segs[i].units
	}
	return u
}

// spend takes cost units, the oldest first; the caller checked units.
func (k *leaseKey) spend(cost int64) {
	for cost > 0 && k.n > 0 {
		s := &k.segs[0]
		take := min(s.units, cost)
		s.units -= take
		cost -= take
		if s.units == 0 {
			copy(k.segs[:], k.segs[1:k.n])
			k.n--
		}
	}
}

// add holds units granted now until expires; a full ring folds the two
// oldest segments into one expiring with the older, which only shortens
// a unit's life.
func (k *leaseKey) add(units, expires int64) {
	if k.n == len(k.segs) {
		k.segs[1].units += k.segs[0].units
		k.segs[1].expires = k.segs[0].expires
		copy(k.segs[:], k.segs[1:k.n])
		k.n--
	}
	k.segs[k.n] = segment{units, expires}
	k.n++
}

// expire drops the units whose lifetime ended at now: how many.
func (k *leaseKey) expire(now int64) int64 {
	var gone int64
	for k.n > 0 && k.segs[0].expires <= now {
		gone += k.segs[0].units
		copy(k.segs[:], k.segs[1:k.n])
		k.n--
	}
	return gone
}

// take spends cost units held (the caller checked) and counts them.
func (t *Tier) take(k *leaseKey, cost int64) {
	k.spend(cost)
	k.spent += cost
	t.stats.local.Add(cost)
}

// locked is avail while the lock holds the pool: the fast path then
// leaves the decision to the lock.
const locked = -1

// lock takes k's lock and folds in what was spent and refused without it.
func (t *Tier) lock(k *leaseKey) {
	k.mu.Lock()
	r := k.avail.Swap(locked)
	if used := k.synced - r; used > 0 {
		k.spend(used)
		k.spent += used
		k.asked += used
		t.stats.local.Add(used)
	}
	k.synced = 0
	if n := k.refusedN.Swap(0); n > 0 {
		t.stats.refused.Add(n)
		k.asked += k.refusedU.Swap(0)
	}
}

// unlock publishes what may be decided without the lock at now, and
// releases it.
func (t *Tier) unlock(k *leaseKey, now int64) {
	u := k.units()
	gate, low, paced := int64(0), int64(-1), int64(0)
	if k.hot && !t.shut.Load() {
		gate = k.bucket + int64(t.o.Target)
		if k.n > 0 {
			gate = min(gate, k.segs[0].expires)
		}
		if k.flight == nil && now >= k.pace && k.down == 0 {
			low = (k.size(now, int64(t.o.Target), 1) + 1) / 2
		}
		if k.down == 0 {
			paced = k.pace
		}
	}
	k.synced = u
	k.gate.Store(gate)
	k.low.Store(low)
	k.paced.Store(paced)
	k.limitV.Store(k.last.Limit)
	k.resetV.Store(int64(k.last.ResetAfter))
	k.avail.Store(u)
	k.mu.Unlock()
}
