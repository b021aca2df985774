package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// A primary failover under the local tier, on a 3-primary cluster with a
// replica each: four processes (each its own ClusterClient, reloading the
// slot map every 200 ms while the test runs, as an application does on
// connection errors) decide PerSecond(1000) on a key of primary 0 from 32
// goroutines for 6 s; 500 ms in, primary 0 is killed (SIGKILL) and its
// replica takes over. No decision errs (the processes spend what they
// hold, then decide at their share of the limit until grants answer
// again), and the excess — what was admitted beyond the exact limiter's
// allowance for the run, its burst and the rate × the time — is measured
// and held under one burst: the most a lost state can give back, since
// the new primary's state lags the old one's only by what was not
// replicated, and the fallback admits the limit's rate over the processes.
func TestClusterLeasedFailover(t *testing.T) {
	nodes := startCluster(t, flavors[1])
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr())
	}
	const k = "rl:{b}:hot" // slot 3300: primary 0's
	var procs []*lease.Tier
	var ccs []*redis.ClusterClient
	for range 4 {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Protocol: 2, MaxRedirects: 8})
		t.Cleanup(func() { cc.Close() })
		ccs = append(ccs, cc)
		p := lease.New(client.New(cc), lease.Options{})
		t.Cleanup(func() { p.Close(context.Background()) })
		procs = append(procs, p)
	}
	if owner, err := ccs[0].MasterForKey(ctx, k); err != nil || owner.Options().Addr != nodes[0].addr() {
		t.Fatalf("%s is not primary 0's key: %v", k, err)
	}
	l := client.PerSecond(1000)
	start := time.Now()
	runDone := make(chan leased)
	go func() { runDone <- leasedRun(t, procs, k, l, 32, 6*time.Second) }()
	reloadStop := make(chan struct{})
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-reloadStop:
				return
			case <-tick.C:
				for _, cc := range ccs {
					cc.ReloadState(ctx)
				}
			}
		}
	}()
	defer close(reloadStop)
	time.Sleep(500 * time.Millisecond)
	killTimeout := time.Duration(0)
	if err := nodes[0].c.Stop(ctx, &killTimeout); err != nil { // SIGKILL: no goodbye
		t.Fatal(err)
	}
	killedAt := time.Now()
	waitFor(t, 30*time.Second, "the replica to take over", func() bool {
		return strings.Contains(nodes[3].rdb.Info(ctx, "replication").Val(), "role:master")
	})
	tookOver := time.Since(killedAt)
	run := <-runDone
	elapsed := time.Since(start)
	allowance := 1000 + 1000*elapsed.Seconds()
	excess := float64(len(run.admitted)) - allowance
	var s lease.Stats
	for _, p := range procs {
		ps := p.Stats()
		s.Fallback += ps.Fallback
		s.Down += ps.Down
		s.Unclaimed += ps.Unclaimed
	}
	if run.errors != 0 || excess > 1000 || float64(len(run.admitted)) < 0.8*allowance {
		t.Fatalf("the replica took over %v after the kill; %d admitted of an allowance of %.0f over %v (excess %.0f), %d errors; fallback %+v",
			tookOver, len(run.admitted), allowance, elapsed, excess, run.errors, s)
	}
	t.Logf("the replica took over %v after the kill; %d admitted of an allowance of %.0f over %v: excess %+.0f (%.1f%% of the allowance); slowest decision %v; the processes' fallback decisions %d, time in fallback %v, grants unanswered %d",
		tookOver.Round(time.Millisecond), len(run.admitted), allowance, elapsed.Round(time.Millisecond), excess, 100*excess/allowance,
		run.slowest.Round(time.Millisecond), s.Fallback, s.Down.Round(time.Millisecond), s.Unclaimed)
}
