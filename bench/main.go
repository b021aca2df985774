// Command bench measures the module beside native commands (INCR, SET),
// beside Lua scripts doing the same job (bench/lua, run with EVALSHA: what
// users run without the module) and beside a C module making GCRA.THROTTLE's
// server calls (bench/cref: what the module API itself costs), in one run,
// and writes bench/BENCHMARKS.md and bench/chart.svg. `make bench` builds the C
// reference and runs it.
//
// On Debian's redis-server, for every command, in alternating rounds (the
// order rotates each round, the median is reported): redis-benchmark
// throughput at -P 1 and -P 16 with 50 clients on random keys, and the
// server's own µs per call from INFO commandstats. Then bytes per key (MEMORY
// USAGE) beside an integer SET with the same TTL, and the Go side's
// allocations per command (go test -bench). With -images, the rows marked
// everywhere again, at -P 16, on servers started from those local images.
package main

import (
	"context"
	"embed"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/bench/internal/machine"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

//go:embed lua/*.lua
var scripts embed.FS

// workload is one command as redis-benchmark sends it.
type workload struct {
	name string // row label
	kind string // "native", "module", "all" (RL.ALL), "multi" (MULTI/EXEC), "cref" (the C reference), "lua" (a recipe), "engine" (the Lua engine's EVAL script), "function" (its FUNCTION library) or "redis_rate" (go-redis/redis_rate's allowN)
	algo string // pairs a module command with its Lua script
	stat string // its INFO commandstats name
	args []string
	lua  string // script file, for kind "lua"
	// engine: for kinds "engine" and "function", the command whose script
	// or function of the Lua engine (package lua) runs.
	engine string
	// keys: for kind "multi", the GCRA.THROTTLE calls (on keys of their
	// own) inside one MULTI/EXEC; for RL.ALL, its numkeys.
	keys int
	// everywhere: also measured on the other servers (-images)
	everywhere bool
	p1         []float64
	p16        []float64
	usec       []float64
	bytes      int64
}

func (w *workload) median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func main() {
	rounds := flag.Int("rounds", 3, "alternating rounds (the median is reported)")
	n16 := flag.Int("n", 300000, "requests per -P 16 run")
	n1 := flag.Int("n1", 100000, "requests per -P 1 run")
	module := flag.String("module", "build/ratelimit.so", "the module")
	cref := flag.String("cref", "build/cref.so", "the C reference module (make bench builds it)")
	images := flag.String("images", "", "comma-separated local server images to measure GCRA.THROTTLE on as well (make bench: Redis 8.0 and Valkey 8.1)")
	out := flag.String("out", "bench/BENCHMARKS.md", "the report")
	chart := flag.String("chart", "bench/chart.svg", "the chart")
	only := flag.String("only", "", "measure one part alone and print its table, writing no report: http (the middleware's cost)")
	flag.Parse()
	log.SetFlags(0)

	for _, bin := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(bin); err != nil {
			log.Fatalf("bench: %s not found (make bench installs Debian's redis-server)", bin)
		}
	}
	so, err := filepath.Abs(*module)
	if err != nil {
		log.Fatal(err)
	}
	cso, err := filepath.Abs(*cref)
	if err != nil {
		log.Fatal(err)
	}
	if filepath.Dir(so) != filepath.Dir(cso) {
		log.Fatal("bench: the module and the C reference must be in one directory")
	}
	ctx := context.Background()

	host := startHost(ctx, so, cso)
	if *only == "http" {
		var b strings.Builder
		httpSection(&b, measureHTTP(ctx, host, *rounds, *n16/10))
		host.stop()
		fmt.Print(b.String())
		return
	}
	works := workloads()
	measure(ctx, host, works, *rounds, *n16, *n1)
	conc := measureConc(ctx, host, *rounds, *n16)
	httpRows := measureHTTP(ctx, host, *rounds, *n16/10)
	hung := measureHung(ctx, host)
	host.rdb.FlushAll(ctx)
	baseline := memory(ctx, host.rdb, works)
	host.stop()

	var others []serverRun
	for _, image := range strings.FieldsFunc(*images, func(r rune) bool { return r == ',' }) {
		s := startImage(ctx, image, filepath.Dir(so), filepath.Base(so), filepath.Base(cso))
		ws := slices.DeleteFunc(workloads(), func(w *workload) bool { return !w.everywhere })
		measure(ctx, s, ws, *rounds, *n16, 0)
		s.stop()
		others = append(others, serverRun{s.version, ws})
	}

	allocs := goAllocs()
	cpu, cores := machine.CPU()
	report(*out, *chart, works, conc, httpRows, hung, others, baseline, allocs, host.version, cpu, cores, *rounds, *n16, *n1)
	log.Printf("bench: wrote %s and %s", *out, *chart)
}

