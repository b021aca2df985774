package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// commandNames lists every command the module registers, consuming ones
// first.
func commandNames() (consuming, peeks []string) {
	seen := map[string]bool{}
	for _, l := range limiters {
		for _, c := range []string{l.cmd, l.peek} {
			if !seen[c] {
				seen[c] = true
				if c == l.peek {
					peeks = append(peeks, strings.ToLower(c))
				} else {
					consuming = append(consuming, strings.ToLower(c))
				}
			}
		}
	}
	return consuming, peeks
}

// COMMAND INFO and COMMAND DOCS describe every command: arity, flags, the
// key spec (read-write or read-only), ACL categories, summary, arguments.
func TestCommandInfoAndDocs(t *testing.T) {
	consuming, peeks := commandNames()
	all := append(append([]string{}, consuming...), peeks...)
	arity := map[string]int64{} // command name, key, positional arguments; more allowed
	for _, l := range limiters {
		arity[strings.ToLower(l.cmd)] = -int64(2 + len(l.args))
		arity[strings.ToLower(l.peek)] = -int64(2 + len(l.args))
	}
	each(t, func(t *testing.T, s *server) {
		info, err := s.rdb.Do(ctx, append([]any{"COMMAND", "INFO"}, toAny(all)...)...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(info) != len(all) {
			t.Fatalf("COMMAND INFO returned %d rows for %d commands", len(info), len(all))
		}
		for i, e := range info {
			row, ok := e.([]any)
			if !ok || len(row) < 10 {
				t.Fatalf("COMMAND INFO %s: %v", all[i], e)
			}
			name := row[0].(string)
			peek := i >= len(consuming)
			if name != all[i] || row[1].(int64) != arity[name] || row[3].(int64) != 1 || row[4].(int64) != 1 || row[5].(int64) != 1 {
				t.Fatalf("%s: name/arity/first/last/step = %v %v %v %v %v", all[i], name, row[1], row[3], row[4], row[5])
			}
			flags, spec, cats := fmt.Sprint(row[2]), fmt.Sprint(row[8]), fmt.Sprint(row[6])
			wantFlags, wantSpec, wantCats := []string{"write", "denyoom", "fast"}, "RW access update", []string{"@write", "@fast", "@ratelimit"}
			if peek {
				wantFlags, wantSpec, wantCats = []string{"readonly", "fast"}, "RO access", []string{"@read", "@fast", "@ratelimit"}
			}
			for _, f := range wantFlags {
				if !strings.Contains(flags, f) {
					t.Fatalf("%s flags %s lack %s", name, flags, f)
				}
			}
			if peek == strings.Contains(flags, "write") || !strings.Contains(spec, wantSpec) {
				t.Fatalf("%s flags %s, key specs %s", name, flags, spec)
			}
			for _, c := range wantCats {
				if s.aclCategories && !strings.Contains(cats, c) {
					t.Fatalf("%s ACL categories %s lack %s", name, cats, c)
				}
			}
			keys, err := s.rdb.Do(ctx, "COMMAND", "GETKEYS", name, "user123", 15, 30, 60).StringSlice()
			if err != nil || len(keys) != 1 || keys[0] != "user123" {
				t.Fatalf("COMMAND GETKEYS %s: %v %v", name, keys, err)
			}
		}

		for _, l := range limiters {
			docs, err := s.rdb.Do(ctx, "COMMAND", "DOCS", l.cmd, l.peek).Result()
			if err != nil {
				t.Fatal(err)
			}
			d := fmt.Sprint(docs)
			for _, want := range append([]string{"summary", "module ratelimit", "MS", l.cost}, l.args[:]...) {
				if !strings.Contains(d, want) {
					t.Fatalf("COMMAND DOCS %s lacks %q: %s", l.cmd, want, d)
				}
			}
		}

		// RL.HOLD and RL.SETTLE: two keys, the limiter's and the hold's,
		// both written; the docs name the hold and the limiter.
		for _, c := range [][]any{{"RL.HOLD", "k", "k:hold", 60, "GCRA", 1, 1, 1, 1}, {"RL.SETTLE", "k", "k:hold", "GCRA", 1, 1, 1, 1}} {
			keys, err := s.rdb.Do(ctx, append([]any{"COMMAND", "GETKEYS"}, c...)...).StringSlice()
			if err != nil || fmt.Sprint(keys) != "[k k:hold]" {
				t.Fatalf("COMMAND GETKEYS %s: %v %v", c[0], keys, err)
			}
			info := fmt.Sprint(s.rdb.Do(ctx, "COMMAND", "INFO", c[0]).Val())
			docs := fmt.Sprint(s.rdb.Do(ctx, "COMMAND", "DOCS", c[0]).Val())
			if !strings.Contains(info, "write") || !strings.Contains(info, "denyoom") || !strings.Contains(docs, "hold") || !strings.Contains(docs, "limiter") {
				t.Fatalf("%s: COMMAND INFO %s, DOCS %s", c[0], info, docs)
			}
		}

		cat, err := s.rdb.Do(ctx, "ACL", "CAT", "ratelimit").StringSlice()
		if s.aclCategories {
			extra := []string{"rl.all", "rl.peek", "conc.acquire", "conc.release", "conc.peek", "rl.hold", "rl.settle"}
			if err != nil || len(cat) != len(all)+len(extra) || slices.ContainsFunc(extra, func(c string) bool { return !slices.Contains(cat, c) }) {
				t.Fatalf("ACL CAT ratelimit: %v %v", cat, err)
			}
		} else if err == nil {
			t.Fatalf("ACL CAT ratelimit on a server without module categories: %v", cat)
		}
	})
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
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
