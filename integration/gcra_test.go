package integration

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A fresh key's reply depends on no clock: these are exact.
func TestGCRAReplyFieldsFreshKey(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		for _, c := range []struct {
			args   []any
			want   []int64
			writes bool // THROTTLE stores state (PEEK never does)
		}{
			// redis-cell's README: CL.THROTTLE user123 15 30 60 -> 0 16 15 -1 2.
			{[]any{15, 30, 60}, []int64{0, 16, 15, -1, 2}, true},
			{[]any{15, 30, 60, 1, "MS"}, []int64{0, 16, 15, -1, 2000}, true},
			{[]any{15, 30, 60, "ms"}, []int64{0, 16, 15, -1, 2000}, true},
			{[]any{15, 30, 60, 5}, []int64{0, 16, 11, -1, 10}, true},
			// T = 10/3 s: 3.333333333 s rounds up to 4 (ms part > 0), 3334 ms with MS.
			{[]any{0, 3, 10}, []int64{0, 1, 0, -1, 4}, true},
			{[]any{0, 3, 10, "MS"}, []int64{0, 1, 0, -1, 3334}, true},
			// T = 1/3 s = 333333333 ns, twice: 666.666666 ms -> 1 s, 667 ms.
			{[]any{9, 3, 1, 2}, []int64{0, 10, 8, -1, 1}, true},
			{[]any{9, 3, 1, 2, "MS"}, []int64{0, 10, 8, -1, 667}, true},
			// A cost above the limit is refused with retry -1, and writes nothing.
			{[]any{4, 1, 1, 6}, []int64{1, 5, 5, -1, 0}, false},
			// quantity 0 reports; a refund on a full limiter stays full.
			{[]any{4, 1, 1, 0}, []int64{0, 5, 5, -1, 0}, false},
			{[]any{4, 1, 1, -3}, []int64{0, 5, 5, -1, 0}, false},
			// The whole burst at once.
			{[]any{4, 1, 1, 5, "MS"}, []int64{0, 5, 0, -1, 5000}, true},
		} {
			for _, cmd := range []string{"GCRA.THROTTLE", "CL.THROTTLE", "GCRA.PEEK"} {
				k := key(t, "fresh")
				got := mustCall(t, s.rdb, cmd, append([]any{k}, c.args...)...)
				assertReply(t, fmt.Sprint(cmd, c.args), got, c.want...)
				writes := c.writes && cmd != "GCRA.PEEK"
				if exists := s.rdb.Exists(ctx, k).Val(); (exists == 1) != writes {
					t.Fatalf("%s %v: key exists=%d, want written=%v", cmd, c.args, exists, writes)
				}
			}
		}
	})
}

// redis-cell's own published table (max_burst 4, 1 per second), the part of
// it that runs at one instant, then refills measured against the server's
// clock with MS.
func TestGCRASequence(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "seq")
		assertReply(t, "cost 6 > limit 5", mustCall(t, s.rdb, "GCRA.THROTTLE", k, 4, 1, 1, 6), 1, 5, 5, -1, 0)
		for i := int64(1); i <= 5; i++ {
			// reset = i s minus the few ms elapsed: redis-cell's rounding
			// gives i whether 0 or 999 ms are left over.
			assertReply(t, fmt.Sprint("call ", i), mustCall(t, s.rdb, "GCRA.THROTTLE", k, 4, 1, 1), 0, 5, 5-i, -1, i)
		}
		assertReply(t, "6th call", mustCall(t, s.rdb, "GCRA.THROTTLE", k, 4, 1, 1), 1, 5, 0, 1, 5)
		r := mustCall(t, s.rdb, "GCRA.THROTTLE", k, 4, 1, 1, 1, "MS")
		assertReply(t, "7th call, MS", r, 1, 5, 0, -2, -2)
		assertBetween(t, "retry_after ms", r[3], 500, 1000)
		assertBetween(t, "reset_after ms", r[4], 4500, 5000)

		// The key expires when the limiter is full again: at TAT, rounded
		// up to the millisecond, absolute.
		sn := snap(t, s.rdb, k)
		tat, err := strconv.ParseInt(sn.Value, 10, 64)
		if err != nil {
			t.Fatalf("state %q is not a decimal TAT", sn.Value)
		}
		if want := (tat + 999_999) / 1_000_000; sn.Expire != want {
			t.Fatalf("PEXPIRETIME %d, want ceil(TAT/1e6) = %d", sn.Expire, want)
		}

		// A refill: after 1.1 s one more is admitted.
		time.Sleep(1100 * time.Millisecond)
		r = mustCall(t, s.rdb, "GCRA.THROTTLE", k, 4, 1, 1, 1, "MS")
		assertReply(t, "after 1.1 s", r, 0, 5, 0, -1, -2)
		assertBetween(t, "reset_after ms", r[4], 4500, 5000)
	})
}

