package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A fresh key: the sliding log's reply is exact; the windows' time fields
// depend on where now falls in the window.
func TestWindowsFreshKey(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "sl")
		assertReply(t, "SL.HIT", mustCall(t, s.rdb, "SL.HIT", k, 10, 60), 0, 10, 9, -1, 60)
		assertReply(t, "SL.HIT 9 MS", mustCall(t, s.rdb, "SL.HIT", k, 10, 60, 9, "MS"), 0, 10, 0, -1, 60000)
		r := mustCall(t, s.rdb, "SL.HIT", k, 10, 60, 1, "MS")
		assertReply(t, "SL.HIT refused", r, 1, 10, 0, -2, -2)
		assertBetween(t, "SL retry (ms)", r[3], 59000, 60000)
		if n := s.rdb.ZCard(ctx, k).Val(); n != 10 {
			t.Fatalf("the log holds %d entries, want 10", n)
		}
		assertReply(t, "SL.HIT cost 11", mustCall(t, s.rdb, "SL.HIT", key(t, "sl"), 10, 60, 11), 1, 10, 10, -1, 0)

		for _, cmd := range []string{"FW.HIT", "SW.HIT"} {
			k := key(t, "w")
			r := mustCall(t, s.rdb, cmd, k, 10, 60, 3, "MS")
			assertReply(t, cmd, r, 0, 10, 7, -1, -2)
			lo, hi := int64(0), int64(60000) // FW: until the window ends
			if cmd == "SW.HIT" {
				lo, hi = 60000, 120000 // SW: until the next window ends
			}
			assertBetween(t, cmd+" reset (ms)", r[4], lo, hi)
			sn := snap(t, s.rdb, k)
			if want := time.Now().Add(time.Duration(r[4]) * time.Millisecond).UnixMilli(); sn.Expire < want-1000 || sn.Expire > want+1000 {
				t.Fatalf("%s: expires at %d, want about %d", cmd, sn.Expire, want)
			}
			assertReply(t, cmd+" cost 8", mustCall(t, s.rdb, cmd, k, 10, 60, 8), 1, 10, -2, -2, -2)
		}
	})
}

