package lease

import (
	"context"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/clientx"
	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
)

// All is Client.All through the tier: decided here, with no call, when
// every limit is a key hot on this process that holds the limit's cost
// (the units are spent from every pool or from none); refused here when
// one of the keys is paced (see Tier) and holds less than its cost,
// with that key's wait as RetryAfter. When a hot key is short and not
// paced, it asks for more (one grant in flight a key) and the decision
// waits for the grant, at most Timeout, then decides again (refused here
// past Timeout). Otherwise — a key cold, or failing and short of its cost
// — the decision goes to the limiter as Client.All (while a failing key
// tries a grant again in the background, about once a Target). Every limit must lease (GCRA
// or a token bucket, a cost from 1 to the burst, no options, no key
// twice, and in a cluster every key in one slot, as RL.ALL wants); other
// calls go to the limiter as they are.
//
// A local Result is the deciding limit's, as Client.All's: admitted, the
// key holding the fewest units after (Remaining those units); refused,
// the paced key with the longest wait. Policy is its position in limits.
func (t *Tier) All(ctx context.Context, limits []client.Keyed, opts ...client.Option) (client.Result, error) {
	if !t.leasesAll(limits, opts) || clientx.Cluster(t.c) && !oneSlot(limits) {
		t.stats.exact.Add(1)
		return t.c.All(ctx, limits, opts...)
	}
	r, here, err := t.allHere(ctx, limits, nil, false)
	if err != nil || here {
		return r, err
	}
	t.stats.exact.Add(1)
	return t.c.All(ctx, limits)
}

// AllHere decides limits from the units the tier holds when it can, as
// All decides them here, all or nothing, and reports whether it did
// (here): each gets every key's own answer, admitted (Remaining is what
// the tier holds of that key after it) or refused here (a paced key short
// of its cost: that key's alone, at r.Policy). While the keys short of
// their costs fail (within Fallback), they decide in fallback as Take
// does, all or nothing (the others spending their units), and what they
// admit is charged when Redis answers again. Otherwise — a limit that does
// not lease (see Leases; a cost from 1 to its burst, at most 16 limits, no
// key twice, no options: any, RESERVE or DEBT, sends the decision to the
// limiter), a key cold, or failing past Fallback — here is false, the
// decision is counted exact (Stats.Exact), and the caller asks the limiter
// (package admit: its plan per slot, for keys of several slots too). A
// per-IP and a per-key limit on hot keys are decided with no call, as one
// limit is.
func (t *Tier) AllHere(ctx context.Context, limits []client.Keyed, each []client.Result, opts ...client.Option) (r client.Result, here bool, err error) {
	if t.leasesAll(limits, opts) {
		if r, here, err = t.allHere(ctx, limits, each, true); err != nil || here {
			return r, here, err
		}
	}
	t.stats.exact.Add(1)
	return client.Result{}, false, nil
}

// oneSlot reports whether limits' keys share a cluster slot, as RL.ALL
// wants.
func oneSlot(limits []client.Keyed) bool {
	for _, kl := range limits[1:] {
		if protocol.Slot(kl.Key) != protocol.Slot(limits[0].Key) {
			return false
		}
	}
	return true
}

