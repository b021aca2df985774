package integration

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/admit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
	"github.com/seed-6b3823f5/ratelimit/lease"
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
		procs := leasedProcs(t, s, 4, &calls)
		tau := 200 * time.Millisecond // the default: 4 × Target
		start := time.Now()
		run := leasedRun(t, procs, k, l, 32, 1500*time.Millisecond)
		admitted := run.admitted
		elapsed := time.Since(start)
		for _, p := range procs {
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		withinWindows(t, k, admitted, 2000, tau)
		allowance := 2000 + 2000*elapsed.Seconds()
		d, c := run.decisions, calls.n.Load()
		if len(admitted) < int(0.9*allowance) || float64(c)/float64(d) > 0.01 {
			t.Fatalf("%d admitted of an allowance of %.0f; %d calls for %d decisions; the first process: %+v", len(admitted), allowance, c, d, procs[0].Stats())
		}
		t.Logf("%d admitted (%.1f%% of the allowance), %d decisions, %d calls (%.4f each); the first process: %+v",
			len(admitted), 100*float64(len(admitted))/allowance, d, c, float64(c)/float64(d), procs[0].Stats())
	})
}

// leasedProcs is n local tiers (default options) over s, each with a
// client and connections of its own, as n processes have; every command
// they send is counted in calls.
func leasedProcs(t *testing.T, s *server, n int, calls *sent) []*lease.Tier {
	var procs []*lease.Tier
	for range n {
		rdb := redis.NewClient(&redis.Options{Addr: s.rdb.Options().Addr})
		rdb.AddHook(calls)
		t.Cleanup(func() { rdb.Close() })
		procs = append(procs, lease.New(client.New(rdb), lease.Options{}))
	}
	return procs
}

// leased is what leasedRun saw.
type leased struct {
	admitted          []span // when each admitted decision was asked for and answered, sorted by answer
	decisions, errors int64
	firstErr          error // the first error seen
	slowest           time.Duration
}

// leasedRun decides on key k from n goroutines spread over procs, each
// asking every 250 µs, for d.
func leasedRun(t *testing.T, procs []*lease.Tier, k string, l client.Limit, n int, d time.Duration) leased {
	t.Helper()
	return leasedRunFunc(procs, n, d, func(p *lease.Tier) (client.Result, error) { return p.Take(ctx, k, l, 1) })
}

