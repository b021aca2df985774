package lease

// Grants: asking the limiter for units ahead, sized and paced.

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

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
func isFW(l client.Limit) bool { return l.Family() == "FW" }

func isGCRA(l client.Limit) bool { return l.Family() == "GCRA" }

// Leases reports whether a Tier decides l from units granted ahead, as
// the command table says of its family: GCRA and the token bucket (their
// unspent units go back), and the fixed window (its units are spent before
// their window ends, or lost). Other limits go to the limiter, one call a
// decision: Leases(client.PerSecond(10)) is true,
// Leases(client.SlidingWindow(10, time.Second)) false. A limit whose
// parameters Redis holds (client.Limit.Override) goes to the limiter too:
// the tier would pace its grants by parameters the hash may have changed.
func Leases(l client.Limit) bool {
	if _, _, over := l.Overridden(); over {
		return false
	}
	f := spec.Named(l.Family())
	return f != nil && f.Lease
}

// refunds reports whether l takes a negative cost back (GCRA and the
// token bucket), as the command table says of its family.
func refunds(l client.Limit) bool { return spec.Refunds(l.Family()) }

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
