package admit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/admit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// A front-end of your own (a gRPC interceptor, a queue consumer) in a few
// lines: a per-IP and a per-account limit decided all or nothing, hot keys
// in the local tier with no call, a breaker per Redis server, and while
// Redis is away decided here and charged to Redis when it answers again.
// (Needs a server with the module on 127.0.0.1:6379: make run.)
func ExampleGate_Decide() {
	g := admit.New(client.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})), admit.Options{
		Timeout:         50 * time.Millisecond,
		OnError:         admit.Local,
		BreakerFailures: 5,
		RefusalCache:    10000,
		Lease:           &lease.Options{},
	})
	defer g.Close(context.Background())

	wants := []*admit.Want{
		{Key: "rl:{ip:192.0.2.7}:ip", Limit: client.GCRA(19, 20, time.Second), Cost: 1, Lease: true},
		{Key: "rl:{acct:42}:acct", Limit: client.PerMinute(600), Cost: 1, Lease: true},
	}
	switch out, err := g.Decide(context.Background(), wants); out {
	case admit.Decided:
		for _, w := range wants {
			if w.Known && w.Result.Limited {
				fmt.Printf("refused by %s: retry in %v\n", w.Key, w.Result.RetryAfter)
				return
			}
		}
		fmt.Println("admitted")
	default:
		fmt.Println("not decided:", err)
	}
}
