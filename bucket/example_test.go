package bucket_test

import (
	"fmt"
	"time"

	"github.com/seed-6b3823f5/ratelimit/bucket"
)

// A bucket of 10 tokens refilled at 1 per second: 10 at once, then one a second.
func ExampleTokenBucket_Take() {
	b, err := bucket.NewTokenBucket(10, 1, 1)
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	d, _ := b.Take(0, now, 10) // a new bucket is full
	fmt.Println("took 10:", !d.Limited, "remaining", d.Remaining, "full again in", d.ResetAfter)
	state := d.State

	d, _ = b.Take(state, now, 1)
	fmt.Println("one more:", !d.Limited, "retry after", d.RetryAfter)

	now += int64(2500 * time.Millisecond)
	d, _ = b.Take(state, now, 3)
	fmt.Println("3 after 2.5 s:", !d.Limited, "retry after", d.RetryAfter)
	// Output:
	// took 10: true remaining 0 full again in 10s
	// one more: false retry after 1s
	// 3 after 2.5 s: false retry after 500ms
}

// A shaper leaking 1 request per second with 2 places: three requests
// arriving together leave at 0, 1 and 2 s; the fourth is refused.
func ExampleShaper_Enqueue() {
	q, err := bucket.NewShaper(2, 1, 1)
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var state int64
	for i := 1; i <= 4; i++ {
		d, _ := q.Enqueue(state, now, 1)
		if d.Limited {
			fmt.Printf("request %d: refused, a place frees in %v\n", i, d.RetryAfter)
			continue
		}
		fmt.Printf("request %d: wait %v, %d places left\n", i, d.Delay, d.Remaining)
		state = d.State
	}
	// Output:
	// request 1: wait 0s, 2 places left
	// request 2: wait 1s, 1 places left
	// request 3: wait 2s, 0 places left
	// request 4: refused, a place frees in 1s
}
