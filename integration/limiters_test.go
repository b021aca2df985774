package integration

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// limiter describes one algorithm's commands for the tests every algorithm
// must pass.
type limiter struct {
	name string
	cmd  string // the consuming command
	peek string
	// params returns the arguments after the key for a limiter that admits
	// burst unit requests at once from a fresh key and then one per
	// period seconds (for the windows: burst per window of period seconds).
	params func(burst, period int) []any
	args   []string // the positional arguments' names
	cost   string   // the optional cost argument's name
	zset   bool     // the state is a sorted set, not a string
	// notState is in the error for a string key that is not this state.
	notState string
	// step is how much field 5 grows, in ms, between two unit calls at one
	// instant: 1000 for the buckets at one per second, 0 for the windows.
	step int64
}

// slow is a period long enough that nothing refills and no window ends
// while a test runs (115 days), and short enough that a burst of 100 of
// them fits 64-bit nanoseconds.
const slow = 10_000_000

func bucketParams(b, p int) []any { return []any{b - 1, 1, p} }
func windowParams(b, p int) []any { return []any{b, p} }

var limiters = []limiter{
	{name: "gcra", cmd: "GCRA.THROTTLE", peek: "GCRA.PEEK", params: bucketParams,
		args: []string{"max_burst", "count", "period"}, cost: "quantity", notState: "not GCRA state", step: 1000},
	{name: "cl", cmd: "CL.THROTTLE", peek: "GCRA.PEEK", params: bucketParams,
		args: []string{"max_burst", "count", "period"}, cost: "quantity", notState: "not GCRA state", step: 1000},
	{name: "tb", cmd: "TB.TAKE", peek: "TB.PEEK", params: func(b, p int) []any { return []any{b, 1, p} },
		args: []string{"capacity", "refill_tokens", "refill_period"}, cost: "tokens", notState: "not token bucket state", step: 1000},
	// A shaper of capacity c lets one go at once and c wait.
	{name: "lb", cmd: "LB.ENQUEUE", peek: "LB.PEEK", params: bucketParams,
		args: []string{"capacity", "leak_count", "leak_period"}, cost: "quantity", notState: "not shaper state", step: 1000},
	{name: "sw", cmd: "SW.HIT", peek: "SW.PEEK", params: windowParams,
		args: []string{"limit", "window"}, cost: "cost", notState: "not sliding window state"},
	{name: "fw", cmd: "FW.HIT", peek: "FW.PEEK", params: windowParams,
		args: []string{"limit", "window"}, cost: "cost", notState: "not fixed window state"},
	{name: "sl", cmd: "SL.HIT", peek: "SL.PEEK", params: windowParams,
		args: []string{"limit", "window"}, cost: "cost", zset: true},
}

// eachLimiter runs fn for every algorithm on every server, in parallel
// across servers.
func eachLimiter(t *testing.T, fn func(t *testing.T, s *server, l limiter)) {
	each(t, func(t *testing.T, s *server) {
		for _, l := range limiters {
			t.Run(l.name, func(t *testing.T) { fn(t, s, l) })
		}
	})
}

func (l limiter) call(t *testing.T, c *redis.Client, cmd, key string, burst, period int, extra ...any) []int64 {
	t.Helper()
	return mustCall(t, c, cmd, append(append([]any{key}, l.params(burst, period)...), extra...)...)
}

// A refused call writes nothing: same value, same expiry, and a WATCH on
// the key survives it (and a peek); an admitted call breaks it.
func TestRefusedChangesNothing(t *testing.T) {
	eachLimiter(t, func(t *testing.T, s *server, l limiter) {
		k := key(t, "refused")
		for i := range 3 {
			if r := l.call(t, s.rdb, l.cmd, k, 3, slow); r[0] != 0 {
				t.Fatalf("call %d refused: %v", i+1, r)
			}
		}
		before := snap(t, s.rdb, k)
		if r := l.call(t, s.rdb, l.cmd, k, 3, slow); r[0] != 1 || r[3] < 1 {
			t.Fatalf("4th call: %v, want refused with a retry", r)
		}
		if after := snap(t, s.rdb, k); after != before {
			t.Fatalf("refused call changed the key: %v -> %v", before, after)
		}

		watched := func(k string, during func()) error {
			return s.rdb.Watch(ctx, func(tx *redis.Tx) error {
				during()
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Set(ctx, k+":other", "x", time.Minute)
					return nil
				})
				return err
			}, k)
		}
		if err := watched(k, func() { l.call(t, s.rdb, l.cmd, k, 3, slow) }); err != nil {
			t.Fatalf("a refused call broke WATCH: %v", err)
		}
		if err := watched(k, func() { l.call(t, s.rdb, l.peek, k, 3, slow) }); err != nil {
			t.Fatalf("a peek broke WATCH: %v", err)
		}
		k2 := key(t, "admitted")
		if err := watched(k2, func() { l.call(t, s.rdb, l.cmd, k2, 3, slow) }); err != redis.TxFailedErr {
			t.Fatalf("an admitted call did not break WATCH: %v", err)
		}
	})
}

