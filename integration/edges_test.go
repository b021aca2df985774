package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A renewal at the same instant (the same lease, nothing lapsed, the same
// expiry) changes nothing: no keyspace event, nothing replicated, through
// the module and through the script alike; a renewal that moves the lease
// writes as before.
func TestConcSameInstantRenewal(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		st := startStopped(t, f, 2)
		if err := st.rdb.ConfigSet(ctx, "notify-keyspace-events", "KEA").Err(); err != nil {
			t.Fatal(err)
		}
		ps := st.rdb.PSubscribe(ctx, "__keyspace@*__:renew*")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
			t.Fatal(err)
		}
		events := func() []string {
			var got []string
			for {
				m, err := ps.ReceiveTimeout(ctx, 300*time.Millisecond)
				if err != nil {
					return got
				}
				got = append(got, fmt.Sprint(m))
			}
		}
		for db, run := range map[int]func(args ...string) string{
			0: func(args ...string) string { return st.e.module(st.dbs[0], "conc.acquire", []string{"renew"}, args) },
			1: func(args ...string) string { return st.e.script(st.dbs[1], "conc.acquire", []string{"renew"}, args) },
		} {
			if r := run("3", "60", "a"); !strings.HasPrefix(r, "[0 3 2 ") {
				t.Fatalf("db %d: the first acquire: %s", db, r)
			}
			if ev := events(); len(ev) == 0 {
				t.Fatalf("db %d: the first acquire published nothing", db)
			}
			if r := run("3", "60", "a"); !strings.HasPrefix(r, "[0 3 2 ") {
				t.Fatalf("db %d: the renewal: %s", db, r)
			}
			if ev := events(); len(ev) != 0 {
				t.Fatalf("db %d: a renewal that changes nothing published %v", db, ev)
			}
		}
		st.setClock(luaStart.UnixNano() + int64(time.Second)) // a second later: the lease moves
		for db := range 2 {
			r := st.e.module(st.dbs[db], "conc.acquire", []string{"renew"}, []string{"3", "60", "a"})
			if db == 1 {
				r = st.e.script(st.dbs[db], "conc.acquire", []string{"renew"}, []string{"3", "60", "a"})
			}
			if !strings.HasPrefix(r, "[0 3 2 ") {
				t.Fatalf("db %d: a later renewal: %s", db, r)
			}
		}
		if ev := events(); len(ev) == 0 {
			t.Fatal("a renewal a second later published nothing")
		}
		if !f.cachedClock {
			return // Redis 7.0's module clock moves within a MULTI
		}
		// Replicated: in one MULTI (one instant), the renewal after the
		// acquire adds nothing to the replication stream.
		p := startFor(t, f, opts{module: true})
		startReplica(t, p, false)
		p.rdb.Set(ctx, "warm", 1, 0) // the stream's SELECT comes now, not in the first measure
		offsetOf := func(calls int) int64 {
			off := replOffset(t, p.rdb)
			_, err := p.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				for range calls {
					pipe.Do(ctx, "CONC.ACQUIRE", "renew", 3, 60, "a")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			p.rdb.Del(ctx, "renew")
			return replOffset(t, p.rdb) - off
		}
		if one, two := offsetOf(1), offsetOf(2); one != two {
			t.Fatalf("an acquire then its renewal at one instant replicated %d bytes, the acquire alone %d", two, one)
		}
	})
}

// RL.ALL's arity is checked by the command, so each of these gets an error
// naming what is wrong, where Redis's arity check answered "wrong number
// of arguments"; a repeated option is an error naming it; one call adds at
// most 100000 sliding-log entries.
func TestAllArgumentEdges(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "a")
		for _, c := range []struct {
			args []any
			want string
		}{
			{[]any{"RL.ALL", 99, k}, "ERR numkeys must be an integer from 1 to 16"},
			{[]any{"RL.ALL", 2, k, k + "b"}, "ERR numkeys is 2 but 0 limiters follow the keys"},
			{[]any{"RL.PEEK", 1}, "ERR numkeys is 1 but 0 arguments follow it"},
			{[]any{"RL.ALL", 1, k, "GCRA", 5, 1, 60, 1, "MS", "ms"}, "ERR the option MS is given twice"},
			{[]any{"RL.ALL", 1, k, "GCRA", 5, 1, 60, 1, "EACH", "EACH"}, "ERR the option EACH is given twice"},
			{[]any{"RL.ALL", 1, k, "GCRA", 5, 1, 60, 1, "RESERVE", 5, "RESERVE", 0}, "ERR the option RESERVE is given twice"},
			{[]any{"GCRA.THROTTLE", k, 5, 1, 60, 1, "RESERVE", 5, "RESERVE", 0}, "ERR the option RESERVE is given twice"},
			{[]any{"CONC.ACQUIRE", k, 5, 60, "id", "MS", "MS"}, "ERR the option MS is given twice"},
		} {
			_, err := s.rdb.Do(ctx, c.args...).Result()
			if err == nil || err.Error() != c.want {
				t.Fatalf("%v: %v, want %q", c.args, err, c.want)
			}
		}
		if n := s.rdb.Exists(ctx, k, k+"b").Val(); n != 0 {
			t.Fatalf("refused calls left %d keys", n)
		}

		// 16 logs of 100000 each would add 1.6 M entries in one call.
		args := []any{"RL.ALL", 16}
		for i := range 16 {
			args = append(args, key(t, fmt.Sprint("log", i)))
		}
		for range 16 {
			args = append(args, "SL", 100000, 60, 100000)
		}
		_, err := s.rdb.Do(ctx, args...).Result()
		if err == nil || err.Error() != "ERR the sliding logs of one call may add at most 100000 entries, not 1600000: split the call" {
			t.Fatalf("16 logs of 100000: %v", err)
		}
		for i := range 16 {
			if s.rdb.Exists(ctx, args[2+i].(string)).Val() != 0 {
				t.Fatal("a refused call left a log behind")
			}
		}

		// The worst call the bound allows: 100000 entries over 10 logs.
		args = []any{"RL.ALL", 10}
		for i := range 10 {
			args = append(args, key(t, fmt.Sprint("most", i)))
		}
		for range 10 {
			args = append(args, "SL", 10000, 60, 10000)
		}
		start := time.Now()
		if r, err := s.rdb.Do(ctx, args...).Int64Slice(); err != nil || r[0] != 0 {
			t.Fatalf("10 logs of 10000: %v %v", r, err)
		}
		t.Logf("%s: one RL.ALL adding 100000 sliding-log entries (10 logs) took %v", s.name, time.Since(start))
	})
}
