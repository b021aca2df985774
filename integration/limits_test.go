package integration

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// TestLimitsUnderTraffic: a fixed window whose limit is held in Redis
// (LIMITS, client.Override) while eight clients take from it and another
// changes the limit (20, 60, 10, 40, 80, then cleared to the call's 1000)
// on a real server, through the module and through the library's
// functions: the call after each change decides with the new limit; every
// admitted call's count is within the limit that admitted it, a limit the
// hash held; while the limit is below the count (10, 40) nothing is
// admitted; raised past it (80), the difference is; and in all the window
// admits exactly the largest limit it was given. The window is a day,
// so no edge falls inside the run but by one chance in 20,000 (then the
// totals are not checked).
func TestLimitsUnderTraffic(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		s := startFor(t, f, opts{module: true})
		for _, e := range []client.Engine{client.Module, client.Functions} {
			t.Run(e.String(), func(t *testing.T) {
				c := client.NewEngine(s.rdb, e)
				key, plan := fmt.Sprintf("{tenant:%v}:api", e), fmt.Sprintf("{tenant:%v}:plan", e)
				own := client.FixedWindow(1000, 24*time.Hour)
				fw := own.Override(plan, "api")
				day := time.Now().Unix() / 86400

				var mu sync.Mutex
				given := map[int64]bool{} // every limit the hash has held
				set := func(n int64) {
					mu.Lock()
					given[n] = true
					mu.Unlock()
					if err := c.SetLimit(ctx, plan, "api", client.FixedWindow(n, 24*time.Hour)); err != nil {
						t.Error(err)
						return
					}
					// The next call decides with it.
					if r, err := c.Peek(ctx, key, fw, 0); err != nil || r.Limit != n {
						t.Errorf("the call after SetLimit %d: %+v %v", n, r, err)
					}
				}
				set(20)
				var admitted, refused atomic.Int64
				var wrong atomic.Value
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							select {
							case <-stop:
								return
							default:
							}
							r, err := c.Take(ctx, key, fw, 1)
							if err != nil {
								wrong.Store(err.Error())
								return
							}
							if r.Limited {
								refused.Add(1)
								continue
							}
							admitted.Add(1)
							mu.Lock()
							ok := given[r.Limit] || r.Limit == 1000
							mu.Unlock()
							if !ok || r.Remaining < 0 || r.Limit-r.Remaining < 1 {
								wrong.Store(fmt.Sprintf("admitted with limit %d, %d remaining: a count past its limit or a limit never given", r.Limit, r.Remaining))
							}
						}
					}()
				}
				waitFor := func(n int64) {
					for deadline := time.Now().Add(10 * time.Second); admitted.Load() < n && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
				}
				waitFor(20) // the window fills to 20
				set(60)
				waitFor(60)
				set(10) // below the count: nothing more is admitted
				before := admitted.Load()
				time.Sleep(50 * time.Millisecond)
				if now := admitted.Load(); now != before { // the window was full at 60 already
					t.Errorf("under a limit of 10 below the count, %d more were admitted", now-before)
				}
				if r, err := c.Take(ctx, key, fw, 1); err != nil || !r.Limited || r.Limit != 10 {
					t.Errorf("a call under the lowered limit: %+v %v, want refused by 10", r, err)
				}
				set(40) // still below the count
				time.Sleep(20 * time.Millisecond)
				if now := admitted.Load(); now != before {
					t.Errorf("under a limit of 40 below the count, %d more were admitted", now-before)
				}
				set(80) // above: it admits the difference, and no more
				waitFor(80)
				time.Sleep(20 * time.Millisecond)
				close(stop)
				wg.Wait()
				if w := wrong.Load(); w != nil {
					t.Fatal(w)
				}
				count, err := s.rdb.Get(ctx, key).Int64()
				if err != nil {
					t.Fatal(err)
				}
				if time.Now().Unix()/86400 == day {
					if count != admitted.Load() || count != 80 {
						t.Fatalf("the window counts %d and admitted %d, want both 80, the largest limit given", count, admitted.Load())
					}
				}
				if refused.Load() == 0 {
					t.Fatal("no call was refused: the traffic never reached a limit")
				}
				// Cleared, the calls' own limit decides again.
				if err := c.ClearLimit(ctx, plan, "api"); err != nil {
					t.Fatal(err)
				}
				if r, err := c.Take(ctx, key, fw, 1); err != nil || r.Limited || r.Limit != 1000 || r.Remaining != 1000-count-1 {
					t.Fatalf("after ClearLimit: %+v %v, want the call's 1000 with %d counted", r, err, count)
				}
				mu.Lock()
				limits := slices.Sorted(maps.Keys(given))
				mu.Unlock()
				t.Logf("%v: %d admitted, %d refused under limits %v", e, admitted.Load(), refused.Load(), limits)
			})
		}
	})
}
