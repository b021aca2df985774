package lease

import (
	"context"
	"errors"
	"iter"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/clientx"
)

// Tier is a local tier over a Client: on a key that is hot on this
// process, it decides from units the limiter at the key granted it ahead
// (Take with UpTo), with no Redis call and no allocation, and asks for
// more before they run out. A key stays exact — decided by the limiter
// per decision, as Client.Take — until it is hot: Hot decisions within
// one Target. A cold key has at most one call in flight: the decisions of
// one cost that come meanwhile share the next (UpTo), and the first
// Granted of them are admitted, as that many calls in a row would be.
//
// Each grant is sized to what the key's measured local demand needs for
// Target (50 ms by default), at most the limit's burst; units not spent
// within Lifetime (τ, 200 ms by default) of their grant are given back
// (a negative Take), as are all on Close and when the key goes cold. A
// key whose grant came back short or refused asks again about a Target
// later (at an instant drawn from [Target/2, 3·Target/2); twice as often
// where the limit's burst fills in less than two Targets), or after its
// RetryAfter when longer; requests in between that the units held cannot
// cover are refused here, with the time until then as RetryAfter: a
// saturated key costs this process about one call per Target, however
// many requests it refuses.
//
// The bound: every unit spent was admitted by the limiter, at most τ
// before it is spent. A leased GCRA or token bucket therefore admits, in
// any window, at most rate × τ more than the exact limiter would: with
// PerSecond(1000) and τ = 200 ms, 200 more in any window. A fixed
// window leases too: its units are held until their window ends (the
// grant's ResetAfter) rather than τ, and cannot be given back (they are
// counted Stranded when unspent), so each window admits exactly its
// limit, no more. Other limits (the sliding window and log, whose units
// would count before they are spent, and the shaper), calls with options,
// costs of 0, refunds and costs above the burst go exact.
//
// A leased decision's Result has RetryAfter Never, Remaining the units this
// process still holds (a lower bound of what the key admits), and Limit
// and ResetAfter from the key's last grant.
//
// Each process leasing a key holds a slot, under an id of its own, in the
// key's registry: a concurrency limit in the key's slot named
// "{key}:leases" ("key:leases" for a key with a hash tag), renewed with a
// grant 250 ms after it joins, then at most once a second, lapsing 2 s
// after the last, and left on Close. Its holders are N, the processes
// sharing the key. Near the
// limit each grant is this process's share of the limit's rate since its
// last grant — rate/N × the time — and what the last fell short by, so
// that N processes asking more than the limit admits get a share each
// (Jain's index 0.997 to 0.9997 for eight), and one whose demand steps
// up takes no more than its share.
//
// When Redis fails (a grant's call errs or times out), a hot key spends
// what it holds, then decides here at limit/N, or at the rate it was
// spending when Redis last answered where that is less (a count taken
// while the others joined is low), for Fallback (10 s by default), and
// after that returns the error, for the caller's own failure policy.
// Summed over processes that is what the limit admits, not N × the
// limit. A fixed window's fallback spends at most its share (over N) of
// what its window had left when last seen, and nothing of the next window.
// A grant is tried again in the background once a Target (each bounded
// by Timeout; a peek first, which changes nothing should it run late),
// and the first that answers ends the fallback. What the fallback
// admitted is charged to the key (DEBT) before that grant: a GCRA or
// token bucket what it admitted beyond the refill its share got since the
// limiter was last seen full, so the limiter resumes as if it had seen
// each decision when it was made, and an outage's excess (at most one
// burst) is repaid by the next burst; a fixed window all of it while its
// window lasts (Uncharged after), so it never passes its limit. These
// bounds hold when the processes lose Redis together (it stops, restarts,
// fails over); a process that alone decides in fallback while the others'
// grants go on (its own stall past Timeout, a partition of its own) may
// admit its fallback share more. No decision waits longer than Timeout for
// a grant, nor a cold key's for the call it shares, but while the client's
// start-up work runs (the engine probe, the library load: its own 2 s
// bound) the decisions wait for it as the client's calls do.
//
// All decides several such limits together from the units held (see
// Tier.All); Acquire and Release hand out, on a hot concurrency key,
// the slots the process holds at the key, and exceed nothing (see
// Tier.Acquire). The windows and the shaper stay exact.
type Tier struct {
	c      *client.Client
	o      Options
	mu     sync.Mutex   // makes and forgets entries
	keys   sync.Map     // key → *leaseKey
	pools  sync.Map     // concurrency key → *slotPool
	pooled atomic.Int64 // pools made: each holds its slots under an id of its own
	stats  leaseCounters
	id     string         // this process's id in the keys' registries
	calls  sync.WaitGroup // refills and returns in flight
	gate   sync.RWMutex   // spawn holds it read, Close write: no call starts once Close waits
	stop   chan struct{}
	swept  chan struct{}
	shut   atomic.Bool
}

// spawn runs f in a goroutine counted in t.calls, unless the tier is
// closed: false then.
func (t *Tier) spawn(f func()) bool {
	t.gate.RLock()
	defer t.gate.RUnlock()
	if t.shut.Load() {
		return false
	}
	t.calls.Add(1)
	go func() {
		defer t.calls.Done()
		f()
	}()
	return true
}

