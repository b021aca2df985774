package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/gcra"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// fairRun is what the eight-process runs measured.
type fairRun struct {
	jain       float64 // equal demand: Jain's index of what each process admitted
	equalUsed  float64 // and the share of the allowance admitted
	stepWorst  float64 // after one process's demand steps ×5: the largest deviation from the fair share, as a fraction of it, in the second from 1 s after the step
	stepWorst2 float64 // the same over the 2 s from 1 s after the step
	stepUsed   float64
	admitted   int // in the three runs
	overExact  int // of them, how many the exact limiter refuses when the admissions are replayed through it (gcra): at most rate × τ
	overBound  int // how many the exact limiter with rate × τ more burst refuses: 0 is never over
}

const (
	fairProcs = 8
	fairRate  = 8000 // PerSecond(8000): a share of 1000 a second each
	fairTau   = 200 * time.Millisecond
)

// fair runs eight processes (each a lease.Tier over its own connections) on
// one PerSecond(8000) key: for d at equal demand, 1.5× their share each;
// then on a fresh key at 1.5× each, one of them stepping to 7.5× its share
// 1 s in, for 4 s; then on another, all at 0.2× their share for 2 s
// (holding units granted ahead) and all at 4× for 1 s. Each process paces
// its decisions (two goroutines, each deciding at an even interval); every
// admission is time-stamped.
func fair(ctx context.Context, addr string, d time.Duration, round int) fairRun {
	var procs []*lease.Tier
	var rdbs []*redis.Client
	for range fairProcs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 8})
		rdbs = append(rdbs, rdb)
		procs = append(procs, lease.New(client.New(rdb), lease.Options{}))
	}
	defer func() {
		for i, p := range procs {
			p.Close(ctx)
			rdbs[i].Close()
		}
	}()
	l := client.PerSecond(fairRate)
	share := float64(fairRate) / fairProcs
	var out fairRun

	key := fmt.Sprintf("b:fair:%d", round)
	each, all, elapsed := pace(ctx, procs, key, l, d, func(int, time.Duration) float64 { return 1.5 * share })
	var counts []float64
	for _, e := range each {
		counts = append(counts, float64(len(e)))
	}
	out.jain = jainIndex(counts)
	out.equalUsed = float64(len(all)) / (fairRate + fairRate*elapsed.Seconds())
	out.admitted += len(all)
	out.overExact += replay(all, fairRate, 0)
	out.overBound += replay(all, fairRate, int64(fairRate*fairTau.Seconds()))

	key = fmt.Sprintf("b:step:%d", round)
	step := time.Second
	each, all, elapsed = pace(ctx, procs, key, l, 4*time.Second, func(p int, at time.Duration) float64 {
		if p == 0 && at >= step {
			return 7.5 * share
		}
		return 1.5 * share
	})
	out.stepUsed = float64(len(all)) / (fairRate + fairRate*elapsed.Seconds())
	out.admitted += len(all)
	out.overExact += replay(all, fairRate, 0)
	out.overBound += replay(all, fairRate, int64(fairRate*fairTau.Seconds()))
	for _, e := range each { // admissions in [step+1s, step+2s) and [step+1s, step+3s) against the share of that time
		n, n2 := 0, 0
		for _, at := range e {
			if at >= step+time.Second && at < step+2*time.Second {
				n++
			}
			if at >= step+time.Second && at < step+3*time.Second {
				n2++
			}
		}
		out.stepWorst = max(out.stepWorst, math.Abs(float64(n)-share)/share)
		out.stepWorst2 = max(out.stepWorst2, math.Abs(float64(n2)-2*share)/(2*share))
	}

	// Hoarding, then bursting together: 0.2× the share each for 2 s (each
	// holds units granted ahead), then 4× each for 1 s.
	key = fmt.Sprintf("b:hoard:%d", round)
	_, all, _ = pace(ctx, procs, key, l, 3*time.Second, func(_ int, at time.Duration) float64 {
		if at < 2*time.Second {
			return 0.2 * share
		}
		return 4 * share
	})
	out.admitted += len(all)
	out.overExact += replay(all, fairRate, 0)
	out.overBound += replay(all, fairRate, int64(fairRate*fairTau.Seconds()))
	return out
}

