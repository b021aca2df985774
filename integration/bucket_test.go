package integration

import (
	"fmt"
	"testing"
)

// A fresh key's reply depends on no clock: these are exact.
func TestBucketsFreshKey(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		for _, c := range []struct {
			cmd, peek string
			args      []any
			want      []int64
			writes    bool
		}{
			{"TB.TAKE", "TB.PEEK", []any{10, 1, 1}, []int64{0, 10, 9, -1, 1}, true},
			{"TB.TAKE", "TB.PEEK", []any{10, 1, 1, 10, "MS"}, []int64{0, 10, 0, -1, 10000}, true},
			{"TB.TAKE", "TB.PEEK", []any{10, 1, 1, 11}, []int64{1, 10, 10, -1, 0}, false},
			{"TB.TAKE", "TB.PEEK", []any{10, 1, 1, 0}, []int64{0, 10, 10, -1, 0}, false},
			{"TB.TAKE", "TB.PEEK", []any{10, 1, 1, -5}, []int64{0, 10, 10, -1, 0}, false},
			// T = 10 s / 3, rounded up to 3333333334 ns: 3.33 s -> 4 s, 3334 ms.
			{"TB.TAKE", "TB.PEEK", []any{3, 3, 10}, []int64{0, 3, 2, -1, 4}, true},
			{"TB.TAKE", "TB.PEEK", []any{3, 3, 10, 1, "MS"}, []int64{0, 3, 2, -1, 3334}, true},
			// The shaper: field 5 is the delay (0: go now), field 3 the free places.
			{"LB.ENQUEUE", "LB.PEEK", []any{2, 1, 1}, []int64{0, 2, 2, -1, 0}, true},
			{"LB.ENQUEUE", "LB.PEEK", []any{2, 1, 1, 3}, []int64{0, 2, 0, -1, 0}, true},
			{"LB.ENQUEUE", "LB.PEEK", []any{2, 1, 1, 4}, []int64{1, 2, 2, -1, 0}, false},
			{"LB.ENQUEUE", "LB.PEEK", []any{2, 1, 1, 0, "MS"}, []int64{0, 2, 2, -1, 0}, false},
			{"LB.ENQUEUE", "LB.PEEK", []any{0, 1, 1}, []int64{0, 0, 0, -1, 0}, true},
		} {
			for _, cmd := range []string{c.cmd, c.peek} {
				k := key(t, "fresh")
				got := mustCall(t, s.rdb, cmd, append([]any{k}, c.args...)...)
				assertReply(t, fmt.Sprint(cmd, c.args), got, c.want...)
				writes := c.writes && cmd == c.cmd
				if exists := s.rdb.Exists(ctx, k).Val(); (exists == 1) != writes {
					t.Fatalf("%s %v: key exists=%d, want written=%v", cmd, c.args, exists, writes)
				}
				if writes {
					assertExpiresAtState(t, s.rdb, k)
				}
			}
		}
	})
}

func TestTokenBucketSequence(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "tb")
		for i := int64(1); i <= 10; i++ {
			// reset = i s minus the few ms elapsed: i once rounded.
			assertReply(t, fmt.Sprint("take ", i), mustCall(t, s.rdb, "TB.TAKE", k, 10, 1, 1), 0, 10, 10-i, -1, i)
		}
		assertReply(t, "11th", mustCall(t, s.rdb, "TB.TAKE", k, 10, 1, 1), 1, 10, 0, 1, 10)
		assertReply(t, "put 4 back", mustCall(t, s.rdb, "TB.TAKE", k, 10, 1, 1, -4), 0, 10, 4, -1, 6)
		r := mustCall(t, s.rdb, "TB.TAKE", k, 10, 1, 1, 4, "MS")
		assertReply(t, "take 4", r, 0, 10, 0, -1, -2)
		assertBetween(t, "full again in (ms)", r[4], 9500, 10000)
		r = mustCall(t, s.rdb, "TB.TAKE", k, 10, 1, 1, 3, "MS")
		assertReply(t, "take 3 on empty", r, 1, 10, 0, -2, -2)
		assertBetween(t, "retry (ms)", r[3], 2500, 3000)
	})
}

// The shaper's delays are 0, T, 2T, …, then refusal until a place frees.
func TestShaperSequence(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "lb")
		for i := int64(0); i <= 4; i++ {
			r := mustCall(t, s.rdb, "LB.ENQUEUE", k, 4, 2, 1, 1, "MS") // T = 500 ms
			assertReply(t, fmt.Sprint("request ", i+1), r, 0, 4, 4-i, -1, -2)
			if s.cachedClock && i == 0 {
				assertReply(t, "first", r, 0, 4, 4, -1, 0)
			}
			assertBetween(t, fmt.Sprint("delay of request ", i+1), r[4], max(500*i-100, 0), 500*i)
		}
		r := mustCall(t, s.rdb, "LB.ENQUEUE", k, 4, 2, 1, 1, "MS")
		assertReply(t, "6th", r, 1, 4, 0, -2, 0)
		assertBetween(t, "retry (ms)", r[3], 400, 500)
	})
}
