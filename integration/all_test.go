package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// allCall runs RL.ALL (or RL.PEEK) over keys with the limiters after them.
func allCall(c *redis.Client, cmd string, keys []string, rest ...any) ([]int64, error) {
	args := append([]any{cmd, len(keys)}, toAny(keys)...)
	return c.Do(ctx, append(args, rest...)...).Int64Slice()
}

func mustAll(t *testing.T, c *redis.Client, cmd string, keys []string, rest ...any) []int64 {
	t.Helper()
	r, err := allCall(c, cmd, keys, rest...)
	if err != nil {
		t.Fatalf("%s %v %v: %v", cmd, keys, rest, err)
	}
	return r
}

// dump is a key's bytes and expiry: what "unchanged" means for RL.ALL.
func dump(t *testing.T, c *redis.Client, k string) string {
	t.Helper()
	d, _ := c.Dump(ctx, k).Result()
	exp, err := c.Do(ctx, "PEXPIRETIME", k).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%q@%d", d, exp)
}

// COMMAND INFO, GETKEYS and DOCS describe RL.ALL and RL.PEEK: every key,
// declared by the key count at argument 1.
func TestAllCommandInfo(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		for _, name := range []string{"rl.all", "rl.peek"} {
			info, err := s.rdb.Do(ctx, "COMMAND", "INFO", name).Slice()
			if err != nil || len(info) != 1 {
				t.Fatalf("COMMAND INFO %s: %v %v", name, info, err)
			}
			row := info[0].([]any)
			flags, spec := fmt.Sprint(row[2]), fmt.Sprint(row[8])
			want, wantSpec := []string{"write", "denyoom", "fast", "movablekeys"}, "RW access update"
			if name == "rl.peek" {
				want, wantSpec = []string{"readonly", "fast", "movablekeys"}, "RO access"
			}
			for _, f := range want {
				if !strings.Contains(flags, f) {
					t.Fatalf("%s flags %s lack %s", name, flags, f)
				}
			}
			if row[1].(int64) != -2 || !strings.Contains(spec, wantSpec) || !strings.Contains(spec, "keynum") {
				t.Fatalf("%s: arity %v, key specs %s", name, row[1], spec)
			}
			keys, err := s.rdb.Do(ctx, "COMMAND", "GETKEYS", name, 3, "a", "b", "c",
				"GCRA", 1, 1, 1, 1, "SW", 5, 60, 1, "TB", 5, 1, 1, 1, "MS").StringSlice()
			if err != nil || fmt.Sprint(keys) != "[a b c]" {
				t.Fatalf("COMMAND GETKEYS %s: %v %v", name, keys, err)
			}
			docs := fmt.Sprint(s.rdb.Do(ctx, "COMMAND", "DOCS", name).Val())
			for _, w := range []string{"numkeys", "limiter", "GCRA max_burst count period quantity", "RESERVE", "MS", "module ratelimit"} {
				if !strings.Contains(docs, w) {
					t.Fatalf("COMMAND DOCS %s lacks %q: %s", name, w, docs)
				}
			}
		}
	})
}

// RL.ALL over one limiter is its family command at the same instant: the
// same five integers, the same stored value and expiry (on servers with
// a cached command clock, where a MULTI is one instant; on Redis 7.0, whose
// clock may move a millisecond, the counts).
func TestAllOfOneIsTheFamilyCommand(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		for _, l := range limiters {
			if l.name == "lb" || l.name == "cl" {
				continue
			}
			family := strings.ToUpper(strings.Split(l.cmd, ".")[0])
			a, b := key(t, "all"), key(t, "one")
			args := append(l.params(5, slow), 2)
			for range 3 { // fresh, then live state
				cmds, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Do(ctx, append([]any{"RL.ALL", 1, a, family}, args...)...)
					p.Do(ctx, append([]any{l.cmd, b}, args...)...)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				all, _ := cmds[0].(*redis.Cmd).Int64Slice()
				one, _ := cmds[1].(*redis.Cmd).Int64Slice()
				if len(all) != 6 || all[5] != 0 {
					t.Fatalf("%s: RL.ALL replied %v", l.name, all)
				}
				if !s.cachedClock {
					assertReply(t, l.name, all[:5], one[0], one[1], one[2], -2, -2)
					continue
				}
				assertReply(t, l.name, all[:5], one...)
				sa, sb := snap(t, s.rdb, a), snap(t, s.rdb, b)
				if l.zset { // members are named by score and number: compare the scores
					za, _ := s.rdb.ZRangeWithScores(ctx, a, 0, -1).Result()
					zb, _ := s.rdb.ZRangeWithScores(ctx, b, 0, -1).Result()
					if fmt.Sprint(za) != fmt.Sprint(zb) || sa.Expire != sb.Expire {
						t.Fatalf("%s: RL.ALL left %v %d, the family command %v %d", l.name, za, sa.Expire, zb, sb.Expire)
					}
				} else if sa.Value != sb.Value || sa.Expire != sb.Expire {
					t.Fatalf("%s: RL.ALL left %v, the family command %v", l.name, sa, sb)
				}
			}
		}
	})
}