// Options tunes a Tier; a zero field takes its default.
type Options struct {
	// Target is the time one grant is sized to last at the key's local
	// demand: 50 ms by default.
	Target time.Duration
	// Lifetime (τ) is how long granted units may be spent: what is left
	// that long after its grant is given back. 4 × Target by default; it
	// bounds how far a leased limiter exceeds the exact one (rate × τ).
	Lifetime time.Duration
	// Hot is how many decisions on a key within one Target make it lease:
	// 8 by default. Keys below it stay exact.
	Hot int64
	// Timeout bounds each call the tier sends for a key (grants, returns),
	// and so how long a decision waits for one (and, while the client's
	// start-up work runs, for that too): 1 s by default.
	Timeout time.Duration
	// Fallback is how long a hot key whose grants fail decides here, at
	// the rate it was spending, before its decisions return the error: 10 s
	// by default.
	Fallback time.Duration
	// Now is the clock: time.Now by default.
	Now func() time.Time
}

// Stats counts what a Tier did since it was made.
type Stats struct {
	Local     int64         // units spent from grants: decisions admitted here, for a cost of 1; for concurrency, slots handed out here
	Refused   int64         // decisions refused here, between paced grants
	Exact     int64         // decisions sent to the limiter one by one (cold keys, other limits)
	Grants    int64         // grant calls (UpTo) sent
	Granted   int64         // units they granted (and concurrency slots)
	Returned  int64         // units given back (and concurrency slots)
	Stranded  int64         // units (and slots) that could not be given back (the call failed; a fixed window's, unspent when held no longer)
	Waits     int64         // decisions that waited on a grant in flight or sent one
	Unclaimed int64         // grants whose answer never came (their units are the limiter's until they lapse)
	Fallback  int64         // decisions made here while grants failed, admitted or not
	Down      time.Duration // time keys spent in fallback, summed, up to their last recovery
	Registers int64         // renewals of this process's slot in the keys' registries (calls)
	Coalesced int64         // decisions on cold keys that shared a call with others (UpTo), not counted in Exact
	Charged   int64         // units charged to keys (DEBT) for what their fallback admitted, when Redis answered again
	Uncharged int64         // units a fallback admitted that could not be charged: a fixed window's once its window had ended; any whose charge failed at Close
}

type leaseCounters struct {
	local, refused, exact, grants, granted, returned, stranded, waits, unclaimed, fallback, down, registers, coalesced, charged, uncharged atomic.Int64
}

// New returns a local tier over c; Close it to give back what it
// holds.
func New(c *client.Client, o Options) *Tier { return makeTier(c, o, true) }

