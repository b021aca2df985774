// Package conc implements a concurrency limiter with time passed in: at
// most limit holders at once, each holding a slot under a lease that lapses
// by itself.
//
// A rate limiter bounds how often requests start; this one bounds how many
// run at once. A request acquires a slot before its work and releases it
// after. Each holder is named by an id the caller chooses (a request id);
// its slot lapses lease after its last acquire, so a worker that crashes
// without releasing holds its slot for at most one lease. Acquiring again
// with an id that holds a slot renews its lease and takes no new slot, so a
// retried acquire is idempotent.
//
// With limit 3 and a lease of 30 s: three requests acquire at 12:00:00
// (remaining 2, 1, 0); a fourth is refused, with RetryAfter 30 s — the time
// until the earliest lease lapses, an upper bound since a release may come
// sooner. When the first releases at 12:00:05, the fourth is admitted. If
// the second crashes, its slot is free again at 12:00:30.
//
// The package keeps no state: Leases reads the leases a caller stores (the
// module keeps them in a sorted set, id scored with its lease's end), and a
// Decision says what to store. Instants are Unix nanoseconds; a lease ending
// at or before now has lapsed.
//
// A lease ends at an absolute instant: if the clock steps back by S, leases
// taken before the step last S longer unless released or renewed (a renewal
// dates the lease from the new now). Unlike the rate limiters, the lease
// cannot be clamped to the call's lease: callers may use different leases on
// one key, and a short one must not cut a long holder's slot.
package conc

import (
	"errors"
	"math"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"
)

// Never is the RetryAfter of an admitted acquire, and of a refused one that
// no lapse can admit (a reserve of the whole limit): ratelimit.Never.
const Never = ratelimit.Never

var (
	// ErrRange means an argument is outside its range.
	ErrRange = errors.New("argument out of range: limit >= 1, lease > 0, 0 <= reserve <= limit")
	// ErrOverflow means the lease's end overflows 64-bit nanoseconds.
	ErrOverflow = errors.New("the lease's end overflows 64-bit nanoseconds: the lease is too long")
)

// Leases reads a key's leases, each the instant (Unix ns) it lapses.
type Leases interface {
	// Count returns how many leases end after the instant after.
	Count(after int64) int64
	// Nth returns when the k-th earliest of the leases ending after the
	// instant after ends (k ≥ 1), or math.MinInt64 when there are fewer.
	Nth(after, k int64) int64
}

// Holder is what a call knows of its own lease and of the latest other one.
type Holder struct {
	// Own is when the caller's lease ends (lapsed or not); 0 when the
	// caller holds none.
	Own int64
	// Slots is how many slots the caller's lease holds (all end at Own);
	// 0 when it holds none. A Holder of Own ≠ 0 and Slots 0 holds one.
	Slots int64
	// Latest is when the latest lease other than the caller's ends; 0 when
	// there is none.
	Latest int64
}

// Decision is the outcome of one acquire or peek: the Verdict (a refused
// acquire changes nothing; Limit is the most holders at once; Remaining the
// free slots after this call; RetryAfter the time until enough leases lapse
// for this acquire to be admitted, an upper bound since releases may come
// sooner, or Never if no lapse can admit it; ResetAfter the time until
// every lease, the caller's included, has lapsed, 0 when none is live), and
// what to store.
type Decision struct {
	ratelimit.Verdict
	// Renewed reports that the caller already held a slot: admitted
	// without needing a new one.
	Renewed bool
	// Granted is, when admitted, how many slots the caller now holds (its
	// held ones and Added), all ending at End; 0 when refused.
	Granted int64
	// Added is how many of them this call took.
	Added int64
	// End is, when admitted, when the caller's lease now ends.
	End int64
	// Expire is, when admitted, when the latest lease ends: the instant the
	// whole state can go.
	Expire int64
}

// Limiter admits at most limit holders whose leases have not lapsed.
type Limiter struct{ limit int64 }

// New returns a limiter of limit holders at once (limit ≥ 1).
func New(limit int64) (Limiter, error) {
	if limit < 1 {
		return Limiter{}, ErrRange
	}
	return Limiter{limit}, nil
}

// Limit is the most holders at once.
func (l Limiter) Limit() int64 { return l.limit }

// Acquire admits the caller, whose own lease and the latest other are h,
// at now: a caller holding a live lease always (a renewal, taking no new
// slot); a new one when, counting it, at most limit − reserve leases are
// live. An admitted caller's lease ends lease after now.
//
// A reserve keeps slots for callers that pass none: with limit 10 and
// reserve 2, a new holder is admitted while at most 7 are live.
func (l Limiter) Acquire(s Leases, h Holder, now int64, lease time.Duration, reserve int64) (Decision, error) {
	return l.AcquireN(s, h, now, lease, reserve, 1)
}