// allHere decides limits (which lease: leasesAll) from the units the tier
// holds, all or nothing, and reports whether it did (here): admitted,
// every pool paid its cost, and r is the key holding the fewest units
// after, Policy its position; refused, r is the paced key's with the
// longest wait. each, when not nil, gets every key's own answer (the
// refusing key's alone when refused). With fallback, when every key short
// of its cost is failing (within Options.Fallback of its first
// failure), the keys decide as Take's fallback does, all or nothing: the
// others spend their units, the failing ones their fallback's; a failing
// key then waits (Timeout at most) for the others' grants rather than send
// the decision to the limiter. Not here: a key cold, failing and short
// (without fallback, or past it), or the tier closed; the caller asks the
// limiter.
func (t *Tier) allHere(ctx context.Context, limits []client.Keyed, each []client.Result, fallback bool) (r client.Result, here bool, err error) {
	var kb [16]*leaseKey
	var ob [16]int
	ks, order := kb[:len(limits)], ob[:len(limits)]
	for i, kl := range limits {
		ks[i], order[i] = t.entry(kl.Key, kl.Limit), i
	}
	for i := 1; i < len(order); i++ { // lock in key order: two Alls never wait for each other
		for j := i; j > 0 && limits[order[j]].Key < limits[order[j-1]].Key; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	target := int64(t.o.Target)
	var w wait
	counted := false
	for {
		now := t.now()
		for _, i := range order {
			t.lock(ks[i])
		}
		unlock := func() {
			for _, i := range order {
				t.unlock(ks[i], now)
			}
		}
		covered, refuse, gone := true, -1, false
		for _, k := range ks {
			gone = gone || k.gone
		}
		if gone { // swept, retired or closed meanwhile: the keys' entries now
			unlock()
			if t.shut.Load() {
				break
			}
			for i, kl := range limits {
				ks[i] = t.entry(kl.Key, kl.Limit)
			}
			continue
		}
		for i, k := range ks {
			if g := k.expire(now); g > 0 {
				t.giveBack(limits[i].Key, k.limit, g)
			}
			if k.units() < limits[i].Cost {
				covered = false
				if k.hot && k.down == 0 && (now < k.pace || w.late) && (refuse < 0 || k.pace > ks[refuse].pace) {
					refuse = i
				}
			}
		}
		for i, k := range ks { // a key's demand is what it was asked when it could decide: not a refusal by another
			if counted {
				break
			}
			cost := limits[i].Cost
			if !covered && k.units() >= cost {
				cost = 0
			}
			k.observe(now, target, cost, t.o.Hot)
		}
		counted = true
		falls := fallback && !covered && refuse < 0
		for i, k := range ks {
			if falls && k.units() < limits[i].Cost && (k.down == 0 || !t.fallsBack(k, now)) {
				falls = false
			}
		}
		var ch chan struct{} // a grant to wait for
		switch {
		case t.shut.Load(): // closed meanwhile
		case falls:
			r, here = t.fallAll(limits, ks, each, now)
			unlock()
			t.stats.fallback.Add(1)
			return r, here, nil
		case covered:
			fewest := 0
			for i, k := range ks {
				t.take(k, limits[i].Cost)
				if k.units() < ks[fewest].units() {
					fewest = i
				}
			}
			for i, k := range ks {
				ri := client.Result{Verdict: ratelimit.Verdict{Limit: k.last.Limit, Remaining: k.units(), RetryAfter: ratelimit.Never, ResetAfter: k.last.ResetAfter}}
				if each != nil {
					each[i] = ri
				}
				if i == fewest {
					r, r.Policy = ri, fewest
				}
			}
			for i, k := range ks {
				t.refillAhead(limits[i].Key, k, now)
			}
			unlock()
			return r, true, nil
		case refuse >= 0:
			r = ks[refuse].refusal(now, target)
			if each != nil {
				each[refuse] = r
			}
			r.Policy = refuse
			unlock()
			t.stats.refused.Add(1)
			return r, true, nil
		default: // the hot keys short of units ask for more (one grant in flight a key), and the decision waits for one
			for i, k := range ks {
				if k.down != 0 && k.flight == nil && now >= k.pace { // failing: try again in the background, not waited for
					t.refill(limits[i].Key, k, k.size(now, target, limits[i].Cost))
				}
				if !k.hot || k.down != 0 || k.units() >= limits[i].Cost {
					continue
				}
				if k.flight == nil {
					t.refill(limits[i].Key, k, k.size(now, target, limits[i].Cost))
				}
				if ch == nil {
					ch = k.flight
				}
			}
			for _, k := range ks { // a cold or failing key sends the decision to the limiter: no wait first
				if !k.hot || k.down != 0 && !(fallback && t.fallsBack(k, now)) {
					ch = nil
				}
			}
		}
		unlock()
		if ch == nil { // a key is cold or failing, or the tier closed: the limiter decides
			break
		}
		if err := w.on(ctx, t, ch); err != nil { // no decision waits past Timeout
			return client.Result{}, false, err
		}
	}
	return client.Result{}, false, nil
}

// fallsBack reports whether k, failing, still decides in fallback at now:
// within Fallback of its first failure, having spent while Redis answered
// (as Take's fallback).
func (t *Tier) fallsBack(k *leaseKey, now int64) bool {
	return now-k.down < int64(t.o.Fallback) && k.spentRate != 0
}

// fallAll decides limits, their keys locked, at now while the keys short
// of their costs fail (allHere's fallback): each failing key first tries a
// grant again in the background; then, if a failing key's fallback refuses
// its cost, r is the refusal with the longest wait and nothing is spent;
// else every key pays its cost, from its units or its fallback, and r is
// the answer with the fewest Remaining.
func (t *Tier) fallAll(limits []client.Keyed, ks []*leaseKey, each []client.Result, now int64) (r client.Result, here bool) {
	target := int64(t.o.Target)
	refusedBy := -1
	for i, k := range ks {
		cost := limits[i].Cost
		if k.units() >= cost {
			continue
		}
		if k.flight == nil && now >= k.pace { // try again, in the background
			t.refill(limits[i].Key, k, k.size(now, target, cost))
		}
		if no, refused := k.fallbackRefusal(now, target, cost); refused && (refusedBy < 0 || no.RetryAfter > r.RetryAfter) {
			refusedBy, r = i, no
		}
	}
	if refusedBy >= 0 {
		if each != nil {
			each[refusedBy] = r
		}
		r.Policy = refusedBy
		return r, true
	}
	for i, k := range ks {
		var ri client.Result
		if cost := limits[i].Cost; k.units() >= cost {
			t.take(k, cost)
			ri = client.Result{Verdict: ratelimit.Verdict{Limit: k.last.Limit, Remaining: k.units(), RetryAfter: ratelimit.Never, ResetAfter: k.last.ResetAfter}}
			t.refillAhead(limits[i].Key, k, now)
		} else {
			ri = k.fallbackSpend(cost)
		}
		if each != nil {
			each[i] = ri
		}
		if i == 0 || ri.Remaining < r.Remaining {
			r, r.Policy = ri, i
		}
	}
	return r, true
}

// leasesAll reports whether limits may be decided through the tier (All
// wants besides that they share a slot in a cluster, as RL.ALL does).
func (t *Tier) leasesAll(limits []client.Keyed, opts []client.Option) bool {
	if len(opts) > 0 || len(limits) == 0 || len(limits) > 16 || t.shut.Load() {
		return false
	}
	for i, kl := range limits {
		if kl.Cost <= 0 || !Leases(kl.Limit) || kl.Cost > burst(kl.Limit) {
			return false
		}
		for _, o := range limits[:i] {
			if o.Key == kl.Key {
				return false
			}
		}
	}
	return true
}
