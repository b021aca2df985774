package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Exactly limit holders under a race of many clients with distinct ids; a
// holder acquiring again, even many times at once, renews and never takes a
// second slot; a refusal leaves the key byte-identical.
func TestConcRace(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "conc")
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for c := range 64 {
			wg.Go(func() {
				for i := range 4 {
					r, err := call(s.rdb, "CONC.ACQUIRE", k, 10, 600, fmt.Sprintf("req-%d-%d", c, i))
					if err != nil {
						t.Error(err)
						return
					}
					if r[0] == 0 {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if admitted.Load() != 10 {
			t.Fatalf("admitted %d of 256 distinct ids, want 10", admitted.Load())
		}
		holders, err := s.rdb.ZRange(ctx, k, 0, -1).Result()
		if err != nil || len(holders) != 10 {
			t.Fatalf("the key holds %v, %v", holders, err)
		}

		// Renewals by one holder, 64 at once: all admitted, no new slot.
		var refused atomic.Int64
		for range 64 {
			wg.Go(func() {
				r, err := call(s.rdb, "CONC.ACQUIRE", k, 10, 600, holders[3])
				if err != nil || r[0] != 0 || r[2] != 0 {
					refused.Add(1)
				}
			})
		}
		wg.Wait()
		if n, _ := s.rdb.ZCard(ctx, k).Result(); refused.Load() != 0 || n != 10 {
			t.Fatalf("renewals: %d refused, %d holders", refused.Load(), n)
		}

		// A refusal writes nothing: the key, its expiry, and the replication
		// offset stay as they were.
		before, off := snap(t, s.rdb, k), replOffset(t, s.rdb)
		r := mustCall(t, s.rdb, "CONC.ACQUIRE", k, 10, 600, "late")
		assertReply(t, "refused", r, 1, 10, 0, -2, -2)
		assertBetween(t, "retry_after", r[3], 599, 600)
		if after := snap(t, s.rdb, k); after != before || replOffset(t, s.rdb) != off {
			t.Fatalf("a refusal changed the key:\nbefore %v\nafter  %v", before, after)
		}
		assertReply(t, "peek", mustCall(t, s.rdb, "CONC.PEEK", k, 10), 1, 10, 0, -2, -2)
		assertReply(t, "peek with room", mustCall(t, s.rdb, "CONC.PEEK", k, 12), 0, 12, 1, -1, -2)
	})
}

// A release frees a slot at once; a lease that lapses frees it by itself;
// the key goes with its last lease.
func TestConcReleaseAndLapse(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "conc")
		assertReply(t, "a", mustCall(t, s.rdb, "CONC.ACQUIRE", k, 2, 600, "a"), 0, 2, 1, -1, 600)
		assertReply(t, "b", mustCall(t, s.rdb, "CONC.ACQUIRE", k, 2, 1, "b", "MS"), 0, 2, 0, -1, -2)
		r := mustCall(t, s.rdb, "CONC.ACQUIRE", k, 2, 600, "c", "MS")
		assertReply(t, "c refused", r, 1, 2, 0, -2, -2)
		assertBetween(t, "c's retry_after (b's lease, ms)", r[3], 1, 1000)

		// b never releases: its slot lapses by itself after its lease.
		time.Sleep(time.Duration(r[3])*time.Millisecond + 20*time.Millisecond)
		assertReply(t, "c after b's lease", mustCall(t, s.rdb, "CONC.ACQUIRE", k, 2, 600, "c"), 0, 2, 0, -1, 600)
		if ok, _ := s.rdb.ZScore(ctx, k, "b").Result(); ok != 0 {
			t.Fatalf("b's lapsed lease is still there (score %v)", ok)
		}
		// b, late, releases: it held nothing any more.
		if n, err := s.rdb.Do(ctx, "CONC.RELEASE", k, "b").Int64(); err != nil || n != 0 {
			t.Fatalf("release of a lapsed lease: %v %v", n, err)
		}

		// A release frees a slot at once, and is idempotent.
		assertReply(t, "d refused", mustCall(t, s.rdb, "CONC.ACQUIRE", k, 2, 600, "d"), 1, 2, 0, -2, 600)
		for i, want := range []int64{1, 0} {
			if n, err := s.rdb.Do(ctx, "CONC.RELEASE", k, "a").Int64(); err != nil || n != want {
				t.Fatalf("release %d of a: %v %v, want %d", i+1, n, err, want)
			}
		}
		assertReply(t, "d", mustCall(t, s.rdb, "CONC.ACQUIRE", k, 2, 1, "d"), 0, 2, 0, -1, 600)

		// The key expires with its latest lease, and goes with the last release.
		sn := snap(t, s.rdb, k)
		score, _ := s.rdb.ZScore(ctx, k, "c").Result()
		if sn.Expire != (int64(score)+999_999)/1_000_000*1000 {
			t.Fatalf("key expires at %d ms, latest lease ends at %.0f µs: want the second after it", sn.Expire, score)
		}
		s.rdb.Do(ctx, "CONC.RELEASE", k, "c")
		if sn := snap(t, s.rdb, k); sn.Type != "zset" || sn.Expire > time.Now().Add(2*time.Second).UnixMilli() {
			t.Fatalf("after c's release, d's 1 s lease is left: %v", sn)
		}
		waitFor(t, 3*time.Second, "the key to go with d's lease", func() bool { return s.rdb.Exists(ctx, k).Val() == 0 })
		if n, err := s.rdb.Do(ctx, "CONC.RELEASE", k, "d").Int64(); err != nil || n != 0 {
			t.Fatalf("release on a missing key: %v %v", n, err)
		}
		if s.rdb.Exists(ctx, k).Val() != 0 {
			t.Fatal("a release created the key")
		}
	})
}

