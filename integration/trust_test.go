package integration

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The module never takes what isn't its own and never locks users out for
// reasons they can't see: application data under a limiter's key name,
// clock steps, costs it can never admit, keyspace listeners, maxmemory.

// otherDataErr starts every refusal of a key that holds other data.
const otherDataErr = "ERR the key holds other data"

// Application data under a limiter's key name is refused, never taken over:
// the collisions issue 11 reproduced, and the shapes that only look like
// state. Nothing changes, and peeks refuse too.
func TestForeignDataRefused(t *testing.T) {
	instants := [][]any{{"GCRA.THROTTLE", 5, 1, 60}, {"GCRA.PEEK", 5, 1, 60}, {"TB.TAKE", 5, 1, 60}, {"TB.PEEK", 5, 1, 60},
		{"LB.ENQUEUE", 5, 1, 60}, {"LB.PEEK", 5, 1, 60}}
	counters := [][]any{{"FW.HIT", 100, 60}, {"FW.PEEK", 100, 60}, {"SW.HIT", 100, 60}, {"SW.PEEK", 100, 60}}
	logs := [][]any{{"SL.HIT", 5, 60}, {"SL.PEEK", 5, 60}}
	each(t, func(t *testing.T, s *server) {
		c := s.rdb
		cases := []struct {
			what  string
			setup func(k string) error
			cmds  [][]any
		}{
			{"SET visits 42", func(k string) error { return c.Set(ctx, k, "42", 0).Err() }, append(instants, counters...)},
			{"a timestamp without expiry", func(k string) error { return c.Set(ctx, k, "1795426258398000000", 0).Err() }, instants},
			{"42 with a TTL", func(k string) error { return c.Set(ctx, k, "42", time.Hour).Err() }, instants},
			{"an instant in 2014 with a TTL", func(k string) error { return c.Set(ctx, k, "1400000000000000000", time.Hour).Err() }, instants},
			{"an instant in 2255 expiring in a minute", func(k string) error { return c.Set(ctx, k, "9000000000000000000", time.Minute).Err() }, instants},
			{"the largest int64, no expiry", func(k string) error { return c.Set(ctx, k, "9223372036854775807", 0).Err() }, instants},
			{"a leaderboard", func(k string) error {
				return c.ZAdd(ctx, k, redis.Z{Score: 100, Member: "alice"}, redis.Z{Score: 200, Member: "bob"}).Err()
			}, logs},
			{"a leaderboard with a TTL", func(k string) error {
				c.ZAdd(ctx, k, redis.Z{Score: 100, Member: "alice"}, redis.Z{Score: 200, Member: "bob"})
				return c.Expire(ctx, k, time.Hour).Err()
			}, logs},
			{"scores of 1e300", func(k string) error {
				for _, m := range []string{"a", "b", "c", "d", "e"} {
					c.ZAdd(ctx, k, redis.Z{Score: 1e300, Member: m})
				}
				return c.Expire(ctx, k, time.Hour).Err()
			}, logs},
			{"a log's members with no expiry", func(k string) error {
				us := time.Now().UnixMicro()
				return c.ZAdd(ctx, k, redis.Z{Score: float64(us), Member: fmt.Sprintf("%d-0", us)}).Err()
			}, logs},
		}
		for _, cs := range cases {
			k := key(t, "foreign")
			if err := cs.setup(k); err != nil {
				t.Fatal(err)
			}
			before := snap(t, c, k)
			for _, cmd := range cs.cmds {
				_, err := call(c, cmd[0].(string), append([]any{k}, cmd[1:]...)...)
				assertErr(t, fmt.Sprintf("%v on %s", cmd, cs.what), err, otherDataErr)
			}
			if after := snap(t, c, k); after != before {
				t.Fatalf("%s changed: %v -> %v", cs.what, before, after)
			}
		}
	})
}

