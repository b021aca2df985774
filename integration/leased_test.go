package integration

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// sent counts the commands a go-redis client sends.
type sent struct{ n atomic.Int64 }

func (s *sent) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.n.Add(1)
		return next(ctx, cmd)
	}
}
func (s *sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// The local tier on a real server: four processes (each its own client
// and connections) decide one hot PerSecond(2000) key, 32 goroutines
// asking at many times the limit for 1.5 s. In every window of 100 ms and
// 1 s the admissions stay within the exact limiter's (burst + rate × W)
// and rate × τ more (10 ms more for the clocks of client and server); the
// allowance is used; fewer than 0.01 calls reach Redis per decision,
// every command the tiers send counted; Close gives back what is held.
func TestLeased(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "hot")
		l := client.PerSecond(2000)
		var calls sent
		var procs []*client.Leased
		for range 4 {
			rdb := redis.NewClient(&redis.Options{Addr: s.rdb.Options().Addr})
			rdb.AddHook(&calls)
			t.Cleanup(func() { rdb.Close() })
			procs = append(procs, client.NewLeased(client.New(rdb), client.LeaseOptions{}))
		}
		tau := 200 * time.Millisecond // the default: 4 × Target
		start := time.Now()
		stop := start.Add(1500 * time.Millisecond)
		var mu sync.Mutex
		var admitted []int64
		var decisions atomic.Int64
		var wg sync.WaitGroup
		for g := range 32 {
			p := procs[g%4]
			wg.Go(func() {
				var mine []int64
				for time.Now().Before(stop) {
					r, err := p.Take(ctx, k, l, 1)
					if err != nil {
						t.Error(err)
						return
					}
					decisions.Add(1)
					if !r.Limited {
						mine = append(mine, time.Now().UnixNano())
					}
					time.Sleep(250 * time.Microsecond)
				}
				mu.Lock()
				admitted = append(admitted, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		for _, p := range procs {
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(admitted)
		for _, w := range []time.Duration{100 * time.Millisecond, time.Second} {
			most := 2000 + int(2000*(w+tau+10*time.Millisecond)/time.Second)
			j := 0
			for i := range admitted {
				for admitted[i]-admitted[j] >= int64(w) {
					j++
				}
				if n := i - j + 1; n > most {
					t.Fatalf("%d admitted within %v; the exact limiter and τ admit %d", n, w, most)
				}
			}
		}
		allowance := 2000 + 2000*elapsed.Seconds()
		d, c := decisions.Load(), calls.n.Load()
		if len(admitted) < int(0.9*allowance) || float64(c)/float64(d) > 0.01 {
			t.Fatalf("%d admitted of an allowance of %.0f; %d calls for %d decisions; the first process: %+v", len(admitted), allowance, c, d, procs[0].Stats())
		}
		t.Logf("%d admitted (%.1f%% of the allowance), %d decisions, %d calls (%.4f each); the first process: %+v",
			len(admitted), 100*float64(len(admitted))/allowance, d, c, float64(c)/float64(d), procs[0].Stats())
	})
}
