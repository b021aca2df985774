package integration

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// bothEngines are the module, and the Lua library on a server without it,
// as the tests that race clients on each run them.
var bothEngines = []struct {
	name   string
	module bool
	engine client.Engine
}{{"module", true, client.Module}, {"lua", false, client.Functions}}

// TestUpToRace: 50 clients, each asking UPTO 7 again and again until it is
// granted none, against one limit: the grants add up to exactly what the
// limit admits, never more; and against two in one RL.ALL, to the tighter
// one's, which both then count. With the module, and with the Lua library
// on a server without it.
func TestUpToRace(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		for _, e := range bothEngines {
			s := startFor(t, f, opts{module: e.module})
			c := client.NewEngine(s.rdb, e.engine)
			day := 24 * time.Hour
			race := func(take func() (client.Result, error)) int64 {
				var granted atomic.Int64
				var wg sync.WaitGroup
				for range 50 {
					wg.Go(func() {
						for {
							r, err := take()
							if err != nil {
								t.Error(err)
								return
							}
							if r.Granted == 0 {
								if !r.Limited {
									t.Errorf("%s: granted none, not refused: %+v", e.name, r)
								}
								return
							}
							granted.Add(r.Granted)
						}
					})
				}
				wg.Wait()
				return granted.Load()
			}
			gcra := client.GCRA(999, 1, day) // 1000 at once, one a day after
			if n := race(func() (client.Result, error) { return c.Take(ctx, "race:g", gcra, 1, client.UpTo(7)) }); n != 1000 {
				t.Errorf("%s: GCRA granted %d in all, want 1000", e.name, n)
			}
			limits := []client.Keyed{{Key: "{race}a", Limit: gcra, Cost: 1}, {Key: "{race}b", Limit: client.FixedWindow(700, day), Cost: 1}}
			if n := race(func() (client.Result, error) { return c.All(ctx, limits, client.UpTo(7)) }); n != 700 {
				t.Errorf("%s: RL.ALL granted %d in all, want 700 (the window's)", e.name, n)
			}
			if r, err := c.Peek(ctx, "{race}a", gcra, 0); err != nil || r.Remaining != 300 {
				t.Errorf("%s: the GCRA of RL.ALL: %+v %v, want 300 remaining", e.name, r, err)
			}
		}
	})
}