// Costs a limiter can never admit are refusals, however large: each of
// these replied an overflow error before issue 11. A refund beyond full
// leaves the limiter full. An overflow is an error only for arguments
// that cannot be computed at all, and names them.
func TestHugeCosts(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		c := s.rdb
		for _, cs := range []struct {
			cmd  []any
			want []int64
		}{
			{[]any{"TB.TAKE", 5, 1, 1, 10_000_000_000}, []int64{1, 5, 5, -1, 0}},
			{[]any{"TB.TAKE", 5, 1, 60, 153722868}, []int64{1, 5, 5, -1, 0}},
			{[]any{"LB.ENQUEUE", 5, 1, 1, int64(math.MaxInt64)}, []int64{1, 5, 5, -1, 0}},
			{[]any{"GCRA.THROTTLE", 5, 1, 1, 10_000_000_000}, []int64{1, 6, 6, -1, 0}},
			{[]any{"GCRA.THROTTLE", 5, 1, 60, int64(math.MaxInt64)}, []int64{1, 6, 6, -1, 0}},
		} {
			k := key(t, "huge")
			assertReply(t, fmt.Sprint(cs.cmd), mustCall(t, c, cs.cmd[0].(string), append([]any{k}, cs.cmd[1:]...)...), cs.want...)
			if c.Exists(ctx, k).Val() != 0 {
				t.Fatalf("%v created the key", cs.cmd)
			}
		}

		for _, cmd := range [][]any{{"GCRA.THROTTLE", 5, 1, 60}, {"TB.TAKE", 6, 1, 60}} {
			k := key(t, "refund")
			mustCall(t, c, cmd[0].(string), append(append([]any{k}, cmd[1:]...), 2)...)
			for _, refund := range []int64{-153722868, math.MinInt64} {
				assertReply(t, fmt.Sprint(cmd, " refund ", refund), mustCall(t, c, cmd[0].(string), append(append([]any{k}, cmd[1:]...), refund)...), 0, 6, 6, -1, 0)
				if c.Exists(ctx, k).Val() != 0 {
					t.Fatalf("%v: a refund to full left the key", cmd)
				}
			}
		}

		// One request per 7e9 s: the second is refused, not an overflow
		// the stored state caused.
		k := key(t, "slow")
		assertReply(t, "first", mustCall(t, c, "GCRA.THROTTLE", k, 0, 1, 7_000_000_000), 0, 1, 0, -1, 7_000_000_000)
		assertReply(t, "second", mustCall(t, c, "GCRA.THROTTLE", k, 0, 1, 7_000_000_000), 1, 1, 0, 7_000_000_000, 7_000_000_000)

		// τ of 2^63 ns puts the state past the year 2262: the arguments are
		// at fault, and the error says which.
		_, err := call(c, "GCRA.THROTTLE", key(t, "overflow"), 0, 1, 9223372036)
		assertErr(t, "an uncomputable period", err, "ERR arguments overflow", "max_burst", "period", "count", "2262")
	})
}

// What issue 11 found beside its five items: a fixed window's expiry past
// 2262 restarted the count; a sliding window counter that overflows
// reported a refusal with the whole limit remaining.
func TestWindowEdges(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		c := s.rdb
		k := key(t, "fw")
		c.Set(ctx, k, "2", time.Minute)
		c.PExpireAt(ctx, k, time.UnixMilli(9_300_000_000_000))
		assertReply(t, "FW.HIT on an expiry past 2262", mustCall(t, c, "FW.HIT", k, 2, 60), 1, 2, 0, -2, -2)
		end := (time.Now().UnixMilli()/60_000 + 1) * 60_000
		if sn := snap(t, c, k); sn.Value != "2" || (sn.Expire != end && sn.Expire != end+60_000) {
			t.Fatalf("after FW.HIT: %v, want the count 2 expiring at the window's end %d", sn, end)
		}

		k = key(t, "sw")
		idx := time.Now().Unix() / 60
		c.Set(ctx, k, fmt.Sprintf("%d:%d:%d", idx, int64(math.MaxInt64), int64(math.MaxInt64)), time.Minute)
		r := mustCall(t, c, "SW.HIT", k, 5, 60)
		if r[0] != 1 || r[2] != 0 {
			t.Fatalf("SW.HIT on overflowing counts: %v, want refused with 0 remaining", r)
		}
	})
}

