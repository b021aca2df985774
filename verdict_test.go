package ratelimit_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/bucket"
	"github.com/seed-6b3823f5/ratelimit/gcra"
	"github.com/seed-6b3823f5/ratelimit/window"
)

func TestReserve(t *testing.T) {
	for _, c := range []struct {
		cost, reserve, probe int64
		first                bool
	}{
		{1, 0, 1, false},                        // no reserve: nothing to decide first
		{1, 2, 3, true},                         // cost + reserve first
		{0, 5, 5, true},                         // a report still honours the reserve
		{-3, 2, -3, false},                      // a refund ignores it
		{math.MaxInt64, 1, math.MaxInt64, true}, // saturating, never wrapping
		{math.MaxInt64 - 1, 1, math.MaxInt64, true},
	} {
		if probe, first := ratelimit.Reserve(c.cost, c.reserve); probe != c.probe || first != c.first {
			t.Errorf("Reserve(%d, %d) = %d, %v; want %d, %v", c.cost, c.reserve, probe, first, c.probe, c.first)
		}
	}
}

// headers is one routine for every algorithm: each Decision embeds a
// Verdict.
func headers(v ratelimit.Verdict) string {
	if v.Limited {
		return fmt.Sprintf("429, RateLimit r=0, Retry-After %v", v.RetryAfter)
	}
	return fmt.Sprintf("200, RateLimit q=%d r=%d t=%v", v.Limit, v.Remaining, v.ResetAfter)
}

// Three algorithms, one routine for their answers.
func Example() {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixNano()
	g, _ := gcra.New(15, 30, 60) // 16 at once, then one every 2 s
	gd, _ := g.Throttle(0, now, 1)
	b, _ := bucket.NewTokenBucket(10, 1, 1) // 10 tokens, one a second
	bd, _ := b.Take(0, now, 11)             // more than it holds: never
	w, _ := window.NewFixedWindow(100, 60)
	wd, _, _, _ := w.Hit(0, 0, now, 1)
	fmt.Println(headers(gd.Verdict))
	fmt.Println(headers(bd.Verdict), bd.RetryAfter == ratelimit.Never)
	fmt.Println(headers(wd.Verdict))
	// Output:
	// 200, RateLimit q=16 r=15 t=2s
	// 429, RateLimit r=0, Retry-After -1ns true
	// 200, RateLimit q=100 r=99 t=1m0s
}
