package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// startCluster builds a cluster of 3 primaries and 3 replicas, all with the
// module, on loopback ports, and waits until every node reports it ok.
func startCluster(t *testing.T, f flavor) []*server {
	t.Helper()
	return startClusterWith(t, f, true)
}

// startClusterWith is startCluster, its nodes with the module or without.
// nodes[3+i] replicates nodes[i].
func startClusterWith(t *testing.T, f flavor, module bool) []*server {
	t.Helper()
	nodes := startClusterNodes(t, f, module, 6, 3)
	for i, rep := range nodes[3:] {
		id, err := nodes[i].rdb.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.rdb.Do(ctx, "CLUSTER", "REPLICATE", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitClusterOK(t, nodes)
	for _, rep := range nodes[3:] {
		waitFor(t, 30*time.Second, "replica link up", func() bool {
			return strings.Contains(rep.rdb.Info(ctx, "replication").Val(), "master_link_status:up")
		})
	}
	return nodes
}

// startClusterNodes starts n cluster nodes, with the module or without,
// gives the first three a third of the slots each, and waits until every
// node knows every other. The others are primaries without slots until
// told otherwise. extra are more server arguments.
func startClusterNodes(t *testing.T, f flavor, module bool, n, withSlots int, extra ...string) []*server {
	t.Helper()
	nodes := make([]*server, n)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			nodes[i] = startFor(t, f, opts{module: module, args: append([]string{
				"--cluster-enabled", "yes", "--cluster-config-file", "/tmp/nodes.conf",
				"--cluster-node-timeout", "1500", "--cluster-announce-ip", "127.0.0.1",
				"--cluster-replica-validity-factor", "0",
			}, extra...)})
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, r := range ranges[:withSlots] {
		if err := nodes[i].rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", r[0], r[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range nodes[1:] {
		if err := nodes[0].rdb.ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(m.port)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("every node to know all %d", n), func() bool {
		for _, m := range nodes {
			out, err := m.rdb.ClusterNodes(ctx).Result()
			if err != nil || strings.Count(strings.TrimSpace(out), "\n")+1 != n || strings.Contains(out, "handshake") {
				return false
			}
		}
		return true
	})
	return nodes
}

// waitClusterOK waits until every node reports cluster_state:ok.
func waitClusterOK(t *testing.T, nodes []*server) {
	t.Helper()
	waitFor(t, 30*time.Second, "cluster_state:ok on every node", func() bool {
		for _, n := range nodes {
			info, err := n.rdb.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
}

// Redis Cluster: 10,000 keys across every command through go-redis's
// ClusterClient without an error; then a primary is killed, its replica
// takes over, and the limiters go on. The test measures the admissions
// above the limit the failover allowed: state the dead primary had not yet
// replicated.
func TestCluster(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		nodes := startCluster(t, f)
		var addrs []string
		for _, n := range nodes {
			addrs = append(addrs, n.addr())
		}
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Protocol: 2, MaxRedirects: 8})
		defer cc.Close()

		// 10,000 keys, every command, in pipelines that go-redis splits by slot.
		var cmds []*redis.Cmd
		_, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range 10000 {
				l := limiters[i%len(limiters)]
				c := l.cmd
				if i%3 == 0 {
					c = l.peek
				}
				cmds = append(cmds, p.Do(ctx, append([]any{c, fmt.Sprintf("rl:cluster:%d", i)}, l.params(3, slow)...)...))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cmds {
			if r, err := c.Int64Slice(); err != nil || len(r) != 5 {
				t.Fatalf("key %d: %v %v", i, r, err)
			}
		}
		for _, n := range nodes[:3] {
			if n.rdb.DBSize(ctx).Val() < 1500 {
				t.Fatalf("%s holds %d keys: the keys did not spread", n.addr(), n.rdb.DBSize(ctx).Val())
			}
		}

		// RL.ALL: keys of one slot (a hash tag) decide together; keys of two
		// slots are the server's CROSSSLOT error. go-redis routes by the
		// first key when told where it is (RL.ALL's keys follow numkeys);
		// without it, by a MOVED redirect.
		all := func(firstKeyPos bool, keys ...string) ([]int64, error) {
			args := append([]any{"RL.ALL", len(keys)}, toAny(keys)...)
			for range keys {
				args = append(args, "GCRA", 4, 1, slow, 1)
			}
			cmd := redis.NewCmd(ctx, args...)
			if firstKeyPos {
				cmd.SetFirstKeyPos(2)
			}
			cc.Process(ctx, cmd)
			return cmd.Int64Slice()
		}
		for _, pos := range []bool{true, false} {
			r, err := all(pos, "rl:{user:42}:rpm", "rl:{user:42}:tpm", "rl:{user:42}:day")
			if err != nil || len(r) != 6 || r[0] != 0 {
				t.Fatalf("RL.ALL over one slot (first key position given: %v): %v %v", pos, r, err)
			}
		}
		_, err = all(true, "rl:{user:42}:rpm", "rl:{user:43}:rpm")
		assertErr(t, "RL.ALL over two slots", err, "CROSSSLOT")
		// LIMITS's hash is a key of the call: in the key's slot it is read;
		// in another the server refuses the call, for a command of one key
		// (its key specs find the hash) as for RL.ALL (which reports every
		// hash itself).
		if err := cc.HSet(ctx, "rl:{user:42}:plan", "rpm", "1 3600").Err(); err != nil {
			t.Fatal(err)
		}
		if r, err := cc.Do(ctx, "FW.HIT", "rl:{user:42}:fw", 10, 3600, 1, "LIMITS", "rl:{user:42}:plan", "rpm").Int64Slice(); err != nil || r[1] != 1 {
			t.Fatalf("FW.HIT with its LIMITS in its slot: %v %v, want the hash's limit 1", r, err)
		}
		_, err = cc.Do(ctx, "FW.HIT", "rl:{user:42}:fw", 10, 3600, 1, "LIMITS", "rl:{user:43}:plan", "rpm").Result()
		assertErr(t, "FW.HIT with its LIMITS in another slot", err, "CROSSSLOT")
		_, err = cc.Do(ctx, "RL.ALL", 2, "rl:{user:42}:a", "rl:{user:42}:b", "FW", 10, 3600, 1, "LIMITS", "rl:{user:42}:plan", "rpm",
			"FW", 10, 3600, 1, "LIMITS", "rl:{user:43}:plan", "rpm").Result()
		assertErr(t, "RL.ALL with a second LIMITS in another slot", err, "CROSSSLOT")
		// A node that does not own the keys redirects, and never runs it.
		owner, err := cc.MasterForKey(ctx, "rl:{user:42}:rpm")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes[:3] {
			if n.addr() == owner.Options().Addr {
				continue
			}
			_, err := n.rdb.Do(ctx, "RL.ALL", 2, "rl:{user:42}:rpm", "rl:{user:42}:tpm", "GCRA", 4, 1, slow, 1, "GCRA", 4, 1, slow, 1).Result()
			assertErr(t, "RL.ALL on a node that does not own its keys", err, "MOVED")
		}

		// The Go client over the cluster client: single-key calls on keys of
		// every slot, RL.ALL routed by its first key, a concurrency slot.
		rc := client.New(cc)
		for i := range 200 {
			if r, err := rc.Take(ctx, fmt.Sprintf("rl:client:%d", i), client.SlidingWindow(3, time.Hour), 1); err != nil || r.Remaining != 2 {
				t.Fatalf("client Take on key %d: %+v %v", i, r, err)
			}
		}
		if r, err := rc.All(ctx, []client.Keyed{
			{Key: "rl:{user:7}:rpm", Limit: client.GCRA(4, 1, time.Hour), Cost: 1},
			{Key: "rl:{user:7}:day", Limit: client.FixedWindow(100, time.Hour), Cost: 1},
		}); err != nil || r.Limited || r.Policy != 0 || r.Remaining != 4 {
			t.Fatalf("client All over one slot: %+v %v", r, err)
		}
		if r, err := rc.Acquire(ctx, "rl:client:conc", client.Concurrency{Limit: 1, Lease: time.Minute}, "a"); err != nil || r.Limited {
			t.Fatalf("client Acquire: %+v %v", r, err)
		}
		holdOnEverySlot(t, rc, nodes)
		// RL.HOLD's two keys in two slots: the server's CROSSSLOT error.
		_, err = cc.Do(ctx, "RL.HOLD", "rl:{user:42}:tpm", "rl:{user:43}:hold", 60, "GCRA", 4, 1, slow, 1).Result()
		assertErr(t, "RL.HOLD over two slots", err, "CROSSSLOT")
		if held, err := rc.Release(ctx, "rl:client:conc", "a"); err != nil || !held {
			t.Fatalf("client Release: %v %v", held, err)
		}

		// The middleware on the cluster: policies keyed apart, in two slots.
		refundAcrossTags(t, cc, "rl:http:")

		// Failover under load: 4 clients pipeline calls on 5000 fresh GCRA
		// keys of limit 5 while primary 0 is killed; they go on through the
		// new primary until every key refuses.
		const keys, limit = 5000, 5
		name := func(i int) string { return fmt.Sprintf("rl:failover:%d", i) }
		var mu sync.Mutex
		admitted := make([]int, keys)
		var errSample sync.Map
		batch := func(rng *rand.Rand) (errs int) {
			idx := make([]int, 50)
			var cmds []*redis.Cmd
			cc.Pipelined(ctx, func(p redis.Pipeliner) error {
				for n := range idx {
					idx[n] = rng.IntN(keys)
					cmds = append(cmds, p.Do(ctx, "GCRA.THROTTLE", name(idx[n]), limit-1, 1, slow))
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			for n, c := range cmds {
				r, err := c.Int64Slice()
				if err != nil {
					errs++
					errSample.Store(strings.SplitN(err.Error(), ":", 2)[0], true)
					continue
				}
				if r[0] == 0 {
					admitted[idx[n]]++
				}
			}
			return errs
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for {
					select {
					case <-stop:
						return
					default:
					}
					if batch(rng) > 0 {
						// go-redis keeps the dead primary in its slot map until it
						// reloads it (or gets a MOVED): an application reloads on
						// connection errors.
						cc.ReloadState(ctx)
						time.Sleep(20 * time.Millisecond)
					}
				}
			})
		}
		time.Sleep(500 * time.Millisecond)
		killTimeout := time.Duration(0)
		if err := nodes[0].c.Stop(ctx, &killTimeout); err != nil { // SIGKILL: no goodbye
			t.Fatal(err)
		}
		killedAt := time.Now()
		waitFor(t, 60*time.Second, "the replica to take over", func() bool {
			return strings.Contains(nodes[3].rdb.Info(ctx, "replication").Val(), "role:master")
		})
		tookOver := time.Since(killedAt)
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()

		// Drive every key to its limit through the new primary, then every
		// key refuses: the limiters go on. The excess is what the failover
		// lost: admissions the dead primary had not replicated.
		excess, keysOver, total := 0, 0, 0
		for i := range keys {
			for {
				r, err := cc.Do(ctx, "GCRA.THROTTLE", name(i), limit-1, 1, slow).Int64Slice()
				if err != nil {
					cc.ReloadState(ctx)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if r[0] == 1 {
					break
				}
				admitted[i]++
			}
			if admitted[i] > 2*limit {
				t.Fatalf("key %d admitted %d, more than twice its limit", i, admitted[i])
			}
			total += admitted[i]
			if admitted[i] > limit {
				excess += admitted[i] - limit
				keysOver++
			}
		}
		var errs []string
		errSample.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return true })
		t.Logf("%s: the replica took over %v after the kill; the failover allowed %d admissions above the limit (on %d of %d keys, %d admissions in all; limit %d); errors seen: %q",
			f.name, tookOver.Round(time.Millisecond), excess, keysOver, keys, total, limit, errs)
	})
}

// A cluster without the module: the client loads the FUNCTION library on
// every primary it meets, and again on a new primary after a failover
// when that one lacks it (here flushed after it took over).
func TestClusterFunctions(t *testing.T) {
	nodes := startClusterWith(t, flavors[1], false)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Protocol: 2, MaxRedirects: 8})
	defer cc.Close()
	rc := client.New(cc)
	for i := range 300 {
		if r, err := rc.Take(ctx, fmt.Sprintf("rl:fn:%d", i), client.SlidingWindow(3, time.Hour), 1); err != nil || r.Remaining != 2 {
			t.Fatalf("Take on key %d: %+v %v", i, r, err)
		}
	}
	holdOnEverySlot(t, rc, nodes)
	// LIMITS through the functions: the plan, beside its keys in their
	// slot, read by a function that declared only the limiter's key; a
	// plan of another slot is refused.
	for i := range 30 {
		plan, key := fmt.Sprintf("rl:{tenant:%d}:plan", i), fmt.Sprintf("rl:{tenant:%d}:api", i)
		if err := rc.SetLimit(ctx, plan, "api", client.FixedWindow(2, time.Hour)); err != nil {
			t.Fatal(err)
		}
		if r, err := rc.Take(ctx, key, client.FixedWindow(100, time.Hour).Override(plan, "api"), 1); err != nil || r.Limit != 2 || r.Remaining != 1 {
			t.Fatalf("a function with its LIMITS on %s: %+v %v", key, r, err)
		}
	}
	if _, err := rc.Take(ctx, "rl:{tenant:0}:api", client.FixedWindow(100, time.Hour).Override("rl:{tenant:1}:plan", "api"), 1); err == nil {
		t.Fatal("a function read a LIMITS hash of another slot")
	}
	engines := rc.Engines()
	for _, n := range nodes[:3] {
		if engines[n.addr()] != client.Functions {
			t.Fatalf("primary %s: engine %v (all: %v)", n.addr(), engines[n.addr()], engines)
		}
		if libs, err := n.rdb.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", lua.Versioned().Name).Slice(); err != nil || len(libs) != 1 {
			t.Fatalf("primary %s holds %v (%v)", n.addr(), libs, err)
		}
	}

	// nodes[3] takes over nodes[0]'s slots; its library came by
	// replication: flush it, as a new primary without it would be.
	rep := nodes[3]
	if err := rep.rdb.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the replica to take over", func() bool {
		return strings.Contains(rep.rdb.Info(ctx, "replication").Val(), "role:master")
	})
	if err := rep.rdb.Do(ctx, "FUNCTION", "FLUSH").Err(); err != nil {
		t.Fatal(err)
	}
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("rl:fn:after:%d", i); slotOf(t, rep, k) <= 5460 {
			key = k
		}
	}
	waitFor(t, 30*time.Second, "a call on the new primary", func() bool {
		r, err := rc.Take(ctx, key, client.SlidingWindow(3, time.Hour), 1)
		return err == nil && r.Remaining == 2
	})
	// The call that found the library missing was sent as its script's
	// source; the library is loaded behind it.
	waitFor(t, 10*time.Second, "the library on the new primary", func() bool {
		libs, err := rep.rdb.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", lua.Versioned().Name).Slice()
		return err == nil && len(libs) == 1
	})
	if r, err := rep.rdb.Do(ctx, "FCALL_RO", "sw_peek"+lua.Versioned().Suffix, 1, key, 3, 3600, 0).Int64Slice(); err != nil || r[2] != 2 {
		t.Fatalf("the key on the new primary: %v %v", r, err)
	}
}