// AcquireN asks for up to n slots (n ≥ 1) under the caller's id: a caller
// holding h live slots renews them all and takes up to n − h more; a new
// one takes g, the most in 1..n that leave at most limit − reserve leases
// live, and is refused (as Acquire refuses it, for one slot) when none is
// free. Granted is the slots held after the call, which may be more than n
// when the caller held more.
//
// With limit 10, reserve 2 and 5 leases held by others, a new id asking
// for 4 gets 3 (Remaining 2); asking again renews those 3 and gets none
// more while nothing lapses.
func (l Limiter) AcquireN(s Leases, h Holder, now int64, lease time.Duration, reserve, n int64) (Decision, error) {
	if lease <= 0 || reserve < 0 || reserve > l.limit || l.limit < 1 || n < 1 {
		return Decision{}, ErrRange
	}
	end, ok := checked.Add(now, int64(lease))
	if !ok {
		return Decision{}, ErrOverflow
	}
	held := h.Own > now
	d := l.decide(s, held, now, reserve)
	if d.Limited {
		d.ResetAfter = untilAll(max(h.Own, h.Latest), now)
		return d, nil
	}
	if held {
		d.Granted = max(h.Slots, 1)
	}
	// Room is what new slots may take: limit − reserve − live, less the
	// one decide counted for a new holder (Remaining is L − live − 1 then).
	room := d.Remaining - reserve
	if !held {
		room++
	}
	d.Added = max(min(n-d.Granted, room), 0)
	if !held {
		d.Remaining++ // decide took one; Added says how many
	}
	d.Remaining = max(d.Remaining-d.Added, 0)
	d.Granted += d.Added
	d.End = end
	d.Expire = max(h.Latest, end)
	d.ResetAfter = time.Duration(d.Expire - now)
	return d, nil
}

// Peek reports what an acquire by a new holder would decide at now,
// changing nothing; latest is when the latest lease ends (0: none). Its
// ResetAfter is the time until the leases already held have lapsed.
func (l Limiter) Peek(s Leases, latest, now, reserve int64) (Decision, error) {
	if reserve < 0 || reserve > l.limit || l.limit < 1 {
		return Decision{}, ErrRange
	}
	d := l.decide(s, false, now, reserve)
	d.ResetAfter = untilAll(latest, now)
	return d, nil
}

// decide admits or refuses at now: a renewal (held) always, a new holder
// when the live leases and it fit under limit − reserve. It returns the
// decision without ResetAfter, End and Expire.
func (l Limiter) decide(s Leases, held bool, now, reserve int64) Decision {
	L := l.limit
	live := s.Count(now)
	d := Decision{Verdict: ratelimit.Verdict{Limit: L, RetryAfter: Never}, Renewed: held}
	switch {
	case held:
		d.Remaining = L - live
	case live+1+reserve <= L: // live ≤ L: no overflow
		d.Remaining = L - live - 1
	default:
		d.Limited = true
		d.Remaining = L - live
		// Wait until the k-th earliest live lease lapses, k = live + 1 +
		// reserve − L: then live − k + 1 + reserve = L.
		if k := live + 1 + reserve - L; k <= live {
			if t := s.Nth(now, k); t > now {
				d.RetryAfter = time.Duration(t - now)
			}
		}
	}
	d.Remaining = min(max(d.Remaining, 0), L)
	return d
}

// untilAll is the time from now until the instant latest, 0 when it has
// come (or is 0, none).
func untilAll(latest, now int64) time.Duration {
	if latest <= now {
		return 0
	}
	return time.Duration(latest - now)
}

// Release is what releasing the caller's slots, whose own lease and the
// latest other are h, changes at now.
type Release struct {
	// Held reports that the caller held a live lease (Released > 0).
	Held bool
	// Remove reports that the caller's lease, live or lapsed, must go.
	Remove bool
	// Released is how many live slots are given back, Keep how many the
	// caller still holds (live, ending at h.Own); with Keep 0 every slot
	// of the caller's, live or lapsed, goes (Remove), else the Released
	// slots above Keep.
	Released, Keep int64
	// Expire is when the latest remaining lease ends, the state's new
	// expiry; 0 when no live lease remains and the state can go at once.
	Expire int64
}

// Free releases the caller's slots at now.
func Free(h Holder, now int64) Release { return FreeN(h, now, math.MaxInt64) }

// FreeN releases up to n of the caller's slots at now (n ≥ 1): holding 5
// live slots, FreeN of 2 releases 2 and keeps 3, renewing none.
func FreeN(h Holder, now, n int64) Release {
	r := Release{Held: h.Own > now, Remove: h.Own != 0}
	slots := max(h.Slots, 1)
	if r.Held {
		r.Released = min(n, slots)
		r.Keep = slots - r.Released
	}
	latest := h.Latest
	if r.Keep > 0 {
		latest = max(latest, h.Own)
		r.Remove = false
	}
	if latest > now {
		r.Expire = latest
	}
	return r
}
