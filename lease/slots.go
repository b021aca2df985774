package lease

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// slotSlack is how much longer than the limit's Lease a process holds its
// slots at a key, and how old its last renewal may be for it to hand one
// out (see Tier.Acquire).
const slotSlack = time.Second

// slotPool is one concurrency key's slots on this process.
type slotPool struct {
	mu      sync.Mutex
	l       client.Concurrency
	held    int64            // slots this process's id holds at the key, as its last grant said
	sent    int64            // when that grant was sent (Unix ns): the slots lapse no sooner than a Lease and slotSlack after
	holders map[string]int64 // local holder → the end of its lease (Unix ns)
	bucket  int64            // acquires in the Target-long bucket from bucket: seen
	seen    int64
	hot     bool
	used    int64 // the last acquire or release
	flight  chan struct{}
	pace    int64 // no grant before this instant, near the limit or after a failure
	near    bool
	idle    int64 // the fewest slots free since the last sweep
	last    client.Result
	err     error  // the last grant's error; nil once one answers
	lost    bool   // the last grant found the server gone (refused or dropped the connection): what it held may not come back with it
	gone    bool   // forgotten, or the tier closed: decisions go to the limiter
	closed  bool   // the tier closed: a holder's Release releases one slot at the key
	id      string // the id the process holds the slots under: its own and the pool's, so a forgotten pool's late release never takes a new one's
	owe     int64  // slots taken off held, to release at the key when no call is in flight
	doubt   int64  // slots whose release failed: it may yet run, after a grant that counts them, so they are never handed out again
	registration
}

// share is the slots this process keeps near the limit: the limit over
// the processes the key's registry counts, rounded up (the whole limit
// when not known).
func (p *slotPool) share() int64 {
	if p.procs <= 0 {
		return p.l.Limit
	}
	return (p.l.Limit + p.procs - 1) / p.procs
}

// end is when the process's slots at the key lapse, at the latest.
func (p *slotPool) end() int64 { return p.sent + int64(p.l.Lease+slotSlack) }

// fresh reports whether a slot handed out at now lasts its whole Lease
// at the key even if no renewal answers.
func (p *slotPool) fresh(now int64) bool {
	return p.held > 0 && !p.lost && now-p.sent <= int64(slotSlack-slotMargin)
}

// slotMargin is kept off slotSlack against the server's clock, which
// stamps the slots' lease in milliseconds.
const slotMargin = 10 * time.Millisecond

// free is the slots held that no holder uses at now, dropping the holders
// whose slots lapsed when none is.
func (p *slotPool) free(now int64) int64 {
	if now >= p.end() {
		p.held = 0
		clear(p.holders)
		return 0
	}
	if f := p.held - int64(len(p.holders)); f > 0 {
		return f
	}
	for id, e := range p.holders {
		if e <= now {
			delete(p.holders, id)
		}
	}
	return max(p.held-int64(len(p.holders)), 0)
}

// prune drops the holders whose lease ended at now.
func (p *slotPool) prune(now int64) {
	for id, e := range p.holders {
		if e <= now {
			delete(p.holders, id)
		}
	}
}

// spare is the free slots the process keeps beyond its holders.
func (p *slotPool) spare() int64 {
	if p.near {
		return 0
	}
	return max(1, int64(len(p.holders))/4)
}

// leasesSlots reports whether an acquire of l may go through the tier.
func leasesSlots(l client.Concurrency, opts []client.Option) bool {
	return len(opts) == 0 && l.Limit >= 1 && l.Limit <= registryLimit && l.Lease >= time.Second && l.Lease%time.Second == 0
}