// newTier is New, with the sweeper running every Target or, for
// tests that sweep by themselves, not.
func makeTier(c *client.Client, o Options, sweeper bool) *Tier {
	if o.Target <= 0 {
		o.Target = 50 * time.Millisecond
	}
	if o.Lifetime <= 0 {
		o.Lifetime = 4 * o.Target
	}
	if o.Hot <= 0 {
		o.Hot = 8
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Fallback <= 0 {
		o.Fallback = 10 * time.Second
	}
	l := &Tier{c: c, o: o, stop: make(chan struct{}), swept: make(chan struct{}),
		id: "lease:" + strconv.FormatUint(rand.Uint64(), 36)}
	if sweeper {
		go l.sweeper()
	} else {
		close(l.swept)
	}
	return l
}

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

// The tier's tuning numbers, each with its reason.
const (
	// demandBuckets: a key's demand is counted per Target, each Target
	// passed halving the past; after 8 the past weighs under 1/256 and
	// the rest are skipped at once (a key idle for an hour costs 8 steps,
	// not 72,000).
	demandBuckets = 8
	// spentTargets: what a key spends while Redis answers is averaged over
	// about 16 Targets (800 ms by default), long enough to smooth one
	// burst, short enough to follow a change of load within a second; a
	// fallback spends at most at that rate (fallbackRate).
	spentTargets = 16
	// keepTargets: after a fallback, grants leave the other processes'
	// shares of the window for 3 Targets, the time each takes to find
	// Redis again (its next call, within a Target) and charge what it
	// admitted, with a Target to spare.
	keepTargets = 3
	// windowEndMargin: a fixed window's ResetAfter is rounded up to the
	// millisecond and measured from the server's receipt; 2 ms less from
	// the send puts the window's end no later than the server's.
	windowEndMargin = 2 * time.Millisecond
)

// observe counts a decision of cost at now in the demand buckets, and
// makes the key hot when a bucket sees hot decisions.
func (k *leaseKey) observe(now, target int64, cost, hot int64) {
	if now >= k.bucket+target {
		for i := 0; i < demandBuckets && now >= k.bucket+target; i++ { // each bucket passed halves the past
			k.rate = (k.rate + float64(k.asked)) / 2
			if k.down == 0 { // what it spends while Redis answers
				k.spentRate += (float64(k.spent) - k.spentRate) / spentTargets
			}
			k.asked, k.seen, k.spent = 0, 0, 0
			k.bucket += target
		}
		if now >= k.bucket+target {
			k.bucket, k.rate = now, 0
			if k.down == 0 {
				k.spentRate = 0
			}
		}
	}
	k.asked += cost
	k.seen++
	k.used = now
	if k.seen >= hot {
		k.hot = true
	}
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

// fast decides cost at now without the lock when it can: from the units
// held, or refused while the key is paced. ok is false when the lock must
// decide.
func (t *Tier) fast(key string, k *leaseKey, now, cost int64) (r client.Result, ok bool) {
	if now >= k.gate.Load() {
		return r, false
	}
	r.Limit, r.ResetAfter = k.limitV.Load(), time.Duration(k.resetV.Load())
	for {
		a := k.avail.Load()
		if a < 0 { // the lock holds the pool: it decides
			return r, false
		}
		if a < cost {
			break
		}
		if k.avail.CompareAndSwap(a, a-cost) {
			if a-cost < k.low.Load() { // refill ahead
				t.lock(k)
				t.refillAhead(key, k, now)
				t.unlock(k, now)
			}
			r.Remaining, r.RetryAfter = a-cost, ratelimit.Never
			return r, true
		}
	}
	if p := k.paced.Load(); now < p {
		k.refusedU.Add(cost)
		k.refusedN.Add(1)
		r.Limited, r.RetryAfter = true, time.Duration(p-now)
		return r, true
	}
	return r, false
}

// fallback decides cost at now while grants fail: from a bucket refilled
// at fallbackRate, holding one Target's worth. A fixed window spends
// besides at most fwLeft, its share of what its window had left when last
// seen, and nothing once that window has ended: nothing of the next until
// Redis confirms it. What it admits is owed to the limiter (debt), and
// charged when Redis answers again (see owed).
func (k *leaseKey) fallback(now, target, cost int64) client.Result {
	if r, refused := k.fallbackRefusal(now, target, cost); refused {
		return r
	}
	return k.fallbackSpend(cost)
}

// fallbackRefusal refills the fallback's bucket to now and reports whether
// it refuses cost, with the refusal; it spends nothing.
func (k *leaseKey) fallbackRefusal(now, target, cost int64) (r client.Result, refused bool) {
	per := k.fallbackRate(target) // units per ns
	rate := per * float64(target) // per Target
	k.fb = min(k.fb+per*float64(now-k.fbAt), max(rate, float64(cost)))
	k.fbAt = now
	r = client.Result{Verdict: ratelimit.Verdict{Limit: k.last.Limit, Limited: true, ResetAfter: k.last.ResetAfter}}
	switch {
	case isFW(k.limit) && (now >= k.winEnd || k.fwLeft < cost): // the window's share is spent, or the window is over
		r.RetryAfter = time.Duration(target)
		if now < k.winEnd {
			r.RetryAfter = time.Duration(k.winEnd - now)
		}
		return r, true
	case k.fb < float64(cost):
		r.RetryAfter = time.Duration(math.Ceil((float64(cost) - k.fb) / per))
		return r, true
	}
	return client.Result{}, false
}

// fallbackSpend spends cost of the fallback's bucket, refilled and found
// to hold it by fallbackRefusal, and owes it to the limiter.
func (k *leaseKey) fallbackSpend(cost int64) client.Result {
	r := client.Result{Verdict: ratelimit.Verdict{Limit: k.last.Limit, RetryAfter: ratelimit.Never, ResetAfter: k.last.ResetAfter}}
	k.fb -= float64(cost)
	k.spent += cost
	k.debt += cost
	r.Remaining = int64(k.fb)
	if isFW(k.limit) {
		k.fwLeft -= cost
		r.Remaining = min(r.Remaining, k.fwLeft)
	}
	return r
}

// fallbackRate is the rate the fallback decides at, in units per ns: the
// limit's rate over the processes the key's registry counted, or the rate
// the key was spending when Redis last answered where that is less (what
// it spent is its share when the count is stale).
func (k *leaseKey) fallbackRate(target int64) float64 {
	rate := rateOf(k.limit) * float64(target) // units per Target
	if k.procs > 0 {
		rate /= float64(k.procs)
	}
	return min(rate, k.spentRate) / float64(target)
}

// owing is a charge for the fallback's decisions on its way to the
// limiter: the units to charge (DEBT), the debt they stand for, and the
// key's settled instant before it (both put back should the charge fail).
type owing struct{ charge, debt, settled int64 }

// owed takes the fallback's debt off k at now, when a call is about to
// reach Redis again, and returns what to charge the limiter for it.
//
// A fixed window is charged all of it while the window it was decided in
// lasts; after, there is nothing to charge it to (counted Uncharged). A
// GCRA or token bucket is charged what the fallback admitted beyond what
// the limiter refilled, at the fallback's rate (this process's share),
// since the latest of the fallback's start, the instant the limiter was
// last seen full, and the last charge: the limiter then holds the state it
// would hold had it seen each decision when it was made, not all of them
// at once (which would refuse for as long as the outage lasted).
func (t *Tier) owed(k *leaseKey, now int64) owing {
	o := owing{debt: k.debt, settled: k.settled}
	k.debt = 0
	switch {
	case isFW(k.limit):
		if now >= k.winEnd {
			t.stats.uncharged.Add(o.debt)
			return owing{settled: k.settled}
		}
		o.charge = o.debt
	case o.debt > 0 || k.down != 0:
		since := max(k.fullAt, k.down, k.settled)
		credit := k.fallbackRate(int64(t.o.Target)) * float64(max(now-since, 0))
		o.charge = max(o.debt-int64(credit), 0)
		k.settled = now
	}
	return o
}

// unpaid puts back a charge that failed.
func (k *leaseKey) unpaid(o owing) {
	k.debt += o.debt
	k.settled = o.settled
}

// size is the units to ask for: what the key's demand needs for one
// Target, at least cost, at most the limit's burst (what it grants at
// once) and ratelimit.MaxUpTo.
func (k *leaseKey) size(now, target, cost int64) int64 {
	n := int64(math.Ceil(max(k.rate, float64(k.asked))))
	if k.near && k.procs > 0 {
		span := k.paceSpan(target)
		since := min(max(now-k.sentAt, span/4), 2*span) // a grant of none paces from a quarter span
		share := int64(math.Ceil(rateOf(k.limit) * float64(since) / float64(k.procs)))
		n = min(n, share+k.owed)
	}
	return max(min(n, burst(k.limit), ratelimit.MaxUpTo), cost, 1)
}

// paceSpan is how often a paced key asks, on average: once a Target, or
// twice in the time the limit takes to fill its burst when that is less
// (a limit whose burst is less than a Target of its rate would otherwise
// fill, and lose what accrues, between asks).
func (k *leaseKey) paceSpan(target int64) int64 {
	fill := float64(burst(k.limit)) / rateOf(k.limit) // ns
	return max(min(target, int64(fill/2)), 1)
}

// rateOf is a GCRA or token-bucket limit's rate, in units per ns; a fixed
// window's limit over its window.
func rateOf(l client.Limit) float64 {
	n, m, period := l.Params()
	if isFW(l) {
		return float64(n) / float64(period)
	}
	return float64(m) / float64(period)
}

// isFW and isGCRA tell a fixed window's and a GCRA's limit.
func isFW(l client.Limit) bool   { return l.Family() == "FW" }
func isGCRA(l client.Limit) bool { return l.Family() == "GCRA" }

// limitN is l's first parameter: a GCRA's burst, a bucket's capacity, a
// window's limit.
func limitN(l client.Limit) int64 {
	n, _, _ := l.Params()
	return n
}

// period is l's period, or its window's length.
func period(l client.Limit) time.Duration {
	_, _, p := l.Params()
	return p
}

// burst is what a GCRA or token-bucket limit admits at once.
func burst(l client.Limit) int64 {
	if isGCRA(l) {
		return limitN(l) + 1
	}
	return limitN(l) // a bucket's capacity
}

// entry is key's pool, made for limit l; a key asked with another limit
// starts again (its units are given back).
func (t *Tier) entry(key string, l client.Limit) *leaseKey {
	if v, ok := t.keys.Load(key); ok && v.(*leaseKey).limit == l {
		return v.(*leaseKey)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.keys.Load(key); ok {
		old := v.(*leaseKey)
		if old.limit == l {
			return old
		}
		t.lock(old)
		t.giveBack(key, old.limit, old.units())
		if o := t.owed(old, t.now()); o.charge > 0 {
			pay := func() {
				ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
				defer cancel()
				_ = t.pay(ctx, key, old.limit, o)
			}
			if !t.spawn(pay) {
				pay()
			}
		}
		old.n, old.hot, old.gone = 0, false, true
		t.unlock(old, t.now())
	}
	k := &leaseKey{limit: l, registration: registration{registry: registryKey(key)}}
	t.keys.Store(key, k)
	return k
}

func (t *Tier) now() int64 {
	if t.o.Now != nil {
		return t.o.Now().UnixNano()
	}
	return time.Now().UnixNano()
}

// Take is Client.Take, decided from units held where the key is hot on
// this process (see Tier).
func (t *Tier) Take(ctx context.Context, key string, l client.Limit, cost int64, opts ...client.Option) (client.Result, error) {
	if len(opts) > 0 || cost <= 0 || !l.Leasable() || cost > burst(l) || t.shut.Load() {
		t.stats.exact.Add(1)
		return t.c.Take(ctx, key, l, cost, opts...)
	}
	k := t.entry(key, l)
	if r, ok := t.fast(key, k, t.now(), cost); ok {
		return r, nil
	}
	target := int64(t.o.Target)
	counted, late := false, false
	var waitUntil time.Time
	for {
		now := t.now()
		t.lock(k)
		if k.gone { // swept, retired, or closed: the key's entry now
			t.unlock(k, now)
			if t.shut.Load() {
				break
			}
			k = t.entry(key, l)
			continue
		}
		if !counted {
			k.observe(now, target, cost, t.o.Hot)
			counted = true
		}
		if gone := k.expire(now); gone > 0 {
			t.giveBack(key, l, gone)
		}
		if k.units() >= cost {
			t.take(k, cost)
			r := client.Result{Verdict: ratelimit.Verdict{Limit: k.last.Limit, Remaining: k.units(), RetryAfter: ratelimit.Never, ResetAfter: k.last.ResetAfter}}
			t.refillAhead(key, k, now)
			t.unlock(k, now)
			return r, nil
		}
		if !k.hot && !t.shut.Load() { // cold: one call, shared with the decisions that come while it is in flight
			t.unlock(k, now)
			return t.coalesce(ctx, key, l, k, cost)
		}
		if t.shut.Load() { // closed while this decision was on its way
			t.unlock(k, now)
			break
		}
		if k.down != 0 {
			if k.flight == nil && now >= k.pace { // try again, in the background
				t.refill(key, k, k.size(now, target, cost))
			}
			if now-k.down >= int64(t.o.Fallback) || k.spentRate == 0 {
				err := k.err
				t.unlock(k, now)
				return client.Result{}, err
			}
			r := k.fallback(now, target, cost)
			t.unlock(k, now)
			t.stats.fallback.Add(1)
			return r, nil
		}
		// Paced, or waited a Timeout already: refused here until the next grant.
		if now < k.pace || late {
			r := k.refusal(now, target)
			t.unlock(k, now)
			t.stats.refused.Add(1)
			return r, nil
		}
		// Wait for the grant in flight, or send one (in the background, on
		// the tier's own Timeout: a caller's deadline never fails a grant).
		if waitUntil.IsZero() { // waits are real time, whatever clock decides
			t.stats.waits.Add(1)
			waitUntil = time.Now().Add(t.o.Timeout)
		}
		if k.flight == nil {
			t.refill(key, k, k.size(now, target, cost))
		}
		ch := k.flight
		t.unlock(k, now)
		if ch == nil { // closed meanwhile
			break
		}
		timedOut, err := t.await(ctx, ch, waitUntil) // no decision waits past Timeout
		if err != nil {
			return client.Result{}, err
		}
		late = late || timedOut
	}
	t.stats.exact.Add(1)
	return t.c.Take(ctx, key, l, cost)
}

// await waits for ch until deadline or ctx's end, as the client waits
// for its own calls (clientx.Await): start-up work is not the call's to
// pay for.
func (t *Tier) await(ctx context.Context, ch <-chan struct{}, deadline time.Time) (late bool, err error) {
	return clientx.Await(t.c, ctx, ch, deadline)
}

// batch is the decisions of one cost on a cold key that came while its
// call was in flight: they share the next call, sent with UpTo as soon as
// that one answers, and the first Granted of them are admitted, as that
// many calls one after another would be.
type batch struct {
	cost, n int64 // n: the decisions that joined, in order
	done    chan struct{}
	r       client.Result
	err     error
	mu      sync.Mutex
	ended   bool           // done is closed
	gone    map[int64]bool // decisions whose caller left before the answer: given back if admitted
}

// coalesce decides cost on cold key k with one call when none is in
// flight for it; otherwise the decision joins the key's next batch (one of
// another cost, or past UpTo's most, goes alone).
func (t *Tier) coalesce(ctx context.Context, key string, l client.Limit, k *leaseKey, cost int64) (client.Result, error) {
	k.mu.Lock()
	if !k.calling {
		k.calling = true
		k.mu.Unlock()
		t.stats.exact.Add(1)
		r, err := t.c.Take(ctx, key, l, cost)
		t.next(key, l, k)
		return r, err
	}
	b := k.queue
	if b == nil {
		b = &batch{cost: cost, done: make(chan struct{})}
		k.queue = b
	} else if b.cost != cost || b.n == ratelimit.MaxUpTo {
		k.mu.Unlock()
		t.stats.exact.Add(1)
		return t.c.Take(ctx, key, l, cost)
	}
	i := b.n
	b.n++
	k.mu.Unlock()
	t.stats.coalesced.Add(1)
	late, err := t.await(ctx, b.done, time.Now().Add(clientx.PrepareTimeout(t.c)+t.o.Timeout)) // the batch's call ends within its Timeout, and the start-up work it may wait for (once more should the work begin while it waits)
	if err != nil || late {
		b.mu.Lock()
		ended := b.ended
		if !ended {
			b.leave(i)
		}
		b.mu.Unlock()
		if !ended {
			if err == nil {
				err = context.DeadlineExceeded
			}
			return client.Result{}, err
		}
	}
	return b.result(i, l)
}

// leave marks decision i gone before the answer; b.mu is held.
func (b *batch) leave(i int64) {
	if b.gone == nil {
		b.gone = map[int64]bool{}
	}
	b.gone[i] = true
}

// result is decision i's answer from the batch's call.
func (b *batch) result(i int64, l client.Limit) (client.Result, error) {
	if b.err != nil {
		return client.Result{}, b.err
	}
	r := b.r
	r.Granted = 0
	if i < b.r.Granted { // admitted, the i-th of them: what remained after it
		r.Limited, r.RetryAfter = false, ratelimit.Never
		r.Remaining = b.r.Remaining + (b.r.Granted-1-i)*b.cost
		return r, nil
	}
	r.Limited, r.Remaining = true, 0
	if !b.r.Limited { // the call took units and left less than another cost: the time for the rest to accrue
		r.RetryAfter = time.Duration(math.Ceil(float64(b.cost-b.r.Remaining) / rateOf(l)))
		if isFW(l) { // or for the window to end
			r.RetryAfter = b.r.ResetAfter
		}
	}
	return r, nil
}

// next sends k's batch when one waits, or ends k's call in flight.
func (t *Tier) next(key string, l client.Limit, k *leaseKey) {
	k.mu.Lock()
	b := k.queue
	k.queue = nil
	k.calling = b != nil
	k.mu.Unlock()
	if b == nil {
		return
	}
	send := func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
		defer cancel()
		r, err := t.c.Take(ctx, key, l, b.cost, client.UpTo(b.n))
		b.mu.Lock()
		b.r, b.err, b.ended = r, err, true
		var back int64
		for i := range b.gone {
			if err == nil && i < r.Granted {
				back += b.cost
			}
		}
		b.mu.Unlock()
		close(b.done)
		t.giveBack(key, l, back)
		t.next(key, l, k)
	}
	if !t.spawn(send) { // closed: at once
		send()
	}
}

// refusal is the answer to a decision the units held cannot cover while
// the key waits for its next grant.
func (k *leaseKey) refusal(now, target int64) client.Result {
	retry := time.Duration(k.pace - now)
	if retry <= 0 { // not paced: a grant is on its way, within a Target or so
		retry = time.Duration(target)
	}
	return client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: k.last.Limit, RetryAfter: retry, ResetAfter: k.last.ResetAfter}}
}

