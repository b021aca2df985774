// Command leased measures the local tier (lease.Tier) on one hot key
// beside the reference the issue names — redis-benchmark -P 16 of
// GCRA.THROTTLE on that same key — in one run on one server (Debian's
// redis-server with the module, on loopback), and writes
// bench/BENCHMARKS-LEASED.md. make bench runs it after the command
// benchmark.
//
// In alternating rounds (the median is reported): the reference, 50
// connections pipelining 16 calls each on one key whose limit is never
// reached; then the tier, one process deciding from 16 goroutines on the
// same kind of key for a few seconds. For each: decisions admitted per
// second, the calls Redis served per decision (INFO commandstats, every
// command counted), and the server's CPU per admitted decision (INFO cpu).
// Then the tier on a saturated key (PerSecond(20000) asked at several
// times its rate): the share of the allowance admitted and calls per
// decision; and beside it the documents' alternative, the limit split in 8
// sub-keys with skewed demand. Decision latency is sampled every 64th
// decision.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/bench/internal/machine"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
	"github.com/seed-6b3823f5/ratelimit/lease"
	"github.com/seed-6b3823f5/ratelimit/rls"
)

func main() {
	rounds := flag.Int("rounds", 3, "alternating rounds (the median is reported)")
	n := flag.Int("n", 1000000, "calls per redis-benchmark run")
	d := flag.Duration("d", 3*time.Second, "how long the tier decides per round")
	dfair := flag.Duration("dfair", 4*time.Second, "how long the eight processes decide at equal demand per round")
	dsat := flag.Duration("dsat", 10*time.Second, "how long the saturated runs (the tier's and the sub-keys') last per round: the units that accrue in the last Target are not yet claimed, a share that shrinks as the run grows")
	module := flag.String("module", "build/ratelimit.so", "the module")
	out := flag.String("out", "bench/BENCHMARKS-LEASED.md", "the report")
	flag.Parse()
	log.SetFlags(0)
	so, err := filepath.Abs(*module)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	port := machine.FreePort()
	srv := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--loadmodule", so)
	if err := srv.Start(); err != nil {
		log.Fatalf("leased: redis-server: %v (make bench installs it)", err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Protocol: 2, PoolSize: 64})
	for i := 0; rdb.Ping(ctx).Err() != nil; i++ {
		if i > 100 {
			log.Fatal("leased: the server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	version := rdb.Info(ctx, "server").Val()
	if m := regexp.MustCompile(`redis_version:(\S+)`).FindStringSubmatch(version); m != nil {
		version = "Redis " + m[1]
	}

	var ref, tier, sat, spl []run
	var fr []fairRun
	pairs := []pairRows{{what: "lease.Tier.AllHere", run: leasedPair}, {what: "httplimit, two policies under Lease", run: httpPair},
		{what: "rls, two descriptors with lease: true", run: rlsPair}}
	for r := range *rounds {
		ref = append(ref, reference(ctx, rdb, port, *n, r))
		tier = append(tier, leased(ctx, rdb, *d, r, client.GCRA(999_999_999, 1_000_000_000, time.Second)))
		sat = append(sat, leased(ctx, rdb, *dsat, r, client.PerSecond(satRate)))
		for i := range pairs {
			p := &pairs[i]
			p.never = append(p.never, p.run(ctx, rdb, *d, r, client.GCRA(999_999_999, 1_000_000_000, time.Second)))
			p.sat = append(p.sat, p.run(ctx, rdb, *dsat, r, client.PerSecond(satRate)))
		}
		spl = append(spl, split(ctx, rdb, *dsat, r))
		fr = append(fr, fair(ctx, fmt.Sprintf("127.0.0.1:%d", port), *dfair, r))
		log.Printf("leased: round %d: reference %.0f/s, tier %.0f/s (%.2g calls each), saturated %.1f%% of the allowance; eight processes: Jain %.4f, after a step %.1f%% off, %d over the exact limiter, %d over the bound",
			r+1, ref[r].admitted, tier[r].admitted, tier[r].calls, 100*sat[r].share, fr[r].jain, 100*fr[r].stepWorst, fr[r].overExact, fr[r].overBound)
	}
	cpu, cores := machine.CPU()
	report(*out, version, cpu, cores, *rounds, *n, *d, *dsat, ref, tier, sat, spl, pairs)
	appendFair(*out, *dfair, fr)
	log.Printf("leased: wrote %s", *out)
}

// satRate is the saturated key's limit, a second: one the server can
// serve one call per decision for (the sub-keys' alternative) on two
// cores shared with the deciders.
const satRate = 20000

// run is one measurement.
type run struct {
	admitted float64 // admitted decisions per second
	calls    float64 // calls Redis served per decision
	cpuUs    float64 // the server's CPU µs per admitted decision
	share    float64 // admitted over the limit's allowance (saturated runs)
	p50, p99 time.Duration
	refused  float64 // refused decisions per second
	elapsed  time.Duration
	// over and overExact: admissions the exact limiter refuses, with the
	// tier's bound's burst and without (leasedPair's saturated runs).
	over, overExact int
}

// serverStats reads the calls Redis served and its CPU seconds so far.
func serverStats(ctx context.Context, rdb *redis.Client) (calls int64, cpu float64) {
	info := rdb.Info(ctx, "commandstats", "cpu").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if _, rest, ok := strings.Cut(line, ":calls="); ok && strings.HasPrefix(line, "cmdstat_") && !strings.HasPrefix(line, "cmdstat_info:") {
			c, _ := strconv.ParseInt(strings.Split(rest, ",")[0], 10, 64)
			calls += c
		}
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				cpu += x
			}
		}
	}
	return calls, cpu
}

