package main

import (
	"fmt"
	"log"
	"os"
	"runtime"
	"strings"
	"time"
)

// target is one of the performance targets and whether the run met it.
type target struct {
	what, figure string
	met          bool
	cref         string // the C reference's figure, where the target applies to it
}

func report(out, chart string, works []*workload, conc []*concRow, httpRows []*httpRow, hung []*hungRow, others []serverRun, baseline int64, allocs map[string][2]float64,
	serverVersion, cpu string, cores, rounds, n16, n1 int) {
	byName := map[string]*workload{}
	lua := map[string]*workload{}
	engine := map[string]*workload{}
	function := map[string]*workload{}
	var redisRate *workload
	for _, w := range works {
		byName[w.name] = w
		switch w.kind {
		case "lua":
			lua[w.algo] = w
		case "engine":
			engine[w.algo] = w
		case "function":
			function[w.algo] = w
		case "redis_rate":
			redisRate = w
		}
	}
	incr := byName["INCR"]
	incrUs, incrP16 := incr.median(incr.usec), incr.median(incr.p16)

	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (`go run ./bench`): one server (Debian's %s) with the module on loopback, every\n", serverVersion)
	fmt.Fprintf(&b, "command measured in %d alternating rounds (the order rotates each round; medians below). Each run starts\n", rounds)
	fmt.Fprintf(&b, "from an empty keyspace and sends random keys among 100,000 (`-r 100000`), so about half the calls create\n")
	fmt.Fprintf(&b, "a key and most are admitted (they write): `redis-benchmark -c 50 -P 16 -n %d` and `-P 1 -n %d`; µs per\n", n16, n1)
	fmt.Fprintf(&b, "call is the server's own `usec_per_call` from `INFO commandstats` over the -P 16 run. The Lua rows are\n")
	fmt.Fprintf(&b, "`bench/lua/*.lua` run with EVALSHA: the same algorithm without the module. The rows marked C are\n")
	fmt.Fprintf(&b, "`bench/cref/cref.c`, a C module loaded into the same server that makes GCRA.THROTTLE's server calls with\n")
	fmt.Fprintf(&b, "no Go in the way, whole and with steps left out: what the module API itself costs.\n\n")
	fmt.Fprintf(&b, "Machine: %s, %d cores, %s/%s, %s. Shared and noisy: compare figures within one run only.\n\n",
		cpu, cores, runtime.GOOS, runtime.GOARCH, runtime.Version())

	fmt.Fprintf(&b, "![µs per call](chart.svg)\n\n")
	fmt.Fprintf(&b, "| command | µs/call | × INCR | ops/s -P 1 | ops/s -P 16 | × INCR at -P 16 | Lua µs/call | faster than Lua |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|\n")
	for _, w := range works {
		if w.kind == "lua" || w.kind == "engine" || w.kind == "function" || w.kind == "redis_rate" {
			continue
		}
		us := w.median(w.usec)
		luaCol, speed := "", ""
		if l := lua[w.algo]; l != nil && w.kind == "module" {
			lus := l.median(l.usec)
			luaCol, speed = fmt.Sprintf("%.2f", lus), fmt.Sprintf("%.1f×", lus/us)
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.0f | %.0f | %.2f | %s | %s |\n", w.name, us, us/incrUs,
			w.median(w.p1), w.median(w.p16), w.median(w.p16)/incrP16, luaCol, speed)
	}
	fmt.Fprintf(&b, "\nThe Lua scripts alone:\n\n| script | µs/call | ops/s -P 1 | ops/s -P 16 |\n|---|---|---|---|\n")
	for _, w := range works {
		if w.kind == "lua" {
			fmt.Fprintf(&b, "| %s | %.2f | %.0f | %.0f |\n", w.name, w.median(w.usec), w.median(w.p1), w.median(w.p16))
		}
	}

	engineSection(&b, works, lua, engine, function, redisRate)

	g := byName["GCRA.THROTTLE"]
	gUs := g.median(g.usec)
	cref := byName["C: GCRA's server calls"]
	cUs := cref.median(cref.usec)
	step := func(name string) float64 { w := byName[name]; return cUs - w.median(w.usec) }
	fmt.Fprintf(&b, "\n## What the module API costs\n\nFrom the rows above, this run:\n\n| | µs/call | × INCR |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| INCR | %.2f | 1.00 |\n", incrUs)
	fmt.Fprintf(&b, "| GCRA.THROTTLE's server calls made from C (the module API's floor for this job) | %.2f | %.2f |\n", cUs, cUs/incrUs)
	fmt.Fprintf(&b, "| GCRA.THROTTLE in Go | %.2f | %.2f |\n", gUs, gUs/incrUs)
	fmt.Fprintf(&b, "| the price of Go (crossings, runtime, parsing and arithmetic in Go) | %+.2f (%+.0f%% of the C figure) | |\n", gUs-cUs, 100*(gUs-cUs)/cUs)
	fmt.Fprintf(&b, "| `SetAbsExpire`, and keys with a TTL (C whole − C without it, whose keys have none) | %.2f | |\n", step("C: without SetAbsExpire"))
	fmt.Fprintf(&b, "| `Replicate` of `SET key value PXAT ms` (C whole − C without it) | %.2f | |\n", step("C: without Replicate"))
	fmt.Fprintf(&b, "| expiry, signal, replication and the five-integer reply (C whole − C read + write only) | %.2f | |\n", step("C: read + write only"))

	// Several limits in one call.
	all2, all3 := byName["RL.ALL, 2 GCRA keys"], byName["RL.ALL, 3 GCRA keys"]
	multi2, multi3 := byName["MULTI: 2 GCRA.THROTTLE"], byName["MULTI: 3 GCRA.THROTTLE"]
	a2, a3, m2, m3 := all2.median(all2.usec), all3.median(all3.usec), multi2.median(multi2.usec), multi3.median(multi3.usec)
	fmt.Fprintf(&b, "\n## Several limits in one call\n\n")
	fmt.Fprintf(&b, "RL.ALL over GCRA limits on keys of their own, beside one GCRA.THROTTLE and beside the same calls inside\n")
	fmt.Fprintf(&b, "MULTI/EXEC (which cannot take all or nothing; the µs are EXEC's, which include the queued calls, plus\n")
	fmt.Fprintf(&b, "MULTI's). Server-side µs per call, this run:\n\n| | µs/call | × GCRA.THROTTLE | × the MULTI equivalent |\n|---|---|---|---|\n")
	ck2, ck3 := byName["C: 2 keys (CREF.KEYS)"], byName["C: 3 keys (CREF.KEYS)"]
	c2, c3 := ck2.median(ck2.usec), ck3.median(ck3.usec)
	fmt.Fprintf(&b, "| GCRA.THROTTLE | %.2f | 1.00 | |\n", gUs)
	fmt.Fprintf(&b, "| RL.ALL, 2 keys | %.2f | %.2f | %.2f |\n| MULTI + 2 × GCRA.THROTTLE + EXEC | %.2f | %.2f | |\n", a2, a2/gUs, a2/m2, m2, m2/gUs)
	fmt.Fprintf(&b, "| the C reference's server calls on 2 keys (CREF.KEYS) | %.2f | %.2f (× CREF.GCRA: %.2f) | |\n", c2, c2/gUs, c2/cUs)
	fmt.Fprintf(&b, "| RL.ALL, 3 keys | %.2f | %.2f | %.2f |\n| MULTI + 3 × GCRA.THROTTLE + EXEC | %.2f | %.2f | |\n", a3, a3/gUs, a3/m3, m3, m3/gUs)
	fmt.Fprintf(&b, "| the C reference's server calls on 3 keys (CREF.KEYS) | %.2f | %.2f (× CREF.GCRA: %.2f) | |\n", c3, c3/gUs, c3/cUs)

	concSlowest := concSection(&b, conc)
	httpSection(&b, httpRows)
	hungSection(&b, hung)

	if len(others) > 0 {
		fmt.Fprintf(&b, "\n## Other servers\n\nThe same measurement, -P 16 only, on the local images `make images` builds (Debian's packages), run\n")
		fmt.Fprintf(&b, "after the tables above on the same machine; the first row repeats %s from above.\n\n", serverVersion)
		fmt.Fprintf(&b, "| server | INCR µs | SET … PX µs | GCRA.THROTTLE µs | × INCR | C reference µs | × INCR | price of Go | C read + write only, × INCR | GCRA ops/s -P 16, × INCR | Lua GCRA µs | faster than Lua |\n")
		fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, run := range append([]serverRun{{serverVersion, works}}, others...) {
			fmt.Fprintf(&b, "%s\n", serverRow(run))
		}
	}

	fmt.Fprintf(&b, "\n## Bytes per key\n\n`MEMORY USAGE` after one call, key names of one length; an integer `SET` with a TTL: **%d** bytes.\n\n", baseline)
	fmt.Fprintf(&b, "| algorithm | module | Lua script |\n|---|---|---|\n")
	for _, w := range works {
		if w.kind == "module" {
			luaBytes := "" // the UPTO and DEBT rows have no script of their own
			if l := lua[w.algo]; l != nil {
				luaBytes = fmt.Sprint(l.bytes)
			}
			fmt.Fprintf(&b, "| %s | %d | %s |\n", w.name, w.bytes, luaBytes)
		}
	}
	fmt.Fprintf(&b, "| the C reference's GCRA state | %d | |\n", cref.bytes)

	fmt.Fprintf(&b, "\n## The Go side\n\n`go test -run '^$' -bench BenchmarkCommands -benchmem ./module/`: parsing, the algorithm and the decision,\nwithout the server.\n\n")
	fmt.Fprintf(&b, "| command | ns/op | allocs/op |\n|---|---|---|\n")
	maxAllocs := 0.0
	for _, w := range works {
		if a, ok := allocs[strings.ToLower(w.name)]; ok {
			fmt.Fprintf(&b, "| %s | %.0f | %.0f |\n", w.name, a[0], a[1])
			maxAllocs = max(maxAllocs, a[1])
		}
	}
	for _, name := range []string{"rl.all", "rl.peek"} { // over a GCRA limit and a sliding window
		if a, ok := allocs[name]; ok {
			fmt.Fprintf(&b, "| %s, 2 keys | %.0f | %.0f |\n", strings.ToUpper(name), a[0], a[1])
			maxAllocs = max(maxAllocs, a[1])
		}
	}
	for _, name := range []string{"conc.acquire", "conc.release", "conc.peek"} { // 3 holders, one lapsed
		if a, ok := allocs[name]; ok {
			fmt.Fprintf(&b, "| %s | %.0f | %.0f |\n", strings.ToUpper(name), a[0], a[1])
			maxAllocs = max(maxAllocs, a[1])
		}
	}
	if c, g := allocs["client"], allocs["go-redis"]; c[1] > 0 || g[1] > 0 {
		fmt.Fprintf(&b, "\nThe Go client (`go test -run '^$' -bench . -benchmem ./client/`): one `Take` of a GCRA limit through\n")
		fmt.Fprintf(&b, "go-redis to a fake server (a hook, no network), beside go-redis's own `Do` of the same command:\n\n")
		fmt.Fprintf(&b, "| call | ns/op | allocs/op |\n|---|---|---|\n| client.Take | %.0f | %.0f |\n| go-redis Do | %.0f | %.0f |\n",
			c[0], c[1], g[0], g[1])
	}

	slowest := 1e9
	slowestName := ""
	for _, w := range works {
		if l := lua[w.algo]; l != nil && w.kind == "module" {
			if r := l.median(l.usec) / w.median(w.usec); r < slowest {
				slowest, slowestName = r, w.name
			}
		}
	}
	gcraBytes := g.bytes
	cP16 := cref.median(cref.p16)
	yes := func(met bool) string {
		if met {
			return "yes"
		}
		return "**no**"
	}
	targets := []target{
		{"GCRA.THROTTLE costs at most 3× INCR's µs per call", fmt.Sprintf("%.2f×", gUs/incrUs), gUs <= 3*incrUs,
			fmt.Sprintf("%.2f×: %s", cUs/incrUs, yes(cUs <= 3*incrUs))},
		{"at -P 16, GCRA.THROTTLE reaches at least 0.6× INCR's throughput", fmt.Sprintf("%.2f×", g.median(g.p16)/incrP16), g.median(g.p16) >= 0.6*incrP16,
			fmt.Sprintf("%.2f×: %s", cP16/incrP16, yes(cP16 >= 0.6*incrP16))},
		{"every algorithm is at least 2× faster than its Lua equivalent", fmt.Sprintf("slowest: %s %.1f×", slowestName, slowest), slowest >= 2, ""},
		{"a GCRA key costs no more memory than an integer SET with the same TTL", fmt.Sprintf("%d vs %d bytes", gcraBytes, baseline), gcraBytes <= baseline,
			fmt.Sprintf("%d bytes: %s", cref.bytes, yes(cref.bytes <= baseline))},
		{"the Go side allocates nothing per command", fmt.Sprintf("%.0f allocs/op at most", maxAllocs), maxAllocs == 0 && len(allocs) > 0, ""},
		{"RL.ALL over 2 keys costs at most 1.6× one GCRA.THROTTLE", fmt.Sprintf("%.2f×", a2/gUs), a2 <= 1.6*gUs,
			fmt.Sprintf("2 keys %.2f× CREF.GCRA: %s", c2/cUs, yes(c2 <= 1.6*cUs))},
		{"RL.ALL over 3 keys costs at most 2.2× one GCRA.THROTTLE", fmt.Sprintf("%.2f×", a3/gUs), a3 <= 2.2*gUs,
			fmt.Sprintf("3 keys %.2f× CREF.GCRA: %s", c3/cUs, yes(c3 <= 2.2*cUs))},
		{"RL.ALL costs less than the same calls in MULTI/EXEC", fmt.Sprintf("2 keys %.2f×, 3 keys %.2f×", a2/m2, a3/m3), a2 < m2 && a3 < m3, ""},
		{"CONC.ACQUIRE + CONC.RELEASE pairs and CONC.ACQUIRE alone reach at least 3× the Lua recipe's calls per second",
			fmt.Sprintf("slowest: %s %.1f×", concSlowest.name, concSlowest.ratio), concSlowest.ratio >= 3, ""},
	}
	fmt.Fprintf(&b, "\n## Targets\n\n| target | this run | met | the C reference |\n|---|---|---|---|\n")
	for _, t := range targets {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.what, t.figure, yes(t.met), t.cref)
	}
	if notes, err := os.ReadFile("bench/NOTES.md"); err == nil {
		fmt.Fprintf(&b, "\n%s", notes)
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(chart, svg(works), 0o644); err != nil {
		log.Fatal(err)
	}
}

// serverRow is one server's line in the "Other servers" table.
func serverRow(run serverRun) string {
	by := map[string]*workload{}
	for _, w := range run.works {
		by[w.name] = w
	}
	us := func(name string) float64 { w := by[name]; return w.median(w.usec) }
	incr, g, c, bare, l := us("INCR"), us("GCRA.THROTTLE"), us("C: GCRA's server calls"), us("C: read + write only"), us("Lua GCRA")
	gw, iw := by["GCRA.THROTTLE"], by["INCR"]
	return fmt.Sprintf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %+.2f (%+.0f%%) | %.2f | %.0f, %.2f | %.2f | %.1f× |",
		run.version, incr, us("SET (integer, PX)"), g, g/incr, c, c/incr, g-c, 100*(g-c)/c, bare/incr,
		gw.median(gw.p16), gw.median(gw.p16)/iw.median(iw.p16), l, l/g)
}