// pool is key's slot pool for l; nil when the key is pooled with another
// limit (its acquires then go to the limiter).
func (t *Tier) pool(key string, l client.Concurrency) *slotPool {
	if v, ok := t.pools.Load(key); ok {
		if p := v.(*slotPool); p.l == l {
			return p
		}
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.pools.Load(key); ok {
		if p := v.(*slotPool); p.l == l {
			return p
		}
		return nil
	}
	p := &slotPool{l: l, holders: map[string]int64{}, registration: registration{registry: registryKey(key)},
		id: t.id + "." + strconv.FormatInt(t.pooled.Add(1), 36)}
	t.pools.Store(key, p)
	return p
}

// Acquire is Client.Acquire through the tier. On a concurrency key hot on
// this process (Hot acquires within one Target) the process holds several
// slots at the key under an id of its own (Acquire with UpTo) and hands
// them to its holders with no call: an Acquire takes a free one, a Release
// frees it for the next. The process's slots at the key are leased for
// the limit's Lease and a second more, renewed about every half second
// while it holds any, and one is handed out only while the last renewal
// was sent under a second ago: it lasts its whole Lease at the key even if
// Redis never answers again. A holder's slot lapses here with its Lease, or when the
// process's slots lapse at the key if that is sooner (the renewals
// failed). The holders here are never more than the slots the process
// holds at the key, so the limit holds exactly: concurrency leases exceed
// nothing.
//
// A process asks for what its holders use and, away from the limit, a
// quarter more (at least one); free slots beyond that go back at the next
// sweep, all of them when the key goes cold. Near the limit (no slot was
// free at the key at its last call, or a grant came back short) it asks
// for one at a time, about once a Target, gives back
// the slots left free through a sweep, and, past its share (the limit
// over the processes the key's registry counts), each slot its holder
// releases. Close gives back the free slots; those in use stay held under
// the pool's id until their holders Release them (each releasing one at
// the key) or they lapse.
//
// A local Result has Remaining the slots this process holds free after
// it (what it can hand out with no call), RetryAfter Never and ResetAfter
// the holder's Lease. When none is free the key asks for more (one call in
// flight a key, a grant or a release) and the acquire waits for it, at
// most Timeout, and is refused here past it; near the limit, acquires
// between paced grants are refused here, with the time until the next as
// RetryAfter. While grants fail, free slots are handed out as
// long as they are fresh; then Acquire returns the error. A server that
// refuses or drops the connection (its process gone: restarted without
// persistence, it holds none of them) stops the handing out at once, until
// a grant answers. A cold key,
// options, or a limit other than the one the key is pooled with go to the
// limiter, under id.
func (t *Tier) Acquire(ctx context.Context, key string, l client.Concurrency, id string, opts ...client.Option) (client.Result, error) {
	if !leasesSlots(l, opts) || t.shut.Load() {
		t.stats.exact.Add(1)
		return t.c.Acquire(ctx, key, l, id, opts...)
	}
	p := t.pool(key, l)
	target := int64(t.o.Target)
	var w wait
	counted := false
decide:
	for p != nil {
		now := t.now()
		p.mu.Lock()
		if p.gone {
			p.mu.Unlock()
			if t.shut.Load() {
				break
			}
			p = t.pool(key, l)
			continue
		}
		if !counted {
			if now >= p.bucket+target {
				p.bucket, p.seen = now, 0
			}
			p.seen++
			p.hot = p.hot || p.seen >= t.o.Hot
			p.used = now
			counted = true
		}
		state, free := p.state(now, id, w.late)
		switch state {
		case cold:
			p.mu.Unlock()
			break decide
		case holding:
			if _, ok := p.holders[id]; ok { // held here (its lease may have lapsed, its slot has not): renewed
				p.holders[id] = now + int64(l.Lease)
				r := p.admitted(free)
				p.mu.Unlock()
				return r, nil
			}
			p.holders[id] = now + int64(l.Lease)
			free--
			p.idle = min(p.idle, free)
			t.stats.local.Add(1)
			r := p.admitted(free)
			if free < (p.spare()+1)/2 && p.flight == nil && now >= p.pace && p.err == nil {
				t.growPool(key, p, 1)
			}
			p.mu.Unlock()
			return r, nil
		case failing: // grants fail: the error, while one more is tried in the background
			if p.flight == nil && now >= p.pace {
				t.growPool(key, p, 1)
			}
			err := p.err
			p.mu.Unlock()
			return client.Result{}, err
		case paced:
			r := client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: l.Limit, RetryAfter: time.Duration(max(p.pace-now, target)), ResetAfter: p.last.ResetAfter}}
			if now < p.pace {
				r.RetryAfter = time.Duration(p.pace - now)
			}
			p.mu.Unlock()
			t.stats.refused.Add(1)
			return r, nil
		}
		// waiting: for the grant in flight, or send one.
		w.begin(t)
		if p.flight == nil {
			t.growPool(key, p, 1)
		}
		ch := p.flight
		p.mu.Unlock()
		if ch == nil { // closed meanwhile
			break
		}
		if err := w.on(ctx, t, ch); err != nil { // no decision waits past Timeout
			return client.Result{}, err
		}
	}
	t.stats.exact.Add(1)
	return t.c.Acquire(ctx, key, l, id)
}