var rpsRE = regexp.MustCompile(`([0-9.]+) requests per second`)

// reference is redis-benchmark -P 16 of GCRA.THROTTLE on one key whose
// limit is never reached: every call admitted.
func reference(ctx context.Context, rdb *redis.Client, port, n, round int) run {
	key := fmt.Sprintf("b:ref:%d", round)
	calls0, cpu0 := serverStats(ctx, rdb)
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-c", "50", "-P", "16", "-n", strconv.Itoa(n), "-q",
		"GCRA.THROTTLE", key, "999999999", "1000000000", "1"}
	outb, err := exec.Command("redis-benchmark", args...).CombinedOutput()
	if err != nil {
		log.Fatalf("leased: redis-benchmark: %v\n%s", err, outb)
	}
	m := rpsRE.FindAllSubmatch(outb, -1)
	if len(m) == 0 {
		log.Fatalf("leased: no result from redis-benchmark:\n%s", outb)
	}
	rps, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	calls1, cpu1 := serverStats(ctx, rdb)
	return run{admitted: rps, calls: float64(calls1-calls0-1) / float64(n), cpuUs: (cpu1 - cpu0) * 1e6 / float64(n)}
}

// leased decides on one key with a fresh lease.Tier from 16 goroutines for d.
func leased(ctx context.Context, rdb *redis.Client, d time.Duration, round int, l client.Limit) run {
	key := fmt.Sprintf("b:leased:%s:%d", l, round)
	tier := lease.New(client.New(rdb), lease.Options{})
	out := drive(ctx, rdb, d, 16, func(int) func() (client.Result, error) {
		return func() (client.Result, error) { return tier.Take(ctx, key, l, 1) }
	}, func() { tier.Close(ctx) })
	if q, w := l.Quota(); w > 0 {
		out.share = out.admitted / (float64(q)/out.elapsed.Seconds() + float64(q)/w.Seconds())
	}
	return out
}

