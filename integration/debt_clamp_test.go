package integration

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestDebtPast2262 (issue 44): a DEBT charge whose state would pass what it
// holds is taken up to it, in the module, the scripts and the functions
// alike, reply for reply and state for state. A schedule (GCRA, the token
// bucket) stops at the largest instant 64 bits hold, 2^63 - 1 ns
// (2262-04-11T23:47:16.854775807Z), stored "<instant>:debt" and expiring
// at 9223372036855 ms, which each server and a replica without the module
// accept (checkReplica); a window's count stops at 2^63 - 1. Every call is refused until
// then, more charges leave it there, a refund pays some back, and 100 s
// before 2262 the key is still read as state. Arguments whose tolerance
// from now already passes 2262 stay an overflow error. The clock is
// stopped at luaStart (2026-11-23T12:00:00Z, 7,427,936,836.854775807 s
// before 2^63 - 1 ns).
func TestDebtPast2262(t *testing.T) {
	const (
		most  = "9223372036854775807"
		owed  = "string " + most + ":debt [] 9223372036855" // type, value, members, PEXPIRETIME
		late  = math.MaxInt64 - 100*int64(time.Second)      // 100 s before 2^63 - 1 ns
		start = 0                                           // at luaStart
	)
	overflow := "error: ERR arguments overflow 64-bit nanoseconds: (max_burst + 1) x period / count is too long (the limiter's state would lie beyond the year 2262)"
	calls := []struct {
		at    int64 // Unix ns; 0: luaStart
		call  []string
		want  string
		state string // of the call's first key, when not ""
	}{
		// GCRA, 5 at once, one back every 12 s (τ = 60 s).
		{start, []string{"gcra.throttle", "{c}:g", "4", "5", "60", most, "DEBT"}, "[1 5 0 7427936789 7427936837]", owed},
		{start, []string{"gcra.throttle", "{c}:g", "4", "5", "60", "0"}, "[1 5 0 7427936777 7427936837]", owed},
		{start, []string{"gcra.throttle", "{c}:g", "4", "5", "60", "7", "DEBT", "MS"}, "[1 5 0 7427936788855 7427936836855]", owed},
		{start, []string{"gcra.throttle", "{c}:g", "4", "5", "60", "-3"}, "[0 5 0 -1 7427936801]", "string 9223372000854775807:debt [] 9223372000855"},
		{start, []string{"gcra.peek", "{c}:g", "4", "5", "60"}, "[1 5 0 7427936753 7427936801]", ""},
		{start, []string{"gcra.throttle", "{c}:g", "4", "5", "60", "1000000000", "debt"}, "[1 5 0 7427936789 7427936837]", owed},
		// The token bucket: 4 tokens, one a second.
		{start, []string{"tb.take", "{c}:tb", "4", "1", "1", most, "DEBT"}, "[1 4 0 7427936834 7427936837]", owed},
		{start, []string{"tb.take", "{c}:tb", "4", "1", "1", "1", "DEBT"}, "[1 4 0 7427936834 7427936837]", owed},
		// The fixed and the sliding window (a minute starts at luaStart):
		// the count stops at 2^63 - 1.
		{start, []string{"fw.hit", "{c}:fw", "5", "60", "3"}, "[0 5 2 -1 60]", ""},
		{start, []string{"fw.hit", "{c}:fw", "5", "60", most, "DEBT"}, "[1 5 0 60 60]", "string " + most + " [] 1795435260000"},
		{start, []string{"fw.hit", "{c}:fw", "5", "60", "1", "DEBT"}, "[1 5 0 60 60]", "string " + most + " [] 1795435260000"},
		{start, []string{"sw.hit", "{c}:sw", "5", "60", most, "DEBT"}, "[1 5 0 120 120]", "string 29923920:" + most + ":0 [] 1795435320000"},
		{start, []string{"sw.hit", "{c}:sw", "5", "60", "2", "DEBT"}, "[1 5 0 120 120]", "string 29923920:" + most + ":0 [] 1795435320000"},
		// RL.ALL: both in debt; the bucket's longer wait decides.
		{start, []string{"rl.all", "2", "{c}:a", "{c}:b", "GCRA", "4", "5", "60", most, "TB", "4", "1", "1", most, "DEBT", "EACH"},
			"[1 4 0 7427936834 7427936837 1 1 5 0 7427936789 7427936837 1 4 0 7427936834 7427936837]", owed},
		// τ from now past 2262: the arguments, admitted or charged.
		{start, []string{"gcra.throttle", "{c}:slow", "0", "1", "9223372036", "1", "DEBT"}, overflow, "none <nil> [] -2"},
		{start, []string{"gcra.throttle", "{c}:slow", "0", "1", "9223372036", "2", "DEBT"}, overflow, "none <nil> [] -2"},
		// A minute on, the sliding window's count weighs to the next
		// window's end.
		{int64(119 * time.Second), []string{"sw.hit", "{c}:sw", "5", "60", "0"}, "[1 5 0 1 1]", ""},
		// 100 s before 2262: still state, still refused.
		{late, []string{"gcra.throttle", "{c}:g", "4", "5", "60", "1"}, "[1 5 0 52 100]", owed},
		{late, []string{"tb.take", "{c}:tb", "4", "1", "1", "1", "DEBT"}, "[1 4 0 97 100]", owed},
		{late, []string{"gcra.throttle", "{c}:a", "4", "5", "60", "5", "DEBT"}, "[1 5 0 52 100]", owed},
	}
	eachFlavor(t, func(t *testing.T, f flavor) {
		st := startStopped(t, f, 3)
		e, dbs := st.e, st.dbs
		for i, c := range calls {
			at := luaStart.UnixNano() + c.at
			if c.at >= late {
				at = c.at
			}
			st.setClock(at)
			cmd, keys, args := c.call[0], c.call[1:2], c.call[2:]
			if cmd == "rl.all" {
				keys, args = c.call[2:4], c.call[4:]
			}
			m := e.module(dbs[0], cmd, keys, args)
			sc := e.script(dbs[1], cmd, keys, args)
			fn := e.function(dbs[2], cmd, keys, args)
			if m != c.want || sc != c.want || fn != c.want {
				t.Fatalf("call %d %v:\n module   %s\n script   %s\n function %s\n want     %s", i, c.call, m, sc, fn, c.want)
			}
			for _, k := range keys {
				sm, ss, sf := state(dbs[0], k), state(dbs[1], k), state(dbs[2], k)
				if sm != ss || sm != sf {
					t.Fatalf("call %d %v: %s after the module %s, after the script %s, after the function %s", i, c.call, k, sm, ss, sf)
				}
			}
			if got := state(dbs[0], keys[0]); c.state != "" && got != c.state {
				t.Fatalf("call %d %v: %s holds %s, want %s", i, c.call, keys[0], got, c.state)
			}
		}
		checkReplica(t, f)
	})
}