// Every limit must admit: the deciding limit and its position, and a
// refused call leaves every key byte for byte as it was (DUMP and
// PEXPIRETIME), refused peeks and RL.PEEK too.
func TestAllOrNothing(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		keys := []string{key(t, "gcra"), key(t, "tb"), key(t, "sw"), key(t, "fw"), key(t, "sl")}
		limits := func(cost int) []any {
			return []any{"GCRA", 9, 1, slow, cost, "TB", 8, 1, slow, cost, "SW", 7, slow, cost, "FW", 6, slow, cost, "SL", 5, slow, cost}
		}
		// Admitted: the fewest remaining decides, the sliding log's (5 − 2).
		assertReply(t, "admitted", mustAll(t, s.rdb, "RL.ALL", keys, limits(2)...), 0, 5, 3, -1, -2, 4)
		// Refused by the log alone (3 left, cost 4): nothing anywhere moves.
		before := map[string]string{}
		for _, k := range keys {
			before[k] = dump(t, s.rdb, k)
		}
		assertReply(t, "refused", mustAll(t, s.rdb, "RL.ALL", keys, limits(4)...), 1, 5, 3, -2, -2, 4)
		assertReply(t, "peek", mustAll(t, s.rdb, "RL.PEEK", keys, limits(4)...), 1, 5, 3, -2, -2, 4)
		for _, k := range keys {
			if after := dump(t, s.rdb, k); after != before[k] {
				t.Fatalf("a refused RL.ALL changed %s: %s -> %s", k, before[k], after)
			}
		}
		// Refused by several: the latest retry decides; a cost above a
		// limit (never) is the latest of all.
		r := mustAll(t, s.rdb, "RL.ALL", keys[:2], "GCRA", 9, 1, slow, 8, "TB", 8, 1, slow, 9)
		assertReply(t, "never decides", r, 1, 8, 6, -1, -2, 1)
		// GCRA lacks one unit (retry one interval), TB two (two intervals).
		r = mustAll(t, s.rdb, "RL.ALL", keys[:2], "GCRA", 9, 1, slow, 9, "TB", 8, 1, slow, 8)
		if r[0] != 1 || r[5] != 1 || r[3] < slow+1 {
			t.Fatalf("the later retry decides: %v", r)
		}
		// The same admitted call through RL.PEEK: the same reply, no write.
		p := mustAll(t, s.rdb, "RL.PEEK", keys, limits(1)...)
		a := mustAll(t, s.rdb, "RL.ALL", keys, limits(1)...)
		assertReply(t, "peek then all", a, p[0], p[1], p[2], p[3], -2, p[5])
		for _, k := range keys {
			if dump(t, s.rdb, k) == before[k] {
				t.Fatalf("an admitted RL.ALL did not write %s", k)
			}
		}
	})
}