// server is one running server with the module and the C reference loaded.
type server struct {
	version string // "Redis 7.0.15", "Valkey 8.1.1"
	port    int
	rdb     *redis.Client
	stop    func()
	// signal sends a signal to the server's process (the host's only):
	// SIGSTOP makes a server that accepts and never answers.
	signal func(os.Signal)
}

// serverRun is what one more server measured.
type serverRun struct {
	version string
	works   []*workload
}

var serverArgs = []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}

// startHost starts Debian's redis-server on this machine.
func startHost(ctx context.Context, so, cso string) *server {
	port := machine.FreePort()
	args := append([]string{"--port", strconv.Itoa(port)}, serverArgs...)
	srv := exec.Command("redis-server", append(args, "--loadmodule", so, "--loadmodule", cso)...)
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	s := ready(ctx, port, func() { srv.Process.Kill(); srv.Wait() })
	s.signal = func(sig os.Signal) { srv.Process.Signal(sig) }
	return s
}

// startImage starts a server from a local image (images/build.sh), on the
// host's network bound to 127.0.0.1, with dir (the modules) mounted
// read-only.
func startImage(ctx context.Context, image, dir, so, cso string) *server {
	const prefix = "ratelimit-bench-"
	if old, _ := exec.Command("docker", "ps", "-aq", "--filter", "name="+prefix).Output(); len(old) > 0 {
		exec.Command("docker", append([]string{"rm", "-f"}, strings.Fields(string(old))...)...).Run()
	}
	bin := "redis-server"
	if strings.Contains(image, "valkey") {
		bin = "valkey-server"
	}
	port := machine.FreePort()
	name := prefix + strconv.Itoa(port)
	args := []string{"run", "-d", "--rm", "--name", name, "--network", "host", "-v", dir + ":/modules:ro", image,
		bin, "--port", strconv.Itoa(port)}
	args = append(append(args, serverArgs...), "--loadmodule", "/modules/"+so, "--loadmodule", "/modules/"+cso)
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		log.Fatalf("bench: docker %v: %v\n%s (make images builds the images)", args, err, out)
	}
	return ready(ctx, port, func() { exec.Command("docker", "rm", "-f", name).Run() })
}