// checkReplica charges a GCRA key past 2262 through the module, the script
// and the function (databases 0 to 2) on a server whose clock runs (a
// stopped clock stalls a replica's first sync), and checks that a replica
// without the module holds each as the primary does: "<2^63 - 1>:debt",
// expiring at 9223372036855 ms (each write replicated as SET key value
// PXAT 9223372036855, which the replica accepts).
func checkReplica(t *testing.T, f flavor) {
	t.Helper()
	p := startFor(t, f, opts{module: true})
	e := loadScripts(t, p.rdb)
	rep := startReplica(t, p, false)
	args := []string{"4", "5", "60", "9223372036854775807", "DEBT"}
	const want = "string 9223372036854775807:debt [] 9223372036855"
	for db, call := range []func(c *redis.Client, cmd string, keys, args []string) string{e.module, e.script, e.function} {
		c := redis.NewClient(&redis.Options{Addr: p.addr(), DB: db, Protocol: 2})
		defer c.Close()
		if r := call(c, "gcra.throttle", []string{"{c}:g"}, args); !strings.HasPrefix(r, "[1 5 0 ") {
			t.Fatalf("db %d: a charge past 2262 replied %s", db, r)
		}
		if got := state(c, "{c}:g"); got != want {
			t.Fatalf("db %d: the primary holds %s, want %s", db, got, want)
		}
	}
	waitReplicas(t, p, 1)
	for db := range 3 {
		r := redis.NewClient(&redis.Options{Addr: rep.addr(), DB: db, Protocol: 2})
		defer r.Close()
		if got := state(r, "{c}:g"); got != want {
			t.Fatalf("db %d: the replica holds %s, want %s", db, got, want)
		}
	}
}