// leasedPair decides two limits together, as httplimit's per-IP and
// per-key pair (keys of two slots), with a fresh lease.Tier's AllHere (the
// limiter's RL.ALL when it cannot decide here) from 16
// goroutines for d: l on the per-IP key, a limit 5 times looser on the
// other (l itself when l is never reached). Every admission's instant is replayed through the exact GCRA of
// l (a PerSecond limit): over counts those it refuses with rate × τ more
// burst, the tier's bound.
func leasedPair(ctx context.Context, rdb *redis.Client, d time.Duration, round int, l client.Limit) run {
	ip, key := fmt.Sprintf("b:pair:ip:%s:%d", l, round), fmt.Sprintf("b:pair:key:%s:%d", l, round)
	c := client.New(rdb)
	tier := lease.New(c, lease.Options{})
	looser := looserOf(l)
	return pairRun(ctx, rdb, d, l, func() (bool, error) {
		limits := []client.Keyed{{Key: ip, Limit: l, Cost: 1}, {Key: key, Limit: looser, Cost: 1}}
		r, here, err := tier.AllHere(ctx, limits, nil)
		if err == nil && !here {
			r, err = c.All(ctx, limits)
		}
		return !r.Limited, err
	}, func() { tier.Close(ctx) })
}

// looserOf is the pair's second limit: 5 times l, or l itself when l is
// never reached.
func looserOf(l client.Limit) client.Limit {
	if q, _ := l.Quota(); q < 1_000_000 {
		return client.GCRA(5*q-1, 5*q, time.Second)
	}
	return l
}

// httpPair is leasedPair through the middleware: an httplimit.Limiter
// under Options.Lease with a per-IP policy of l and a per-key policy 5
// times looser, each request a GET through its Handler (an in-memory
// recorder; 200 admitted, 429 refused).
func httpPair(ctx context.Context, rdb *redis.Client, d time.Duration, round int, l client.Limit) run {
	constant := func(k string) httplimit.KeyFunc {
		return func(*http.Request) (string, error) { return k, nil }
	}
	lim, err := httplimit.New(rdb, httplimit.Options{Prefix: fmt.Sprintf("b:http:%s:%d:", l, round), Lease: &lease.Options{}, Timeout: time.Second},
		httplimit.Policy{Name: "ip", Limit: l, Key: constant("192.0.2.7")},
		httplimit.Policy{Name: "key", Limit: looserOf(l), Key: constant("key-abc")})
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
	return pairRun(ctx, rdb, d, l, func() (bool, error) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK:
			return true, nil
		case http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("httplimit answered %d", w.Code)
	}, func() { lim.Close(ctx) })
}

// rlsPair is leasedPair through the Envoy rate limit service: a
// rls.Service under Options.Lease whose config gives a descriptor ip l's
// limit and a descriptor key one 5 times looser, both lease: true, each
// request one ShouldRateLimit with both descriptors.
func rlsPair(ctx context.Context, rdb *redis.Client, d time.Duration, round int, l client.Limit) run {
	q, _ := l.Quota()
	unit, looser := "second", 5*q
	if q >= 1_000_000 { // never reached: a minute's, whose interval stays above 1 ns
		unit, looser = "minute", q
	}
	cfg, err := rls.Parse(map[string][]byte{"b.yaml": []byte(fmt.Sprintf(`domain: b
descriptors:
  - key: ip
    rate_limit: {unit: %[1]s, requests_per_unit: %[2]d, algorithm: gcra, lease: true}
  - key: key
    rate_limit: {unit: %[1]s, requests_per_unit: %[3]d, algorithm: gcra, lease: true}
`, unit, q, looser))})
	if err != nil {
		log.Fatal(err)
	}
	s := rls.New(rdb, cfg, rls.Options{Prefix: fmt.Sprintf("b:rls:%d:", round), Lease: &lease.Options{}, Timeout: time.Second})
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	req := &pb.RateLimitRequest{Domain: "b", Descriptors: []*rlv3.RateLimitDescriptor{entry("ip", "192.0.2.7"), entry("key", "key-abc")}}
	return pairRun(ctx, rdb, d, l, func() (bool, error) {
		resp, err := s.ShouldRateLimit(ctx, req)
		if err != nil {
			return false, err
		}
		return resp.OverallCode == pb.RateLimitResponse_OK, nil
	}, s.Close)
}