// state is p's state for holder id's acquire at now (late: it waited a
// Timeout already), and, hot, its free slots (free: lapsed holders go);
// p.mu is held.
func (p *slotPool) state(now int64, id string, late bool) (keyState, int64) {
	if !p.hot {
		return cold, 0
	}
	free := p.free(now)
	_, held := p.holders[id]
	switch {
	case p.fresh(now) && (held || free > 0):
		return holding, free
	case p.err != nil:
		return failing, free
	case now < p.pace || late:
		return paced, free
	}
	return waiting, free
}

// admitted is a local acquire's Result, free slots left after it.
func (p *slotPool) admitted(free int64) client.Result {
	return client.Result{Verdict: ratelimit.Verdict{Limit: p.l.Limit, Remaining: free, RetryAfter: ratelimit.Never, ResetAfter: p.l.Lease}}
}

// Release is Client.Release through the tier: a holder's local slot is
// freed here, with no call (true when it had not lapsed); any other id's
// is released at the key.
func (t *Tier) Release(ctx context.Context, key, id string) (bool, error) {
	if held, live, err := t.ReleaseHeld(ctx, key, id); held {
		return live, err
	}
	return t.c.Release(ctx, key, id)
}

// ReleaseHeld is Release for a slot the tier handed out: it frees id's
// slot at key when the tier holds one for it (held true; live when its
// lease had not lapsed), with no call (one, within ctx, once the tier is
// closed), and does nothing otherwise (held false): it never sends the
// limiter a release of its own, so a caller whose breaker is open can
// free the tier's slots.
func (t *Tier) ReleaseHeld(ctx context.Context, key, id string) (held, live bool, err error) {
	v, ok := t.pools.Load(key)
	if !ok {
		return false, false, nil
	}
	p := v.(*slotPool)
	now := t.now()
	p.mu.Lock()
	e, ok := p.holders[id]
	if !ok {
		p.mu.Unlock()
		return false, false, nil
	}
	delete(p.holders, id)
	live = e > now && now < p.end()
	closed, pid := p.closed, p.id
	if !closed {
		p.used = now
		if p.near && live && p.held > p.share() && p.err == nil { // near the limit, past its share: the slot goes back, and this process asks again no sooner than a Target
			t.giveSlots(key, p, 1)
			p.pace = max(p.pace, now+p.draw(int64(t.o.Target)))
		}
		p.idle = min(p.idle, p.free(now))
	}
	p.mu.Unlock()
	if closed && live { // the tier closed: its slot at the key goes too
		n, err := t.c.ReleaseN(ctx, key, pid, 1)
		if err == nil {
			t.stats.returned.Add(n)
		}
		return true, n > 0, err
	}
	return true, live, nil
}