func TestGCRARefund(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "refund")
		assertReply(t, "take 3", mustCall(t, s.rdb, "GCRA.THROTTLE", k, 4, 1, 60, 3), 0, 5, 2, -1, 180)
		assertReply(t, "give 1", mustCall(t, s.rdb, "GCRA.THROTTLE", k, 4, 1, 60, -1), 0, 5, 3, -1, 120)
		if s.rdb.Exists(ctx, k).Val() != 1 {
			t.Fatal("partial refund deleted the key")
		}
		// Giving back more than was taken stops at full, and a full
		// limiter has no key.
		assertReply(t, "give 10", mustCall(t, s.rdb, "GCRA.THROTTLE", k, 4, 1, 60, -10), 0, 5, 5, -1, 0)
		if sn := snap(t, s.rdb, k); sn.Type != "none" {
			t.Fatalf("a full limiter still has a key: %v", sn)
		}
	})
}

// A refused call writes nothing: same value, same expiry, nothing
// replicated, and a WATCH on the key survives it.
func TestGCRARefusedChangesNothing(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "refused")
		for range 3 {
			mustCall(t, s.rdb, "GCRA.THROTTLE", k, 2, 1, 3600)
		}
		before := snap(t, s.rdb, k)
		assertReply(t, "refused", mustCall(t, s.rdb, "GCRA.THROTTLE", k, 2, 1, 3600), 1, 3, 0, -2, -2)
		if after := snap(t, s.rdb, k); after != before {
			t.Fatalf("refused call changed the key: %v -> %v", before, after)
		}

		watchSurvives := func(during func()) error {
			return s.rdb.Watch(ctx, func(tx *redis.Tx) error {
				during()
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Set(ctx, k+":other", "x", time.Minute)
					return nil
				})
				return err
			}, k)
		}
		if err := watchSurvives(func() { mustCall(t, s.rdb, "GCRA.THROTTLE", k, 2, 1, 3600) }); err != nil {
			t.Fatalf("a refused call broke WATCH: %v", err)
		}
		if err := watchSurvives(func() { mustCall(t, s.rdb, "GCRA.PEEK", k, 2, 1, 3600) }); err != nil {
			t.Fatalf("a peek broke WATCH: %v", err)
		}
		// An admitted call is a write: it must break WATCH.
		k2 := key(t, "admitted")
		err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			mustCall(t, s.rdb, "GCRA.THROTTLE", k2, 2, 1, 3600)
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, k2+":other", "x", time.Minute)
				return nil
			})
			return err
		}, k2)
		if err != redis.TxFailedErr {
			t.Fatalf("an admitted call did not break WATCH: %v", err)
		}
	})
}

