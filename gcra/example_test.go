package gcra_test

import (
	"fmt"
	"time"

	"github.com/seed-6b3823f5/ratelimit/gcra"
)

// Burst 15 at 30 per 60 s: 16 at once, then one every 2 s.
func Example() {
	l, err := gcra.New(15, 30, 60)
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var tat int64 // no state yet: the limiter is full
	admitted := 0
	for range 20 {
		d, _ := l.Throttle(tat, now, 1)
		if !d.Limited {
			admitted++
			tat = d.TAT
		}
	}
	fmt.Println("admitted at once:", admitted)

	d, _ := l.Throttle(tat, now, 1)
	fmt.Println("next one refused:", d.Limited, "retry after", d.RetryAfter)

	now += int64(2 * time.Second)
	d, _ = l.Throttle(tat, now, 1)
	fmt.Println("2 s later:", d.Limited, "remaining", d.Remaining, "full again in", d.ResetAfter)
	// Output:
	// admitted at once: 16
	// next one refused: true retry after 2s
	// 2 s later: false remaining 0 full again in 32s
}

// redis-cell's README: CL.THROTTLE user123 15 30 60 replies 0 16 15 -1 2.
func ExampleLimiter_Throttle() {
	l, _ := gcra.New(15, 30, 60)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	d, _ := l.Throttle(0, now, 1)
	fmt.Println(d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter)
	// Output: false 16 15 -1ns 2s
}

// A negative quantity gives tokens back, never beyond a full limiter.
func ExampleLimiter_Throttle_refund() {
	l, _ := gcra.New(4, 1, 1) // 5 at once, then 1 per second
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	d, _ := l.Throttle(0, now, 5)
	fmt.Println("took 5, remaining", d.Remaining)
	d, _ = l.Throttle(d.TAT, now, -2)
	fmt.Println("gave 2 back, remaining", d.Remaining)
	d, _ = l.Throttle(d.TAT, now, -100)
	fmt.Println("gave 100 back, remaining", d.Remaining)
	// Output:
	// took 5, remaining 0
	// gave 2 back, remaining 2
	// gave 100 back, remaining 5
}

// Stripe's load shedder in one option: requests that pass a reserve stop 2
// short of the limit, leaving the last 2 for those that pass none.
func ExampleLimiter_ThrottleReserve() {
	l, _ := gcra.New(5, 1, 60) // 6 at once, then one a minute
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var tat int64
	for i := range 5 {
		d, _ := l.ThrottleReserve(tat, now, 1, 2)
		fmt.Println("low priority", i+1, "admitted:", !d.Limited, "remaining:", d.Remaining)
		if !d.Limited {
			tat = d.TAT
		}
	}
	d, _ := l.Throttle(tat, now, 1)
	fmt.Println("critical admitted:", !d.Limited, "remaining:", d.Remaining)
	// Output:
	// low priority 1 admitted: true remaining: 5
	// low priority 2 admitted: true remaining: 4
	// low priority 3 admitted: true remaining: 3
	// low priority 4 admitted: true remaining: 2
	// low priority 5 admitted: false remaining: 2
	// critical admitted: true remaining: 1
}

// A charge for work already done: 10 at once, one back a second. A charge
// of 15 from full takes the limiter 5 into debt; every request, even of
// cost 0, is refused until it is paid off.
func ExampleLimiter_Charge() {
	l, _ := gcra.New(9, 1, 1) // T = 1 s, τ = 10 s
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	d, _ := l.Charge(0, now, 15, false)
	fmt.Println("charged 15:", d.Limited, "owed", d.Owed, "one passes after", d.RetryAfter, "full after", d.ResetAfter)
	c, _ := l.ThrottleOwed(d.TAT, now, 0, 0, d.Owed)
	fmt.Println("a check of cost 0:", c.Limited, "retry after", c.RetryAfter)
	now += int64(6 * time.Second)
	c, _ = l.ThrottleOwed(d.TAT, now, 1, 0, d.Owed)
	fmt.Println("6 s later:", c.Limited, "owed", c.Owed)
	// Output:
	// charged 15: true owed true one passes after 6s full after 15s
	// a check of cost 0: true retry after 5s
	// 6 s later: false owed false
}