// Limiter writes emit the events the equivalent built-in writes emit, so a
// primary and its replica (which applies SET ... PXAT, DEL, ZADD, ...)
// publish the same events in the same order; refusals and peeks emit none.
func TestKeyspaceEvents(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		p := startFor(t, f, opts{module: true, args: []string{"--notify-keyspace-events", "KEA"}})
		r := startReplica(t, p, false)
		if err := r.rdb.ConfigSet(ctx, "notify-keyspace-events", "KEA").Err(); err != nil {
			t.Fatal(err)
		}
		prefix := "rl:{ev}:"
		listen := func(s *server) (<-chan []string, func()) {
			ps := s.rdb.PSubscribe(ctx, "__keyspace@0__:"+prefix+"*")
			if _, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			out := make(chan []string, 1)
			go func() {
				var events []string
				for m := range ps.Channel() {
					k := strings.TrimPrefix(m.Channel, "__keyspace@0__:"+prefix)
					events = append(events, k+" "+m.Payload)
					if k == "end" && m.Payload == "expire" {
						break
					}
				}
				out <- events
			}()
			return out, func() { ps.Close() }
		}
		onPrimary, closeP := listen(p)
		defer closeP()
		onReplica, closeR := listen(r)
		defer closeR()

		c := p.rdb
		mustCall(t, c, "GCRA.THROTTLE", prefix+"gcra", 5, 1, slow)
		mustCall(t, c, "GCRA.THROTTLE", prefix+"gcra", 5, 1, slow, 6)  // refused: no event
		mustCall(t, c, "GCRA.PEEK", prefix+"gcra", 5, 1, slow)         // no event
		mustCall(t, c, "GCRA.THROTTLE", prefix+"gcra", 5, 1, slow, -9) // back to full: del
		mustCall(t, c, "TB.TAKE", prefix+"tb", 5, 1, slow)
		mustCall(t, c, "LB.ENQUEUE", prefix+"lb", 5, 1, slow)
		mustCall(t, c, "SW.HIT", prefix+"sw", 5, slow)
		mustCall(t, c, "FW.HIT", prefix+"fw", 5, slow)
		mustCall(t, c, "FW.HIT", prefix+"fw", 5, slow) // same expiry: SET ... PXAT still emits expire
		mustCall(t, c, "SL.HIT", prefix+"sl", 5, 1, 2)
		// Kept past its window by hand, the log's next hit trims every entry
		// (zremrangebyscore, del), then adds (zadd) and expires.
		c.PExpire(ctx, prefix+"sl", time.Minute)
		mustCall(t, c, "CONC.ACQUIRE", prefix+"conc", 2, 60, "a") // zadd, expire
		mustCall(t, c, "CONC.ACQUIRE", prefix+"conc", 2, 1, "s")  // zadd; the latest lease is still a's
		mustCall(t, c, "CONC.ACQUIRE", prefix+"conc", 2, 60, "c") // refused: no event
		time.Sleep(1100 * time.Millisecond)
		mustCall(t, c, "SL.HIT", prefix+"sl", 5, 1)
		mustCall(t, c, "CONC.ACQUIRE", prefix+"conc", 2, 60, "c") // s lapsed: zrem, zadd, expire
		c.Do(ctx, "CONC.RELEASE", prefix+"conc", "a")             // zrem
		c.Do(ctx, "CONC.RELEASE", prefix+"conc", "c")             // the last: del
		c.Set(ctx, prefix+"end", "x", time.Minute)
		waitReplicas(t, p, 1)

		var got [2][]string
		for i, ch := range []<-chan []string{onPrimary, onReplica} {
			select {
			case got[i] = <-ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("no end event on the %s", []string{"primary", "replica"}[i])
			}
		}
		want := []string{"gcra set", "gcra expire", "gcra del", "tb set", "tb expire", "lb set", "lb expire",
			"sw set", "sw expire", "fw set", "fw expire", "fw set", "fw expire", "sl zadd", "sl expire",
			"sl expire", "conc zadd", "conc expire", "conc zadd", "sl zremrangebyscore", "sl del", "sl zadd", "sl expire",
			"conc zrem", "conc zadd", "conc expire", "conc zrem", "conc del", "end set", "end expire"}
		if fmt.Sprint(got[0]) != fmt.Sprint(want) {
			t.Fatalf("primary events:\n got %v\nwant %v", got[0], want)
		}
		if fmt.Sprint(got[1]) != fmt.Sprint(got[0]) {
			t.Fatalf("replica events differ from the primary's:\nprimary %v\nreplica %v", got[0], got[1])
		}
	})
}