// growPool sends a grant in the background for the slots p's holders use,
// need more, and the spare; p is locked and has no flight. With need 0 it
// renews what is held.
func (t *Tier) growPool(key string, p *slotPool, need int64) {
	want := min(max(int64(len(p.holders))+need+p.spare(), p.held)+p.doubt, p.l.Limit) // the doubtful slots are the id's too
	if need == 0 {
		want = p.held + p.doubt
	}
	ch := make(chan struct{})
	sent := t.now() // the slots' lease runs from before the limiter took them
	id := p.id
	if t.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
		defer cancel()
		t.stats.grants.Add(1)
		r, err := t.c.Acquire(ctx, key, client.Concurrency{Limit: p.l.Limit, Lease: p.l.Lease + slotSlack}, id, client.UpTo(want))
		if t.answer(key, p, r, err, want, need, sent, ch) {
			t.register(&p.mu, &p.registration)
		}
	}) {
		p.flight = ch
	}
}

// answer holds a grant's answer; false when it failed.
func (t *Tier) answer(key string, p *slotPool, r client.Result, err error, want, need, sent int64, ch chan struct{}) bool {
	now := t.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flight = nil
	close(ch)
	defer t.settleOwed(key, p)
	if err != nil {
		t.stats.unclaimed.Add(1)
		p.err, p.pace = err, now+int64(t.o.Target)
		// A server that refuses or drops connections has lost its process:
		// restarted without persistence it holds none of the slots, and the
		// others take them there. Nothing more is handed out until a grant
		// answers (what it grants is what the key holds for the pool then).
		// One that does not answer (hung, partitioned) keeps them: they are
		// handed out while fresh.
		p.lost = p.lost || serverGone(err)
		return false
	}
	p.err, p.last, p.lost = nil, r, false
	if got := r.Granted - p.owe - p.doubt - p.held; got > 0 {
		t.stats.granted.Add(got)
	}
	p.held = max(r.Granted-p.owe-p.doubt, 0) // what the key holds for this pool, less what is to go back or may be; 0 when it holds none (lapsed, or lost): the holders here keep theirs, and no one else gets one
	if r.Granted > 0 {
		p.sent = sent
	}
	// Near the limit: no slot left free at the key (a renewal tells a
	// process that holds what it needs, so one that took its slots early
	// learns that the others wait), or a grant came back short. Only a
	// grant for more, which finds slots free, says it is no longer.
	full := r.Remaining == 0 || r.Granted < want
	if need > 0 {
		p.near = full || r.Granted-p.owe-p.doubt-int64(len(p.holders)) < need
		if p.near {
			p.pace = now + p.draw(int64(t.o.Target))
		}
	} else {
		p.near = p.near || full
	}
	return true
}

// draw is when a paced pool asks next, from now: an instant drawn from
// [span/2, 3 span/2).
func (p *slotPool) draw(span int64) int64 { return span/2 + rand.Int64N(span) }

// sweepPools renews the slots held, gives back the free ones beyond the
// spare (near the limit, those free through a whole sweep), and forgets
// the keys idle for a Lifetime with no holder and no call in flight,
// giving back their slots; t.mu is held.
func (t *Tier) sweepPools(now int64) {
	t.pools.Range(func(key, v any) bool {
		p := v.(*slotPool)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.prune(now)
		free := p.free(now)
		extra := min(p.idle, free) - p.spare()
		p.idle = free
		switch {
		case len(p.holders) == 0 && now-p.used >= int64(t.o.Lifetime) && p.flight == nil && p.owe == 0:
			t.pools.Delete(key)
			p.gone = true
			if n := p.held + p.doubt; n > 0 { // all the pool's id holds
				p.doubt = 0
				t.giveSlots(key.(string), p, n)
			}
		case len(p.holders) == 0 && p.doubt > 0 && p.flight == nil && p.owe == 0: // no holder: the id retires with its doubtful slots, and the pool takes a new one
			t.retire(key.(string), p)
		case extra > 0 && p.err == nil:
			p.idle -= extra
			t.giveSlots(key.(string), p, extra)
		case p.held > 0 && p.flight == nil && now-p.sent >= int64(slotSlack)/2:
			t.growPool(key.(string), p, 0)
		}
		return true
	})
}

