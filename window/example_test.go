package window_test

import (
	"fmt"
	"time"

	"github.com/seed-6b3823f5/ratelimit/window"
)

// Cloudflare's example: 42 hits in the previous minute, 18 in this one, 15 s
// into it. The estimate 42 × 45/60 + 18 = 49.5 is under 50: admitted.
func ExampleSlidingWindow_Hit() {
	w, _ := window.NewSlidingWindow(50, 60)
	start := time.Date(2026, 1, 1, 12, 1, 0, 0, time.UTC).UnixNano() // a minute boundary
	idx := start / int64(time.Minute)
	counts := window.Counts{Index: idx, Current: 18, Previous: 42}
	now := start + int64(15*time.Second)

	d, counts, _, _ := w.Hit(counts, now, 1)
	fmt.Println("admitted:", !d.Limited, "remaining:", d.Remaining, "counts:", counts.Current, counts.Previous)
	d, _, _, _ = w.Hit(counts, now, 1)
	fmt.Println("next one admitted:", !d.Limited, "retry after:", d.RetryAfter)
	// Output:
	// admitted: true remaining: 0 counts: 19 42
	// next one admitted: false retry after: 714.285715ms
}

// A fixed window of 100 per minute admits 100 at 12:00:59.9 and 100 more at
// 12:01:00.1: 200 within 200 ms.
func ExampleFixedWindow_Hit() {
	f, _ := window.NewFixedWindow(100, 60)
	boundary := time.Date(2026, 1, 1, 12, 1, 0, 0, time.UTC).UnixNano()
	admitted := 0
	var count, end int64 // the stored count and its expiry
	for _, at := range []int64{boundary - 100e6, boundary + 100e6} {
		for range 100 {
			d, n, e, _ := f.Hit(count, end, at, 1)
			if !d.Limited {
				admitted++
				count, end = n, e
			}
		}
	}
	fmt.Println("admitted within 200 ms:", admitted)
	// Output: admitted within 200 ms: 200
}

// A charge past the limit: 10 a minute, 8 counted, a charge of 5 makes 13,
// and the window refuses until it ends.
func ExampleFixedWindow_Charge() {
	f, _ := window.NewFixedWindow(10, 60)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	now := start + int64(20*time.Second)
	end := start + int64(time.Minute)
	d, n, _, _ := f.Charge(8, end, now, 5)
	fmt.Println("charged 5 over 8:", d.Limited, "count", n, "retry after", d.RetryAfter)
	d, _, _, _ = f.Hit(n, end, now, 0)
	fmt.Println("a check of cost 0:", d.Limited)
	// Output:
	// charged 5 over 8: true count 13 retry after 40s
	// a check of cost 0: true
}