// PEEK replies what the consuming command would and changes nothing; it
// runs in EVAL_RO, where the consuming command does not.
func TestPeekChangesNothing(t *testing.T) {
	eachLimiter(t, func(t *testing.T, s *server, l limiter) {
		k := key(t, "peek")
		fresh := l.call(t, s.rdb, l.peek, k, 5, slow)
		if n := s.rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatal("PEEK created the key")
		}
		// The two calls run at two instants: a window's reset_after (whole
		// seconds, rounded up) may have crossed a second between them, never
		// grown.
		got := l.call(t, s.rdb, l.cmd, k, 5, slow)
		assertReply(t, "fresh peek vs consume", got[:4], fresh[:4]...)
		assertBetween(t, "fresh peek vs consume: reset_after", got[4], fresh[4]-2, fresh[4])

		before := snap(t, s.rdb, k)
		// One transaction sees one state: the peeks reply what the
		// consuming call then does.
		cmds, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range []string{l.peek, l.peek, l.cmd} {
				p.Do(ctx, append(append([]any{c, k}, l.params(5, slow)...), 2)...)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var r [3][]int64
		for i, c := range cmds {
			r[i], _ = c.(*redis.Cmd).Int64Slice()
		}
		assertReply(t, "peek twice", r[1], r[0]...)
		assertReply(t, "peek vs consume", r[2], r[0]...)
		if after := snap(t, s.rdb, k); after == before {
			t.Fatalf("the consuming call in the transaction did not write")
		}

		before = snap(t, s.rdb, k)
		script := fmt.Sprintf("return redis.call('%s', KEYS[1], unpack(ARGV))", l.peek)
		argv := l.params(5, slow)
		if _, err := s.rdb.Do(ctx, append([]any{"EVAL_RO", script, 1, k}, argv...)...).Int64Slice(); err != nil {
			t.Fatalf("PEEK in EVAL_RO: %v", err)
		}
		script = fmt.Sprintf("return redis.call('%s', KEYS[1], unpack(ARGV))", l.cmd)
		_, err = s.rdb.Do(ctx, append([]any{"EVAL_RO", script, 1, k}, argv...)...).Result()
		assertErr(t, "consuming command in EVAL_RO", err, "ERR")
		if after := snap(t, s.rdb, k); after != before {
			t.Fatalf("EVAL_RO changed the key: %v -> %v", before, after)
		}
	})
}