// svg draws µs per call as horizontal bars: native grey, module blue, the C
// reference green, Lua orange.
func svg(works []*workload) []byte {
	const rowH, left, width = 22, 170, 420
	maxUs := 0.0
	for _, w := range works {
		maxUs = max(maxUs, w.median(w.usec))
	}
	h := len(works)*rowH + 50
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", left+width+70, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="18" font-weight="bold">µs per call on the server (INFO commandstats), median</text>`+"\n", left)
	colors := map[string]string{"native": "#8a8a8a", "module": "#2f6fb3", "all": "#2f6fb3", "multi": "#8a8a8a", "cref": "#3a9a5b", "lua": "#e08a2c", "engine": "#b0413e", "function": "#7a3fb0", "redis_rate": "#e08a2c"}
	for i, w := range works {
		y := 30 + i*rowH
		us := w.median(w.usec)
		bw := int(float64(width) * us / maxUs)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+14, w.name)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", left, y+3, max(bw, 1), rowH-6, colors[w.kind])
		fmt.Fprintf(&b, `<text x="%d" y="%d">%.2f</text>`+"\n", left+bw+5, y+14, us)
	}
	fmt.Fprintf(&b, "</svg>\n")
	return []byte(b.String())
}

// slowestConc is the concurrency workload closest to its Lua recipe, in
// calls per second.
type slowestConc struct {
	name  string
	ratio float64
}

