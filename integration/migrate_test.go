package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// TestSlotMigration moves the slot of some users' keys back and forth
// between a primary and a fourth one added empty, while httplimit (two
// policies per request: one RL.ALL) and rls (two descriptors per request)
// decide those users' requests and those of users in other slots: on the
// migrating slot's own primary and on the others. Redis answers TRYAGAIN
// and ASK while the slot moves; the client sends the call again within its
// deadline, and with the Lua engine runs it from its source on the new
// primary, which has no library at first.
//
// Nothing may be counted that was not admitted (each user's count in
// Redis is the number of requests admitted for it); no request of a user
// outside the migrating slot may be decided by the failure policy; no
// breaker may open.
func TestSlotMigration(t *testing.T) {
	for _, module := range []bool{true, false} {
		name := map[bool]string{true: "module", false: "lua"}[module]
		t.Run(name, func(t *testing.T) { migrateUnderLoad(t, module) })
	}
}

// usersIn lists n user names whose slot passes ok.
func usersIn(n int, prefix string, ok func(slot int) bool) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if u := fmt.Sprint(prefix, i); ok(protocol.Slot(u)) {
			out = append(out, u)
		}
	}
	return out
}

// redirects counts the replies saying a command ran nothing because its
// slot moves, as the nodes' clients and the cluster's see them.
type redirects struct{ tryAgain, ask, moved atomic.Int64 }

func (r *redirects) count(err error) {
	if err == nil {
		return
	}
	switch msg := err.Error(); {
	case strings.HasPrefix(msg, "TRYAGAIN"):
		r.tryAgain.Add(1)
	case strings.HasPrefix(msg, "ASK "):
		r.ask.Add(1)
	case strings.HasPrefix(msg, "MOVED "):
		r.moved.Add(1)
	}
}

func (r *redirects) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *redirects) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.count(cmd.Err())
		return err
	}
}

func (r *redirects) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.count(c.Err())
		}
		return err
	}
}