// pairRun drives decide from 16 goroutines for d, then done; when l is
// reached, every admission's instant is replayed through the exact GCRA
// of l (a PerSecond limit): over counts those it refuses with rate × τ
// more burst, the tier's bound, overExact those it refuses as it is.
func pairRun(ctx context.Context, rdb *redis.Client, d time.Duration, l client.Limit, decide func() (bool, error), done func()) run {
	start := time.Now()
	var mu sync.Mutex
	var all []time.Duration
	out := drive(ctx, rdb, d, 16, func(int) func() (client.Result, error) {
		var mine []time.Duration
		n := 0
		return func() (client.Result, error) {
			admitted, err := decide()
			if admitted {
				mine = append(mine, time.Since(start))
			}
			if n++; n%4096 == 0 || !time.Now().Before(start.Add(d)) {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
				mine = mine[:0]
			}
			return client.Result{Verdict: ratelimit.Verdict{Limited: !admitted}}, err
		}
	}, done)
	if q, w := l.Quota(); w > 0 && q < 1_000_000 {
		out.share = out.admitted / (float64(q)/out.elapsed.Seconds() + float64(q)/w.Seconds())
		slices.Sort(all)
		tau := 4 * 50 * time.Millisecond // the default Lifetime
		out.over = replay(all, q, int64(float64(q)*tau.Seconds()))
		out.overExact = replay(all, q, 0)
	}
	return out
}

// split is the documents' alternative to a local tier: the limit of
// PerSecond(satRate) split into 8 sub-keys of a share each, every decision a
// Take on one of them, demand skewed across them (sub-key j drawn with
// weight 1/(j+1)), from 64 goroutines for d (every decision waits for its
// call: more goroutines than the tier's 16 keep the demand above the
// limit).
func split(ctx context.Context, rdb *redis.Client, d time.Duration, round int) run {
	c := client.New(rdb)
	l := client.PerSecond(satRate / 8)
	var weights [8]float64
	var sum float64
	for j := range weights {
		sum += 1 / float64(j+1)
		weights[j] = sum
	}
	out := drive(ctx, rdb, d, 64, func(g int) func() (client.Result, error) {
		rnd := rand.New(rand.NewPCG(uint64(round), uint64(g)))
		return func() (client.Result, error) {
			x := rnd.Float64() * sum
			j := 0
			for weights[j] < x {
				j++
			}
			return c.Take(ctx, fmt.Sprintf("b:split:%d:{b%d}", round, j), l, 1)
		}
	}, func() {})
	out.share = out.admitted / (satRate/out.elapsed.Seconds() + satRate)
	return out
}

