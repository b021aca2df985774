package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestSoak makes ten million calls over every algorithm on 100,000 keys
// that churn (periods of 1 to 5 s, so keys expire and come back), and
// samples the server's RSS and the Go runtime's share of it every million.
// RSS must stay flat once warm. It runs only with SOAK=1: `make soak`.
func TestSoak(t *testing.T) {
	if os.Getenv("SOAK") == "" {
		t.Skip("the soak runs with SOAK=1 (make soak)")
	}
	calls := 10_000_000
	if v, err := strconv.Atoi(os.Getenv("SOAK_CALLS")); err == nil && v > 0 {
		calls = v
	}
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			s := startFor(t, f, opts{module: true})
			rng := rand.New(rand.NewPCG(1, 2))
			mem := func() (rss, gort int64) {
				rss, _ = strconv.ParseInt(infoField(t, s.rdb, "memory", "used_memory_rss"), 10, 64)
				gort, _ = strconv.ParseInt(infoField(t, s.rdb, "ratelimit", "ratelimit_go_runtime_bytes"), 10, 64)
				return
			}
			var samples []string
			var warmRSS, warmGo int64
			for done := 0; done < calls; done += 1000 {
				_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range 1000 {
						l := limiters[rng.IntN(len(limiters))]
						i := rng.IntN(100_000)
						p.Do(ctx, append([]any{l.cmd, "rl:soak:" + l.name + ":" + strconv.Itoa(i)}, l.params(3+i%5, 1+i%5)...)...)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if (done+1000)%1_000_000 == 0 {
					rss, gort := mem()
					samples = append(samples, fmt.Sprintf("%dM: rss %.1f MiB, go %.1f MiB", (done+1000)/1_000_000, float64(rss)/(1<<20), float64(gort)/(1<<20)))
					if done+1000 == 2_000_000 || (calls < 2_000_000 && warmRSS == 0) {
						warmRSS, warmGo = rss, gort
					}
				}
			}
			rss, gort := mem()
			t.Logf("%s: %d calls; %s", f.name, calls, strings.Join(samples, "; "))
			if warmRSS > 0 && float64(rss) > 1.25*float64(warmRSS) {
				t.Errorf("RSS grew from %d to %d after the warm-up", warmRSS, rss)
			}
			if warmGo > 0 && float64(gort) > 1.10*float64(warmGo) {
				t.Errorf("the Go runtime grew from %d to %d after the warm-up", warmGo, gort)
			}
		})
	}
}