// ready waits for the server on port and reads its version.
func ready(ctx context.Context, port int, stop func()) *server {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Protocol: 2})
	for i := 0; rdb.Ping(ctx).Err() != nil; i++ {
		if i > 100 {
			stop()
			log.Fatalf("bench: the server on port %d did not start", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s := &server{port: port, rdb: rdb, stop: stop}
	for _, f := range strings.Fields(rdb.Info(ctx, "server").Val()) {
		if v, ok := strings.CutPrefix(f, "redis_version:"); ok && s.version == "" {
			s.version = "Redis " + v
		}
		if v, ok := strings.CutPrefix(f, "valkey_version:"); ok {
			s.version = "Valkey " + v
		}
	}
	checkReference(ctx, rdb)
	return s
}

// measure runs every workload on s in alternating rounds, at -P 16 (with
// the server's µs per call) and, when n1 > 0, at -P 1.
func measure(ctx context.Context, s *server, works []*workload, rounds, n16, n1 int) {
	rrScript := redisRateScript(ctx, s.port) // first: it flushes the script cache
	// For make callgrind-lua, which counts its instructions beside the library's.
	if err := os.WriteFile("build/redis_rate_allown.lua", []byte(rrScript), 0o644); err != nil {
		log.Printf("bench: %v", err)
	}
	library, _ := lua.Library()
	if err := s.rdb.FunctionLoadReplace(ctx, library).Err(); err != nil {
		log.Fatalf("bench: FUNCTION LOAD: %v", err)
	}
	for _, w := range works {
		if w.kind == "function" {
			w.args = append([]string{"FCALL", lua.Must(w.engine).Function, "1"}, w.args...)
		}
		if w.kind != "lua" && w.kind != "engine" && w.kind != "redis_rate" {
			continue
		}
		src, err := scripts.ReadFile("lua/" + w.lua)
		if w.kind == "redis_rate" {
			src, err = []byte(rrScript), nil
		}
		if w.kind == "engine" {
			s, ok := lua.Get(w.engine)
			src, err = []byte(s.Source), nil
			if !ok {
				err = fmt.Errorf("no script for %s", w.engine)
			}
		}
		if err != nil {
			log.Fatal(err)
		}
		sha, err := s.rdb.ScriptLoad(ctx, string(src)).Result()
		if err != nil {
			log.Fatalf("bench: %s: %v", w.lua, err)
		}
		w.args = append([]string{"EVALSHA", sha, "1"}, w.args...)
	}
	pipelines := []int{16, 1}
	if n1 == 0 {
		pipelines = pipelines[:1]
	}
	for r := range rounds {
		order := append(slices.Clone(works[r%len(works):]), works[:r%len(works)]...)
		for _, w := range order {
			for _, p := range pipelines {
				s.rdb.FlushAll(ctx)
				s.rdb.ConfigResetStat(ctx)
				n := n16
				if p == 1 {
					n = n1
				}
				var rps float64
				switch w.kind {
				case "multi":
					rps = multiBenchmark(ctx, s.port, p, n, w.keys, w.args)
				default:
					rps = benchmark(s.port, p, n, w.args)
				}
				if p == 16 {
					w.p16 = append(w.p16, rps)
					us := usecPerCall(ctx, s.rdb, w.stat)
					if w.kind == "multi" { // EXEC runs the queued calls; MULTI opens it
						us += usecPerCall(ctx, s.rdb, "multi")
					}
					w.usec = append(w.usec, us)
				} else {
					w.p1 = append(w.p1, rps)
				}
			}
			log.Printf("%s round %d %-26s %8.0f ops/s at -P 16, %.2f µs/call", s.version, r+1, w.name,
				w.p16[len(w.p16)-1], w.usec[len(w.usec)-1])
		}
	}
}

// checkReference makes sure the C reference does the work it stands for:
// like GCRA.THROTTLE, it replies five integers and leaves a key holding a
// 19-digit Unix time in nanoseconds that expires then.
func checkReference(ctx context.Context, rdb *redis.Client) {
	for _, cmd := range []string{"GCRA.THROTTLE", "CREF.GCRA"} {
		key := "b:check:" + cmd
		reply, err := rdb.Do(ctx, cmd, key, "15", "30", "60").Slice()
		if err != nil || len(reply) != 5 {
			log.Fatalf("bench: %s replied %v, %v", cmd, reply, err)
		}
		val, err := rdb.Get(ctx, key).Result()
		tat, perr := strconv.ParseInt(val, 10, 64)
		exp, _ := rdb.Do(ctx, "PEXPIRETIME", key).Int64()
		now := time.Now()
		if err != nil || perr != nil || len(val) != 19 || tat <= now.UnixNano() ||
			exp < now.UnixMilli() || exp > tat/int64(time.Millisecond)+1 {
			log.Fatalf("bench: %s left %q (%v) expiring at %v ms", cmd, val, err, exp)
		}
	}
	rdb.FlushAll(ctx)
}

func workloads() []*workload {
	k := func(tag string) string { return "b:" + tag + ":__rand_int__" }
	return []*workload{
		{everywhere: true, name: "INCR", kind: "native", stat: "incr", args: []string{"INCR", k("incr")}},
		{everywhere: true, name: "SET (integer, PX)", kind: "native", stat: "set", args: []string{"SET", k("set"), "1795000000000000000", "PX", "60000"}},
		{everywhere: true, name: "GCRA.THROTTLE", kind: "module", algo: "gcra", stat: "gcra.throttle", args: []string{"GCRA.THROTTLE", k("gcra"), "15", "30", "60"}},
		{name: "GCRA.THROTTLE ... UPTO 10", kind: "module", algo: "gcrau", stat: "gcra.throttle", args: []string{"GCRA.THROTTLE", k("gcrau"), "15", "30", "60", "1", "UPTO", "10"}},
		{name: "GCRA.THROTTLE ... 20 DEBT", kind: "module", algo: "gcrad", stat: "gcra.throttle", args: []string{"GCRA.THROTTLE", k("gcrad"), "15", "30", "60", "20", "DEBT"}},
		{name: "TB.TAKE", kind: "module", algo: "tb", stat: "tb.take", args: []string{"TB.TAKE", k("tb"), "16", "30", "60"}},
		{name: "LB.ENQUEUE", kind: "module", algo: "lb", stat: "lb.enqueue", args: []string{"LB.ENQUEUE", k("lb"), "15", "30", "60"}},
		{name: "SW.HIT", kind: "module", algo: "sw", stat: "sw.hit", args: []string{"SW.HIT", k("sw"), "16", "60"}},
		{name: "FW.HIT", kind: "module", algo: "fw", stat: "fw.hit", args: []string{"FW.HIT", k("fw"), "16", "60"}},
		{name: "SL.HIT", kind: "module", algo: "sl", stat: "sl.hit", args: []string{"SL.HIT", k("sl"), "16", "60"}},
		{name: "RL.ALL, 2 GCRA keys", kind: "all", stat: "rl.all", keys: 2,
			args: []string{"RL.ALL", "2", k("a1"), k("a2"), "GCRA", "15", "30", "60", "1", "GCRA", "15", "30", "60", "1"}},
		{name: "RL.ALL, 3 GCRA keys", kind: "all", stat: "rl.all", keys: 3,
			args: []string{"RL.ALL", "3", k("a1"), k("a2"), k("a3"), "GCRA", "15", "30", "60", "1", "GCRA", "15", "30", "60", "1", "GCRA", "15", "30", "60", "1"}},
		{name: "C: 2 keys (CREF.KEYS)", kind: "cref", algo: "keys2", stat: "cref.keys", keys: 2,
			args: []string{"CREF.KEYS", "2", k("ck1"), k("ck2"), "15", "30", "60"}},
		{name: "C: 3 keys (CREF.KEYS)", kind: "cref", algo: "keys3", stat: "cref.keys", keys: 3,
			args: []string{"CREF.KEYS", "3", k("ck1"), k("ck2"), k("ck3"), "15", "30", "60"}},
		{name: "MULTI: 2 GCRA.THROTTLE", kind: "multi", stat: "exec", keys: 2, args: []string{"GCRA.THROTTLE", "b:m", "15", "30", "60"}},
		{name: "MULTI: 3 GCRA.THROTTLE", kind: "multi", stat: "exec", keys: 3, args: []string{"GCRA.THROTTLE", "b:m", "15", "30", "60"}},
		{everywhere: true, name: "C: GCRA's server calls", kind: "cref", algo: "gcra", stat: "cref.gcra", args: []string{"CREF.GCRA", k("cgcra"), "15", "30", "60"}},
		{name: "C: without SetAbsExpire", kind: "cref", algo: "noexp", stat: "cref.noexpire", args: []string{"CREF.NOEXPIRE", k("cnoexp"), "15", "30", "60"}},
		{name: "C: without Replicate", kind: "cref", algo: "norepl", stat: "cref.norepl", args: []string{"CREF.NOREPL", k("cnorepl"), "15", "30", "60"}},
		{everywhere: true, name: "C: read + write only", kind: "cref", algo: "bare", stat: "cref.bare", args: []string{"CREF.BARE", k("cbare"), "15", "30", "60"}},
		{everywhere: true, name: "Lua GCRA", kind: "lua", algo: "gcra", stat: "evalsha", lua: "gcra.lua", args: []string{k("lgcra"), "15", "30", "60"}},
		{name: "Lua token bucket", kind: "lua", algo: "tb", stat: "evalsha", lua: "tb.lua", args: []string{k("ltb"), "16", "30", "60"}},
		{name: "Lua shaper", kind: "lua", algo: "lb", stat: "evalsha", lua: "lb.lua", args: []string{k("llb"), "15", "30", "60"}},
		{name: "Lua sliding window", kind: "lua", algo: "sw", stat: "evalsha", lua: "sw.lua", args: []string{k("lsw"), "16", "60"}},
		{name: "Lua fixed window", kind: "lua", algo: "fw", stat: "evalsha", lua: "fw.lua", args: []string{k("lfw"), "16", "60"}},
		{name: "Lua sliding log", kind: "lua", algo: "sl", stat: "evalsha", lua: "sl.lua", args: []string{k("lsl"), "16", "60"}},
		{name: "engine: GCRA.THROTTLE", kind: "engine", algo: "gcra", stat: "evalsha", engine: "gcra.throttle", args: []string{k("egcra"), "15", "30", "60"}},
		{name: "engine: TB.TAKE", kind: "engine", algo: "tb", stat: "evalsha", engine: "tb.take", args: []string{k("etb"), "16", "30", "60"}},
		{name: "engine: LB.ENQUEUE", kind: "engine", algo: "lb", stat: "evalsha", engine: "lb.enqueue", args: []string{k("elb"), "15", "30", "60"}},
		{name: "engine: SW.HIT", kind: "engine", algo: "sw", stat: "evalsha", engine: "sw.hit", args: []string{k("esw"), "16", "60"}},
		{name: "engine: FW.HIT", kind: "engine", algo: "fw", stat: "evalsha", engine: "fw.hit", args: []string{k("efw"), "16", "60"}},
		{name: "engine: SL.HIT", kind: "engine", algo: "sl", stat: "evalsha", engine: "sl.hit", args: []string{k("esl"), "16", "60"}},
		{name: "function: GCRA.THROTTLE", kind: "function", algo: "gcra", stat: "fcall", engine: "gcra.throttle", args: []string{k("fgcra"), "15", "30", "60"}},
		{name: "function: TB.TAKE", kind: "function", algo: "tb", stat: "fcall", engine: "tb.take", args: []string{k("ftb"), "16", "30", "60"}},
		{name: "function: LB.ENQUEUE", kind: "function", algo: "lb", stat: "fcall", engine: "lb.enqueue", args: []string{k("flb"), "15", "30", "60"}},
		{name: "function: SW.HIT", kind: "function", algo: "sw", stat: "fcall", engine: "sw.hit", args: []string{k("fsw"), "16", "60"}},
		{name: "function: FW.HIT", kind: "function", algo: "fw", stat: "fcall", engine: "fw.hit", args: []string{k("ffw"), "16", "60"}},
		{name: "function: SL.HIT", kind: "function", algo: "sl", stat: "fcall", engine: "sl.hit", args: []string{k("fsl"), "16", "60"}},
		{name: "redis_rate allowN (GCRA 16/min)", kind: "redis_rate", algo: "gcra", stat: "evalsha", args: []string{k("rr"), "16", "30", "60", "1"}},
	}
}

// redisRateScript is the script go-redis/redis_rate's AllowN runs, as the
// library sends it: the server's script cache is flushed, so AllowN's
// EVALSHA misses and go-redis sends the script's text with EVAL, which a
// hook reads. It is measured as the recipes are, with redis-benchmark.
func redisRateScript(ctx context.Context, port int) string {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Protocol: 2})
	defer rdb.Close()
	var src evalSource
	rdb.AddHook(&src)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		log.Fatalf("bench: SCRIPT FLUSH: %v", err)
	}
	if _, err := redis_rate.NewLimiter(rdb).AllowN(ctx, "b:rr:probe", redis_rate.PerMinute(30), 1); err != nil {
		log.Fatalf("bench: redis_rate: %v", err)
	}
	if src.text == "" {
		log.Fatal("bench: redis_rate sent no EVAL")
	}
	return src.text
}