// pace has each process decide on key at demand(p, since start) decisions
// a second from two goroutines for d; it returns each process's admission
// instants (since start), all of them sorted, and the time it took.
func pace(ctx context.Context, procs []*lease.Tier, key string, l client.Limit, d time.Duration, demand func(p int, at time.Duration) float64) (each [][]time.Duration, all []time.Duration, elapsed time.Duration) {
	each = make([][]time.Duration, len(procs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for p, tier := range procs {
		for range 2 {
			wg.Go(func() {
				var mine []time.Duration
				next := time.Duration(0)
				for {
					now := time.Since(start)
					if now >= d {
						break
					}
					if now < next {
						time.Sleep(next - now)
						continue
					}
					next += time.Duration(2 * float64(time.Second) / demand(p, now))
					if r, err := tier.Take(ctx, key, l, 1); err == nil && !r.Limited {
						mine = append(mine, time.Since(start))
					}
				}
				mu.Lock()
				each[p] = append(each[p], mine...)
				all = append(all, mine...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	slices.Sort(all)
	return each, all, time.Since(start)
}

// replay passes the sorted admissions, as calls of cost 1 at their
// instants, through the exact GCRA (the gcra package) of rate a second and
// burst extra more than PerSecond(rate)'s: how many it refuses.
func replay(all []time.Duration, rate, extra int64) int {
	g, err := gcra.New(rate-1+extra, rate, 1)
	if err != nil {
		panic(err)
	}
	base := time.Now().UnixNano()
	var tat int64
	refused := 0
	for _, at := range all {
		d, err := g.Throttle(tat, base+int64(at), 1)
		if err != nil {
			panic(err)
		}
		if d.Limited {
			refused++
		} else if d.Write {
			tat = d.TAT
		}
	}
	return refused
}

// jainIndex is Jain's fairness index: 1 when all are equal.
func jainIndex(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	return s * s / (float64(len(xs)) * s2)
}

// appendFair adds the eight processes' table to the report: each round,
// since the fairness figures are not medians of one thing.
func appendFair(out string, d time.Duration, fr []fairRun) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Eight processes on one key: fair, used, never over\n\n")
	fmt.Fprintf(&b, "Eight processes (each a `lease.Tier` over its own connections) on one `PerSecond(%d)` key, each deciding\n", fairRate)
	fmt.Fprintf(&b, "at an even pace from two goroutines: for %v at 1.5× its share (%d a second) each; then on a fresh key for 4 s,\n", d, fairRate/fairProcs)
	fmt.Fprintf(&b, "one of them stepping to 7.5× its share 1 s in; then on another for 3 s, all at 0.2× their share for 2 s (each\n")
	fmt.Fprintf(&b, "holding units granted ahead) and all at 4× in the last second. Every admission is time-stamped and replayed, in order, through\n")
	fmt.Fprintf(&b, "the exact GCRA (the `gcra` package): once as the limit is, counting the admissions it would refuse — the most\n")
	fmt.Fprintf(&b, "the tier may pass it by is rate × τ = %d — and once with rate × τ more burst, where any refusal would break\n", int(fairRate*fairTau.Seconds()))
	fmt.Fprintf(&b, "the bound.\n\n")
	fmt.Fprintf(&b, "| round | equal demand: Jain's index | used | after the ×5 step: worst process off its share, the second from 1 s after | the 2 s from 1 s after | used | admitted in the three runs | over the exact limiter | over the bound |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	for i, f := range fr {
		fmt.Fprintf(&b, "| %d | %.4f | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %d | %d | %d |\n", i+1, f.jain, 100*f.equalUsed, 100*f.stepWorst, 100*f.stepWorst2, 100*f.stepUsed, f.admitted, f.overExact, f.overBound)
	}
	fmt.Fprintf(&b, "\nA process's grants near the limit are about a Target (50 ms) of its share each, 5%% of a second's: a single\n")
	fmt.Fprintf(&b, "second's count moves by about one grant with where the second's edges fall, hence the second figure.\n")
	fmt.Fprintf(&b, "\nThe targets: Jain's index at least 0.99; every process within 5%% of its share within 1 s of the step;\n")
	fmt.Fprintf(&b, "at least 99%% of the allowance used; 0 over the bound. Faults (Redis stopped, a process killed, a failover)\n")
	fmt.Fprintf(&b, "are measured by the integration tests: `cd integration && go test -run Leased -v .`.\n")
	f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(b.String()); err != nil {
		log.Fatal(err)
	}
}