// grant asks the limiter for up to a.n units and holds what it grants,
// after a peek and the fallback's charge where a asks for them; ch is the
// key's flight, closed when the answer is in.
func (t *Tier) grant(key string, l client.Limit, k *leaseKey, a ask, ch chan struct{}) (client.Result, error) {
	call := func(f func(ctx context.Context) error) error { // each call on the tier's own Timeout: a caller's deadline never fails a grant
		ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
		defer cancel()
		return f(ctx)
	}
	var err error
	if a.probe { // grants failed: a peek first, which changes nothing should it run late (a call that timed out may yet run once Redis resumes)
		err = call(func(ctx context.Context) error { _, err := t.c.Peek(ctx, key, l, 1); return err })
		if err == nil { // Redis answers: what the fallback decided while the peek was out is charged too
			now := t.now()
			t.lock(k)
			more := t.owed(k, now)
			if isFW(k.limit) && now >= k.winEnd { // the window ended meanwhile: nothing to charge it to
				t.stats.uncharged.Add(a.owe.debt)
				a.owe = owing{settled: a.owe.settled}
			}
			t.unlock(k, now)
			a.owe.charge += more.charge
			a.owe.debt += more.debt
		}
	}
	if err == nil && a.owe.charge > 0 { // the fallback's decisions, before any new grant
		err = call(func(ctx context.Context) error {
			_, err := t.c.Take(ctx, key, l, a.owe.charge, client.Debt())
			return err
		})
	}
	paid := err == nil
	var r client.Result
	sent := a.sent // a unit's lifetime runs from before the limiter granted it
	if paid {
		t.stats.charged.Add(a.owe.charge)
		t.stats.grants.Add(1)
		sent = t.now()
		err = call(func(ctx context.Context) (err error) {
			if a.keep > 0 {
				r, err = t.c.Take(ctx, key, l, 1, client.UpTo(a.n), client.Reserve(a.keep))
			} else {
				r, err = t.c.Take(ctx, key, l, 1, client.UpTo(a.n))
			}
			return err
		})
	}
	now := t.now()
	t.lock(k)
	defer t.unlock(k, now)
	k.flight = nil
	close(ch)
	if !paid { // owed still (a charge whose answer was lost may have been counted: it errs on the side of the limit)
		k.unpaid(a.owe)
	}
	if err != nil { // ctx is the tier's own: Redis failed or took past Timeout
		t.stats.unclaimed.Add(1)
		if k.down == 0 {
			k.down, k.fb, k.fbAt = now, 0, now
			k.fwLeft = 0
			if k.procs > 0 && now < k.winEnd { // a fixed window's share of what its window had left when last seen
				k.fwLeft = max(k.last.Remaining-k.fwOthers, 0) / k.procs
				// Until the window ends, its grants leave the others' shares
				// to them: they may be spending them still, uncharged.
				share := (k.last.Remaining + k.fwOthers + k.procs - 1) / k.procs
				k.keep, k.keepEnd = min((k.procs-1)*share, limitN(k.limit)-1), k.winEnd
			}
		}
		k.err = err
		k.pace = now + int64(t.o.Target)
		return r, err
	}
	if k.down != 0 {
		t.stats.down.Add(now - k.down)
		k.down, k.err = 0, nil
		// The others' fallback ends about now too, each charging what it
		// admitted at its next call, within a Target or two: the grants
		// leave their shares to them until then.
		k.keepEnd = min(k.keepEnd, now+keepTargets*int64(t.o.Target))
	}
	if isFW(k.limit) {
		end := sent + int64(r.ResetAfter) - int64(windowEndMargin) // its window ends, as seen from the send
		k.fwOthers = max(k.procs-1, 0) * r.Granted
		if half := int64(period(k.limit)) / 2; end-k.winEnd < half && end-k.winEnd > -half { // the window the last grant saw (its end measured again, a latency apart): what the others took since
			k.fwOthers = max(k.fwOthers, k.last.Remaining-r.Remaining-r.Granted)
		}
		k.winEnd = end
	}
	k.last = r
	k.fullAt = now + int64(r.ResetAfter)
	if r.Granted > 0 {
		expires := sent + int64(t.o.Lifetime)
		if isFW(k.limit) { // held until its window ends
			expires = k.winEnd
		}
		k.add(r.Granted, expires)
		t.stats.granted.Add(r.Granted)
	}
	// Near the limit (a short grant, or less left than another grant) every
	// process asks about once a Target, at an instant drawn from [Target/2,
	// 3 Target/2) — one granted nothing from [Target/4, 3 Target/4): whoever
	// asks first after the limit refills takes what accrued, the draw
	// changes who that is from one Target to the next, and the last units
	// go to those that asked and got none.
	wasNear := k.near
	perT := max(int64(rateOf(k.limit)*float64(k.paceSpan(int64(t.o.Target)))), 1)
	// Near stays until the limit holds what accrues between paced asks
	// (at most half its burst: paceSpan).
	k.near = r.Granted < a.n || r.Remaining < a.n || (k.near && r.Remaining < perT)
	if wasNear && k.near && float64(a.n) < math.Ceil(max(k.rate, float64(k.asked))) {
		k.owed = min(a.n-r.Granted, perT/2/max(k.procs, 1)) // at most half a Target of its share: more made the shares swing from one second to the next
	} else {
		k.owed = 0
	}
	if k.near {
		span := k.paceSpan(int64(t.o.Target))
		if r.Granted == 0 {
			span /= 2
		}
		k.pace = now + span/2 + rand.Int64N(span)
		if r.Limited && a.keep == 0 { // (refused for what it leaves the others, it asks again a pace later)
			k.pace = max(k.pace, now+int64(r.RetryAfter))
		}
	}
	return r, nil
}