// evalSource keeps the script text of the EVAL commands a client sends.
type evalSource struct{ text string }

func (*evalSource) DialHook(next redis.DialHook) redis.DialHook { return next }

func (e *evalSource) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), "eval") {
			e.text = fmt.Sprint(args[1])
		}
		return next(ctx, cmd)
	}
}

func (*evalSource) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

var rpsRE = regexp.MustCompile(`([0-9.]+) requests per second`)

// benchmark runs redis-benchmark and returns its requests per second.
func benchmark(port, pipeline, n int, args []string) float64 {
	return benchmarkRange(port, pipeline, n, 100000, args)
}

// benchmarkRange is benchmark with __rand_int__ drawn from r values.
func benchmarkRange(port, pipeline, n, r int, args []string) float64 {
	cmd := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-c", "50", "-P", strconv.Itoa(pipeline),
		"-n", strconv.Itoa(n), "-r", strconv.Itoa(r), "-q"}, args...)
	out, err := exec.Command("redis-benchmark", cmd...).CombinedOutput()
	if err != nil {
		log.Fatalf("bench: redis-benchmark %v: %v\n%s", cmd, err, out)
	}
	m := rpsRE.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		log.Fatalf("bench: no result from redis-benchmark %v:\n%s", cmd, out)
	}
	v, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	return v
}