// leasedRunFunc is leasedRun deciding with decide.
func leasedRunFunc(procs []*lease.Tier, n int, d time.Duration, decide func(p *lease.Tier) (client.Result, error)) leased {
	stop := time.Now().Add(d)
	var mu sync.Mutex
	var out leased
	var wg sync.WaitGroup
	for g := range n {
		p := procs[g%len(procs)]
		wg.Go(func() {
			var mine []span
			var decisions, errs int64
			var firstErr error
			var slowest time.Duration
			for time.Now().Before(stop) {
				began := time.Now()
				r, err := decide(p)
				done := time.Now()
				slowest = max(slowest, done.Sub(began))
				decisions++
				switch {
				case err != nil:
					errs++
					if firstErr == nil {
						firstErr = err
					}
				case !r.Limited:
					mine = append(mine, span{began.UnixNano(), done.UnixNano()})
				}
				time.Sleep(250 * time.Microsecond)
			}
			mu.Lock()
			out.admitted = append(out.admitted, mine...)
			out.decisions += decisions
			out.errors += errs
			if out.firstErr == nil {
				out.firstErr = firstErr
			}
			out.slowest = max(out.slowest, slowest)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(out.admitted, func(a, b span) int { return cmp.Compare(a.done, b.done) })
	return out
}

// The local tier with Redis hung (SIGSTOP) for 5 s under four processes
// at many times PerSecond(2000): no decision waits more than the grant
// timeout (100 ms) and a little; none errs (the fallback lasts 10 s); the
// hang admits about the limit's allowance for it (at most 5 % more, and
// the units held); the first grant after the resume ends the fallback.
func TestLeasedRedisHung(t *testing.T) {
	leasedOutage(t, "hung (SIGSTOP)", func(s *server) func() { return s.hang(t) })
}

// The same with Redis killed (SIGKILL: connections refused) for 5 s, then
// started again, empty.
func TestLeasedRedisKilled(t *testing.T) {
	leasedOutage(t, "killed", func(s *server) func() { return s.kill(t) })
}

// Two limits decided together through the tier (admit.Gate.Decide under
// Options.Lease, as httplimit's two policies and rls's two descriptors
// are), keys of two
// slots, through TestLeasedRedisHung's 5 s hang: no decision errs or waits
// past 400 ms, the hang admits about the tighter limit's allowance
// (PerSecond(2000): at most 5 % more and the units held), all or nothing,
// in fallback; Redis answers again and the keys lease again.
func TestLeasedDecideRedisHung(t *testing.T) {
	s := startFor(t, flavors[1], opts{module: true})
	ip, k := key(t, "ip"), key(t, "apikey")
	gates := map[*lease.Tier]*admit.Gate{}
	var procs []*lease.Tier
	for range 4 { // as outageProcs, each tier a gate's
		rdb := redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2})
		t.Cleanup(func() { rdb.Close() })
		g := admit.New(client.New(rdb), admit.Options{Lease: &lease.Options{Timeout: 100 * time.Millisecond}})
		t.Cleanup(func() { g.Close(context.Background()) })
		gates[g.Tier()] = g
		procs = append(procs, g.Tier())
	}
	decide := func(p *lease.Tier) (client.Result, error) {
		ws := []*admit.Want{{Key: ip, Limit: client.PerSecond(2000), Cost: 1, Lease: true}, {Key: k, Limit: client.PerSecond(20000), Cost: 1, Lease: true}}
		if out, err := gates[p].Decide(ctx, ws); out != admit.Decided {
			return client.Result{}, fmt.Errorf("outcome %d: %v", out, err)
		}
		if ws[0].Taken != ws[1].Taken {
			return client.Result{}, fmt.Errorf("not all or nothing: %+v %+v", *ws[0], *ws[1])
		}
		return client.Result{Verdict: ratelimit.Verdict{Limited: !ws[0].Taken}}, nil
	}
	outageThrough(t, "hung (SIGSTOP)", procs, decide, func() func() { return s.hang(t) })
}

// kill stops s's process with SIGKILL (its connections refused); resume
// starts it again, with its data as its persistence kept it, and waits
// until it is loaded.
func (s *server) kill(t *testing.T) (resume func()) {
	t.Helper()
	kill := time.Duration(0)
	if err := s.c.Stop(context.Background(), &kill); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := s.c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := s.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// leasedOutage runs four processes at many times PerSecond(2000) for 1 s,
// then through a 5 s outage that stop begins and its result ends, then
// for 1 s more, and checks what TestLeasedRedisHung says.
func leasedOutage(t *testing.T, what string, stop func(*server) (resume func())) {
	s := startFor(t, flavors[1], opts{module: true})
	k := key(t, "hot")
	l := client.PerSecond(2000)
	outageThrough(t, what, outageProcs(t, s), func(p *lease.Tier) (client.Result, error) { return p.Take(ctx, k, l, 1) },
		func() func() { return stop(s) })
}

// outageThrough runs 32 goroutines over procs deciding with decide (a
// tightest limit of PerSecond(2000)) for 1 s, then through a 5 s outage
// that stop begins and its result ends, then for 1 s more, and checks what
// TestLeasedRedisHung says.
func outageThrough(t *testing.T, what string, procs []*lease.Tier, decide func(*lease.Tier) (client.Result, error), stop func() (resume func())) {
	t.Helper()
	if r := leasedRunFunc(procs, 32, time.Second, decide); r.errors != 0 {
		t.Fatalf("Redis up: %d errors (the first: %v)", r.errors, r.firstErr)
	}
	resume := stop()
	out := leasedRunFunc(procs, 32, 5*time.Second, decide)
	resume()
	var fallback int64
	for _, p := range procs {
		fallback += p.Stats().Fallback
	}
	if out.errors != 0 || out.slowest > 400*time.Millisecond || len(out.admitted) > int(1.05*10000)+200 || fallback == 0 {
		t.Fatalf("Redis %s for 5 s: %d admitted (the allowance is 10000), %d errors (the first: %v), the slowest decision %v, %d decided in fallback",
			what, len(out.admitted), out.errors, out.firstErr, out.slowest, fallback)
	}
	after := leasedRunFunc(procs, 32, time.Second, decide)
	if after.errors != 0 || procs[0].Stats().Down == 0 {
		t.Fatalf("after the outage: %d errors (the first: %v), %+v", after.errors, after.firstErr, procs[0].Stats())
	}
	t.Logf("Redis %s for 5 s: %d admitted (allowance 10000), slowest decision %v; the first process: %+v",
		what, len(out.admitted), out.slowest, procs[0].Stats())
}

// httplimit with Options.Lease on a real server, seen by a real HTTP
// client: 8 clients at once for 1.5 s on one route limited to
// PerSecond(500): every response carries its RateLimit fields, the
// admitted stay within the limit's burst and rate over the run and τ more
// and use at least 90 % of it, and Redis serves a small fraction of a call
// per request.
func TestHTTPLeased(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		httpLeased(t, s, httplimit.Policy{Name: "api", Limit: client.PerSecond(500), Key: httplimit.Global()})
	})
}

// The same with two policies, the route's PerSecond(500) and a per-IP
// PerSecond(5000): decided together through the tier (Tier.AllHere), with
// the same bounds, and both policies in every RateLimit field.
func TestHTTPLeasedTwoPolicies(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		httpLeased(t, s, httplimit.Policy{Name: "api", Limit: client.PerSecond(500), Key: httplimit.Global()},
			httplimit.Policy{Name: "per-ip", Limit: client.PerSecond(5000), Key: httplimit.ClientIP(httplimit.IPOptions{})})
	})
}

