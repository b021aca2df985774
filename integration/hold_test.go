package integration

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// TestHoldRace: 40 workers hold an estimate of 100 from one budget of
// 10,000 tokens (one more a day), do work that costs 50 to 150, settle it
// (twice, as a retried stream-done call would), and stop at their first
// refusal. Every settled unit is counted exactly once: the budget's state
// at the end is 10,000 minus the sum of the actual costs (in debt past
// it); the debt is at most what the holds in flight under-estimated, 50
// for each worker; and a budget in debt admits no hold until it is
// repaid. With the module, and with the Lua library on a server without it.
func TestHoldRace(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		for _, e := range bothEngines {
			s := startFor(t, f, opts{module: e.module})
			c := client.NewEngine(s.rdb, e.engine)
			day := 24 * time.Hour
			budget := client.GCRA(9999, 1, day)
			key := "rl:{race}:tokens"
			var spent, settled, twice atomic.Int64
			var wg sync.WaitGroup
			for w := range 40 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(w), 46))
					for i := 0; ; i++ {
						id := fmt.Sprintf("w%d-%d", w, i)
						h, err := c.Hold(ctx, key, id, budget, 100, time.Minute)
						if err != nil {
							t.Error(err)
							return
						}
						if h.Limited {
							return
						}
						actual := 50 + r.Int64N(101)
						_, held, err := c.Settle(ctx, key, id, budget, actual)
						if err != nil || held != 100 {
							t.Errorf("%s: settled %d, held %d: %v", e.name, actual, held, err)
							return
						}
						spent.Add(actual)
						settled.Add(1)
						if _, held, err := c.Settle(ctx, key, id, budget, actual); err != nil || held != -1 {
							t.Errorf("%s: a second settle found %d: %v", e.name, held, err)
							return
						}
						twice.Add(1)
					}
				})
			}
			wg.Wait()
			p, err := c.Peek(ctx, key, budget, 0)
			if err != nil {
				t.Fatal(err)
			}
			over := int64(0)
			if p.Limited { // in debt: a check of 0 waits a day per unit owed, less the ms since
				over = int64((p.RetryAfter + day/2) / day)
			}
			if got := 10000 - p.Remaining + over; got != spent.Load() {
				t.Errorf("%s: the budget counts %d, the workers spent %d in %d settlements (%d settled twice)",
					e.name, got, spent.Load(), settled.Load(), twice.Load())
			}
			if over > 40*50 {
				t.Errorf("%s: %d past the budget, more than 40 holds could under-estimate", e.name, over)
			}
			if over > 0 {
				if h, err := c.Hold(ctx, key, "late", budget, 0, time.Minute); err != nil || !h.Limited {
					t.Errorf("%s: a hold of 0 while %d are owed: %+v %v", e.name, over, h, err)
				}
			}
			t.Logf("%s: %d holds settled, %d spent, %d past the budget", e.name, settled.Load(), spent.Load(), over)
		}
	})
}