// drive runs goroutines, goroutine g deciding with decider(g) until d
// has passed, then done; it measures what they admitted, the calls Redis
// served, its CPU, and every 64th decision's latency.
func drive(ctx context.Context, rdb *redis.Client, d time.Duration, goroutines int, decider func(g int) func() (client.Result, error), done func()) run {
	calls0, cpu0 := serverStats(ctx, rdb)
	start := time.Now()
	stop := start.Add(d)
	var admitted, refused atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for g := range goroutines {
		decide := decider(g)
		wg.Go(func() {
			var a, r int64
			sample := make([]time.Duration, 0, 1<<16)
			for i := 0; i%64 != 0 || time.Now().Before(stop); i++ {
				began := time.Now()
				res, err := decide()
				if i%64 == 0 && len(sample) < cap(sample) {
					sample = append(sample, time.Since(began))
				}
				switch {
				case err != nil:
					log.Fatalf("leased: %v", err)
				case res.Limited:
					r++
				default:
					a++
				}
			}
			admitted.Add(a)
			refused.Add(r)
			mu.Lock()
			lat = append(lat, sample...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	done()
	calls1, cpu1 := serverStats(ctx, rdb)
	slices.Sort(lat)
	decisions := admitted.Load() + refused.Load()
	return run{
		elapsed:  elapsed,
		admitted: float64(admitted.Load()) / elapsed.Seconds(),
		refused:  float64(refused.Load()) / elapsed.Seconds(),
		calls:    float64(calls1-calls0-1) / float64(decisions),
		cpuUs:    (cpu1 - cpu0) * 1e6 / float64(max(admitted.Load(), 1)),
		p50:      lat[len(lat)/2],
		p99:      lat[len(lat)*99/100],
	}
}

func median(rs []run, f func(run) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// pairRows are the two-limit rows of one front-end: how it decides a
// pair, and its runs on limits never reached and saturated.
type pairRows struct {
	what       string
	run        func(ctx context.Context, rdb *redis.Client, d time.Duration, round int, l client.Limit) run
	never, sat []run
}

func report(out, version, cpu string, cores, rounds, n int, d, dsat time.Duration, ref, tier, sat, spl []run, pairs []pairRows) {
	var b strings.Builder
	fmt.Fprintf(&b, "# The local tier: one hot key\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (`go run ./bench/leased`): one server (Debian's %s) with the module on loopback,\n", version)
	fmt.Fprintf(&b, "%d alternating rounds, medians below. The reference is `redis-benchmark -c 50 -P 16 -n %d` of\n", rounds, n)
	fmt.Fprintf(&b, "`GCRA.THROTTLE` on one key whose limit is never reached; the tier is one process (`lease.New`,\n")
	fmt.Fprintf(&b, "default options) deciding `Take` on one key from 16 goroutines for %v on a limit never reached, and for\n", d)
	fmt.Fprintf(&b, "%v on `PerSecond(%d)` asked at many times its rate. Calls per decision count every command Redis served in\n", dsat, satRate)
	fmt.Fprintf(&b, "the run (`INFO commandstats`); CPU is the server's (`INFO cpu`, user and system).\n\n")
	fmt.Fprintf(&b, "Machine: %s, %d cores, %s/%s, %s. The tier and redis-server share the cores: compare within one run.\n\n",
		cpu, cores, runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(&b, "| one hot key | admitted decisions/s | × the reference | Redis calls per decision | server CPU µs per admitted decision | decision p50 / p99 |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|\n")
	ra := median(ref, func(r run) float64 { return r.admitted })
	fmt.Fprintf(&b, "| GCRA.THROTTLE, redis-benchmark -P 16 | %.0f | 1.0× | %.3f | %.2f | |\n", ra,
		median(ref, func(r run) float64 { return r.calls }), median(ref, func(r run) float64 { return r.cpuUs }))
	ta := median(tier, func(r run) float64 { return r.admitted })
	fmt.Fprintf(&b, "| lease.Tier, limit never reached | %.0f | %.1f× | %.2g | %.2g | %v / %v |\n", ta, ta/ra,
		median(tier, func(r run) float64 { return r.calls }), median(tier, func(r run) float64 { return r.cpuUs }),
		time.Duration(median(tier, func(r run) float64 { return float64(r.p50) })), time.Duration(median(tier, func(r run) float64 { return float64(r.p99) })))
	fmt.Fprintf(&b, "| lease.Tier, PerSecond(%d) saturated | %.0f (%.1f%% of the allowance; %.0f refused/s) | | %.2g | %.2g | %v / %v |\n", satRate,
		median(sat, func(r run) float64 { return r.admitted }), 100*median(sat, func(r run) float64 { return r.share }),
		median(sat, func(r run) float64 { return r.refused }), median(sat, func(r run) float64 { return r.calls }),
		median(sat, func(r run) float64 { return r.cpuUs }),
		time.Duration(median(sat, func(r run) float64 { return float64(r.p50) })), time.Duration(median(sat, func(r run) float64 { return float64(r.p99) })))
	for _, p := range pairs {
		pair, pairSat := p.never, p.sat
		pa := median(pair, func(r run) float64 { return r.admitted })
		fmt.Fprintf(&b, "| %s, two limits (keys of two slots), never reached | %.0f | %.1f× | %.2g | %.2g | %v / %v |\n", p.what, pa, pa/ra,
			median(pair, func(r run) float64 { return r.calls }), median(pair, func(r run) float64 { return r.cpuUs }),
			time.Duration(median(pair, func(r run) float64 { return float64(r.p50) })), time.Duration(median(pair, func(r run) float64 { return float64(r.p99) })))
		fmt.Fprintf(&b, "| %s, PerSecond(%d) and PerSecond(%d) saturated | %.0f (%.1f%% of the allowance; %.0f refused/s; over the exact limiter %d, over the bound %d) | | %.2g | %.2g | %v / %v |\n", p.what, satRate, 5*satRate,
			median(pairSat, func(r run) float64 { return r.admitted }), 100*median(pairSat, func(r run) float64 { return r.share }),
			median(pairSat, func(r run) float64 { return r.refused }),
			int(median(pairSat, func(r run) float64 { return float64(r.overExact) })), int(slices.MaxFunc(pairSat, func(a, b run) int { return a.over - b.over }).over),
			median(pairSat, func(r run) float64 { return r.calls }), median(pairSat, func(r run) float64 { return r.cpuUs }),
			time.Duration(median(pairSat, func(r run) float64 { return float64(r.p50) })), time.Duration(median(pairSat, func(r run) float64 { return float64(r.p99) })))
	}
	fmt.Fprintf(&b, "| the alternative: 8 sub-keys `{b0..b7}` of PerSecond(%d) each, skewed demand, every decision a `Take` | %.0f (%.1f%% of the allowance; %.0f refused/s) | | %.2g | %.2g | %v / %v |\n", satRate/8,
		median(spl, func(r run) float64 { return r.admitted }), 100*median(spl, func(r run) float64 { return r.share }),
		median(spl, func(r run) float64 { return r.refused }),
		median(spl, func(r run) float64 { return r.calls }), median(spl, func(r run) float64 { return r.cpuUs }),
		time.Duration(median(spl, func(r run) float64 { return float64(r.p50) })), time.Duration(median(spl, func(r run) float64 { return float64(r.p99) })))
	fmt.Fprintf(&b, "\nThe sub-keys' demand is skewed as a hash of uneven callers spreads it: sub-key j gets a share of it\n")
	fmt.Fprintf(&b, "proportional to 1/(j+1), so the busiest sub-keys refuse while the quiet ones leave their share unused. Each of its\n")
	fmt.Fprintf(&b, "decisions waits for a call, so it runs from 64 goroutines; where admitted and refused together stay under the\n")
	fmt.Fprintf(&b, "limit's rate, the server (sharing the cores) could not serve more, and the share is a ceiling of the machine.\n")
	fmt.Fprintf(&b, "\nThe two-limit rows decide a per-IP key and a per-key key together, the second limit 5 times looser: with\n")
	fmt.Fprintf(&b, "`Tier.AllHere`, then through the front-ends' own decision (`admit`): httplimit's handler (an in-memory\n")
	fmt.Fprintf(&b, "recorder, 200 or 429) and rls's `ShouldRateLimit` (in process, no gRPC); the saturated runs' admissions are\n")
	fmt.Fprintf(&b, "replayed through the exact GCRA (the `gcra` package) of the tighter limit, as the limit is (its median count of\n")
	fmt.Fprintf(&b, "refusals) and with rate × τ more burst, the tier's bound (the most over any round: it must be 0).\n")
	fmt.Fprintf(&b, "\nLatency is sampled every 64th decision, `time.Now` around `Take` (a sample of %d per goroutine at most).\n", 1<<16)
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
}