func TestGCRAPeek(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "peek")
		assertReply(t, "peek fresh", mustCall(t, s.rdb, "GCRA.PEEK", k, 15, 30, 60), 0, 16, 15, -1, 2)
		if n := s.rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatal("PEEK created the key")
		}
		mustCall(t, s.rdb, "GCRA.THROTTLE", k, 15, 30, 60, 3)
		before := snap(t, s.rdb, k)
		// In one transaction PEEK and THROTTLE see one state; PEEK must
		// reply what THROTTLE then does.
		cmds, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "GCRA.PEEK", k, 15, 30, 60, 2)
			p.Do(ctx, "GCRA.PEEK", k, 15, 30, 60, 2)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		p1, _ := cmds[0].(*redis.Cmd).Int64Slice()
		p2, _ := cmds[1].(*redis.Cmd).Int64Slice()
		if after := snap(t, s.rdb, k); after != before {
			t.Fatalf("PEEK changed the key: %v -> %v", before, after)
		}
		th := mustCall(t, s.rdb, "GCRA.THROTTLE", k, 15, 30, 60, 2)
		assertReply(t, "peek vs throttle", p1, th...)
		assertReply(t, "peek twice", p2, p1...)
		assertReply(t, "throttle after 3", th, 0, 16, 11, -1, 10)

		// PEEK runs where only reads are allowed: EVAL_RO. THROTTLE does not.
		r, err := s.rdb.Do(ctx, "EVAL_RO", "return redis.call('GCRA.PEEK', KEYS[1], 15, 30, 60)", 1, k).Int64Slice()
		if err != nil {
			t.Fatalf("PEEK in EVAL_RO: %v", err)
		}
		assertReply(t, "EVAL_RO peek", r, 0, 16, 10, -1, 12)
		_, err = s.rdb.Do(ctx, "EVAL_RO", "return redis.call('GCRA.THROTTLE', KEYS[1], 15, 30, 60)", 1, k).Result()
		assertErr(t, "THROTTLE in EVAL_RO", err, "ERR", "")
	})
}