// multiBenchmark sends n transactions, MULTI, keys calls of args (each on
// a random key of its own among 100,000, args[1] the key's prefix), EXEC,
// from 50 connections with pipeline transactions per round trip, as
// redis-benchmark does for one command; it returns transactions per second.
func multiBenchmark(ctx context.Context, port, pipeline, n, keys int, args []string) float64 {
	const clients = 50
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Protocol: 2, PoolSize: clients, MaxRetries: -1})
	defer rdb.Close()
	var sent atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), uint64(port)))
			for sent.Add(int64(pipeline)) <= int64(n)+int64(pipeline)-1 {
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range pipeline {
						p.Do(ctx, "MULTI")
						for k := range keys {
							call := []any{args[0], fmt.Sprintf("%s%d:%d", args[1], k, rng.IntN(100000))}
							for _, a := range args[2:] {
								call = append(call, a)
							}
							p.Do(ctx, call...)
						}
						p.Do(ctx, "EXEC")
					}
					return nil
				})
				if err != nil {
					log.Fatalf("bench: MULTI %v: %v", args, err)
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// usecPerCall reads one command's µs per call from INFO commandstats.
func usecPerCall(ctx context.Context, rdb *redis.Client, stat string) float64 {
	return commandStat(ctx, rdb, stat, "usec_per_call")
}

// commandStat reads one field ("usec", "usec_per_call") of one command's
// INFO commandstats line.
func commandStat(ctx context.Context, rdb *redis.Client, stat, field string) float64 {
	info := rdb.Info(ctx, "commandstats").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+stat+":"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, field+"="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					return x
				}
			}
		}
	}
	log.Fatalf("bench: no commandstats %s for %s", field, stat)
	return 0
}

