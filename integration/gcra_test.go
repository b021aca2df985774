package integration

import (
	"fmt"
	"strconv"
	"strings"
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
		assertExpiresAtState(t, s.rdb, k)

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
		{[]any{"x", 1, 1}, []string{"max_burst", "from 0 to 9007199254740990"}},
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
		// Combinations: an interval under 1 ns, and 64-bit overflow of τ.
		// (A quantity is never an overflow: TestHugeCosts.)
		{[]any{1, 2_000_000_000, 1}, []string{"count", "period"}},
		{[]any{"9007199254740990", 1, 1}, []string{"overflow"}},
		{[]any{10, 1, "9223372036"}, []string{"overflow"}},
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

// A key written in redis-cell's format (decimal nanoseconds, with the expiry
// redis-cell sets: the TAT's distance from now, in ms) is read as-is.
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
		s.rdb.Set(ctx, k, strconv.FormatInt(tat, 10), 10*time.Second)
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

// remaining is exact where the interval is not a whole number of
// microseconds: 6000 per second holds 6001 at once, and two calls at one
// instant leave 6000, then 5999 (redis-cell's truncated microseconds gave
// 6001 twice).
func TestGCRARemainingExact(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "exact")
		cmds, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "GCRA.THROTTLE", k, 6000, 6000, 1)
			p.Do(ctx, "GCRA.THROTTLE", k, 6000, 6000, 1)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := cmds[0].(*redis.Cmd).Int64Slice()
		b, _ := cmds[1].(*redis.Cmd).Int64Slice()
		assertReply(t, "first", a, 0, 6001, 6000, -1, -2)
		if s.cachedClock {
			assertReply(t, "second, same instant", b, 0, 6001, 5999, -1, -2)
		} else { // Redis 7.0's clock may move a millisecond: 6 more units
			assertBetween(t, "second remaining", b[2], 5999, 6000)
		}
	})
}