// httpLeased runs TestHTTPLeased's requests under policies, the tightest
// PerSecond(500).
func httpLeased(t *testing.T, s *server, policies ...httplimit.Policy) {
	var calls sent
	rdb := redis.NewClient(&redis.Options{Addr: s.rdb.Options().Addr, ContextTimeoutEnabled: true})
	rdb.AddHook(&calls)
	t.Cleanup(func() { rdb.Close() })
	lim, err := httplimit.New(rdb, httplimit.Options{Prefix: key(t, "http") + ":", OnError: httplimit.FailClosed, Lease: &lease.Options{}},
		policies...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()
	start := time.Now()
	stop := start.Add(1500 * time.Millisecond)
	var ok, refused, requests atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				resp := get(t, srv.URL+"/a")
				requests.Add(1)
				switch {
				case resp.Header.Get("RateLimit") == "":
					t.Errorf("no RateLimit field: %d %v", resp.StatusCode, resp.Header)
					return
				case resp.StatusCode == 200 && strings.Count(resp.Header.Get("RateLimit"), ";r=") != len(policies):
					t.Errorf("RateLimit %q: want every policy's item", resp.Header.Get("RateLimit"))
					return
				case resp.StatusCode == 200:
					ok.Add(1)
				case resp.StatusCode == 429:
					refused.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := lim.Close(ctx); err != nil {
		t.Fatal(err)
	}
	allowance := 500 + 500*elapsed.Seconds()
	most := allowance + 500*0.2 + 5 // τ = 200 ms, and 10 ms for the clocks
	n := float64(ok.Load())
	if n > most || n < 0.9*allowance || float64(calls.n.Load()) > 0.1*float64(requests.Load()) {
		t.Fatalf("%v admitted, %d refused (allowance %.0f, at most %.0f); %d Redis calls for %d requests; tier %+v",
			n, refused.Load(), allowance, most, calls.n.Load(), requests.Load(), lim.Leased())
	}
	t.Logf("%v admitted, %d refused (allowance %.0f); %d Redis calls for %d requests; tier %+v",
		n, refused.Load(), allowance, calls.n.Load(), requests.Load(), lim.Leased())
}

// The local tier on a real 3-primary cluster: four processes (each its own
// ClusterClient) decide keys on three slots at once, each PerSecond(1000)
// asked at many times its rate for 1.5 s. Each key's admissions stay
// within its limit's burst and rate and τ more in every window of 100 ms
// and 1 s, use at least 90 % of its allowance, and cost under 0.01 Redis
// calls per decision.
func TestClusterLeased(t *testing.T) {
	nodes := startCluster(t, flavors[1])
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr())
	}
	var calls sent
	var procs []*lease.Tier
	for range 4 {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Protocol: 2, MaxRedirects: 8})
		cc.AddHook(&calls)
		t.Cleanup(func() { cc.Close() })
		p := lease.New(client.New(cc), lease.Options{})
		t.Cleanup(func() { p.Close(context.Background()) })
		procs = append(procs, p)
	}
	l := client.PerSecond(1000)
	keys := []string{"rl:{a}:hot", "rl:{b}:hot", "rl:{c}:hot"} // slots 15495, 3300 and 7365: one on each primary
	runs := make([]leased, len(keys))
	start := time.Now()
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { runs[i] = leasedRun(t, procs, k, l, 16, 1500*time.Millisecond) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	var decisions int64
	for i, r := range runs {
		decisions += r.decisions
		allowance := 1000 + 1000*elapsed.Seconds()
		if r.errors != 0 || float64(len(r.admitted)) < 0.9*allowance {
			t.Fatalf("%s: %d admitted of an allowance of %.0f, %d errors", keys[i], len(r.admitted), allowance, r.errors)
		}
		withinWindows(t, keys[i], r.admitted, 1000, 200*time.Millisecond)
	}
	if c := calls.n.Load(); float64(c) > 0.01*float64(decisions) {
		t.Fatalf("%d calls for %d decisions", c, decisions)
	}
	t.Logf("%d decisions, %d calls (every command the ClusterClients sent); admitted per key %d, %d, %d",
		decisions, calls.n.Load(), len(runs[0].admitted), len(runs[1].admitted), len(runs[2].admitted))
}

// withinWindows fails t when the admitted decisions of key (sorted by
// answer, and placed at it) hold more in a window of 100 ms or 1 s than a
// limit of burst and rate a second (PerSecond(rate)) admits in it, τ more,
// and 10 ms more for the clocks of client and server.
func withinWindows(t *testing.T, key string, admitted []span, rate int, tau time.Duration) {
	t.Helper()
	for _, w := range []time.Duration{100 * time.Millisecond, time.Second} {
		most := rate + int(time.Duration(rate)*(w+tau+10*time.Millisecond)/time.Second)
		j := 0
		for i := range admitted {
			for admitted[i].done-admitted[j].done >= int64(w) {
				j++
			}
			if n := i - j + 1; n > most {
				t.Fatalf("%s: %d admitted within %v; the exact limiter and τ admit %d", key, n, w, most)
			}
		}
	}
}