// Bad input names the problem and changes nothing: the arguments, and
// keys of another type or holding other data.
func TestAllBadInput(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		live, other, foreign := key(t, "live"), key(t, "list"), key(t, "foreign")
		mustCall(t, s.rdb, "GCRA.THROTTLE", live, 5, 1, slow)
		s.rdb.RPush(ctx, other, "x")
		s.rdb.Set(ctx, foreign, "42", 0)
		before := map[string]string{live: dump(t, s.rdb, live), other: dump(t, s.rdb, other), foreign: dump(t, s.rdb, foreign)}
		g := []any{"GCRA", 5, 1, slow, 1}
		cases := []struct {
			args []any
			want []string
		}{
			{append([]any{0, live}, g...), []string{"ERR numkeys must be an integer from 1 to 16"}},
			{append([]any{17, live}, g...), []string{"ERR numkeys must be an integer from 1 to 16"}},
			{append([]any{"x", live}, g...), []string{"ERR numkeys must be an integer from 1 to 16"}},
			{[]any{9, live, 1, 2, 3, 4, 5}, []string{"ERR numkeys is 9 but 6 arguments follow it"}},
			{append([]any{2, live, "k2"}, g...), []string{"numkeys is 2 but 1 limiters follow"}},
			{[]any{1, live, "LB", 1, 1, 1, 1}, []string{"LB is a shaper"}},
			{[]any{1, live, "XYZ", 1, 1, 1, 1}, []string{"unknown limiter", "XYZ"}},
			{[]any{2, live, "k2", "SW", 5, 60, 1, "SW", 5, 60}, []string{"limiter 2 (SW) takes 3 arguments: limit window cost"}},
			{[]any{1, live, "GCRA", 5, "x", 60, 1}, []string{"limiter 1 (GCRA): count must be an integer"}},
			{append(append([]any{1, live}, g...), "RESERVE", 7), []string{"RESERVE must be an integer from 0 to 6"}},
			{append(append([]any{1, live}, g...), "XX"), []string{"unknown option", "XX"}},
			{append(append([]any{2, live, live}, g...), g...), []string{"named twice"}},
			{append(append([]any{2, live, other}, g...), g...), []string{"limiter 2 (GCRA", "wrong kind"}},
			{append(append([]any{2, live, foreign}, g...), g...), []string{"limiter 2 (GCRA", "holds other data"}},
		}
		for _, c := range cases {
			for _, cmd := range []string{"RL.ALL", "RL.PEEK"} {
				_, err := s.rdb.Do(ctx, append([]any{cmd}, c.args...)...).Result()
				prefix := "ERR"
				if strings.Contains(fmt.Sprint(c.want), "wrong kind") {
					prefix = "WRONGTYPE"
				}
				assertErr(t, fmt.Sprintf("%s %v", cmd, c.args), err, prefix, c.want...)
			}
		}
		for k, b := range before {
			if a := dump(t, s.rdb, k); a != b {
				t.Fatalf("bad input changed %s: %s -> %s", k, b, a)
			}
		}
		// numkeys is read as every number is: a sign and leading zeros pass.
		for _, n := range []string{"+1", "001", "+01"} {
			if _, err := s.rdb.Do(ctx, append([]any{"RL.PEEK", n, live}, g...)...).Int64Slice(); err != nil {
				t.Fatalf("RL.PEEK with numkeys %q: %v", n, err)
			}
		}
		if n := s.rdb.Exists(ctx, "k2").Val(); n != 0 {
			t.Fatal("bad input created a key")
		}
	})
}

// 64 clients racing RL.ALL over three limits admit exactly the tightest
// one, and every key took exactly that many.
func TestAllRace(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		keys := []string{key(t, "a"), key(t, "b"), key(t, "c")}
		limits := []any{"GCRA", 99, 1, slow, 1, "SW", 50, slow, 1, "SL", 80, slow, 1}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for range 3 {
					r, err := allCall(s.rdb, "RL.ALL", keys, limits...)
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
		if admitted.Load() != 50 {
			t.Fatalf("admitted %d, want 50 (the tightest limit)", admitted.Load())
		}
		assertReply(t, "GCRA took 50", mustCall(t, s.rdb, "GCRA.PEEK", keys[0], 99, 1, slow, 0), 0, 100, 50, -1, -2)
		assertReply(t, "SW took 50", mustCall(t, s.rdb, "SW.PEEK", keys[1], 50, slow, 0), 0, 50, 0, -1, -2)
		assertReply(t, "SL took 50", mustCall(t, s.rdb, "SL.PEEK", keys[2], 80, slow, 0), 0, 80, 30, -1, -2)
	})
}

