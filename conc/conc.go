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
	// without taking a new one.
	Renewed bool
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
	if lease <= 0 || reserve < 0 || reserve > l.limit || l.limit < 1 {
		return Decision{}, ErrRange
	}
	end, ok := checked.Add(now, int64(lease))
	if !ok {
		return Decision{}, ErrOverflow
	}
	d := l.decide(s, h.Own > now, now, reserve)
	if d.Limited {
		d.ResetAfter = untilAll(max(h.Own, h.Latest), now)
		return d, nil
	}
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

// Release is what releasing the caller's slot, whose own lease and the
// latest other are h, changes at now.
type Release struct {
	// Held reports that the caller held a live lease: the reply 1.
	Held bool
	// Remove reports that the caller's lease, live or lapsed, must go.
	Remove bool
	// Expire is when the latest remaining lease ends, the state's new
	// expiry; 0 when no live lease remains and the state can go at once.
	Expire int64
}

// Free releases the caller's slot at now.
func Free(h Holder, now int64) Release {
	r := Release{Held: h.Own > now, Remove: h.Own != 0}
	if h.Latest > now {
		r.Expire = h.Latest
	}
	return r
}