// Every bad argument: an ERR naming the argument (and its range), no key
// created, an existing key unchanged.
func TestGCRABadArguments(t *testing.T) {
	long := strings.Repeat("9", 400)
	cases := []struct {
		args []any
		want []string
	}{
		{[]any{"x", 1, 1}, []string{"max_burst", "from 0 to 9223372036854775806"}},
		{[]any{-1, 1, 1}, []string{"max_burst", "from 0"}},
		{[]any{"1.5", 1, 1}, []string{"max_burst"}},
		{[]any{"1e3", 1, 1}, []string{"max_burst"}},
		{[]any{" 1", 1, 1}, []string{"max_burst"}},
		{[]any{"0x10", 1, 1}, []string{"max_burst"}},
		{[]any{"", 1, 1}, []string{"max_burst"}},
		{[]any{"9223372036854775807", 1, 1}, []string{"max_burst"}},
		{[]any{long, 1, 1}, []string{"max_burst"}},
		{[]any{1, 0, 1}, []string{"count", "from 1 to 9223372036854775807"}},
		{[]any{1, -5, 1}, []string{"count"}},
		{[]any{1, "1_000", 1}, []string{"count"}},
		{[]any{1, 1, 0}, []string{"period", "whole seconds from 1 to 9223372036"}},
		{[]any{1, 1, "9223372037"}, []string{"period"}},
		{[]any{1, 1, "1.0"}, []string{"period"}},
		{[]any{1, 1, 1, "1.5"}, []string{"quantity", "from -9223372036854775808 to 9223372036854775807"}},
		{[]any{1, 1, 1, "9223372036854775808"}, []string{"quantity"}},
		{[]any{1, 1, 1, "\xff\xfe"}, []string{"quantity"}},
		{[]any{1, 1, 1, 1, "XS"}, []string{"unknown option", "XS", "MS"}},
		{[]any{1, 1, 1, "MS", 5}, []string{"unknown option", "5"}},
		{[]any{1, 1, 1, 1, ""}, []string{"unknown option"}},
		// Combinations: an interval under 1 ns, and 64-bit overflow.
		{[]any{1, 2_000_000_000, 1}, []string{"count", "period"}},
		{[]any{"9223372036854775806", 1, 1}, []string{"overflow"}},
		{[]any{10, 1, "9223372036"}, []string{"overflow"}},
		{[]any{1, 1, "4611686018", 3}, []string{"overflow"}},
	}
	each(t, func(t *testing.T, s *server) {
		existing := key(t, "existing")
		mustCall(t, s.rdb, "GCRA.THROTTLE", existing, 5, 1, 3600, 2)
		before := snap(t, s.rdb, existing)
		for _, c := range cases {
			for _, cmd := range []string{"GCRA.THROTTLE", "CL.THROTTLE", "GCRA.PEEK"} {
				k := key(t, "bad")
				_, err := call(s.rdb, cmd, append([]any{k}, c.args...)...)
				assertErr(t, fmt.Sprintf("%s %q", cmd, c.args), err, "ERR ", c.want...)
				if s.rdb.Exists(ctx, k).Val() != 0 {
					t.Fatalf("%s %q left a key behind", cmd, c.args)
				}
				_, err = call(s.rdb, cmd, append([]any{existing}, c.args...)...)
				assertErr(t, fmt.Sprintf("%s %q on a live key", cmd, c.args), err, "ERR ", c.want...)
			}
		}
		if after := snap(t, s.rdb, existing); after != before {
			t.Fatalf("bad arguments changed a live key: %v -> %v", before, after)
		}
		// Wrong numbers of arguments.
		for _, args := range [][]any{{}, {existing}, {existing, 1, 1}, {existing, 1, 1, 1, 1, "MS", "MS", "MS", "MS", "MS", "MS", "MS", "MS", "MS", "MS", "MS"}} {
			_, err := call(s.rdb, "GCRA.THROTTLE", args...)
			assertErr(t, fmt.Sprint("arity ", len(args)), err, "ERR", "wrong number of arguments")
		}
		if after := snap(t, s.rdb, existing); after != before {
			t.Fatalf("wrong arity changed a live key: %v -> %v", before, after)
		}
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// Keys of other types are WRONGTYPE; strings that are not GCRA state are
// an ERR. Neither is overwritten, and the server stays up.
func TestGCRAForeignKeys(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		setups := map[string]func(k string) error{
			"list": func(k string) error { return s.rdb.RPush(ctx, k, "a").Err() },
			"hash": func(k string) error { return s.rdb.HSet(ctx, k, "f", "1").Err() },
			"set":  func(k string) error { return s.rdb.SAdd(ctx, k, "a").Err() },
			"zset": func(k string) error { return s.rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: "a"}).Err() },
			"stream": func(k string) error {
				return s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []any{"f", "v"}}).Err()
			},
		}
		for typ, setup := range setups {
			k := key(t, typ)
			if err := setup(k); err != nil {
				t.Fatal(err)
			}
			before := snap(t, s.rdb, k)
			for _, cmd := range []string{"GCRA.THROTTLE", "GCRA.PEEK", "CL.THROTTLE"} {
				_, err := call(s.rdb, cmd, k, 1, 1, 1)
				assertErr(t, cmd+" on a "+typ, err, "WRONGTYPE")
			}
			if after := snap(t, s.rdb, k); after != before {
				t.Fatalf("%s changed: %v -> %v", typ, before, after)
			}
		}
		for _, v := range []string{"hello", "", "-5", "+5", "1.5", " 12", "99999999999999999999", "12abc", "\x00"} {
			k := key(t, "string")
			s.rdb.Set(ctx, k, v, time.Hour)
			before := snap(t, s.rdb, k)
			for _, cmd := range []string{"GCRA.THROTTLE", "GCRA.PEEK", "CL.THROTTLE"} {
				_, err := call(s.rdb, cmd, k, 1, 1, 1)
				assertErr(t, fmt.Sprintf("%s on %q", cmd, v), err, "ERR ", "not GCRA state")
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

// A key written by redis-cell's format (decimal nanoseconds) is read as-is.
func TestGCRAReadsRedisCellState(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "cell")
		tm, err := s.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		// TAT 10 s ahead of a whole millisecond (Redis 7.0's module clock
		// has milliseconds), with T = 1 s and limit 15: 5 remaining, full
		// in 10 s; taking one leaves 4.
		tat := tm.UnixMilli()*int64(time.Millisecond) + 10*int64(time.Second)
		s.rdb.Set(ctx, k, strconv.FormatInt(tat, 10), 0)
		assertReply(t, "peek 0", mustCall(t, s.rdb, "GCRA.PEEK", k, 14, 60, 60, 0), 0, 15, 5, -1, 10)
		assertReply(t, "peek 1", mustCall(t, s.rdb, "GCRA.PEEK", k, 14, 60, 60), 0, 15, 4, -1, 11)
		assertReply(t, "throttle", mustCall(t, s.rdb, "GCRA.THROTTLE", k, 14, 60, 60), 0, 15, 4, -1, 11)
		if v := s.rdb.Get(ctx, k).Val(); v != strconv.FormatInt(tat+int64(time.Second), 10) {
			t.Fatalf("state %s, want %d", v, tat+int64(time.Second))
		}
	})
}