// allWorkload drives RL.ALL over every family it takes: four admitted
// calls, then refusals by the sliding log (limit 4), which write nothing.
func allWorkload(t *testing.T, c *redis.Client, prefix string) {
	t.Helper()
	for i := range 6 {
		keys := []string{prefix + fmt.Sprint("g", i%3), prefix + fmt.Sprint("t", i%2), prefix + "sw", prefix + "fw", prefix + "sl"}
		allCall(c, "RL.ALL", keys, "GCRA", 3, 1, slow, 1, "TB", 5, 1, slow, 1, "SW", 9, slow, 1, "FW", 9, slow, 1, "SL", 4, slow, 1)
	}
	allCall(c, "RL.ALL", []string{prefix + "g9", prefix + "sl"}, "GCRA", 3, 1, slow, 1, "SL", 4, slow, 1) // refused by the log
}

// Replicas and an AOF reload hold exactly the primary's keys after mixed
// RL.ALL traffic, and an admitted call reaches the AOF as one MULTI/EXEC.
func TestAllReplicationAndAOF(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		dir := t.TempDir()
		p := startFor(t, f, opts{module: true, dataDir: dir, args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
		r := startReplica(t, p, false)
		prefix := "rl:{all}:"
		allWorkload(t, p.rdb, prefix)
		waitReplicas(t, p, 1)
		want := snapAll(t, p.rdb, prefix+"*")
		if len(want) != 8 { // g0-g2, t0-t1, sw, fw, sl; g9's call was refused
			t.Fatalf("the primary holds %d keys: %v", len(want), want)
		}
		if got := snapAll(t, r.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("replica differs:\nprimary %v\nreplica %v", want, got)
		}

		// The AOF: each admitted RL.ALL's effects between one MULTI and EXEC
		// (four were admitted; the log refused the rest).
		aof := strings.ToLower(readAOF(t, dir))
		if n, e := strings.Count(aof, "\r\nmulti\r\n"), strings.Count(aof, "\r\nexec\r\n"); n != 4 || e != 4 {
			t.Fatalf("%d MULTI and %d EXEC in the AOF for 4 admitted RL.ALL calls", n, e)
		}
		if err := p.restart(ctx); err != nil {
			t.Fatal(err)
		}
		if got := snapAll(t, p.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after an AOF restart:\n got %v\nwant %v", got, want)
		}
	})
}

// readAOF returns every AOF file in dir (the incremental ones of Redis 7
// and Valkey's appendonlydir), concatenated.
func readAOF(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "appendonlydir", "*.aof"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	if b.Len() == 0 {
		t.Fatalf("no AOF in %s", dir)
	}
	return b.String()
}

// RESERVE n on every family and on RL.ALL: with a limit of 5 and a reserve
// of 2, three unit calls pass and the fourth is refused; calls without it
// then take the last two. remaining reports what truly remains; cost + n
// above the limit is refused for good; RL.PEEK and the peeks agree.
func TestReserve(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		type fam struct {
			cmd, peek string
			args      []any // a limit of 5, nothing refilling
		}
		fams := []fam{
			{"GCRA.THROTTLE", "GCRA.PEEK", []any{4, 1, slow}},
			{"TB.TAKE", "TB.PEEK", []any{5, 1, slow}},
			{"SW.HIT", "SW.PEEK", []any{5, slow}},
			{"FW.HIT", "FW.PEEK", []any{5, slow}},
			{"SL.HIT", "SL.PEEK", []any{5, slow}},
		}
		for _, f := range fams {
			k := key(t, "reserve")
			with := func(cmd string, cost int, n int) []int64 {
				return mustCall(t, s.rdb, cmd, append(append([]any{k}, f.args...), cost, "RESERVE", n)...)
			}
			for i := range 3 {
				assertReply(t, fmt.Sprint(f.cmd, " call ", i+1), with(f.cmd, 1, 2), 0, 5, int64(4-i), -1, -2)
			}
			assertReply(t, f.cmd+" peek past the reserve", with(f.peek, 1, 2), 1, 5, 2, -2, -2)
			r := with(f.cmd, 1, 2)
			if r[0] != 1 || r[2] != 2 || r[3] < 1 {
				t.Fatalf("%s: the fourth call with RESERVE 2: %v, want refused with 2 remaining", f.cmd, r)
			}
			assertReply(t, f.cmd+" cost + n above the limit", with(f.cmd, 4, 2), 1, 5, 2, -1, -2)
			for i := range 2 { // critical traffic: no reserve
				assertReply(t, f.cmd+" without RESERVE", mustCall(t, s.rdb, f.cmd, append(append([]any{k}, f.args...), 1)...), 0, 5, int64(1-i), -1, -2)
			}
			_, err := call(s.rdb, f.cmd, append(append([]any{k}, f.args...), 1, "RESERVE", 6)...)
			assertErr(t, f.cmd+" RESERVE 6", err, "ERR", "RESERVE must be an integer from 0 to 5")
		}
		_, err := call(s.rdb, "LB.ENQUEUE", key(t, "lb"), 5, 1, slow, 1, "RESERVE", 1)
		assertErr(t, "LB.ENQUEUE with RESERVE", err, "ERR", "unknown option", "the options are MS")

		// RL.ALL: the reserve applies to every limit.
		keys := []string{key(t, "a"), key(t, "b")}
		lim := []any{"GCRA", 4, 1, slow, 1, "SW", 9, slow, 1, "RESERVE", 2}
		for i := range 3 {
			assertReply(t, fmt.Sprint("RL.ALL call ", i+1), mustAll(t, s.rdb, "RL.ALL", keys, lim...), 0, 5, int64(4-i), -1, -2, 0)
		}
		assertReply(t, "RL.PEEK past the reserve", mustAll(t, s.rdb, "RL.PEEK", keys, lim...), 1, 5, 2, -2, -2, 0)
		assertReply(t, "RL.ALL past the reserve", mustAll(t, s.rdb, "RL.ALL", keys, lim...), 1, 5, 2, -2, -2, 0)
	})
}