// retire releases every slot of p's id at key in the background and gives
// p a new id: a release of the old id's that failed may yet run, and now
// takes nothing p hands out; p is locked and has no holder.
func (t *Tier) retire(key string, p *slotPool) {
	old, n := p.id, p.held+p.doubt
	p.id = t.id + "." + strconv.FormatInt(t.pooled.Add(1), 36)
	p.held, p.doubt = 0, 0
	t.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
		defer cancel()
		if freed, err := t.c.ReleaseN(ctx, key, old, n); err != nil { // they lapse a Lease and a second after the last renewal
			t.stats.stranded.Add(n)
		} else {
			t.stats.returned.Add(freed)
		}
	})
}

// giveSlots takes n slots off what p holds and releases them at key in
// the background, once no other call of p's is in flight (a grant
// answering after a release would count the slots it took back); p is
// locked.
func (t *Tier) giveSlots(key string, p *slotPool, n int64) {
	p.held = max(p.held-n, 0)
	p.owe += n
	t.settleOwed(key, p)
}

// settleOwed sends the release of what p owes when no call of p's is in
// flight; p is locked.
func (t *Tier) settleOwed(key string, p *slotPool) {
	if p.owe == 0 || p.flight != nil {
		return
	}
	n, id := p.owe, p.id
	ch := make(chan struct{})
	if t.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
		defer cancel()
		freed, err := t.c.ReleaseN(ctx, key, id, n)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.flight = nil
		close(ch)
		p.owe -= n
		if err != nil { // it may yet run: held at the key until they lapse, never handed out again by this pool
			p.doubt += n
			t.stats.stranded.Add(n)
		} else {
			t.stats.returned.Add(freed)
		}
		t.settleOwed(key, p)
	}) {
		p.flight = ch
	}
}

// closePools gives back the free slots of every pool, within Timeout
// each (and ctx); the slots in use stay held until their holders Release
// them. It returns the errors the releases met.
func (t *Tier) closePools(ctx context.Context) error {
	type give struct {
		key, id, registry string // registry: "" when this process holds no slot in it
		n                 int64
	}
	var gives []give
	now := t.now()
	t.pools.Range(func(key, v any) bool {
		p := v.(*slotPool)
		p.mu.Lock()
		p.prune(now)
		free := p.free(now)
		g := give{key: key.(string), id: p.id, n: free + p.owe + p.doubt} // the free slots, those whose release did not go out, and those it may not have done
		p.held -= free
		p.owe, p.doubt = 0, 0
		if p.registered != 0 {
			g.registry = p.registry
		}
		if g.n > 0 || g.registry != "" {
			gives = append(gives, g)
		}
		p.gone, p.closed = true, true
		if len(p.holders) == 0 {
			t.pools.Delete(key)
		}
		p.mu.Unlock()
		return true
	})
	errs := make([]error, len(gives))
	var wg sync.WaitGroup
	for i, g := range gives {
		wg.Go(func() {
			if g.n > 0 {
				rctx, cancel := context.WithTimeout(ctx, t.o.Timeout)
				if freed, err := t.c.ReleaseN(rctx, g.key, g.id, g.n); err != nil {
					t.stats.stranded.Add(g.n)
					errs[i] = err
				} else {
					t.stats.returned.Add(freed)
				}
				cancel()
			}
			if g.registry != "" {
				rctx, cancel := context.WithTimeout(ctx, t.o.Timeout)
				_, _ = t.c.Release(rctx, g.registry, t.id)
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// serverGone reports an error that says the server's process is gone (its
// connection refused, reset or closed), not merely slow.
func serverGone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