// concSection writes the concurrency limiter's table and returns the
// workload with the smallest gain over Lua in calls per second.
func concSection(b *strings.Builder, rows []*concRow) slowestConc {
	fmt.Fprintf(b, "\n## Concurrency limiter\n\n")
	fmt.Fprintf(b, "CONC.* beside `bench/lua/conc_acquire.lua` and `conc_release.lua`, the sorted-set recipe peers document\n")
	fmt.Fprintf(b, "(ZREMRANGEBYSCORE of every lapsed member, ZSCORE, ZCARD, ZADD, PEXPIREAT; the same five-integer reply),\n")
	fmt.Fprintf(b, "module and Lua alternating in each round, medians. Calls per second come from redis-benchmark, pairs per\n")
	fmt.Fprintf(b, "second from a driver of the bench's own that writes the protocol and parses the replies as leanly as\n")
	fmt.Fprintf(b, "redis-benchmark (`pairBenchmark` in bench/conc.go); µs are the server's own, from `INFO commandstats`\n")
	fmt.Fprintf(b, "(for a pair, both calls).\n\n")
	fmt.Fprintf(b, "| workload | module µs | Lua µs | × | module per s | Lua per s | × | what |\n|---|---|---|---|---|---|---|---|\n")
	slowest := slowestConc{ratio: 1e9}
	for _, r := range rows {
		mo, mu := r.mod.medians()
		lo, lu := r.lua.medians()
		perS := "| | |"
		if mo > 0 && lo > 0 {
			perS = fmt.Sprintf("%.0f | %.0f | %.1f×", mo, lo, mo/lo)
			if mo/lo < slowest.ratio {
				slowest = slowestConc{r.name, mo / lo}
			}
		}
		fmt.Fprintf(b, "| %s | %.2f | %.2f | %.1f× | %s | %s |\n", r.name, mu, lu, lu/mu, perS, r.what)
	}
	return slowest
}

