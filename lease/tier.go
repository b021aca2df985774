package lease

import (
	"context"
	"errors"
	"iter"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
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