// refillAhead sends a grant in the background when the units held fall
// below half of what the key's demand needs for a Target; k is locked.
func (t *Tier) refillAhead(key string, k *leaseKey, now int64) {
	if !k.hot || k.flight != nil || now < k.pace || t.shut.Load() {
		return
	}
	n := k.size(now, int64(t.o.Target), 1)
	if k.units() >= (n+1)/2 {
		return
	}
	t.refill(key, k, n)
}

// refill sends a grant of up to n in the background; k is locked and has
// no flight.
func (t *Tier) refill(key string, k *leaseKey, n int64) {
	ch := make(chan struct{})
	sent := t.now() // a unit's lifetime runs from before the limiter granted it
	a := ask{n: n, sent: sent, probe: k.down != 0, owe: t.owed(k, sent)}
	if sent < k.keepEnd {
		a.keep = k.keep
	}
	if t.spawn(func() {
		if _, err := t.grant(key, k.limit, k, a, ch); err == nil { // a failure is counted as unclaimed; the next decision asks again
			t.register(&k.mu, &k.registration)
		}
	}) {
		k.flight, k.sentAt = ch, sent
	} else {
		k.unpaid(a.owe) // closed: Close charges it
	}
}

// ask is one grant's particulars, fixed when it is sent: up to n units,
// sent at sent, leaving keep (RESERVE); after failures, a peek first
// (probe), then what the fallback owes.
type ask struct {
	n, sent, keep int64
	probe         bool
	owe           owing
}

