// Command rls measures the Envoy rate limit service (rls/cmd/rls) beside
// envoyproxy/ratelimit, the service it replaces, on one redis-server with
// the module: ShouldRateLimit calls per second and latency with 32
// concurrent callers, one and three descriptors, and Redis commands per
// request, also under a flood against one key over its limit. It writes
// bench/BENCHMARKS-RLS.md. Run by make bench (after the module's benchmarks), from
// the repository's root:
//
//	cd bench && go build -o ../build/bench-rls ./rls && cd .. && ./build/bench-rls
//
// envoyproxy/ratelimit is built from the Go module proxy at peerVersion
// (go install); nothing of it is kept in this repository.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seed-6b3823f5/ratelimit/bench/internal/machine"
	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// peerVersion is the envoyproxy/ratelimit measured: its main branch as
// the Go module proxy served it (the project tags no releases as modules).
const peerVersion = "v1.4.1-0.20260122083618-3fb702589d36"

const config = `domain: bench
descriptors:
  - key: a
    rate_limit: {unit: day, requests_per_unit: 4000000000}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 4000000000}
  - key: c
    rate_limit: {unit: day, requests_per_unit: 4000000000}
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// holdConfig is rls's alone (the peer refuses the file, and with it
// every other): holds of up to 100,000 requests of a user at once.
const holdConfig = `domain: hold
descriptors:
  - key: user
    descriptors:
      - key: request_id
        holder: true
        rate_limit: {algorithm: concurrency, limit: 100000, hold_ttl: 60s}
