package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/calendar"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// 10 requests at once per API key, then 10 a minute; a refused one is told
// when to come back. (Needs a server with the module on 127.0.0.1:6379:
// make run.)
func ExampleClient_Take() {
	ctx := context.Background()
	c := client.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}))
	res, err := c.Take(ctx, "rl:api:key:abc", client.GCRA(9, 10, time.Minute), 1)
	if err != nil {
		fmt.Println("limiter unavailable:", err) // decide: serve, or refuse
		return
	}
	if res.Limited {
		fmt.Printf("refused: retry in %v\n", res.RetryAfter)
		return
	}
	fmt.Printf("admitted, %d left\n", res.Remaining)
}

// Requests and tokens per minute for one user, decided together: either
// both admit, or nothing is taken from either. The hash tag keeps both keys
// in one cluster slot.
func ExampleClient_All() {
	ctx := context.Background()
	c := client.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}))
	res, err := c.All(ctx, []client.Keyed{
		{Key: "rl:{user:42}:rpm", Limit: client.GCRA(59, 60, time.Minute), Cost: 1},
		{Key: "rl:{user:42}:tpm", Limit: client.TokenBucket(40000, 40000, time.Minute), Cost: 1200},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	policy := []string{"requests per minute", "tokens per minute"}[res.Policy]
	fmt.Printf("limited %v by %s, %d left\n", res.Limited, policy, res.Remaining)
}

// At most 4 exports at once; a worker that crashes holds its slot for two
// minutes at most. A refused request is shed with 503.
func ExampleClient_Acquire() {
	c := client.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}))
	export := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("report")) }
	handler := func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		res, err := c.Acquire(r.Context(), "rl:conc:export", client.Concurrency{Limit: 4, Lease: 2 * time.Minute}, id)
		if err != nil || res.Limited {
			http.Error(w, "too many exports running", http.StatusServiceUnavailable)
			return
		}
		defer c.Release(context.WithoutCancel(r.Context()), "rl:conc:export", id)
		export(w, r)
	}
	_ = handler
}

// A budget of 40,000 tokens a minute for one user's LLM calls, whose cost
// is known only when the response is done: hold the request's estimate
// (its max_tokens) before the call, settle what it used after. A response
// that used more goes into debt, and the user's next calls wait it out.
func ExampleClient_Hold() {
	c := client.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}))
	tpm := client.TokenBucket(40000, 40000, time.Minute)
	handler := func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		res, err := c.Hold(r.Context(), "rl:{user:42}:tpm", id, tpm, 1200, 10*time.Minute)
		if err != nil || res.Limited {
			http.Error(w, "token budget spent", http.StatusTooManyRequests)
			return
		}
		used := int64(1450) // the response's usage, once it is done
		if _, held, err := c.Settle(context.WithoutCancel(r.Context()), "rl:{user:42}:tpm", id, tpm, used); err == nil && held < 0 {
			log.Printf("request %s outlived its hold: its estimate stands", id)
		}
	}
	_ = handler
}

// A Limit tells what it is: its family, as the command table names it, and
// the arguments its command takes after the key.
func ExampleLimit_Params() {
	l := client.PerMinute(10)
	n, m, period := l.Params()
	q, w := l.Quota()
	fmt.Println(l.Family(), n, m, period, q, w)
	// Output: GCRA 9 10 1m0s 10 1m0s
}

// A fixed window spread per key: each key's minutes start at an offset of
// its own, so 10,000 users' quotas do not all refill, and their retries
// all arrive, at hh:mm:00.
func ExampleLimit_Spread() {
	l := client.FixedWindow(100, time.Minute).Spread()
	fmt.Println(l, l.Spreads())
	// Output: FW(limit 100, window 1m0s, spread) true
}

// A million requests per calendar month in Berlin, counted afresh at
// midnight on the 1st (CET or CEST), whatever the month's length; with
// Anchor{Day: 15}, from each 15th.
func ExampleCalendar() {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	l := client.Calendar(1_000_000, calendar.Period{Unit: calendar.Month, Location: berlin})
	p, _ := l.Period()
	fmt.Println(l, p.Unit)
	// Output: FW(limit 1000000, month in Europe/Berlin) month
}
