package lease

// The hot path: a decision spends units held, or shares a cold key's call.

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/clientx"
)

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

// Take is Client.Take, decided from units held where the key is hot on
// this process (see Tier).
func (t *Tier) Take(ctx context.Context, key string, l client.Limit, cost int64, opts ...client.Option) (client.Result, error) {
	if len(opts) > 0 || cost <= 0 || !Leases(l) || cost > burst(l) || t.shut.Load() {
		t.stats.exact.Add(1)
		return t.c.Take(ctx, key, l, cost, opts...)
	}
	k := t.entry(key, l)
	if r, ok := t.fast(key, k, t.now(), cost); ok {
		return r, nil
	}
	target := int64(t.o.Target)
	counted := false
	var w wait
decide:
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
		switch k.state(now, cost, w.late, t.shut.Load()) {
		case holding:
			t.take(k, cost)
			r := client.Result{Verdict: ratelimit.Verdict{Limit: k.last.Limit, Remaining: k.units(), RetryAfter: ratelimit.Never, ResetAfter: k.last.ResetAfter}}
			t.refillAhead(key, k, now)
			t.unlock(k, now)
			return r, nil
		case cold: // one call, shared with the decisions that come while it is in flight
			t.unlock(k, now)
			return t.coalesce(ctx, key, l, k, cost)
		case closed: // closed while this decision was on its way
			t.unlock(k, now)
			break decide
		case failing:
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
		case paced: // refused here until the next grant
			r := k.refusal(now, target)
			t.unlock(k, now)
			t.stats.refused.Add(1)
			return r, nil
		}
		// waiting: for the grant in flight, or send one (in the background,
		// on the tier's own Timeout: a caller's deadline never fails a grant).
		w.begin(t)
		if k.flight == nil {
			t.refill(key, k, k.size(now, target, cost))
		}
		ch := k.flight
		t.unlock(k, now)
		if ch == nil { // closed meanwhile
			break
		}
		if err := w.on(ctx, t, ch); err != nil {
			return client.Result{}, err
		}
	}
	t.stats.exact.Add(1)
	return t.c.Take(ctx, key, l, cost)
}

// wait is one decision's waits for grants (Take's, All's, Acquire's): at
// most Timeout in all, in real time whatever clock decides; late once that
// time has passed, when a key still short is refused rather than waited
// for again.
type wait struct {
	until time.Time
	late  bool
}

// begin starts the decision's Timeout, at its first wait.
func (w *wait) begin(t *Tier) {
	if w.until.IsZero() {
		t.stats.waits.Add(1)
		w.until = time.Now().Add(t.o.Timeout)
	}
}

// on waits for ch, within the decision's Timeout (begun here, if not
// yet); its error is ctx's end.
func (w *wait) on(ctx context.Context, t *Tier, ch <-chan struct{}) error {
	w.begin(t)
	timedOut, err := t.await(ctx, ch, w.until)
	w.late = w.late || timedOut
	return err
}

// TryTake is Take when it decides at once: from the units held, or
// refused while the key is paced, with no lock, call or wait (ok); else
// it decides nothing (ok false, and Take decides). A front-end that bounds
// its calls by a context of its own tries it first and makes that context
// only when Take must ask Redis or wait (package admit does: 7 of its 8
// allocations a decision were that context's).
func (t *Tier) TryTake(key string, l client.Limit, cost int64) (client.Result, bool) {
	if cost <= 0 || !Leases(l) || cost > burst(l) || t.shut.Load() {
		return client.Result{}, false
	}
	return t.fast(key, t.entry(key, l), t.now(), cost)
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