// holdOnEverySlot holds and settles through rc on keys spread over every
// primary, with a hash tag and without: each hold's key (client.HoldKey)
// shares its limiter key's slot, or the server would refuse the call
// (CROSSSLOT).
func holdOnEverySlot(t *testing.T, rc *client.Client, nodes []*server) {
	t.Helper()
	tokens := client.TokenBucket(1000, 1000, time.Hour)
	for i := range 100 {
		key := fmt.Sprintf("rl:hold:%d", i)
		if i%2 == 0 {
			key = fmt.Sprintf("rl:{tenant:%d}:tpm", i)
		}
		if r, err := rc.Hold(ctx, key, "req-1", tokens, 300, time.Minute); err != nil || r.Remaining != 700 {
			t.Fatalf("Hold on %s: %+v %v", key, r, err)
		}
		if r, held, err := rc.Settle(ctx, key, "req-1", tokens, 120); err != nil || held != 300 || r.Remaining != 880 {
			t.Fatalf("Settle on %s: %+v, held %d, %v", key, r, held, err)
		}
	}
	for _, n := range nodes[:3] {
		if keys, err := n.rdb.Keys(ctx, "*rl:hold:*").Result(); err != nil || len(keys) < 5 {
			t.Fatalf("%s holds %v (%v): the limiter keys did not spread", n.addr(), keys, err)
		}
	}
}