// Bad input is an error naming the argument, and writes nothing: no key
// appears, an existing one stays byte-identical.
func TestConcBadInput(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k, missing, str := key(t, "conc"), key(t, "missing"), key(t, "string")
		mustCall(t, s.rdb, "CONC.ACQUIRE", k, 3, 600, "holder")
		s.rdb.Set(ctx, str, "v", 0)
		long := strings.Repeat("i", 129)
		cases := []struct {
			args   []any
			prefix string
			parts  []string
		}{
			{[]any{"CONC.ACQUIRE", "KEY", 0, 60, "id"}, "ERR", []string{"limit", "1 to 100000"}},
			{[]any{"CONC.ACQUIRE", "KEY", 100001, 60, "id"}, "ERR", []string{"limit", "1 to 100000"}},
			{[]any{"CONC.ACQUIRE", "KEY", 5, 0, "id"}, "ERR", []string{"lease", "whole seconds"}},
			{[]any{"CONC.ACQUIRE", "KEY", 5, -1, "id"}, "ERR", []string{"lease"}},
			{[]any{"CONC.ACQUIRE", "KEY", 5, 9223372036, "id"}, "ERR", []string{"lease", "2255"}},
			{[]any{"CONC.ACQUIRE", "KEY", 5, 60, ""}, "ERR", []string{"id", "1 to 128 bytes"}},
			{[]any{"CONC.ACQUIRE", "KEY", 5, 60, long}, "ERR", []string{"id", "1 to 128 bytes", "129"}},
			{[]any{"CONC.ACQUIRE", "KEY", 5, 60, "id", "extra"}, "ERR", []string{"unknown option", "extra"}},
			{[]any{"CONC.ACQUIRE", "KEY", 5, 60, "id", "RESERVE", 6}, "ERR", []string{"RESERVE", "0 to 5"}},
			{[]any{"CONC.ACQUIRE", "KEY", 5, 60}, "ERR", []string{"wrong number of arguments"}},
			{[]any{"CONC.PEEK", "KEY", 0}, "ERR", []string{"limit"}},
			{[]any{"CONC.PEEK", "KEY", 5, 60}, "ERR", []string{"unknown option"}},
			{[]any{"CONC.RELEASE", "KEY", ""}, "ERR", []string{"id", "1 to 128 bytes"}},
			{[]any{"CONC.RELEASE", "KEY", long}, "ERR", []string{"id"}},
			{[]any{"CONC.RELEASE", "KEY", "a", "1", "b"}, "ERR", []string{"wrong number of arguments"}},
			{[]any{"CONC.RELEASE", "KEY", "a", "b"}, "ERR", []string{"n must be an integer from 1 to 1000000"}},
			{[]any{"CONC.ACQUIRE", "KEY", 5, 60, "a", "UPTO", 0}, "ERR", []string{"UPTO", "1 to 1000000"}},
			{[]any{"CONC.RELEASE", "KEY"}, "ERR", []string{"wrong number of arguments"}},
		}
		before := snap(t, s.rdb, k)
		for _, c := range cases {
			for _, target := range []string{k, missing} {
				args := append([]any{}, c.args...)
				args[1] = target
				err := s.rdb.Do(ctx, args...).Err()
				assertErr(t, fmt.Sprint(args), err, c.prefix, c.parts...)
			}
		}
		if after := snap(t, s.rdb, k); after != before {
			t.Fatalf("bad input changed the key:\nbefore %v\nafter  %v", before, after)
		}
		if s.rdb.Exists(ctx, missing).Val() != 0 {
			t.Fatal("bad input created a key")
		}
		for _, args := range [][]any{{"CONC.ACQUIRE", str, 5, 60, "id"}, {"CONC.RELEASE", str, "id"}, {"CONC.PEEK", str, 5}} {
			assertErr(t, fmt.Sprint(args), s.rdb.Do(ctx, args...).Err(), "WRONGTYPE")
		}
		// A sorted set of the application's, even one scored with timestamps
		// and given a TTL, is not taken over.
		app := key(t, "app")
		now := time.Now()
		s.rdb.ZAdd(ctx, app, redis.Z{Score: float64(now.Add(time.Minute).UnixMicro()), Member: "alice"})
		s.rdb.Expire(ctx, app, time.Hour)
		appBefore := snap(t, s.rdb, app)
		for _, args := range [][]any{{"CONC.ACQUIRE", app, 5, 60, "alice"}, {"CONC.RELEASE", app, "alice"}, {"CONC.PEEK", app, 5}} {
			assertErr(t, fmt.Sprint(args), s.rdb.Do(ctx, args...).Err(), "ERR the key holds other data", "concurrency state", "expire with its latest lease")
		}
		if after := snap(t, s.rdb, app); after != appBefore {
			t.Fatalf("the application's sorted set changed: %v -> %v", appBefore, after)
		}
	})
}