// MULTI/EXEC and scripts: the commands work inside both, and on servers
// with a cached command clock two calls in one transaction see one instant.
func TestGCRATransactionsAndScripts(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "multi")
		cmds, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for range 3 {
				p.Do(ctx, "GCRA.THROTTLE", k, 15, 30, 60, 1, "MS")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cmds {
			r, err := c.(*redis.Cmd).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			want := int64(2000 * (i + 1))
			if s.cachedClock {
				assertReply(t, fmt.Sprint("MULTI call ", i), r, 0, 16, int64(14-i+1), -1, want)
			} else {
				assertReply(t, fmt.Sprint("MULTI call ", i), r, 0, 16, int64(14-i+1), -1, -2)
				assertBetween(t, "reset ms", r[4], want-50, want)
			}
		}

		k2 := key(t, "eval")
		script := `
local a = redis.call('GCRA.THROTTLE', KEYS[1], 15, 30, 60, 1, 'MS')
local b = redis.call('GCRA.THROTTLE', KEYS[1], 15, 30, 60, 1, 'MS')
return {a[3], a[5], b[3], b[5]}`
		r, err := s.rdb.Eval(ctx, script, []string{k2}).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if r[0] != 15 || r[2] != 14 || r[1] != 2000 {
			t.Fatalf("EVAL: %v", r)
		}
		if s.cachedClock && r[3] != 4000 {
			t.Fatalf("two calls in one script saw two instants: %v", r)
		}
		if !s.cachedClock {
			assertBetween(t, "second reset in script", r[3], 3950, 4000)
		}
	})
}

func TestCommandInfoAndDocs(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		info, err := s.rdb.Do(ctx, "COMMAND", "INFO", "gcra.throttle", "cl.throttle", "gcra.peek").Slice()
		if err != nil {
			t.Fatal(err)
		}
		wantFlags := map[string][]string{
			"gcra.throttle": {"write", "denyoom", "fast"},
			"cl.throttle":   {"write", "denyoom", "fast"},
			"gcra.peek":     {"readonly", "fast"},
		}
		for _, e := range info {
			row, ok := e.([]any)
			if !ok || len(row) < 10 {
				t.Fatalf("COMMAND INFO row: %v", e)
			}
			name := row[0].(string)
			if row[1].(int64) != -5 || row[3].(int64) != 1 || row[4].(int64) != 1 || row[5].(int64) != 1 {
				t.Fatalf("%s: arity/first/last/step = %v %v %v %v", name, row[1], row[3], row[4], row[5])
			}
			flags := fmt.Sprint(row[2])
			for _, f := range wantFlags[name] {
				if !strings.Contains(flags, f) {
					t.Fatalf("%s flags %s lack %s", name, flags, f)
				}
			}
			if strings.Contains(name, "peek") == strings.Contains(flags, "write") {
				t.Fatalf("%s flags %s", name, flags)
			}
			specs := fmt.Sprint(row[8])
			wantSpec := "RW access update"
			if name == "gcra.peek" {
				wantSpec = "RO access"
			}
			if !strings.Contains(specs, wantSpec) {
				t.Fatalf("%s key specs %s lack %q", name, specs, wantSpec)
			}
			cats := fmt.Sprint(row[6])
			if s.aclCategories && !strings.Contains(cats, "@ratelimit") {
				t.Fatalf("%s ACL categories %s lack @ratelimit", name, cats)
			}
		}
		keys, err := s.rdb.Do(ctx, "COMMAND", "GETKEYS", "GCRA.THROTTLE", "user123", 15, 30, 60).StringSlice()
		if err != nil || len(keys) != 1 || keys[0] != "user123" {
			t.Fatalf("COMMAND GETKEYS: %v %v", keys, err)
		}

		docs, err := s.rdb.Do(ctx, "COMMAND", "DOCS", "gcra.throttle", "gcra.peek").Result()
		if err != nil {
			t.Fatal(err)
		}
		d := fmt.Sprint(docs)
		for _, want := range []string{"summary", "max_burst", "count", "period", "quantity", "MS", "module ratelimit"} {
			if !strings.Contains(d, want) {
				t.Fatalf("COMMAND DOCS lacks %q: %s", want, d)
			}
		}

		cat, err := s.rdb.Do(ctx, "ACL", "CAT", "ratelimit").StringSlice()
		if s.aclCategories {
			if err != nil || len(cat) != 3 {
				t.Fatalf("ACL CAT ratelimit: %v %v", cat, err)
			}
		} else if err == nil {
			t.Fatalf("ACL CAT ratelimit on a server without module categories: %v", cat)
		}
	})
}