// shiftClock steps the wall clock of the servers started with dir by d
// (negative: back), and waits until s reports it.
func shiftClock(t *testing.T, dir string, s *server, d time.Duration) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "ns"), []byte(strconv.FormatInt(int64(d), 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the server's clock to step", func() bool {
		tm, err := s.rdb.Time(ctx).Result()
		return err == nil && time.Until(tm) < d/2 == (d < 0)
	})
	time.Sleep(50 * time.Millisecond) // a server caching its clock per event loop sees the step too
}

// clockWorkload leaves every limiter partly or wholly used, on keys with
// prefix: 2 of 6 for GCRA and the token bucket, 2 queued in the shaper,
// 2 of 5 in the sliding window, and the fixed window and the log exhausted.
func clockWorkload(t *testing.T, c *redis.Client, prefix string) {
	t.Helper()
	mustCall(t, c, "GCRA.THROTTLE", prefix+"gcra", 5, 1, 60, 2)
	mustCall(t, c, "TB.TAKE", prefix+"tb", 6, 1, 60, 2)
	mustCall(t, c, "LB.ENQUEUE", prefix+"lb", 5, 1, 60, 3)
	mustCall(t, c, "SW.HIT", prefix+"sw", 5, 60, 2)
	mustCall(t, c, "FW.HIT", prefix+"fw", 5, 60, 5)
	mustCall(t, c, "SL.HIT", prefix+"sl", 5, 60, 5)
}

// clockBounds checks, after the clock stepped back an hour, that each
// limiter waits at most one refill (a window), not the hour: first by
// peeks, then, when consume is set, by the consuming commands, which store
// the state as it counts, so that it expires within a refill of the new now.
func clockBounds(t *testing.T, c *redis.Client, prefix string, consume bool) {
	t.Helper()
	for _, cs := range []struct {
		cmd, peek   string
		args        []any
		retry, full int64 // the most each may be, in seconds
	}{
		{"GCRA.THROTTLE", "GCRA.PEEK", []any{5, 1, 60}, 60, 360},
		{"TB.TAKE", "TB.PEEK", []any{6, 1, 60}, 60, 360},
		{"LB.ENQUEUE", "LB.PEEK", []any{5, 1, 60}, 60, 360},
		{"SW.HIT", "SW.PEEK", []any{5, 60}, 120, 120},
		{"FW.HIT", "FW.PEEK", []any{5, 60}, 60, 60},
		{"SL.HIT", "SL.PEEK", []any{5, 60}, 60, 60},
	} {
		k := prefix + strings.ToLower(strings.Split(cs.cmd, ".")[0])
		cmd := cs.peek
		if consume {
			cmd = cs.cmd
		}
		r := mustCall(t, c, cmd, append([]any{k}, cs.args...)...)
		t.Logf("%s %s %v after the clock stepped back an hour: %v", cmd, k, cs.args, r)
		if r[3] > cs.retry || r[4] > cs.full {
			t.Fatalf("%s after the clock stepped back an hour: %v, want retry_after <= %d and field 5 <= %d", cmd, r, cs.retry, cs.full)
		}
		if !consume {
			continue
		}
		tm, _ := c.Time(ctx).Result()
		exp, err := c.Do(ctx, "PEXPIRETIME", k).Int64()
		if err != nil || exp-tm.UnixMilli() > cs.full*1000+1000 {
			t.Fatalf("%s: the key expires at %d, %d ms after now: the step was not stored as it counts", cmd, exp, exp-tm.UnixMilli())
		}
	}
	if consume {
		scores, _ := c.ZRangeWithScores(ctx, prefix+"sl", 0, -1).Result()
		tm, _ := c.Time(ctx).Result()
		for _, z := range scores {
			if int64(z.Score) > tm.UnixMicro() {
				t.Fatalf("a log entry at %v is still after now %d", z, tm.UnixMicro())
			}
		}
	}
}

