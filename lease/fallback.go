package lease

// Fallback: while Redis fails, deciding here at this process's share, and
// charging Redis what was admitted once it answers.

import (
	"context"
	"math"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

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