// A fixed window's key expires at the window's end, hit after hit. The
// module sets the expiry only when the key does not already expire then, so
// a key whose expiry was moved past the window behind its back gets the
// window's end back on its next hit. A count whose expiry was removed is
// not limiter state any more: refused as other data, and left alone.
func TestFixedWindowExpiresAtWindowEnd(t *testing.T) {
	const window = 3600
	end := func() int64 { return (time.Now().UnixMilli()/(window*1000) + 1) * window * 1000 }
	each(t, func(t *testing.T, s *server) {
		k := key(t, "fw")
		hit := func(what string) {
			t.Helper()
			before := end()
			mustCall(t, s.rdb, "FW.HIT", k, 100, window)
			after := end()
			if sn := snap(t, s.rdb, k); sn.Expire != before && sn.Expire != after {
				t.Fatalf("%s: %v, want pexpiretime=%d (the window's end)", what, sn, after)
			}
		}
		hit("first hit")
		hit("second hit")
		hit("third hit")
		if err := s.rdb.PExpire(ctx, k, window*time.Second+time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		hit("hit after PEXPIRE beyond the window")
		if sn := snap(t, s.rdb, k); sn.Value != "4" {
			t.Fatalf("after four hits: %v, want the count 4", sn)
		}
		if err := s.rdb.Persist(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
		before := snap(t, s.rdb, k)
		_, err := call(s.rdb, "FW.HIT", k, 100, window)
		assertErr(t, "FW.HIT after PERSIST", err, otherDataErr, "no expiry")
		if after := snap(t, s.rdb, k); after != before {
			t.Fatalf("FW.HIT after PERSIST changed the key: %v -> %v", before, after)
		}
	})
}

// The adversarial pattern on real servers: a full burst 100 ms before a
// window boundary and another 50 ms after it. The fixed window admits twice
// the limit within 150 ms, the sliding log exactly the limit, the sliding
// window counter the limit plus what ~50 ms of a 1 s window weighs.
func TestWindowsBoundaryBurst(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		const limit = 20
		keys := map[string]string{"FW.HIT": key(t, "fw"), "SW.HIT": key(t, "sw"), "SL.HIT": key(t, "sl")}
		tm, err := s.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The next whole second at least 300 ms away, in the server's clock.
		boundary := tm.Truncate(time.Second).Add(time.Second)
		if boundary.Sub(tm) < 300*time.Millisecond {
			boundary = boundary.Add(time.Second)
		}
		skew := time.Since(tm) // how far the local clock is ahead of the server's, plus one round trip
		burst := func(at time.Time) map[string]int {
			time.Sleep(time.Until(at.Add(skew)))
			got := map[string]int{}
			for cmd, k := range keys {
				cmds, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range limit {
						p.Do(ctx, cmd, k, limit, 1)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range cmds {
					if r, _ := c.(*redis.Cmd).Int64Slice(); r[0] == 0 {
						got[cmd]++
					}
				}
			}
			return got
		}
		before := burst(boundary.Add(-100 * time.Millisecond))
		after := burst(boundary.Add(50 * time.Millisecond))
		for cmd := range keys {
			if before[cmd] != limit {
				t.Fatalf("%s: %d admitted in the first burst, want %d", cmd, before[cmd], limit)
			}
		}
		if after["FW.HIT"] != limit {
			t.Errorf("fixed window: %d admitted after the boundary, want %d (2 x limit across it)", after["FW.HIT"], limit)
		}
		if after["SL.HIT"] != 0 {
			t.Errorf("sliding log: %d admitted after the boundary, want 0", after["SL.HIT"])
		}
		// 50 ms (up to ~250 ms on a loaded machine) into the window the
		// previous 20 weigh ⌊20 × 0.75..0.95⌋ = 15..19: 1 to 5 more, where
		// the fixed window admits all 20.
		if n := after["SW.HIT"]; n < 1 || n > 5 {
			t.Errorf("sliding window counter: %d admitted after the boundary, want 1 to 5", n)
		}
		t.Logf("%s: admitted across the boundary: fixed %d, sliding counter %d, sliding log %d (limit %d per 1 s)",
			s.name, before["FW.HIT"]+after["FW.HIT"], before["SW.HIT"]+after["SW.HIT"], before["SL.HIT"]+after["SL.HIT"], limit)
	})
}

// Bytes per key, from MEMORY USAGE, beside a plain integer SET with a TTL
// under a key name of the same length.
func TestMemoryPerKey(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		name := func(tag string) string { return "rl:user:" + tag + ":123456789" }
		usage := func(k string) int64 {
			n, err := s.rdb.MemoryUsage(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		base := name("int")
		s.rdb.Set(ctx, base, 1234567, time.Hour)
		baseline := usage(base)
		var report []string
		// Redis counts the key's name and table entry, Valkey 8 only the
		// value: compare what each state costs beyond the integer SET.
		for _, c := range []struct {
			tag string
			cmd []any
		}{
			{"gcr", []any{"GCRA.THROTTLE", 99, 100, 60}},
			{"tbk", []any{"TB.TAKE", 100, 100, 60}},
			{"lbk", []any{"LB.ENQUEUE", 99, 100, 60}},
			{"swc", []any{"SW.HIT", 100, 60}},
			{"fwc", []any{"FW.HIT", 100, 60}},
			{"slg", []any{"SL.HIT", 100, 60}},
		} {
			k := name(c.tag)
			mustCall(t, s.rdb, c.cmd[0].(string), append([]any{k}, c.cmd[1:]...)...)
			n := usage(k)
			report = append(report, fmt.Sprintf("%s %d", c.cmd[0], n))
			if n-baseline > 48 {
				t.Errorf("%s: %d bytes, %d more than an integer SET", c.cmd[0], n, n-baseline)
			}
		}
		// The sliding log grows with what it holds: 100 entries.
		k := name("sl1")
		mustCall(t, s.rdb, "SL.HIT", k, 100, 60, 100)
		full := usage(k)
		report = append(report, fmt.Sprintf("SL.HIT(100 entries) %d", full))
		if full > 100*40+baseline {
			t.Errorf("sliding log with 100 entries: %d bytes", full)
		}
		t.Logf("%s: bytes per key (MEMORY USAGE, 22-byte key name): integer SET with TTL %d; %s", s.name, baseline, strings.Join(report, ", "))
	})
}
