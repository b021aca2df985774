package lease_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// A whole API's budget of 50,000 requests a second, shared by every
// process: each decides its hot key's requests from units granted ahead,
// about one Redis call per 50 ms instead of one per request. (Needs a
// server with the module on 127.0.0.1:6379: make run.)
func ExampleNew() {
	ctx := context.Background()
	c := client.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}))
	tier := lease.New(c, lease.Options{}) // Target 50 ms, τ 200 ms
	defer tier.Close(ctx)                 // gives back what it holds
	res, err := tier.Take(ctx, "rl:api:all", client.PerSecond(50000), 1)
	if err != nil {
		fmt.Println("limiter unavailable:", err)
		return
	}
	fmt.Println("admitted:", !res.Limited)
}