// ACL key patterns see every key of RL.ALL: a user who may only read rl:*
// can RL.PEEK them and not RL.ALL, and no key outside the pattern.
func TestAllACL(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		reader, _ := readOnlyUser(t, s, "allreader")
		keys := []string{key(t, "a"), key(t, "b")}
		lim := []any{"GCRA", 4, 1, slow, 1, "SW", 9, slow, 1}
		if _, err := allCall(reader, "RL.PEEK", keys, lim...); err != nil {
			t.Fatalf("RL.PEEK by a read-only user: %v", err)
		}
		_, err := allCall(reader, "RL.ALL", keys, lim...)
		assertErr(t, "RL.ALL by a read-only user", err, "NOPERM")
		_, err = allCall(reader, "RL.PEEK", []string{keys[0], "other:b"}, lim...)
		assertErr(t, "RL.PEEK with a key outside rl:*", err, "NOPERM")
	})
}

// EACH: after the six integers, every limit's own five, as its family's
// peek then reports them (admitted); refused, the others untouched.
func TestAllEach(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		a, b := key(t, "a"), key(t, "b")
		keys := []string{a, b}
		r := mustAll(t, s.rdb, "RL.ALL", keys, "GCRA", 4, 1, slow, 2, "SW", 3, slow, 1, "EACH")
		if len(r) != 16 || r[0] != 0 || r[5] != 1 {
			t.Fatalf("admitted: %v", r)
		}
		ga := mustCall(t, s.rdb, "GCRA.PEEK", a, 4, 1, slow, 0)
		sb := mustCall(t, s.rdb, "SW.PEEK", b, 3, slow, 0)
		if r[6+2] != ga[2] || r[11+2] != sb[2] || r[7] != 5 || r[12] != 3 {
			t.Fatalf("admitted: each %v, peeks %v %v", r[6:], ga, sb)
		}
		pattern := "rl:{" + strings.ReplaceAll(t.Name(), "/", ".") + "*"
		before := snapAll(t, s.rdb, pattern)
		if len(before) != 2 {
			t.Fatalf("%d keys match %s", len(before), pattern)
		}
		r = mustAll(t, s.rdb, "RL.ALL", keys, "GCRA", 4, 1, slow, 1, "SW", 3, slow, 3, "EACH")
		if len(r) != 16 || r[0] != 1 || r[5] != 1 || r[6] != 0 || r[8] != ga[2] || r[11] != 1 {
			t.Fatalf("refused by the window: %v (GCRA untouched at %d)", r, ga[2])
		}
		if after := snapAll(t, s.rdb, pattern); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatal("a refused RL.ALL EACH wrote")
		}
	})
}