// The registry of a leased key is a concurrency limit in the key's slot
// (registryKey) where each process leasing the key holds a slot under its
// id, renewed with a grant a quarter of registryEvery after it joins, then
// at most once a registryEvery, lapsing registryLease after its last: the
// holders are the processes sharing the key, N. A key no registry name
// shares a slot with (such as "a}b") has none: its N is not known, and its
// grants and fallback go by what the process spends.
const (
	registryEvery = time.Second
	registryLease = 2 * time.Second
	registryLimit = 100_000 // CONC.ACQUIRE's most
)

// registryKey is the name of key's registry: key + ":leases" when key has
// a hash tag, "{" + key + "}:leases" when it has none (the braces make key
// the tag); "" for a key no such name shares a slot with.
func registryKey(key string) string {
	r := "{" + key + "}:leases"
	if i := strings.IndexByte(key, '{'); i >= 0 && strings.IndexByte(key[i+1:], '}') > 0 {
		r = key + ":leases"
	}
	if client.Slot(r) != client.Slot(key) {
		return ""
	}
	return r
}

// registration is a key's place in its registry.
type registration struct {
	registry   string // the registry's key, in the key's slot ("": none can be named)
	registered int64  // when this process last joined it
	renewals   int64  // how many times
	procs      int64  // the processes it counted then (0: not known)
}