// concWorkload drives the concurrency limiter through every write it
// makes: acquires, a renewal, a refusal, a release, a sweep of lapsed
// holders and a release that leaves nothing.
func concWorkload(t *testing.T, c *redis.Client, prefix string) {
	t.Helper()
	k := prefix + "conc"
	for i := range 5 {
		mustCall(t, c, "CONC.ACQUIRE", k, 5, 1, fmt.Sprint("short-", i))
	}
	mustCall(t, c, "CONC.ACQUIRE", k, 9, 600, "long")
	mustCall(t, c, "CONC.ACQUIRE", k, 9, 700, "long") // renewal
	mustCall(t, c, "CONC.ACQUIRE", k, 6, 600, "refused")
	if n, err := c.Do(ctx, "CONC.RELEASE", k, "short-0").Int64(); err != nil || n != 1 {
		t.Fatalf("release: %v %v", n, err)
	}
	time.Sleep(1100 * time.Millisecond) // the short leases lapse
	mustCall(t, c, "CONC.ACQUIRE", k, 9, 600, "sweeper")
	gone := prefix + "gone"
	mustCall(t, c, "CONC.ACQUIRE", gone, 1, 600, "only")
	c.Do(ctx, "CONC.RELEASE", gone, "only")
}

// A replica (without the module) and an AOF reload hold exactly the
// primary's state; CONC.PEEK on a replica with the module reports what the
// primary does.
func TestConcReplicationAndAOF(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		dir := t.TempDir()
		p := startFor(t, f, opts{module: true, dataDir: dir, args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
		plain := startReplica(t, p, false)
		withModule := startReplica(t, p, true)
		prefix := "rl:{conc}:"
		concWorkload(t, p.rdb, prefix)
		waitReplicas(t, p, 2)
		want := snapAll(t, p.rdb, prefix+"*")
		holders, _ := p.rdb.ZRange(ctx, prefix+"conc", 0, -1).Result()
		if len(want) != 1 || fmt.Sprint(holders) != "[sweeper long]" {
			t.Fatalf("the primary holds %v, holders %v", want, holders)
		}
		for _, r := range []*server{plain, withModule} {
			if got := snapAll(t, r.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("replica differs:\nprimary %v\nreplica %v", want, got)
			}
		}
		pp := mustCall(t, p.rdb, "CONC.PEEK", prefix+"conc", 2, "MS")
		rp := mustCall(t, withModule.rdb, "CONC.PEEK", prefix+"conc", 2, "MS")
		assertReply(t, "peek on the primary", pp, 1, 2, 0, -2, -2)
		assertReply(t, "peek on the replica", rp, pp[0], pp[1], pp[2], -2, -2)
		assertBetween(t, "the replica's retry_after", rp[3], pp[3]-1000, pp[3])
		if err := withModule.rdb.Do(ctx, "CONC.ACQUIRE", prefix+"conc", 5, 60, "x").Err(); err == nil ||
			!strings.Contains(err.Error(), "READONLY") {
			t.Fatalf("CONC.ACQUIRE on a replica: %v", err)
		}

		aof := strings.ToLower(readAOF(t, dir))
		for _, cmd := range []string{"zadd", "zrem", "pexpireat", "del"} {
			if !strings.Contains(aof, "\r\n"+cmd+"\r\n") {
				t.Fatalf("the AOF has no %s", cmd)
			}
		}
		if strings.Contains(aof, "conc.") {
			t.Fatal("the AOF holds the command, not its effects")
		}
		if err := p.restart(ctx); err != nil {
			t.Fatal(err)
		}
		if got := snapAll(t, p.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after an AOF restart:\n got %v\nwant %v", got, want)
		}
	})
}