func TestModuleUnloadRefused(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		err := s.rdb.Do(ctx, "MODULE", "UNLOAD", "ratelimit").Err()
		assertErr(t, "MODULE UNLOAD", err, "ERR")
		k := key(t, "after-unload")
		assertReply(t, "after unload", mustCall(t, s.rdb, "GCRA.THROTTLE", k, 15, 30, 60), 0, 16, 15, -1, 2)
	})
}

func TestInfoCounters(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		before := counters(t, s.rdb, "gcra_throttle")
		k := key(t, "info")
		mustCall(t, s.rdb, "GCRA.THROTTLE", k, 0, 1, 60)
		mustCall(t, s.rdb, "GCRA.THROTTLE", k, 0, 1, 60)
		call(s.rdb, "GCRA.THROTTLE", k, "bad", 1, 60)
		after := counters(t, s.rdb, "gcra_throttle")
		for f, d := range map[string]int64{"calls": 3, "admitted": 1, "refused": 1, "errors": 1} {
			if after[f]-before[f] != d {
				t.Fatalf("INFO %s went %d -> %d, want +%d", f, before[f], after[f], d)
			}
		}
		if v := infoField(t, s.rdb, "ratelimit", "ratelimit_clock"); (v == "cached-command-time") != s.cachedClock {
			t.Fatalf("clock %q on %s", v, s.name)
		}
	})
}

// 64 clients racing one key admit exactly the limit.
func TestGCRARace(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "race")
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for range 5 {
					r, err := call(s.rdb, "GCRA.THROTTLE", k, 99, 1, 3600)
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

// Replicas and the AOF hold the effect: a replica without the module ends
// with the same values and the same absolute expiries; refused calls and
// peeks replicate nothing; peeks run on a read-only replica.
func TestGCRAReplication(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		p := startFor(t, f, opts{module: true})
		bare := startReplica(t, p, false)
		withModule := startReplica(t, p, true)

		prefix := "rl:{repl}:"
		for i := range 20 {
			k := fmt.Sprintf("%s%d", prefix, i)
			for j := range i % 7 {
				mustCall(t, p.rdb, "GCRA.THROTTLE", k, 3, 1, 10+i, 1+j%2)
			}
		}
		// Refunds, one of them back to full (a DEL).
		mustCall(t, p.rdb, "GCRA.THROTTLE", prefix+"6", 3, 1, 16, -1)
		mustCall(t, p.rdb, "GCRA.THROTTLE", prefix+"1", 3, 1, 11, -100)
		waitReplicas(t, p, 2)

		// The primary pings its replicas every few seconds, which moves the
		// offset too: a call that replicates moves it every time, so one
		// quiet attempt out of three shows the calls replicate nothing.
		var moved []int64
		for range 3 {
			offset := replOffset(t, p.rdb)
			r := mustCall(t, p.rdb, "GCRA.THROTTLE", prefix+"5", 3, 1, 15, 1)
			if r[0] != 1 {
				t.Fatalf("expected a refusal, got %v", r)
			}
			mustCall(t, p.rdb, "GCRA.PEEK", prefix+"5", 3, 1, 15)
			mustCall(t, p.rdb, "GCRA.THROTTLE", prefix+"5", 3, 1, 15, 0)
			moved = append(moved, replOffset(t, p.rdb)-offset)
			if moved[len(moved)-1] == 0 {
				break
			}
		}
		if moved[len(moved)-1] != 0 {
			t.Fatalf("refused call / peek / quantity 0 moved the replication offset by %v", moved)
		}

		want := snapAll(t, p.rdb, prefix+"*")
		if len(want) < 15 {
			t.Fatalf("only %d keys on the primary", len(want))
		}
		if _, ok := want[prefix+"1"]; ok {
			t.Fatal("a refund to full left the key")
		}
		for _, rep := range []*server{bare, withModule} {
			got := snapAll(t, rep.rdb, prefix+"*")
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("replica differs:\nprimary %v\nreplica %v", want, got)
			}
		}

		// On the replica with the module, PEEK answers like the primary's.
		pr := mustCall(t, p.rdb, "GCRA.PEEK", prefix+"6", 3, 1, 16)
		rr := mustCall(t, withModule.rdb, "GCRA.PEEK", prefix+"6", 3, 1, 16)
		assertReply(t, "peek on replica", rr, pr[0], pr[1], pr[2], pr[3], -2)
		_, err := call(withModule.rdb, "GCRA.THROTTLE", prefix+"6", 3, 1, 16)
		assertErr(t, "THROTTLE on a replica", err, "READONLY")
	})
}