// memory measures MEMORY USAGE of one key per algorithm, after one call,
// and of an integer SET with a TTL under a name of the same length.
func memory(ctx context.Context, rdb *redis.Client, works []*workload) int64 {
	// Names of one length: "b:mem:" + tag + ":" + zeros, 19 bytes.
	name := func(tag string) string { return "b:mem:" + tag + ":" + strings.Repeat("0", 12-len(tag)) }
	rdb.Set(ctx, name("int"), 1795000000, time.Minute)
	base := rdb.MemoryUsage(ctx, name("int")).Val()
	for _, w := range works {
		if w.kind == "native" || w.kind == "all" || w.kind == "multi" || w.keys > 1 {
			continue
		}
		k := name(w.kind[:1] + w.algo) // same length for every algorithm
		args := make([]any, len(w.args))
		for i, a := range w.args {
			args[i] = a
			if strings.Contains(a, "__rand_int__") {
				args[i] = k
			}
		}
		if err := rdb.Do(ctx, args...).Err(); err != nil {
			log.Fatalf("bench: %s: %v", w.name, err)
		}
		w.bytes = rdb.MemoryUsage(ctx, k).Val()
	}
	return base
}

// benchRE reads one benchmark's name, ns/op and allocs/op from go test -bench -benchmem.
var benchRE = regexp.MustCompile(`Benchmark(\S+?)-\d+\s+\d+\s+([0-9.]+) ns/op\s+\d+ B/op\s+(\d+) allocs/op`)

// goBench runs the benchmarks of pkg that match pattern and returns ns/op
// and allocs/op by the name after "Benchmark" ("Commands/gcra.throttle").
func goBench(pkg, pattern string) map[string][2]float64 {
	out, err := exec.Command("go", "test", "-run", "^$", "-bench", pattern, "-benchmem", pkg).CombinedOutput()
	if err != nil {
		log.Fatalf("bench: go test -bench %s: %v\n%s", pkg, err, out)
	}
	res := map[string][2]float64{}
	for _, m := range benchRE.FindAllSubmatch(out, -1) {
		ns, _ := strconv.ParseFloat(string(m[2]), 64)
		a, _ := strconv.ParseFloat(string(m[3]), 64)
		res[string(m[1])] = [2]float64{ns, a}
	}
	return res
}

// goAllocs runs the Go benchmark of the handler logic (per command, by its
// name in lower case) and the Go client's (a call through go-redis to a
// fake server, "client", beside go-redis's own Do of the same command,
// "go-redis"), and returns ns/op and allocs/op for each.
func goAllocs() map[string][2]float64 {
	res := map[string][2]float64{}
	for name, v := range goBench("./internal/engine/", "^BenchmarkCommands$") {
		res[strings.TrimPrefix(name, "Commands/")] = v
	}
	c := goBench("./client/", "^(BenchmarkTake|BenchmarkGoRedisDo)$")
	res["client"], res["go-redis"] = c["Take"], c["GoRedisDo"]
	return res
}