// A key holding 20000 lapsed holders: an acquire counts the live ones
// exactly (past 64 lapsed ones, by ZCOUNT), removes 64 lapsed ones, and
// replicates exactly that.
func TestConcManyLapsed(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		p := startFor(t, f, opts{module: true})
		r := startReplica(t, p, false)
		k := "rl:{lapsed}:conc"
		err := p.rdb.Eval(ctx, `
			local t = redis.call('TIME')
			local now = t[1] * 1000000 + t[2]
			for i = 1, 20000 do redis.call('ZADD', KEYS[1], now - 1000000 - i, 'gone-' .. i) end
			local live = now + 600000000
			redis.call('ZADD', KEYS[1], live, 'live')
			redis.call('PEXPIREAT', KEYS[1], math.ceil(live / 1000000) * 1000)
			return 1`, []string{k}).Err()
		if err != nil {
			t.Fatal(err)
		}
		assertReply(t, "peek", mustCall(t, p.rdb, "CONC.PEEK", k, 3), 0, 3, 1, -1, -2)
		for i := range 2 {
			assertReply(t, "acquire", mustCall(t, p.rdb, "CONC.ACQUIRE", k, 3, 60, fmt.Sprint("new-", i)), 0, 3, int64(1-i), -1, -2)
			if n := p.rdb.ZCard(ctx, k).Val(); n != int64(20001+i+1-64*(i+1)) {
				t.Fatalf("after acquire %d: %d members, want %d", i+1, n, 20001+i+1-64*(i+1))
			}
		}
		// Full: refused, and a refusal sweeps nothing either.
		assertReply(t, "full", mustCall(t, p.rdb, "CONC.ACQUIRE", k, 3, 60, "late"), 1, 3, 0, 60, 600)
		if n := p.rdb.ZCard(ctx, k).Val(); n != 20001+2-128 {
			t.Fatalf("after a refusal: %d members", n)
		}
		waitReplicas(t, p, 1)
		if a, b := snap(t, p.rdb, k), snap(t, r.rdb, k); a != b {
			t.Fatal("the replica differs after the sweeps")
		}
	})
}