// migrate moves slot from one primary to another as redis-cli --cluster
// reshard does, but a key at a time with a pause between keys, as a slot
// of many keys takes long to move: all that time some of its keys have
// moved, some not. Then the slot's new owner is told to every primary.
func migrate(t *testing.T, slot int, from, to *server, all []*server) error {
	t.Helper()
	fromID, err := from.rdb.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	toID, err := to.rdb.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	if err := to.rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		return fmt.Errorf("importing: %w", err)
	}
	if err := from.rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	for {
		keys, err := from.rdb.ClusterGetKeysInSlot(ctx, slot, 10).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		for _, k := range keys {
			if err := from.rdb.Do(ctx, "MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", k).Err(); err != nil && err != redis.Nil {
				return fmt.Errorf("MIGRATE %s: %w", k, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for _, n := range append([]*server{to, from}, all...) {
		if err := n.rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(); err != nil {
			return fmt.Errorf("node on %s: %w", n.addr(), err)
		}
	}
	return nil
}

// percentile is the p-th percentile of ds (sorted in place).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

func migrateUnderLoad(t *testing.T, module bool) {
	// A primary whose last slot leaves stays a primary (by default it
	// would become a replica of the slot's new owner).
	nodes := startClusterNodes(t, flavors[1], module, 4, 3, "--cluster-allow-replica-migration", "no")
	waitClusterOK(t, nodes)
	home, fresh := nodes[0], nodes[3]
	var addrs []string
	for _, n := range nodes[:3] {
		addrs = append(addrs, n.addr())
	}
	var seen redirects
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Protocol: 2, ContextTimeoutEnabled: true,
		NewClient: func(o *redis.Options) *redis.Client {
			rdb := redis.NewClient(o)
			rdb.AddHook(&seen)
			return rdb
		}})
	defer cc.Close()
	cc.AddHook(&seen) // and the errors go-redis does not follow itself, as the client sees them

	// The migrating slot is on nodes[0]; other users live in its other
	// slots, and on the other primaries.
	slot := protocol.Slot(usersIn(1, "m", func(s int) bool { return s <= 5460 })[0])
	moving := usersIn(20, "m", func(s int) bool { return s == slot })
	sameNode := usersIn(20, "s", func(s int) bool { return s != slot && s <= 5460 })
	elsewhere := usersIn(20, "e", func(s int) bool { return s > 5460 })
	group := map[string]string{}
	for name, us := range map[string][]string{"moving": moving, "same-node": sameNode, "elsewhere": elsewhere} {
		for _, u := range us {
			group[u] = name
		}
	}
	users := slices.Concat(moving, sameNode, elsewhere)

	// httplimit: two policies per request, one RL.ALL, failing open. Its
	// timeout is 250 ms, not 50: the test is of redirections, not of how
	// fast this machine serves five servers, rls and the load at once.
	const limit, rlsLimit = 500, 40
	var breakerOpened atomic.Int64
	var failures sync.Map // a sample of the calls' errors
	byUser := func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }
	lim, err := httplimit.New(cc, httplimit.Options{OnError: httplimit.FailOpen, Timeout: 250 * time.Millisecond, Event: func(e httplimit.Event) {
		switch {
		case e.Kind == httplimit.BreakerOpen:
			breakerOpened.Add(1)
		case e.Kind == httplimit.RedisCall && e.Err != nil:
			failures.Store(e.Err.Error(), true)
		}
	}},
		httplimit.Policy{Name: "daily", Limit: client.FixedWindow(limit, 24*time.Hour), Key: byUser},
		httplimit.Policy{Name: "burst", Limit: client.PerHour(100000), Key: byUser})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	// rls: two descriptors per request; a value {u} puts both keys in u's slot.
	p := startRLS(t, strings.Join(addrs, ","), map[string]string{"mig.yaml": `
domain: mig
descriptors:
  - key: a
    rate_limit: {unit: day, requests_per_unit: 40}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 1000}
`}, "-redis-type", "cluster", "-prefix", "", "-redis-timeout", "250ms")

	type tally struct{ admitted, refused, failedOpen, rlsOK, rlsOver, rlsErr int }
	var mu sync.Mutex
	tallies := map[string]*tally{}
	for _, u := range users {
		tallies[u] = &tally{}
	}
	var migrating atomic.Bool
	var latMu sync.Mutex
	var latMoving, latStill []time.Duration
	day := time.Now().Unix() / 86400

	stop := make(chan struct{})
	var load sync.WaitGroup
	for range 4 {
		load.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				u := users[rand.IntN(len(users))]
				r := httptest.NewRequest("GET", "/", nil)
				r.Header.Set("X-User", u)
				w := httptest.NewRecorder()
				during := migrating.Load()
				start := time.Now()
				h.ServeHTTP(w, r)
				took := time.Since(start)
				latMu.Lock()
				if during {
					latMoving = append(latMoving, took)
				} else {
					latStill = append(latStill, took)
				}
				latMu.Unlock()
				mu.Lock()
				switch tl := tallies[u]; {
				case w.Code == 429:
					tl.refused++
				case w.Header().Get("RateLimit") == "":
					tl.failedOpen++
				default:
					tl.admitted++
				}
				mu.Unlock()
			}
		})
	}
	load.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			u := users[rand.IntN(len(users))]
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := p.rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "mig",
				Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "{"+u+"}"), desc("b", "{"+u+"}")}})
			cancel()
			mu.Lock()
			switch tl := tallies[u]; {
			case err != nil:
				tl.rlsErr++
				if tl.rlsErr == 1 {
					t.Logf("rls for %s (%s): %v", u, group[u], err)
				}
			case resp.OverallCode == pb.RateLimitResponse_OK:
				tl.rlsOK++
			default:
				tl.rlsOver++
			}
			mu.Unlock()
		}
	})

	// Back and forth for 15 s.
	migrations := 0
	deadline := time.Now().Add(15 * time.Second)
	from, to := home, fresh
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		migrating.Store(true)
		err := migrate(t, slot, from, to, nodes)
		migrating.Store(false)
		if err != nil {
			close(stop)
			load.Wait()
			t.Fatalf("migration %d (%s to %s): %v", migrations+1, from.addr(), to.addr(), err)
		}
		migrations++
		from, to = to, from
	}
	close(stop)
	load.Wait()

	// What Redis counted is what was admitted, for every user.
	counted := client.New(cc)
	var failedOpen = map[string]int{}
	var total tally
	for _, u := range users {
		tl := tallies[u]
		failedOpen[group[u]] += tl.failedOpen
		total.admitted += tl.admitted
		total.refused += tl.refused
		total.failedOpen += tl.failedOpen
		total.rlsOK += tl.rlsOK
		total.rlsOver += tl.rlsOver
		total.rlsErr += tl.rlsErr
		if time.Now().Unix()/86400 != day {
			continue // the day's window turned during the run
		}
		r, err := counted.Peek(ctx, "rl:http:{"+u+"}:daily", client.FixedWindow(limit, 24*time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		// A call whose reply was lost (a timeout) may have been counted:
		// its request was served by FailOpen.
		if used := int(limit - r.Remaining); used < tl.admitted || used > tl.admitted+tl.failedOpen || used > limit {
			t.Errorf("user %s (%s): %d admitted, %d more failed open, %d counted in Redis (limit %d)", u, group[u], tl.admitted, tl.failedOpen, used, limit)
		}
		r, err = counted.Peek(ctx, "mig_a_{"+u+"}_fw86400", client.FixedWindow(rlsLimit, 24*time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		// Likewise a call that ran past rls's deadline: the gateway got
		// UNAVAILABLE, and its failure mode decided.
		if used := int(rlsLimit - r.Remaining); used < tl.rlsOK || used > tl.rlsOK+tl.rlsErr || used > rlsLimit {
			t.Errorf("rls, user %s (%s): %d admitted, %d more unavailable, %d counted in Redis (limit %d)", u, group[u], tl.rlsOK, tl.rlsErr, used, rlsLimit)
		}
	}
	rlsErrs, requests := map[string]int{}, map[string]int{}
	for _, u := range users {
		tl := tallies[u]
		rlsErrs[group[u]] += tl.rlsErr
		requests[group[u]] += tl.admitted + tl.refused + tl.failedOpen + tl.rlsOK + tl.rlsOver + tl.rlsErr
	}
	var samples []string
	failures.Range(func(k, _ any) bool { samples = append(samples, k.(string)); return len(samples) < 5 })
	latMu.Lock()
	t.Logf("%d migrations of slot %d in 15 s; the client saw TRYAGAIN %d times, ASK %d, MOVED %d", migrations, slot,
		seen.tryAgain.Load(), seen.ask.Load(), seen.moved.Load())
	t.Logf("httplimit: %d admitted, %d refused, failed open by group %v; breaker opened %d times; errors seen %q",
		total.admitted, total.refused, failedOpen, breakerOpened.Load(), samples)
	t.Logf("rls: %d OK, %d OVER_LIMIT, errors by group %v", total.rlsOK, total.rlsOver, rlsErrs)
	t.Logf("request latency while the slot moves: p50 %v p99 %v (%d requests); otherwise p50 %v p99 %v (%d)",
		percentile(latMoving, 0.5), percentile(latMoving, 0.99), len(latMoving), percentile(latStill, 0.5), percentile(latStill, 0.99), len(latStill))
	latMu.Unlock()

	if migrations < 5 || seen.tryAgain.Load()+seen.ask.Load() == 0 {
		t.Fatalf("%d migrations, %d TRYAGAIN and %d ASK: the test did not exercise a moving slot", migrations, seen.tryAgain.Load(), seen.ask.Load())
	}
	if failedOpen["same-node"]+failedOpen["elsewhere"] != 0 || breakerOpened.Load() != 0 {
		t.Errorf("users outside the migrating slot were decided by the failure policy: %v; breaker opened %d times", failedOpen, breakerOpened.Load())
	}
	if rlsErrs["same-node"]+rlsErrs["elsewhere"] != 0 {
		t.Errorf("rls failed requests of users outside the migrating slot: %v", rlsErrs)
	}
	// In the migrating slot a call is undecided only when its slot kept
	// moving until its deadline: rare (before the client sent calls again,
	// 35 % of them failed).
	if bad := failedOpen["moving"] + rlsErrs["moving"]; bad*100 > requests["moving"] {
		t.Errorf("requests in the migrating slot not decided within their deadline: httplimit %d, rls %d, of %d", failedOpen["moving"], rlsErrs["moving"], requests["moving"])
	}
	if !module {
		name := lua.Versioned().Name
		if libs, err := fresh.rdb.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", name).Slice(); err != nil || len(libs) != 1 {
			t.Errorf("the fourth primary holds %v (%v), not %s", libs, err, name)
		}
	}
}