// A wall clock that steps back an hour (NTP, a VM restore, a failover to a
// replica whose clock is behind) costs at most one refill, not the hour, on
// the primary and on a promoted replica. A preloaded shim steps the clock.
func TestClockStepBack(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		dir := t.TempDir()
		s := startFor(t, f, opts{module: true, clockDir: dir})
		prefix := "rl:{clock}:"
		clockWorkload(t, s.rdb, prefix)
		shiftClock(t, dir, s, -time.Hour)
		clockBounds(t, s.rdb, prefix, false)
		clockBounds(t, s.rdb, prefix, true)

		// A replica an hour behind its primary, peeked at, then promoted.
		rdir := t.TempDir()
		p := startFor(t, f, opts{module: true})
		r := startFor(t, f, opts{module: true, clockDir: rdir, args: []string{"--replicaof", "127.0.0.1", fmt.Sprint(p.port)}})
		shiftClock(t, rdir, r, -time.Hour)
		waitFor(t, 30*time.Second, "replication link up", func() bool {
			return strings.Contains(r.rdb.Info(ctx, "replication").Val(), "master_link_status:up")
		})
		clockWorkload(t, p.rdb, prefix)
		waitReplicas(t, p, 1)
		clockBounds(t, r.rdb, prefix, false)
		if err := r.rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		clockBounds(t, r.rdb, prefix, true)
	})
}

// A sliding-log write that would take the server past maxmemory is refused
// with the server's OOM error, and changes nothing; deny-oom alone checks
// only before the command. Also measured: bytes and time per entry.
func TestSlidingLogMaxmemory(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		s := startFor(t, f, opts{module: true})
		c := s.rdb

		// Without maxmemory: what 100000 entries cost.
		c.ConfigResetStat(ctx)
		mustCall(t, c, "SL.HIT", "rl:big", 100000, 60, 100000)
		usage := c.MemoryUsage(ctx, "rl:big", 0).Val()
		stats := infoField(t, c, "commandstats", "cmdstat_sl.hit")
		t.Logf("%s: SL.HIT of 100000 entries: MEMORY USAGE %d bytes (%.0f per entry); %s",
			f.name, usage, float64(usage)/100000, stats)
		c.Del(ctx, "rl:big")
		// Valkey frees a big value in the background (lazyfree-lazy-user-del).
		waitFor(t, 10*time.Second, "the log to be freed", func() bool {
			return infoField(t, c, "memory", "lazyfree_pending_objects") == "0"
		})

		used, _ := strconv.ParseInt(infoField(t, c, "memory", "used_memory"), 10, 64)
		limit := used + 3<<20
		c.ConfigSet(ctx, "maxmemory-policy", "noeviction")
		if err := c.ConfigSet(ctx, "maxmemory", fmt.Sprint(limit)).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := call(c, "SL.HIT", "rl:big", 100000, 60, 100000)
		assertErr(t, "SL.HIT of 100000 entries under 3 MB of room", err, "OOM")
		if c.Exists(ctx, "rl:big").Val() != 0 {
			t.Fatal("the refused write left a key")
		}
		if now, _ := strconv.ParseInt(infoField(t, c, "memory", "used_memory"), 10, 64); now > limit {
			t.Fatalf("used memory %d passed maxmemory %d", now, limit)
		}
		// What fits goes ahead, and is checked again as the log grows.
		assertReply(t, "1000 entries", mustCall(t, c, "SL.HIT", "rl:big", 100000, 60, 1000), 0, 100000, 99000, -1, -2)
		_, err = call(c, "SL.HIT", "rl:big", 100000, 60, 30000)
		assertErr(t, "30000 more entries", err, "OOM")
		if n := c.ZCard(ctx, "rl:big").Val(); n != 1000 {
			t.Fatalf("the log holds %d entries after a refused write, want 1000", n)
		}
	})
}