// httpSection writes the middleware's cost per request.
func httpSection(b *strings.Builder, rows []*httpRow) {
	fmt.Fprintf(b, "\n## The HTTP middleware\n\n")
	fmt.Fprintf(b, "A handler that writes \"ok\", served on loopback bare and behind `httplimit` (Redis on loopback, the\n")
	fmt.Fprintf(b, "same server), driven by 32 keep-alive Go clients (`measureHTTP` in bench/http.go), alternating, medians.\n")
	fmt.Fprintf(b, "Server, clients and Redis share the machine's cores, so the µs added per request include the\n")
	fmt.Fprintf(b, "Redis round trip's CPU on both ends.\n\n")
	fmt.Fprintf(b, "| policies | bare req/s | with the middleware (or the GET) req/s | × | µs added per request |\n|---|---|---|---|---|\n")
	w := workload{}
	for _, r := range rows {
		bare, with := w.median(r.bare), w.median(r.with)
		fmt.Fprintf(b, "| %s | %.0f | %.0f | %.2f | %.1f |\n", r.name, bare, with, with/bare, 1e6/with-1e6/bare)
	}
}

// hungSection writes what requests cost while Redis hangs.
func hungSection(b *strings.Builder, rows []*hungRow) {
	fmt.Fprintf(b, "\n## While Redis hangs\n\n")
	fmt.Fprintf(b, "The same server stopped with SIGSTOP (it accepts connections and never answers, as a hung process does),\n")
	fmt.Fprintf(b, "32 keep-alive clients sending requests through the middleware (one policy, FailOpen, the default 50 ms\n")
	fmt.Fprintf(b, "timeout and breaker) for 3 s, each request's time from the client (`measureHung` in bench/http.go). The\n")
	fmt.Fprintf(b, "reference is a handler that sends one GET to Redis with a 50 ms context over a go-redis client with its\n")
	fmt.Fprintf(b, "defaults, what a limiter built on a plain client costs: its clients wait until their requests end.\n\n")
	fmt.Fprintf(b, "| requests through | requests served | median | p99 | slowest | slowest ÷ the 50 ms timeout |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %d | %v | %v | %v | %.1f× |\n", r.name, r.n, r.median.Round(time.Microsecond),
			r.p99.Round(time.Microsecond), r.slowest.Round(time.Microsecond), float64(r.slowest)/float64(50*time.Millisecond))
	}
}