// register renews this process's slot in g's registry when due, and
// takes the processes it counts as N; mu guards g.
func (t *Tier) register(mu *sync.Mutex, g *registration) {
	now := t.now()
	mu.Lock()
	every := int64(registryEvery)
	if g.renewals == 1 { // the first count was taken as the others may have been joining
		every /= 4
	}
	due := g.registry != "" && now-g.registered >= every
	if due {
		g.registered = now
		g.renewals++
	}
	mu.Unlock()
	if !due {
		return
	}
	t.stats.registers.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
	defer cancel()
	r, err := t.c.Acquire(ctx, g.registry, client.Concurrency{Limit: registryLimit, Lease: registryLease}, t.id)
	mu.Lock()
	defer mu.Unlock()
	if err != nil { // N stays as it was; a grant 250 ms on tries again
		g.registered = now - int64(registryEvery) + int64(registryEvery)/4
		return
	}
	g.procs = max(r.Limit-r.Remaining, 1)
}

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
	if !l.Refundable() {
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

// settle charges k's debt at now in the background, for a key no
// decision asks a grant for (after a peek, while its grants fail); k is
// locked and has no flight.
func (t *Tier) settle(key string, k *leaseKey, now int64) {
	o, probe := t.owed(k, now), k.down != 0
	if o.charge == 0 {
		return
	}
	ch := make(chan struct{})
	if t.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
		defer cancel()
		var err error
		if probe {
			_, err = t.c.Peek(ctx, key, k.limit, 1)
		}
		if err == nil {
			_, err = t.c.Take(ctx, key, k.limit, o.charge, client.Debt())
		}
		now := t.now()
		t.lock(k)
		defer t.unlock(k, now)
		k.flight = nil
		close(ch)
		if err != nil {
			k.unpaid(o)
			k.pace = now + int64(t.o.Target)
			return
		}
		t.stats.charged.Add(o.charge)
		if k.down != 0 { // Redis answers: the fallback is over (as after a grant)
			t.stats.down.Add(now - k.down)
			k.down, k.err = 0, nil
			k.keepEnd = min(k.keepEnd, now+keepTargets*int64(t.o.Target))
		}
	}) {
		k.flight = ch
	} else {
		k.unpaid(o)
	}
}