`

// service is one rate limit service under test.
type service struct {
	name string
	cmd  *exec.Cmd
	conn []*grpc.ClientConn
}

func main() {
	rounds := flag.Int("rounds", 5, "alternating rounds (the median is reported)")
	dur := flag.Duration("d", 5*time.Second, "length of each run")
	callers := flag.Int("c", 32, "concurrent callers")
	out := flag.String("out", "bench/BENCHMARKS-RLS.md", "the report")
	module := flag.String("module", "build/ratelimit.so", "the module")
	only := flag.String("only", "", "run only the scenarios whose name holds this text, and those they are held to (the report then has only them: write it elsewhere with -out)")
	baseline := flag.String("baseline", "", "an rls binary of another build, measured beside this one's with one and three descriptors (rls (module), baseline)")
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()
	if n := runtime.NumCPU(); *serviceCPUs == "auto" || *driverCPUs == "auto" {
		*serviceCPUs, *driverCPUs = "", ""
		if n >= 2 {
			*serviceCPUs, *driverCPUs = "0", fmt.Sprintf("1-%d", n-1)
		}
	}
	placement := "Every service, the load generator and Redis share the machine."
	if *serviceCPUs != "" {
		placement = fmt.Sprintf("Redis and the service measured run on CPU %s and the load generator on CPU %s (taskset), "+
			"as a gateway on machines of its own would leave them; services get GOMAXPROCS from that.", *serviceCPUs, *driverCPUs)
	}
	if *driverCPUs != "" {
		run(".", nil, "taskset", "-a", "-p", "-c", *driverCPUs, strconv.Itoa(os.Getpid()))
	}

	root, err := os.Getwd()
	if err != nil {
		log.Fatal(err)
	}
	build := filepath.Join(root, "build")
	run(root, nil, "go", "build", "-C", "rls", "-o", filepath.Join(build, "rls"), "./cmd/rls")
	peerBin := filepath.Join(build, "peer", "service_cmd")
	if _, err := os.Stat(peerBin); err != nil {
		log.Printf("bench-rls: building envoyproxy/ratelimit %s (go install, about a minute)", peerVersion)
		run(root, []string{"GOBIN=" + filepath.Dir(peerBin)}, "go", "install", "github.com/envoyproxy/ratelimit/src/service_cmd@"+peerVersion)
	}

	so, _ := filepath.Abs(*module)
	port := machine.FreePort()
	srv := pinned("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loadmodule", so)
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Protocol: 2})
	for i := 0; rdb.Ping(ctx).Err() != nil; i++ {
		if i > 100 {
			log.Fatal("bench-rls: redis-server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	version := strings.TrimPrefix(infoField(ctx, rdb, "server", "redis_version"), "")

	// The peer reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config; ours the
	// same directory.
	runtime := filepath.Join(build, "rls-bench")
	cfgDir := filepath.Join(runtime, "ratelimit", "config")
	os.RemoveAll(runtime)
	if err := os.MkdirAll(filepath.Join(runtime, "certs-dir"), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		log.Fatal(err)
	}
	rlsCfg := filepath.Join(runtime, "rls-config") // the peer's config and the holds
	if err := os.MkdirAll(rlsCfg, 0o755); err != nil {
		log.Fatal(err)
	}
	for _, f := range []struct{ dir, name, text string }{{cfgDir, "bench.yaml", config}, {rlsCfg, "bench.yaml", config}, {rlsCfg, "hold.yaml", holdConfig}} {
		if err := os.WriteFile(filepath.Join(f.dir, f.name), []byte(f.text), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	redisAddr := fmt.Sprintf("127.0.0.1:%d", port)
	peerEnv := func(extra ...string) []string {
		return append([]string{
			"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(machine.FreePort()),
			"LOG_LEVEL=warn", "BACKEND_TYPE=redis",
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
			"RUNTIME_ROOT=" + runtime, "RUNTIME_SUBDIRECTORY=ratelimit",
			"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		}, extra...)
	}
	// TLS: a CA of the bench's, the services' certificate, and a client's
	// (Envoy's) for rls with mutual TLS.
	ca, err := rlstest.MakeCA(filepath.Join(runtime, "certs-dir"), "bench")
	if err == nil {
		_, err = ca.IssueFiles("tls", "localhost")
	}
	if err == nil {
		_, err = ca.IssueFiles("envoy", "envoy")
	}
	if err != nil {
		log.Fatal(err)
	}
	oneWay, err := ca.ClientConfig("localhost", nil, "")
	if err != nil {
		log.Fatal(err)
	}
	mutual, err := ca.ClientConfig("localhost", ca, "envoy")
	if err != nil {
		log.Fatal(err)
	}
	// rlsArgs are rls's flags in every run, then extra.
	rlsArgs := func(extra ...string) []string {
		return append([]string{"-config", rlsCfg, "-redis", redisAddr, "-log-level", "warn"}, extra...)
	}
	rlsTLS := []string{"-grpc-tls", "-grpc-tls-cert", ca.Path("tls.crt"), "-grpc-tls-key", ca.Path("tls.key")}
	starts := map[string]func() *service{
		"envoyproxy/ratelimit, TLS": func() *service {
			return start("envoyproxy/ratelimit, TLS", peerBin, nil, peerEnv("GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+ca.Path("tls.crt"), "GRPC_SERVER_TLS_KEY="+ca.Path("tls.key")), true, oneWay)
		},
		"rls (module), TLS": func() *service {
			return start("rls (module), TLS", filepath.Join(build, "rls"), rlsArgs(rlsTLS...), nil, false, oneWay)
		},
		"rls (module), mutual TLS": func() *service {
			return start("rls (module), mutual TLS", filepath.Join(build, "rls"), rlsArgs(append(slices.Clone(rlsTLS), "-grpc-tls-client-ca", ca.Path("ca.crt"))...), nil, false, mutual)
		},
		"envoyproxy/ratelimit": func() *service {
			return start("envoyproxy/ratelimit", peerBin, nil, peerEnv(), true, nil)
		},
		"envoyproxy/ratelimit, local cache": func() *service {
			return start("envoyproxy/ratelimit, local cache", peerBin, nil, peerEnv("LOCAL_CACHE_SIZE_IN_BYTES=1048576"), true, nil)
		},
		"rls (module)": func() *service {
			return start("rls (module)", filepath.Join(build, "rls"), rlsArgs(), nil, false, nil)
		},
		"rls (module), refusal cache": func() *service {
			return start("rls (module), refusal cache", filepath.Join(build, "rls"), rlsArgs("-refusal-cache", "10000"), nil, false, nil)
		},
		"rls (Lua library)": func() *service {
			return start("rls (Lua library)", filepath.Join(build, "rls"), rlsArgs("-engine", "functions"), nil, false, nil)
		},
	}

	type scenario struct {
		name     string
		services []string
		req      func(r *rand.Rand) *pb.RateLimitRequest
		ref      string // the service the others are held to ("": envoyproxy/ratelimit)
		refIn    string // the scenario ref was measured in ("": this one)
	}
	one := func(r *rand.Rand) *pb.RateLimitRequest {
		return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", r.IntN(100000))}}
	}
	three := func(r *rand.Rand) *pb.RateLimitRequest {
		v := r.IntN(100000)
		return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", v), desc("b", v), desc("c", v)}}
	}
	hot := func(r *rand.Rand) *pb.RateLimitRequest {
		return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("hot", 1)}}
	}
	// A hold: each request's descriptor takes a slot named by its id, and
	// the stream-done call (is_negative_hits) gives it back; calls
	// alternate, so every id is taken once and released once (by whichever
	// caller comes next: a release may come first, and release nothing).
	var holds atomic.Int64
	hold := func(r *rand.Rand) *pb.RateLimitRequest {
		n := holds.Add(1)
		d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: "user", Value: strconv.FormatInt(n/2%1000, 10)}, {Key: "request_id", Value: strconv.FormatInt(n/2, 10)}}}
		d.IsNegativeHits = n%2 == 1
		return &pb.RateLimitRequest{Domain: "hold", Descriptors: []*rlv3.RateLimitDescriptor{d}}
	}
	normal := []string{"envoyproxy/ratelimit", "rls (module)", "rls (Lua library)"}
	if *baseline != "" {
		bin, err := filepath.Abs(*baseline)
		if err != nil {
			log.Fatal(err)
		}
		starts["rls (module), baseline"] = func() *service {
			return start("rls (module), baseline", bin, rlsArgs(), nil, false, nil)
		}
		normal = append(normal, "rls (module), baseline")
	}
	scenarios := []scenario{
		{"one descriptor", normal, one, "", ""},
		{"three descriptors", normal, three, "", ""},
		{"a flood against one key over its limit", []string{"envoyproxy/ratelimit", "envoyproxy/ratelimit, local cache", "rls (module)", "rls (module), refusal cache"}, hot, "", ""},
		{"one descriptor, gRPC over TLS", []string{"envoyproxy/ratelimit", "rls (module)", "envoyproxy/ratelimit, TLS", "rls (module), TLS", "rls (module), mutual TLS"}, one, "envoyproxy/ratelimit, TLS", ""},
		// The peer has no holds (algorithm: concurrency): held to one
		// descriptor's fixed window on rls.
		{"a hold and its release (half the calls each)", []string{"rls (module)", "rls (Lua library)"}, hold, "rls (module)", "one descriptor"},
	}

	if *only != "" {
		var kept []scenario
		for _, sc := range scenarios {
			if strings.Contains(sc.name, *only) || slices.ContainsFunc(scenarios, func(o scenario) bool { return strings.Contains(o.name, *only) && o.refIn == sc.name }) {
				kept = append(kept, sc)
			}
		}
		scenarios = kept
	}
	results := map[string]map[string][]result{}
	for _, sc := range scenarios {
		results[sc.name] = map[string][]result{}
		for round := range *rounds {
			for _, name := range sc.services {
				rdb.FlushAll(ctx)
				s := starts[name]()
				drive(s, *callers, time.Second, sc.req) // warm-up: connections, the engine probe
				before, cpu := totalCalls(ctx, rdb), cpuTicks(s.cmd.Process.Pid)
				res := drive(s, *callers, *dur, sc.req)
				res.commands = float64(totalCalls(ctx, rdb)-before) / float64(res.requests)
				res.cpu = float64(cpuTicks(s.cmd.Process.Pid)-cpu) * 1e6 / ticksPerSecond / float64(res.requests)
				s.stop()
				results[sc.name][name] = append(results[sc.name][name], res)
				log.Printf("bench-rls: %s, %s, round %d: %.0f calls/s, p50 %v, p99 %v, %.3f Redis commands and %.1f µs of the service's CPU per request",
					sc.name, name, round+1, res.perSecond, res.p50, res.p99, res.commands, res.cpu)
			}
		}
	}

	cpu, cores := machine.CPU()
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks: the Envoy rate limit service\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (`build/bench-rls`, bench/rls/main.go) on %s: Redis %s with the module, %d cores (%s), "+
		"%d concurrent callers over 4 gRPC connections, runs of %v after a 1 s warm-up, %d alternating rounds, the median round reported. "+
		"envoyproxy/ratelimit %s built by `go install` from the Go module proxy, with its defaults (a pool of 10 Redis connections, "+
		"its metrics in Prometheus, as rls keeps its own); rls with its defaults (go-redis's pool, calls pipelined). %s\n\n",
		time.Now().UTC().Format("2006-01-02"), version, cores, cpu, *callers, *dur, *rounds, peerVersion, placement)
	fmt.Fprintf(&b, "Every limit admits all (4,000,000,000 a day) except the flood's (10 an hour, on one key), so the first two tables "+
		"measure the cost of counting; keys are spread over 100,000 values. \"Service CPU\" is the service process's user and system time "+
		"(/proc/<pid>/stat) per request: what the service costs whatever else shares the machine. \"Redis commands\" counts every command the server ran "+
		"(INFO commandstats) per ShouldRateLimit, not those a function runs inside: the peer pipelines INCRBY and EXPIRE per descriptor, "+
		"rls sends one FW.HIT, or one RL.ALL for several descriptors (FCALL on the Lua library).\n\n")
	for _, sc := range scenarios {
		ref, refIn := cmp.Or(sc.ref, "envoyproxy/ratelimit"), cmp.Or(sc.refIn, sc.name)
		refName := ref
		if refIn != sc.name {
			refName += " (" + refIn + ")"
		}
		fmt.Fprintf(&b, "## %s\n\n| service | calls/s | ÷ %s | p50 | p99 | service CPU per request | %s's ÷ this | Redis commands per request |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", capital(sc.name), refName, refName)
		peer := median(results[refIn][ref])
		for _, name := range sc.services {
			m := median(results[sc.name][name])
			fmt.Fprintf(&b, "| %s | %.0f | %.2f× | %v | %v | %.1f µs | %.2f× | %.4f |\n", name, m.perSecond, m.perSecond/peer.perSecond,
				m.p50.Round(time.Microsecond), m.p99.Round(time.Microsecond), m.cpu, peer.cpu/m.cpu, m.commands)
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("bench-rls: wrote %s", *out)
}

func capital(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

func desc(key string, v int) *rlv3.RateLimitDescriptor {
	return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: strconv.Itoa(v)}}}
}

// pinned is name and args run on the CPUs of -service-cpus (taskset), or
// as given when it is empty.
func pinned(name string, args ...string) *exec.Cmd {
	if *serviceCPUs == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("taskset", append([]string{"-c", *serviceCPUs, name}, args...)...)
}

var (
	serviceCPUs = flag.String("service-cpus", "auto", "CPUs (taskset -c) for Redis and the service measured; empty: shared with the load generator; auto: CPU 0 when there are two or more")
	driverCPUs  = flag.String("driver-cpus", "auto", "CPUs (taskset -c) for the load generator, this process; auto: every CPU but 0 when there are two or more")
)

func run(dir string, env []string, name string, args ...string) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		log.Fatalf("bench-rls: %s %v: %v", name, args, err)
	}
}

// start runs a service on ports of its own and waits for its health check.
func start(name, bin string, args, env []string, peer bool, tc *tls.Config) *service {
	gport, hport := machine.FreePort(), machine.FreePort()
	cmd := pinned(bin, args...)
	if peer {
		cmd.Env = append(os.Environ(), append(env, "GRPC_PORT="+strconv.Itoa(gport), "PORT="+strconv.Itoa(hport), "DEBUG_PORT="+strconv.Itoa(machine.FreePort()))...)
	} else {
		cmd.Args = append(cmd.Args, "-grpc", fmt.Sprintf("127.0.0.1:%d", gport), "-http", fmt.Sprintf("127.0.0.1:%d", hport))
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	s := &service{name: name, cmd: cmd}
	for i := 0; ; i++ {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthcheck", hport))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if i > 300 {
			s.stop()
			log.Fatalf("bench-rls: %s did not become healthy", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	for range 4 {
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", gport), grpc.WithTransportCredentials(creds))
		if err != nil {
			log.Fatal(err)
		}
		s.conn = append(s.conn, conn)
	}
	return s
}

func (s *service) stop() {
	for _, c := range s.conn {
		c.Close()
	}
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// result is one run.
type result struct {
	requests  int64
	perSecond float64
	p50, p99  time.Duration
	commands  float64 // Redis commands per request
	cpu       float64 // the service process's CPU time per request, µs
}

// drive sends requests from callers goroutines for d.
func drive(s *service, callers int, d time.Duration, req func(*rand.Rand) *pb.RateLimitRequest) result {
	var n atomic.Int64
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 7))
			client := pb.NewRateLimitServiceClient(s.conn[c%len(s.conn)])
			for time.Now().Before(end) {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := client.ShouldRateLimit(ctx, req(r))
				cancel()
				if err != nil {
					log.Fatalf("bench-rls: %s: %v", s.name, err)
				}
				lat[c] = append(lat[c], time.Since(t0))
				n.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	return result{
		requests:  n.Load(),
		perSecond: float64(n.Load()) / elapsed.Seconds(),
		p50:       all[len(all)/2],
		p99:       all[len(all)*99/100],
	}
}

func median(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int {
		switch {
		case a.perSecond < b.perSecond:
			return -1
		case a.perSecond > b.perSecond:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// totalCalls is the commands clients sent that decide requests (INFO
// commandstats): the module's commands, FCALL and EVALSHA (not the commands
// a function calls inside), and the peer's INCRBY and EXPIRE.

func totalCalls(ctx context.Context, rdb *redis.Client) int64 {
	info := rdb.Info(ctx, "commandstats").Val()
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok || !topLevel(name) {
			continue
		}
		v, _ := strconv.ParseInt(strings.Split(rest, ",")[0], 10, 64)
		n += v
	}
	return n
}

func topLevel(name string) bool {
	switch name {
	case "incrby", "expire", "fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval":
		return true
	}
	return strings.Contains(name, ".")
}

func infoField(ctx context.Context, rdb *redis.Client, section, field string) string {
	for _, line := range strings.Split(rdb.Info(ctx, section).Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// ticksPerSecond is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times (100 on Linux).
const ticksPerSecond = 100

// cpuTicks is a process's user and system time so far, in ticks.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		log.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from the 3rd on
	u, _ := strconv.ParseInt(f[11], 10, 64)                  // utime, the 14th field
	k, _ := strconv.ParseInt(f[12], 10, 64)                  // stime, the 15th
	return u + k
}