// engineSection compares the Lua engine, as a FUNCTION library (FCALL) and
// as EVAL scripts, with the module's commands, the recipes and
// go-redis/redis_rate's allowN, from the same run.
func engineSection(b *strings.Builder, works []*workload, lua, engine, function map[string]*workload, redisRate *workload) {
	fmt.Fprintf(b, "\n## The Lua engine\n\nThe Lua engine (the module's replies, errors and state, byte for byte, on exact integers) for servers\n")
	fmt.Fprintf(b, "without the module: the FUNCTION library `lua/ratelimit.lua` called with FCALL, and the same commands as EVAL\n")
	fmt.Fprintf(b, "scripts (package lua) run with EVALSHA, in the same run beside the module's command and the recipe of the\n")
	fmt.Fprintf(b, "same algorithm above (`bench/lua/`, which is not exact and does not check its input):\n\n")
	fmt.Fprintf(b, "| command | module µs/call | FCALL µs/call | FCALL ÷ recipe | EVAL script µs/call | recipe µs/call | FCALL ÷ module |\n|---|---|---|---|---|---|---|\n")
	for _, w := range works {
		f, e, l := function[w.algo], engine[w.algo], lua[w.algo]
		if w.kind != "module" || f == nil || e == nil || l == nil {
			continue
		}
		us, fus, lus := w.median(w.usec), f.median(f.usec), l.median(l.usec)
		fmt.Fprintf(b, "| %s | %.2f | %.2f | %.2f× | %.2f | %.2f | %.1f× |\n", w.name, us, fus, fus/lus, e.median(e.usec), lus, fus/us)
	}
	if f := function["gcra"]; f != nil && redisRate != nil {
		rr := redisRate.median(redisRate.usec)
		fmt.Fprintf(b, "\ngo-redis/redis_rate's allowN (v10, the GCRA script most Go services run, read from the library as it sends\n")
		fmt.Fprintf(b, "it, run with EVALSHA as the recipes are; burst 16, 30 a minute): %.2f µs per call; GCRA.THROTTLE through\n", rr)
		fmt.Fprintf(b, "FCALL ÷ allowN: **%.2f×**.\n", f.median(f.usec)/rr)
	}
}