// COMMAND INFO: CONC.ACQUIRE writes and is denied past maxmemory; CONC.RELEASE
// writes but only frees, so it runs past maxmemory (a slot must always be
// given back); CONC.PEEK is read-only.
func TestConcCommandInfo(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		for name, want := range map[string]struct {
			arity      int64
			flags      string
			denyOOM    bool
			spec, cats string
		}{
			"conc.acquire": {-5, "write", true, "RW", "@write"},
			"conc.release": {-3, "write", false, "RW", "@write"}, // CONC.RELEASE key id [n]
			"conc.peek":    {-3, "readonly", false, "RO", "@read"},
		} {
			info, err := s.rdb.Do(ctx, "COMMAND", "INFO", name).Slice()
			if err != nil || len(info) != 1 {
				t.Fatalf("COMMAND INFO %s: %v %v", name, info, err)
			}
			row := info[0].([]any)
			flags, spec, cats := fmt.Sprint(row[2]), fmt.Sprint(row[8]), fmt.Sprint(row[6])
			if row[1].(int64) != want.arity || !strings.Contains(flags, want.flags) ||
				strings.Contains(flags, "denyoom") != want.denyOOM || !strings.Contains(spec, want.spec) {
				t.Fatalf("%s: arity %v flags %s specs %s", name, row[1], flags, spec)
			}
			if s.aclCategories && (!strings.Contains(cats, want.cats) || !strings.Contains(cats, "@ratelimit")) {
				t.Fatalf("%s: ACL categories %s", name, cats)
			}
			keys, err := s.rdb.Do(ctx, "COMMAND", "GETKEYS", name, "user123", "5", "60", "id").StringSlice()
			if name == "conc.release" {
				keys, err = s.rdb.Do(ctx, "COMMAND", "GETKEYS", name, "user123", "id").StringSlice()
			}
			if err != nil || fmt.Sprint(keys) != "[user123]" {
				t.Fatalf("COMMAND GETKEYS %s: %v %v", name, keys, err)
			}
		}
		d := fmt.Sprint(s.rdb.Do(ctx, "COMMAND", "DOCS", "conc.acquire").Val())
		for _, want := range []string{"limit", "lease", "id", "MS", "RESERVE", "module ratelimit"} {
			if !strings.Contains(d, want) {
				t.Fatalf("COMMAND DOCS conc.acquire lacks %q: %s", want, d)
			}
		}
		k := key(t, "info")
		before := counters(t, s.rdb, "conc_release")
		mustCall(t, s.rdb, "CONC.ACQUIRE", k, 1, 60, "a")
		s.rdb.Do(ctx, "CONC.RELEASE", k, "a")
		s.rdb.Do(ctx, "CONC.RELEASE", k, "a")
		s.rdb.Do(ctx, "CONC.RELEASE", k, "")
		after := counters(t, s.rdb, "conc_release")
		for f, n := range map[string]int64{"calls": 3, "admitted": 1, "refused": 1, "errors": 1} {
			if after[f]-before[f] != n {
				t.Fatalf("INFO conc_release %s went %d -> %d, want +%d", f, before[f], after[f], n)
			}
		}
	})
}

// The worst case, measured: 32 workers take slots with 1 s leases, hold
// them for up to 100 ms, and one acquire in five "crashes" (never
// releases), while a sampler counts the live leases by the server's own
// clock (a script: ZCOUNT above TIME, atomic with the commands) every few
// milliseconds. The count never exceeds the limit.
func TestConcNeverMoreThanLimit(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "conc")
		const limit = 8
		sampler := redis.NewScript(`
			local t = redis.call('TIME')
			return redis.call('ZCOUNT', KEYS[1], '(' .. (t[1] * 1000000 + t[2]), '+inf')`)
		stop := make(chan struct{})
		var most, samples, admitted, crashed atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := sampler.Run(ctx, s.rdb, []string{k}).Int64()
				if err != nil {
					t.Error(err)
					return
				}
				samples.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
		deadline := time.Now().Add(3 * time.Second)
		for w := range 32 {
			wg.Go(func() {
				for i := 0; time.Now().Before(deadline); i++ {
					id := fmt.Sprintf("w%d-%d", w, i)
					r, err := call(s.rdb, "CONC.ACQUIRE", k, limit, 1, id, "MS")
					if err != nil {
						t.Error(err)
						return
					}
					if r[0] == 1 {
						time.Sleep(time.Duration(min(r[3], 50)) * time.Millisecond)
						continue
					}
					admitted.Add(1)
					time.Sleep(time.Duration(i%5*25) * time.Millisecond)
					if (w+i)%5 == 0 {
						crashed.Add(1) // never released: its slot lapses after 1 s
						continue
					}
					if err := s.rdb.Do(ctx, "CONC.RELEASE", k, id).Err(); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		time.Sleep(time.Until(deadline))
		close(stop)
		wg.Wait()
		t.Logf("%s: %d admitted (%d never released), %d samples, at most %d live leases (limit %d)",
			s.name, admitted.Load(), crashed.Load(), samples.Load(), most.Load(), limit)
		if most.Load() > limit || most.Load() < limit/2 || crashed.Load() == 0 {
			t.Fatalf("at most %d live leases with limit %d (%d crashed)", most.Load(), limit, crashed.Load())
		}
	})
}

// Random arguments, most of them hostile, against CONC.* on live keys,
// missing ones and keys of every other type: an error changes nothing, a
// reply has its shape, every key left behind expires, the server stays up.
func TestConcHostileInput(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 13))
		pool := keyPool(t, key(t, ""), otherTypes(s.rdb), 4)
		cmds := []string{"CONC.ACQUIRE", "CONC.RELEASE", "CONC.PEEK"}
		for n := range 1500 {
			k := pool[rng.IntN(len(pool))]
			cmd := cmds[rng.IntN(3)]
			args := []any{cmd, k}
			switch cmd {
			case "CONC.ACQUIRE":
				args = append(args, 1+rng.IntN(4), 1+rng.IntN(3), fmt.Sprint("id-", rng.IntN(6)))
			case "CONC.RELEASE":
				args = append(args, fmt.Sprint("id-", rng.IntN(6)))
			default:
				args = append(args, 1+rng.IntN(4))
			}
			if rng.IntN(3) == 0 {
				args = append(args, "MS")
			}
			if i := 2 + rng.IntN(len(args)-1); rng.IntN(2) == 0 {
				if i < len(args) {
					args[i] = hostileArg(rng)
				} else {
					args = append(args, hostileArg(rng))
				}
			}
			res, _, after, err := hostileCall(t, s.rdb, n, k, args)
			if err != nil {
				continue
			}
			if r, ok := res.([]any); cmd != "CONC.RELEASE" && (!ok || len(r) != 5) {
				t.Fatalf("vector %d %q: reply %v", n, args, res)
			}
			if r, ok := res.(int64); cmd == "CONC.RELEASE" && (!ok || r < 0 || r > 1) {
				t.Fatalf("vector %d %q: reply %v", n, args, res)
			}
			if after.Type != "none" && after.Expire < 0 {
				t.Fatalf("vector %d %q left %s without an expiry: %v", n, args, k, after)
			}
		}
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("server down: %v", err)
		}
	})
}