// Every argument that does not parse is an ERR naming it; nothing is
// created or changed, and the server stays up.
func TestBadArgumentsEveryCommand(t *testing.T) {
	eachLimiter(t, func(t *testing.T, s *server, l limiter) {
		existing := key(t, "existing")
		l.call(t, s.rdb, l.cmd, existing, 5, slow)
		before := snap(t, s.rdb, existing)
		good := l.params(5, slow)
		var cases [][]any
		var want [][]string
		for i, name := range l.args {
			for _, bad := range []string{"x", "1.5", "1e3", " 1", "0x10", "", "-0.0", "99999999999999999999", strings.Repeat("7", 400), "\xff"} {
				args := append([]any{}, good...)
				args[i] = bad
				cases = append(cases, args)
				want = append(want, []string{"ERR " + name + " must be"})
			}
		}
		for _, bad := range []string{"1.5", "x", "-9223372036854775809"} {
			cases = append(cases, append(append([]any{}, good...), bad))
			want = append(want, []string{"ERR " + l.cost + " must be"})
		}
		cases = append(cases, append(append([]any{}, good...), 1, "MSX"), append(append([]any{}, good...), "MS", 1))
		want = append(want, []string{"unknown option", "MSX"}, []string{"unknown option", "1"})

		// 17 arguments with the command name: one more than any command takes.
		tooMany := append(append([]any{existing}, good...), 1)
		for len(tooMany) < 16 {
			tooMany = append(tooMany, "MS")
		}
		for _, cmd := range []string{l.cmd, l.peek} {
			for i, args := range cases {
				k := key(t, "bad")
				_, err := call(s.rdb, cmd, append([]any{k}, args...)...)
				assertErr(t, fmt.Sprintf("%s %q", cmd, args), err, "ERR ", want[i]...)
				if s.rdb.Exists(ctx, k).Val() != 0 {
					t.Fatalf("%s %q left a key behind", cmd, args)
				}
				_, err = call(s.rdb, cmd, append([]any{existing}, args...)...)
				assertErr(t, fmt.Sprintf("%s %q on a live key", cmd, args), err, "ERR ", want[i]...)
			}
			for _, args := range [][]any{{}, {existing}, append([]any{existing}, good[:len(good)-1]...), tooMany} {
				_, err := call(s.rdb, cmd, args...)
				assertErr(t, fmt.Sprintf("%s with %d arguments", cmd, len(args)), err, "ERR", "wrong number of arguments")
			}
		}
		if after := snap(t, s.rdb, existing); after != before {
			t.Fatalf("bad arguments changed a live key: %v -> %v", before, after)
		}
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// otherTypes creates a key of each type other than a string.
func otherTypes(c *redis.Client) map[string]func(k string) error {
	return map[string]func(k string) error{
		"list":   func(k string) error { return c.RPush(ctx, k, "a").Err() },
		"hash":   func(k string) error { return c.HSet(ctx, k, "f", "1").Err() },
		"set":    func(k string) error { return c.SAdd(ctx, k, "a").Err() },
		"zset":   func(k string) error { return c.ZAdd(ctx, k, redis.Z{Score: 1, Member: "a"}).Err() },
		"stream": func(k string) error { return c.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []any{"f", "v"}}).Err() },
	}
}

// Keys of other types are WRONGTYPE; strings that are not the algorithm's
// state are an ERR. Neither is overwritten, and the server stays up.
func TestForeignKeys(t *testing.T) {
	eachLimiter(t, func(t *testing.T, s *server, l limiter) {
		setups := otherTypes(s.rdb)
		if l.zset {
			setups["string"] = func(k string) error { return s.rdb.Set(ctx, k, "12", 0).Err() }
			delete(setups, "zset")
		}
		for typ, setup := range setups {
			k := key(t, typ)
			if err := setup(k); err != nil {
				t.Fatal(err)
			}
			before := snap(t, s.rdb, k)
			for _, cmd := range []string{l.cmd, l.peek} {
				_, err := call(s.rdb, cmd, append([]any{k}, l.params(3, 60)...)...)
				assertErr(t, cmd+" on a "+typ, err, "WRONGTYPE")
			}
			if after := snap(t, s.rdb, k); after != before {
				t.Fatalf("%s changed: %v -> %v", typ, before, after)
			}
		}
		if l.zset {
			return
		}
		for _, v := range []string{"hello", "", "-5", "+5", "1.5", " 12", "99999999999999999999", "12abc", "\x00"} {
			k := key(t, "string")
			s.rdb.Set(ctx, k, v, time.Hour)
			before := snap(t, s.rdb, k)
			for _, cmd := range []string{l.cmd, l.peek} {
				_, err := call(s.rdb, cmd, append([]any{k}, l.params(3, 60)...)...)
				assertErr(t, fmt.Sprintf("%s on %q", cmd, v), err, "ERR ", l.notState)
			}
			if after := snap(t, s.rdb, k); after != before {
				t.Fatalf("string %q changed: %v -> %v", v, before, after)
			}
		}
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// 64 clients racing one key admit exactly what the algorithm allows: a
// burst of 100 with no refill to speak of (one per hour).
func TestRace(t *testing.T) {
	eachLimiter(t, func(t *testing.T, s *server, l limiter) {
		k := key(t, "race")
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for range 5 {
					r, err := call(s.rdb, l.cmd, append([]any{k}, l.params(100, slow)...)...)
					if err != nil {
						t.Error(err)
						return
					}
					if r[0] == 0 {
						admitted.Add(1)
					} else {
						refused.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if admitted.Load() != 100 || refused.Load() != 220 {
			t.Fatalf("admitted %d refused %d, want 100 and 220", admitted.Load(), refused.Load())
		}
	})
}

// Inside MULTI/EXEC and a script the commands work, and on servers with a
// cached command clock two calls see one instant: at one per second, the
// second call's time field is exactly one second more than the first's.
func TestOneInstantPerTransaction(t *testing.T) {
	eachLimiter(t, func(t *testing.T, s *server, l limiter) {
		check := func(what string, a, b []int64) {
			t.Helper()
			if a[0] != 0 || b[0] != 0 || b[2] != a[2]-1 {
				t.Fatalf("%s: %v then %v", what, a, b)
			}
			if s.cachedClock && b[4]-a[4] != l.step {
				t.Fatalf("%s saw two instants: %v then %v", what, a, b)
			}
			assertBetween(t, what+": second time field minus first", b[4]-a[4], l.step-50, l.step)
		}
		period := 1 // one per second: field 5 grows by exactly 1000 ms
		if l.step == 0 {
			period = slow // the windows: field 5 stays, whatever the window
		}
		k := key(t, "multi")
		cmds, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for range 2 {
				p.Do(ctx, append(append([]any{l.cmd, k}, l.params(10, period)...), 1, "MS")...)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := cmds[0].(*redis.Cmd).Int64Slice()
		b, _ := cmds[1].(*redis.Cmd).Int64Slice()
		check("MULTI", a, b)

		k = key(t, "eval")
		script := fmt.Sprintf(`local a = redis.call('%[1]s', KEYS[1], unpack(ARGV))
local b = redis.call('%[1]s', KEYS[1], unpack(ARGV))
return {a, b}`, l.cmd)
		res, err := s.rdb.Eval(ctx, script, []string{k}, append(l.params(10, period), 1, "MS")...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		ints := func(v any) []int64 {
			var out []int64
			for _, x := range v.([]any) {
				out = append(out, x.(int64))
			}
			return out
		}
		check("EVAL", ints(res[0]), ints(res[1]))
	})
}

// workload drives every algorithm over keys with prefix: admitted calls,
// refusals, refunds (one back to full, which deletes the key), charges
// past the limit. Key i of a
// limiter gets i % 6 calls on a burst of 3, with period slow + i.
func workload(t *testing.T, c *redis.Client, prefix string) {
	t.Helper()
	for _, l := range limiters {
		for i := range 8 {
			k := fmt.Sprintf("%s%s:%d", prefix, l.name, i)
			for range i % 6 {
				l.call(t, c, l.cmd, k, 3, slow+i)
			}
		}
	}
	mustCall(t, c, "GCRA.THROTTLE", prefix+"gcra:4", 2, 1, slow+4, -1)
	mustCall(t, c, "GCRA.THROTTLE", prefix+"gcra:1", 2, 1, slow+1, -5)
	mustCall(t, c, "TB.TAKE", prefix+"tb:4", 3, 1, slow+4, -2)
	mustCall(t, c, "TB.TAKE", prefix+"tb:2", 3, 1, slow+2, -5)
	// Charges past the limit (DEBT): schedules stored in debt, counts and
	// logs over their limits.
	mustCall(t, c, "GCRA.THROTTLE", prefix+"gcra:debt", 2, 1, slow, 9, "DEBT")
	mustCall(t, c, "TB.TAKE", prefix+"tb:debt", 3, 1, slow, 9, "DEBT")
	mustCall(t, c, "TB.TAKE", prefix+"tb:debt", 3, 1, slow, -2)
	mustCall(t, c, "SW.HIT", prefix+"sw:debt", 3, slow, 9, "DEBT")
	mustCall(t, c, "FW.HIT", prefix+"fw:debt", 3, slow, 9, "DEBT")
	mustCall(t, c, "SL.HIT", prefix+"sl:debt", 3, slow, 9, "DEBT")
	// Returns (a negative cost) on the windows: part of a count, a log's
	// newest entries (ZREMRANGEBYRANK), and all of one (the key deleted).
	for _, cmd := range []string{"SW.HIT", "FW.HIT", "SL.HIT"} {
		name := strings.ToLower(cmd[:2])
		mustCall(t, c, cmd, prefix+name+":ret", 5, slow, 4)
		mustCall(t, c, cmd, prefix+name+":ret", 5, slow, -3)
		mustCall(t, c, cmd, prefix+name+":gone", 5, slow, 2)
		mustCall(t, c, cmd, prefix+name+":gone", 5, slow, -7)
	}
}

// Replicas hold the effect: one without the module ends with the same
// values and the same absolute expiries; refused calls, peeks and cost 0
// replicate nothing; peeks run on a read-only replica.
func TestReplication(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		p := startFor(t, f, opts{module: true})
		bare := startReplica(t, p, false)
		withModule := startReplica(t, p, true)

		prefix := "rl:{repl}:"
		workload(t, p.rdb, prefix)
		waitReplicas(t, p, 2)
		want := snapAll(t, p.rdb, prefix+"*")
		if len(want) < 35 {
			t.Fatalf("only %d keys on the primary", len(want))
		}
		for _, gone := range []string{"gcra:1", "tb:2", "sl:0", "sw:gone", "fw:gone", "sl:gone"} {
			if _, ok := want[prefix+gone]; ok {
				t.Fatalf("a refund to full left %s", gone)
			}
		}
		if v := want[prefix+"fw:ret"].Value; v != "1" {
			t.Fatalf("fw:ret holds %q after 4 taken and 3 given back", v)
		}
		for _, owed := range []string{"gcra:debt", "tb:debt"} {
			if v := want[prefix+owed].Value; !strings.HasSuffix(v, ":debt") {
				t.Fatalf("%s holds %q, not a state in debt", owed, v)
			}
		}
		for _, rep := range []*server{bare, withModule} {
			if got := snapAll(t, rep.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("replica differs:\nprimary %v\nreplica %v", want, got)
			}
		}

		// The primary pings its replicas every few seconds, which moves the
		// offset too: a call that replicates moves it every time, so one
		// quiet attempt out of three shows the calls replicate nothing.
		for _, l := range limiters {
			k := prefix + l.name + ":5" // 5 calls on a burst of 3: exhausted
			var moved []int64
			for range 3 {
				offset := replOffset(t, p.rdb)
				if r := l.call(t, p.rdb, l.cmd, k, 3, slow+5); r[0] != 1 {
					t.Fatalf("%s: expected a refusal, got %v", l.name, r)
				}
				l.call(t, p.rdb, l.peek, k, 3, slow+5)
				l.call(t, p.rdb, l.cmd, k, 3, slow+5, 0)
				moved = append(moved, replOffset(t, p.rdb)-offset)
				if moved[len(moved)-1] == 0 {
					break
				}
			}
			if moved[len(moved)-1] != 0 {
				t.Fatalf("%s: refused call / peek / cost 0 moved the replication offset by %v", l.name, moved)
			}

			// On the replica with the module, PEEK answers like the primary's.
			k = prefix + l.name + ":3"
			pr := l.call(t, p.rdb, l.peek, k, 3, slow+3)
			rr := l.call(t, withModule.rdb, l.peek, k, 3, slow+3)
			// The replica's peek runs after the primary's, perhaps across
			// a whole second: retry_after may be one less there.
			assertReply(t, l.name+" peek on a replica", rr, pr[0], pr[1], pr[2], -2, -2)
			assertBetween(t, l.name+" retry_after on a replica", rr[3], pr[3]-1, pr[3])
			_, err := call(withModule.rdb, l.cmd, append([]any{k}, l.params(3, slow+3)...)...)
			assertErr(t, l.cmd+" on a replica", err, "READONLY")
		}
	})
}

// An AOF restart keeps every key, and the AOF loads on a server without
// the module, since it holds SET ... PXAT and DEL, never module commands.
func TestAOF(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		dir := t.TempDir()
		s := startFor(t, f, opts{module: true, dataDir: dir, args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
		prefix := "rl:{aof}:"
		workload(t, s.rdb, prefix)
		want := snapAll(t, s.rdb, prefix+"*")
		var peeks [][]int64
		for _, l := range limiters {
			peeks = append(peeks, l.call(t, s.rdb, l.peek, prefix+l.name+":4", 3, slow+4))
		}
		if err := s.restart(ctx); err != nil {
			t.Fatal(err)
		}
		if got := snapAll(t, s.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after restart:\n got %v\nwant %v", got, want)
		}
		for i, l := range limiters {
			r := l.call(t, s.rdb, l.peek, prefix+l.name+":4", 3, slow+4)
			assertReply(t, l.name+" peek after restart", r, peeks[i][0], peeks[i][1], peeks[i][2], -2, -2)
		}
		s.stop(ctx)

		bare := startFor(t, f, opts{dataDir: dir, args: []string{"--appendonly", "yes"}})
		if got := snapAll(t, bare.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("AOF on a server without the module:\n got %v\nwant %v", got, want)
		}
	})
}
