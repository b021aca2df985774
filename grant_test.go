package ratelimit_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/bucket"
	"github.com/seed-6b3823f5/ratelimit/gcra"
	"github.com/seed-6b3823f5/ratelimit/window"
)

func TestGrant(t *testing.T) {
	for _, c := range []struct{ remaining, cost, reserve, n, want int64 }{
		{7, 2, 1, 5, 3},  // 6 units taken, the reserve's 1 left
		{7, 2, 1, 2, 2},  // no more than asked
		{7, 2, 0, 10, 3}, // 6 of 7: a whole number of calls
		{1, 2, 0, 5, 0},  // not one call fits: refused
		{5, 1, 5, 3, 0},  // the reserve is all that remains
		{5, 1, 9, 3, 0},  // more reserve than remains
		{0, 0, 0, 4, 4},  // a cost of 0 always fits
		{3, 1, 0, 0, 0},  // asking for none
		{ratelimit.MaxUpTo, 1, 0, ratelimit.MaxUpTo, ratelimit.MaxUpTo},
		{math.MaxInt64, 1, -1, 3, 3}, // a negative reserve counts as none
	} {
		if got := ratelimit.Grant(c.remaining, c.cost, c.reserve, c.n); got != c.want {
			t.Errorf("Grant(%d, %d, %d, %d) = %d, want %d", c.remaining, c.cost, c.reserve, c.n, got, c.want)
		}
	}
}

// limiter is one algorithm at one state: what a call of cost 0 leaves
// remaining, and whether a call of cost (with a reserve) is refused.
type limiter struct {
	name      string
	remaining int64
	refused   func(cost, reserve int64) bool
}

// sortedLog is a sliding log of instants, sorted.
type sortedLog []int64

func (l sortedLog) Count(after int64) int64 {
	n := int64(0)
	for _, e := range l {
		if e > after {
			n++
		}
	}
	return n
}

func (l sortedLog) Nth(after, k int64) int64 {
	for _, e := range l {
		if e > after {
			if k--; k == 0 {
				return e
			}
		}
	}
	return math.MinInt64
}

func (l sortedLog) Newest() int64 {
	if len(l) == 0 {
		return math.MinInt64
	}
	return l[len(l)-1]
}

// randomLimiters are the five limiters of units at random states at now.
func randomLimiters(r *rand.Rand, now int64) []limiter {
	sec := int64(time.Second)
	between := func(a, b int64) int64 { return a + r.Int64N(b-a+1) }
	g, _ := gcra.New(between(0, 20), between(1, 30), between(1, 120))
	tat := now + between(-2*int64(g.Tolerance()), int64(g.Tolerance()))
	tb, _ := bucket.NewTokenBucket(between(1, 20), between(1, 10), between(1, 60))
	full := now + between(-int64(tb.Tolerance()), int64(tb.Tolerance()))
	L, W := between(1, 30), between(1, 60)
	fw, _ := window.NewFixedWindow(L, W)
	count, expires := between(0, L+3), now+between(-W*sec, W*sec)
	sw, _ := window.NewSlidingWindow(L, W)
	idx := now / (W * sec)
	counts := window.Counts{Index: idx - between(0, 1), Current: between(0, L), Previous: between(0, L+2)}
	sl, _ := window.NewSlidingLog(L, W)
	var log sortedLog
	for range between(0, L+2) {
		log = append(log, now-between(0, 2*W*sec))
	}
	slices.Sort(log)
	return []limiter{
		{"gcra", must(g.Throttle(tat, now, 0)).Remaining, func(c, res int64) bool { return must(g.ThrottleReserve(tat, now, c, res)).Limited }},
		{"token bucket", must(tb.Take(full, now, 0)).Remaining, func(c, res int64) bool { return must(tb.TakeReserve(full, now, c, res)).Limited }},
		{"fixed window", first(fw.Hit(count, expires, now, 0)).Remaining, func(c, res int64) bool { return first(fw.HitReserve(count, expires, now, c, res)).Limited }},
		{"sliding window", first(sw.Hit(counts, now, 0)).Remaining, func(c, res int64) bool { return first(sw.HitReserve(counts, now, c, res)).Limited }},
		{"sliding log", must(sl.Hit(log, now, 0)).Remaining, func(c, res int64) bool { return must(sl.HitReserve(log, now, c, res)).Limited }},
	}
}

func must[D any](d D, err error) D {
	if err != nil {
		panic(err)
	}
	return d
}

func first[D, S any](d D, _ S, _ int64, err error) D { return must(d, err) }

// TestGrantIsTheMost: for every limiter at random states, Grant on what a
// call of cost 0 leaves remaining is the most calls the limiter admits at
// once: g × cost (with the reserve) is admitted, (g + 1) × cost is not,
// unless g is all that was asked for.
func TestGrantIsTheMost(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 11, 26, 12, 0, 0, 123456789, time.UTC).UnixNano()
	for range 20000 {
		cost, reserve, n := 1+r.Int64N(6), r.Int64N(4), 1+r.Int64N(12)
		for _, l := range randomLimiters(r, now) {
			g := ratelimit.Grant(l.remaining, cost, reserve, n)
			what := fmt.Sprintf("%s: remaining %d, UPTO %d of cost %d, reserve %d: grant %d", l.name, l.remaining, n, cost, reserve, g)
			if g > 0 && l.refused(g*cost, reserve) {
				t.Fatalf("%s, which it refuses", what)
			}
			if g < n && !l.refused((g+1)*cost, reserve) {
				t.Fatalf("%s, but it admits %d", what, g+1)
			}
		}
	}
}

// A local tier asks a token bucket for up to 5 calls of 2 tokens, keeping
// 1 token for others: of 7 tokens it is granted 3 calls (6 tokens).
func ExampleGrant() {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC).UnixNano()
	b, _ := bucket.NewTokenBucket(10, 1, 1) // 10 tokens, one a second
	state, _ := b.Take(0, now, 3)           // 7 left
	left, _ := b.Take(state.State, now, 0)
	g := ratelimit.Grant(left.Remaining, 2, 1, 5)
	took, _ := b.TakeReserve(state.State, now, g*2, 1)
	fmt.Println(left.Remaining, g, took.Remaining)
	// Output: 7 3 1
}