// pay charges what o owes at key now, within ctx: a key the tier lets go
// of (Close, a key asked with another limit); what fails is Uncharged.
func (t *Tier) pay(ctx context.Context, key string, l client.Limit, o owing) error {
	if o.charge == 0 {
		return nil
	}
	if _, err := t.c.Take(ctx, key, l, o.charge, client.Debt()); err != nil {
		t.stats.uncharged.Add(o.debt)
		return err
	}
	t.stats.charged.Add(o.charge)
	return nil
}

// Stats is what the tier did so far.
func (t *Tier) Stats() Stats {
	now := t.now()
	for _, k := range t.all() { // fold in what was decided without the lock
		t.lock(k)
		t.unlock(k, now)
	}
	s := &t.stats
	return Stats{Local: s.local.Load(), Refused: s.refused.Load(), Exact: s.exact.Load(), Grants: s.grants.Load(),
		Granted: s.granted.Load(), Returned: s.returned.Load(), Stranded: s.stranded.Load(), Waits: s.waits.Load(),
		Unclaimed: s.unclaimed.Load(), Fallback: s.fallback.Load(), Down: time.Duration(s.down.Load()), Registers: s.registers.Load(),
		Coalesced: s.coalesced.Load(), Charged: s.charged.Load(), Uncharged: s.uncharged.Load()}
}

// Close gives back every unit held, leaves the keys' registries, and
// waits for the calls in flight; later decisions go exact. The returns
// run at once, each bounded by Timeout (and ctx); it returns the errors
// the returns met (errors.Join).
func (t *Tier) Close(ctx context.Context) error {
	t.gate.Lock()
	closed := t.shut.Swap(true)
	t.gate.Unlock()
	if closed {
		return nil
	}
	close(t.stop)
	<-t.swept
	t.calls.Wait()
	type held struct {
		key, registry string // registry: "" when this process holds no slot in it
		limit         client.Limit
		units         int64
		owed          owing // the fallback's decisions, charged before anything goes back
	}
	var all []held
	t.mu.Lock()
	for key, k := range t.all() {
		t.lock(k)
		h := held{key: key, limit: k.limit, units: k.units(), owed: t.owed(k, t.now())}
		if k.registered != 0 {
			h.registry = k.registry
		}
		all = append(all, h)
		k.n, k.gone = 0, true
		t.unlock(k, t.now())
		t.keys.Delete(key)
	}
	t.mu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, h := range all {
		if h.units > 0 || h.registry != "" || h.owed.charge > 0 {
			wg.Go(func() {
				if h.owed.charge > 0 {
					rctx, cancel := context.WithTimeout(ctx, t.o.Timeout)
					errs[i] = t.pay(rctx, h.key, h.limit, h.owed)
					cancel()
				}
				if h.units > 0 {
					rctx, cancel := context.WithTimeout(ctx, t.o.Timeout)
					errs[i] = errors.Join(errs[i], t.refund(rctx, h.key, h.limit, h.units))
					cancel()
				}
				if h.registry != "" { // the others count one process fewer at their next renewal; a failure lapses in 2 s
					rctx, cancel := context.WithTimeout(ctx, t.o.Timeout)
					_, _ = t.c.Release(rctx, h.registry, t.id)
					cancel()
				}
			})
		}
	}
	wg.Wait()
	return errors.Join(append(errs, t.closePools(ctx))...)
}

// all is every key's entry.
func (t *Tier) all() iter.Seq2[string, *leaseKey] {
	return func(yield func(string, *leaseKey) bool) {
		t.keys.Range(func(key, v any) bool { return yield(key.(string), v.(*leaseKey)) })
	}
}