// An AOF restart keeps every key, and the AOF loads on a server without
// the module, since it holds SET ... PXAT and DEL, never module commands.
func TestGCRAAOF(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		dir := t.TempDir()
		aof := opts{module: true, dataDir: dir, args: []string{"--appendonly", "yes", "--appendfsync", "always"}}
		s := startFor(t, f, aof)
		prefix := "rl:{aof}:"
		for i := range 10 {
			for range i {
				mustCall(t, s.rdb, "GCRA.THROTTLE", fmt.Sprintf("%s%d", prefix, i), 5, 1, 60+i)
			}
		}
		mustCall(t, s.rdb, "GCRA.THROTTLE", prefix+"9", 5, 1, 69, -2)
		want := snapAll(t, s.rdb, prefix+"*")
		peek := mustCall(t, s.rdb, "GCRA.PEEK", prefix+"9", 5, 1, 69)
		if err := s.restart(ctx); err != nil {
			t.Fatal(err)
		}
		if got := snapAll(t, s.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after restart:\n got %v\nwant %v", got, want)
		}
		after := mustCall(t, s.rdb, "GCRA.PEEK", prefix+"9", 5, 1, 69)
		assertReply(t, "peek after restart", after, peek[0], peek[1], peek[2], -2, -2)
		s.stop(ctx)

		bare := startFor(t, f, opts{dataDir: dir, args: []string{"--appendonly", "yes"}})
		if got := snapAll(t, bare.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("AOF on a server without the module:\n got %v\nwant %v", got, want)
		}
	})
}

func TestModuleArguments(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		s := startFor(t, f, opts{module: true, moduleArgs: []string{"CL_ALIAS", "no"}})
		_, err := call(s.rdb, "CL.THROTTLE", "k", 1, 1, 1)
		assertErr(t, "CL.THROTTLE with the alias off", err, "ERR", "unknown command")
		assertReply(t, "GCRA.THROTTLE", mustCall(t, s.rdb, "GCRA.THROTTLE", "k", 15, 30, 60), 0, 16, 15, -1, 2)
		if v := infoField(t, s.rdb, "ratelimit", "ratelimit_cl_throttle_alias"); v != "off" {
			t.Fatalf("INFO alias %q", v)
		}

		// Loading at run time: a bad argument fails the load cleanly (the
		// server dlclose()s a Go library and must survive it), then a good
		// load works.
		bare := startFor(t, f, opts{})
		err = bare.rdb.Do(ctx, "MODULE", "LOAD", moduleInContainer, "CL_ALIAS", "maybe").Err()
		assertErr(t, "MODULE LOAD with a bad argument", err, "ERR")
		if err := bare.rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("server died after a failed load: %v", err)
		}
		if err := bare.rdb.Do(ctx, "MODULE", "LOAD", moduleInContainer).Err(); err != nil {
			t.Fatal(err)
		}
		assertReply(t, "after MODULE LOAD", mustCall(t, bare.rdb, "CL.THROTTLE", "k", 15, 30, 60), 0, 16, 15, -1, 2)
		if !strings.Contains(bare.logs(ctx), "unknown module argument") {
			t.Fatal("the failed load logged no reason")
		}
	})
}