// Several slots per id, raced: 50 clients each asking for up to 7 slots
// against a limit of 100 are granted 100 in all, never more, and the key
// holds exactly the granted slots; releases of some give back exactly
// those; a replica (without the module) and an AOF reload hold exactly the
// primary's slots, written in batches of 64 members.
func TestConcSlots(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		dir := t.TempDir()
		p := startFor(t, f, opts{module: true, dataDir: dir, args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
		plain := startReplica(t, p, false)
		k := "rl:{slots}:conc"
		var granted atomic.Int64
		var wg sync.WaitGroup
		for c := range 50 {
			wg.Go(func() {
				r, err := call(p.rdb, "CONC.ACQUIRE", k, 100, 600, fmt.Sprint("w", c), "UPTO", 7)
				if err != nil || len(r) != 6 || (r[0] == 0) != (r[5] > 0) {
					t.Errorf("w%d: %v %v", c, r, err)
					return
				}
				granted.Add(r[5])
			})
		}
		wg.Wait()
		if n, _ := p.rdb.ZCard(ctx, k).Result(); granted.Load() != 100 || n != 100 {
			t.Fatalf("granted %d slots, the key holds %d; want 100 and 100", granted.Load(), n)
		}
		// One id takes 150 slots of a fresh key, gives back 70, renews.
		big := "rl:{slots}:big"
		assertReply(t, "up to 150 of 200", mustCall(t, p.rdb, "CONC.ACQUIRE", big, 200, 600, "w", "UPTO", 150), 0, 200, 50, -1, 600, 150)
		assertReply(t, "up to 100 more by v", mustCall(t, p.rdb, "CONC.ACQUIRE", big, 200, 600, "v", "UPTO", 100), 0, 200, 0, -1, 600, 50)
		if n, err := p.rdb.Do(ctx, "CONC.RELEASE", big, "w", 70).Int64(); err != nil || n != 70 {
			t.Fatalf("release 70 of 150: %d %v", n, err)
		}
		assertReply(t, "w renews its 80", mustCall(t, p.rdb, "CONC.ACQUIRE", big, 200, 900, "w", "UPTO", 1), 0, 200, 70, -1, 900, 80)
		if n, _ := p.rdb.ZCount(ctx, big, "-inf", "+inf").Result(); n != 130 {
			t.Fatalf("%d members after the release, want 130", n)
		}
		if n, err := p.rdb.Do(ctx, "CONC.RELEASE", big, "v").Int64(); err != nil || n != 50 {
			t.Fatalf("release all of v's 50: %d %v", n, err)
		}
		waitReplicas(t, p, 1)
		want := snapAll(t, p.rdb, "rl:{slots}:*")
		if len(want) != 2 {
			t.Fatalf("the primary holds %v", want)
		}
		if got := snapAll(t, plain.rdb, "rl:{slots}:*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("replica differs:\nprimary %v\nreplica %v", want, got)
		}
		if err := p.restart(ctx); err != nil {
			t.Fatal(err)
		}
		if got := snapAll(t, p.rdb, "rl:{slots}:*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after an AOF restart:\n got %v\nwant %v", got, want)
		}
	})
}
