package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"

	"github.com/seed-6b3823f5/ratelimit/lua"
	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// The Envoy rate limit service (rls/cmd/rls) as a gateway meets it: the
// real binary, asked through go-control-plane's gRPC client, on the real
// servers.

var rlsBin struct {
	once sync.Once
	path string
	err  error
}

// rlsBinary builds rls/cmd/rls once per run.
func rlsBinary(t *testing.T) string {
	t.Helper()
	rlsBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "rls-bin")
		if err != nil {
			rlsBin.err = err
			return
		}
		rlsBin.path = filepath.Join(dir, "rls")
		cmd := exec.Command("go", "build", "-o", rlsBin.path, "./cmd/rls")
		cmd.Dir = "../rls"
		if out, err := cmd.CombinedOutput(); err != nil {
			rlsBin.err = fmt.Errorf("building rls: %v\n%s", err, out)
		}
	})
	if rlsBin.err != nil {
		t.Fatal(rlsBin.err)
	}
	return rlsBin.path
}

// syncBuffer is a process's output, read while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rlsProc is one running rls.
type rlsProc struct {
	cmd    *exec.Cmd
	dir    string // its config directory
	web    string // http://127.0.0.1:port
	out    *syncBuffer
	exited chan struct{} // closed when the process has exited
	err    error         // its exit error, once exited is closed
	rl     pb.RateLimitServiceClient
}

// rlsCommand is the command line of the rls binary bin on redis with the
// config files given, its own key prefix and ports, and more flags.
func rlsCommand(t *testing.T, bin, redisAddr string, files map[string]string, flags ...string) (*exec.Cmd, string, int, int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "config")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		writeFile(t, filepath.Join(dir, name), text)
	}
	gport, hport := twoPorts(t)
	args := append([]string{
		"-config", dir, "-redis", redisAddr,
		"-grpc", fmt.Sprintf("127.0.0.1:%d", gport), "-http", fmt.Sprintf("127.0.0.1:%d", hport),
		"-prefix", key(t, "rls") + ":",
	}, flags...)
	return exec.Command(bin, args...), dir, gport, hport
}

// twoPorts is a free port for gRPC and one for HTTP.
func twoPorts(t *testing.T) (int, int) {
	t.Helper()
	var p [2]int
	for i := range p {
		var err error
		if p[i], err = freePort(); err != nil {
			t.Fatal(err)
		}
	}
	return p[0], p[1]
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startRLS starts an rls and waits until its health check answers OK.
func startRLS(t *testing.T, redisAddr string, files map[string]string, flags ...string) *rlsProc {
	t.Helper()
	return startRLSEnv(t, nil, redisAddr, files, flags...)
}

// startRLSEnv is startRLS with more environment variables.
func startRLSEnv(t *testing.T, env []string, redisAddr string, files map[string]string, flags ...string) *rlsProc {
	t.Helper()
	return startRLSBinary(t, rlsBinary(t), env, redisAddr, files, flags...)
}

// startRLSBinary is startRLSEnv with the rls binary bin.
func startRLSBinary(t *testing.T, bin string, env []string, redisAddr string, files map[string]string, flags ...string) *rlsProc {
	t.Helper()
	cmd, dir, gport, hport := rlsCommand(t, bin, redisAddr, files, flags...)
	cmd.Env = append(os.Environ(), env...)
	p := &rlsProc{cmd: cmd, dir: dir, web: fmt.Sprintf("http://127.0.0.1:%d", hport), out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("rls output:\n%s", tail(p.out.String(), 40))
		}
	})
	waitServing(t, "rls", p.web+"/healthcheck", "OK", p.exited, &p.err, p.out)
	p.rl = dialRLS(t, fmt.Sprintf("127.0.0.1:%d", gport))
	return p
}

// waitServing waits up to 30 s for a service started by the test (what)
// to answer url with 200 (and body, when not ""), failing the test when
// it exits first (exited closed, *err its end) or never does; out is its
// output.
func waitServing(t *testing.T, what, url, body string, exited <-chan struct{}, err *error, out *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, gerr := http.Get(url)
		if gerr == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && (body == "" || string(b) == body) {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("%s exited: %v\n%s", what, *err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy in 30 s:\n%s", what, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialRLS is a client of the rls whose gRPC listens at addr, closed when
// the test ends.
func dialRLS(t *testing.T, addr string) pb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

// expectDropIn: with dropInConfig, two requests from one address take two
// of its three a day.
func expectDropIn(t *testing.T, p *rlsProc, addr string) {
	t.Helper()
	ip := desc("remote_address", addr)
	expectBrief(t, "1", p.ask(t, "apis", ip), "OK [OK r=2 3/DAY]")
	expectBrief(t, "2", p.ask(t, "apis", ip), "OK [OK r=1 3/DAY]")
}

// desc is a descriptor of key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (p *rlsProc) ask(t *testing.T, domain string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	return p.askReq(t, &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
}

func (p *rlsProc) askReq(t *testing.T, req *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := p.rl.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// brief is a response in one line: the overall code, then each status's
// code, remaining and limit ("-" when it has none).
func brief(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, s := range r.Statuses {
		lim := "-"
		if l := s.CurrentLimit; l != nil {
			lim = fmt.Sprintf("%d/%s", l.RequestsPerUnit, l.Unit)
			if l.Name != "" {
				lim += "(" + l.Name + ")"
			}
		}
		fmt.Fprintf(&b, " [%s r=%d %s]", s.Code, s.LimitRemaining, lim)
	}
	return b.String()
}

func expectBrief(t *testing.T, what string, r *pb.RateLimitResponse, want string) {
	t.Helper()
	if got := brief(r); got != want {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// metric reads one sample of the service's /metrics ("" when absent).
func (p *rlsProc) metric(t *testing.T, series string) string {
	t.Helper()
	resp, err := http.Get(p.web + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

const dropInConfig = `
domain: apis
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: path
    value: /login*
    rate_limit: {unit: day, requests_per_unit: 2, name: login}
  - key: gold
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: plan
    value: trial
    rate_limit: {unit: day, requests_per_unit: 1, name: trial, replaces: [{name: login}]}
  - key: user
    descriptors:
      - key: tier
        value: free
        rate_limit: {unit: day, requests_per_unit: 5, algorithm: gcra}
`

// untilMidnight is the peer's duration_until_reset for a day's window.
func untilMidnight() int64 {
	now := time.Now().Unix()
	return 86400 - now%86400
}

// TestRLSDropIn: every config feature answers as envoyproxy/ratelimit
// fills its responses, on each server with the module and on one without
// it (the Lua library).
func TestRLSDropIn(t *testing.T) {
	run := func(t *testing.T, addr string, flags ...string) {
		p := startRLS(t, addr, map[string]string{"apis.yaml": dropInConfig}, flags...)
		ip := desc("remote_address", "1.1.1.1")
		var rs []*pb.RateLimitResponse
		for range 4 {
			rs = append(rs, p.ask(t, "apis", ip))
		}
		for i, want := range []string{"OK [OK r=2 3/DAY]", "OK [OK r=1 3/DAY]", "OK [OK r=0 3/DAY]", "OVER_LIMIT [OVER_LIMIT r=0 3/DAY]"} {
			expectBrief(t, fmt.Sprintf("request %d", i+1), rs[i], want)
			// The fixed window ends at midnight UTC, as the peer's.
			if got, want := rs[i].Statuses[0].DurationUntilReset.AsDuration(), time.Duration(untilMidnight())*time.Second; got < want-2*time.Second || got > want+2*time.Second {
				t.Fatalf("request %d: duration_until_reset %v, want about %v", i+1, got, want)
			}
		}

		// An unknown domain, a descriptor without a limit: OK, no limit.
		expectBrief(t, "unknown domain", p.ask(t, "nope", ip, desc("x", "y")), "OK [OK r=0 -] [OK r=0 -]")
		expectBrief(t, "no limit", p.ask(t, "apis", desc("nothing", "here"), desc("remote_address", "1.1.1.2", "deeper", "x")), "OK [OK r=0 -] [OK r=0 -]")
		expectBrief(t, "unlimited", p.ask(t, "apis", desc("gold", "u")), "OK [OK r=4294967295 -]")
		expectBrief(t, "zero", p.ask(t, "apis", desc("blocked", "u")), "OVER_LIMIT [OVER_LIMIT r=0 0/SECOND]")
		zeroCheck := desc("blocked", "u")
		zeroCheck.HitsAddend = wrapperspb.UInt64(0)
		expectBrief(t, "zero, checked only", p.ask(t, "apis", zeroCheck), "OK [OK r=0 0/SECOND]")

		// Empty domain, no descriptors: errors, as the peer's.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := p.rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{ip}}); err == nil || !strings.Contains(err.Error(), "rate limit domain must not be empty") {
			t.Fatalf("empty domain: %v", err)
		}
		if _, err := p.rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "apis"}); err == nil || !strings.Contains(err.Error(), "rate limit descriptor list must not be empty") {
			t.Fatalf("no descriptors: %v", err)
		}

		// hits_addend: the request's, a descriptor's own (0 checks only).
		ip2 := desc("remote_address", "2.2.2.2")
		expectBrief(t, "hits 2", p.askReq(t, &pb.RateLimitRequest{Domain: "apis", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{ip2}}), "OK [OK r=1 3/DAY]")
		check := desc("remote_address", "2.2.2.2")
		check.HitsAddend = wrapperspb.UInt64(0)
		expectBrief(t, "hits 0", p.askReq(t, &pb.RateLimitRequest{Domain: "apis", HitsAddend: 5, Descriptors: []*rlv3.RateLimitDescriptor{check}}), "OK [OK r=1 3/DAY]")
		expectBrief(t, "hits 2 again", p.askReq(t, &pb.RateLimitRequest{Domain: "apis", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{ip2}}), "OVER_LIMIT [OVER_LIMIT r=0 3/DAY]")
		expectBrief(t, "hits 1", p.ask(t, "apis", ip2), "OK [OK r=0 3/DAY]")

		// replaces: the trial plan's limit replaces the login one.
		login, trial := desc("path", "/login/sso"), desc("plan", "trial")
		expectBrief(t, "replaced", p.ask(t, "apis", login, trial), "OK [OK r=0 -] [OK r=0 1/DAY(trial)]")
		expectBrief(t, "replaced, trial spent", p.ask(t, "apis", login, trial), "OVER_LIMIT [OK r=0 -] [OVER_LIMIT r=0 1/DAY(trial)]")
		expectBrief(t, "login alone, never counted", p.ask(t, "apis", login), "OK [OK r=1 2/DAY(login)]")

		// Nested descriptors, GCRA: 5 at once, then one per day/5.
		free := desc("user", "u1", "tier", "free")
		for i := range 5 {
			expectBrief(t, "gcra", p.ask(t, "apis", free), fmt.Sprintf("OK [OK r=%d 5/DAY]", 4-i))
		}
		r := p.ask(t, "apis", free)
		expectBrief(t, "gcra spent", r, "OVER_LIMIT [OVER_LIMIT r=0 5/DAY]")
		if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 17280*time.Second {
			t.Fatalf("gcra retry: %v, want 4h48m (a day / 5)", got)
		}

		// Envoy's own limit on a descriptor: a fixed window of it.
		o := desc("remote_address", "9.9.9.9")
		o.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_DAY}
		expectBrief(t, "override", p.ask(t, "apis", o), "OK [OK r=0 1/DAY]")
		expectBrief(t, "override spent", p.ask(t, "apis", o), "OVER_LIMIT [OVER_LIMIT r=0 1/DAY]")
	}
	for _, s := range shared {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			run(t, s.addr())
		})
	}
	t.Run("lua", func(t *testing.T) {
		t.Parallel()
		s := startFor(t, flavors[1], opts{})
		// The first request loads the library (FUNCTION LOAD), which while
		// the suite starts its containers has taken longer than the
		// default -redis-timeout of 100 ms.
		run(t, s.addr(), "-redis-timeout", "2s")
		if n, err := s.rdb.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", lua.Versioned().Name).Slice(); err != nil || len(n) != 1 {
			t.Fatalf("the Lua library was not loaded: %v %v", n, err)
		}
	})
}

const aonConfig = `
domain: aon
descriptors:
  - key: a
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: token_bucket}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: c
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: sliding_log}
`

// TestRLSAllOrNothing: a request over the limit counts nothing, on any of
// its descriptors (the peer counts every one of them).
func TestRLSAllOrNothing(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		p := startRLS(t, s.addr(), map[string]string{"aon.yaml": aonConfig})
		a, b := desc("a", "x"), desc("b", "x")
		expectBrief(t, "1", p.ask(t, "aon", a, b), "OK [OK r=9 10/DAY] [OK r=1 2/DAY]")
		expectBrief(t, "2", p.ask(t, "aon", a, b), "OK [OK r=8 10/DAY] [OK r=0 2/DAY]")
		expectBrief(t, "3", p.ask(t, "aon", a, b), "OVER_LIMIT [OK r=8 10/DAY] [OVER_LIMIT r=0 2/DAY]")
		expectBrief(t, "a alone", p.ask(t, "aon", a), "OK [OK r=7 10/DAY]") // 8 - 1: the refused request took nothing

		// Three descriptors; the last refuses: the other two count nothing.
		a, b, c := desc("a", "y"), desc("b", "y"), desc("c", "y")
		expectBrief(t, "three 1", p.ask(t, "aon", a, c, b), "OK [OK r=9 10/DAY] [OK r=2 3/DAY] [OK r=1 2/DAY]")
		expectBrief(t, "three 2", p.ask(t, "aon", a, c, b), "OK [OK r=8 10/DAY] [OK r=1 3/DAY] [OK r=0 2/DAY]")
		for range 3 {
			expectBrief(t, "three refused", p.ask(t, "aon", a, c, b), "OVER_LIMIT [OK r=8 10/DAY] [OK r=1 3/DAY] [OVER_LIMIT r=0 2/DAY]")
		}
		expectBrief(t, "c alone", p.ask(t, "aon", c), "OK [OK r=0 3/DAY]")
		expectBrief(t, "a alone", p.ask(t, "aon", a), "OK [OK r=7 10/DAY]")
	})
}

const debtConfig = `
domain: llm
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000, debt: true}
  - key: user_tb
    rate_limit: {unit: day, requests_per_unit: 1000, debt: true, algorithm: token_bucket}
  - key: rpm
    rate_limit: {unit: day, requests_per_unit: 2}
`

// TestRLSDebt: the AI-gateway pattern through the real service and the
// module: a budget checked with hits_addend 0 and charged after the
// response is counted past its limit (debt: true) and stops its client; a
// request refused by it counts nothing else.
func TestRLSDebt(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		p := startRLS(t, s.addr(), map[string]string{"llm.yaml": debtConfig})
		hits := func(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
			d.HitsAddend = wrapperspb.UInt64(n)
			return d
		}
		for _, key := range []string{"user", "user_tb"} {
			u := key + "-1"
			expectBrief(t, key+" check", p.ask(t, "llm", hits(desc(key, u), 0)), "OK [OK r=1000 1000/DAY]")
			expectBrief(t, key+" charge", p.ask(t, "llm", hits(desc(key, u), 1500)), "OVER_LIMIT [OVER_LIMIT r=0 1000/DAY]")
			expectBrief(t, key+" next check", p.ask(t, "llm", hits(desc(key, u), 0)), "OVER_LIMIT [OVER_LIMIT r=0 1000/DAY]")
			expectBrief(t, key+" with rpm", p.ask(t, "llm", desc("rpm", u), hits(desc(key, u), 0)), "OVER_LIMIT [OK r=0 2/DAY] [OVER_LIMIT r=0 1000/DAY]")
			expectBrief(t, key+" rpm alone", p.ask(t, "llm", desc("rpm", u)), "OK [OK r=1 2/DAY]") // not counted before
		}
	})
}

// refundConfig is a GCRA, a token bucket and a fixed window of 3 a day.
const refundConfig = `
domain: r
descriptors:
  - key: gcra
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: gcra}
  - key: tb
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: token_bucket}
  - key: fw
    rate_limit: {unit: day, requests_per_unit: 3}
`

// TestRLSNegativeHits: Envoy's refund (is_negative_hits) through the rls
// binary on every server: a GCRA and a token bucket take the hits back, so
// a request refused before is admitted after; a refund in a request that
// another descriptor refuses is not kept; a fixed window takes hits off
// its current count (the module's return).
func TestRLSNegativeHits(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		p := startRLS(t, s.addr(), map[string]string{"r.yaml": refundConfig})
		u := key(t, "u")
		hits := func(k string, n uint64, back bool) *rlv3.RateLimitDescriptor {
			d := desc(k, u)
			d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(n), back
			return d
		}
		for _, k := range []string{"gcra", "tb"} {
			expectBrief(t, k+" 3", p.ask(t, "r", hits(k, 3, false)), "OK [OK r=0 3/DAY]")
			expectBrief(t, k+" 1 more", p.ask(t, "r", hits(k, 1, false)), "OVER_LIMIT [OVER_LIMIT r=0 3/DAY]")
			expectBrief(t, k+" 2 back", p.ask(t, "r", hits(k, 2, true)), "OK [OK r=2 3/DAY]")
			expectBrief(t, k+" 2 again", p.ask(t, "r", hits(k, 2, false)), "OK [OK r=0 3/DAY]")
		}
		expectBrief(t, "fw 3", p.ask(t, "r", hits("fw", 3, false)), "OK [OK r=0 3/DAY]")
		expectBrief(t, "a GCRA's refund beside a refusal", p.ask(t, "r", hits("gcra", 1, true), hits("fw", 1, false)),
			"OVER_LIMIT [OK r=0 3/DAY] [OVER_LIMIT r=0 3/DAY]")
		expectBrief(t, "the GCRA after", p.ask(t, "r", hits("gcra", 1, false)), "OVER_LIMIT [OVER_LIMIT r=0 3/DAY]")
		expectBrief(t, "fw 2 back", p.ask(t, "r", hits("fw", 2, true)), "OK [OK r=2 3/DAY]")
		expectBrief(t, "fw after", p.ask(t, "r", hits("fw", 3, false)), "OVER_LIMIT [OVER_LIMIT r=0 3/DAY]")
		expectBrief(t, "fw 2 again", p.ask(t, "r", hits("fw", 2, false)), "OK [OK r=0 3/DAY]")
	})
}

// tokenConfig is a budget of 1,000 tokens a minute, as a file says it
// (debt: true) and as Envoy Gateway's config over xDS does (a plain
// limit, its charges in debt by DEBT_CHARGES).
const tokenConfig = `
domain: ai
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000, debt: true}
  - key: plain_user
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

// tokenBudget runs 10 requests whose responses use 600 tokens each
// against d's budget (rlstest.TokenBudget) and returns the checks'
// answers; it starts in a minute's first 50 s, so that one window holds
// the whole sequence.
func tokenBudget(t *testing.T, rl pb.RateLimitServiceClient, key, user string) string {
	t.Helper()
	if s := time.Now().Unix() % 60; s >= 50 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	return rlstest.TokenBudget(10, 600, func(hits uint64) bool {
		d := desc(key, user)
		d.HitsAddend = wrapperspb.UInt64(hits)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "ai", Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return r.OverallCode == pb.RateLimitResponse_OK
	})
}

// TestRLSTokenBudget: Envoy AI Gateway's token budget through the binary on
// each server: 10 responses of 600 tokens against 1,000 a minute, checked
// before each request and charged after it, as the peer answers: two
// checks pass and the third is refused (the second charge counted past
// the limit), with debt: true in the file, or with DEBT_CHARGES=true on a
// plain limit; a plain limit without it never stops the client.
func TestRLSTokenBudget(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		user := key(t, "u")
		for _, c := range []struct {
			key, debtCharges, want string
		}{
			{"user", "auto", "OOXXXXXXXX"},
			{"plain_user", "true", "OOXXXXXXXX"},
			{"plain_user", "false", "OOOOOOOOOO"},
		} {
			p := startRLSEnv(t, []string{"DEBT_CHARGES=" + c.debtCharges}, s.addr(), map[string]string{"ai.yaml": tokenConfig})
			if got := tokenBudget(t, p.rl, c.key, user+c.debtCharges); got != c.want {
				t.Errorf("%s with DEBT_CHARGES=%s: checks %s, want %s", c.key, c.debtCharges, got, c.want)
			}
		}
	})
}

// TestRLSClusterAcrossSlots: on a real cluster, descriptors whose keys live
// in different slots are taken slot by slot and given back when a later
// one refuses (the window last, since a window cannot give back).
func TestRLSClusterAcrossSlots(t *testing.T) {
	nodes := startCluster(t, flavors[1])
	var addrs []string
	for _, n := range nodes[:3] {
		addrs = append(addrs, n.addr())
	}
	p := startRLS(t, strings.Join(addrs, ","), map[string]string{"aon.yaml": aonConfig}, "-redis-type", "cluster", "-prefix", "")
	// Values whose keys hash to three different slots.
	var v string
	for i := 0; ; i++ {
		v = fmt.Sprint("v", i)
		sa, sb := slotOf(t, nodes[0], "aon_a_"+v+"_tb86400"), slotOf(t, nodes[0], "aon_b_"+v+"_fw86400")
		sc := slotOf(t, nodes[0], "aon_c_"+v+"_sl86400")
		if sa != sb && sb != sc && sa != sc {
			break
		}
	}
	a, b, c := desc("a", v), desc("b", v), desc("c", v)
	// b (a fixed window) is listed first but taken last.
	expectBrief(t, "1", p.ask(t, "aon", b, a, c), "OK [OK r=1 2/DAY] [OK r=9 10/DAY] [OK r=2 3/DAY]")
	expectBrief(t, "2", p.ask(t, "aon", b, a, c), "OK [OK r=0 2/DAY] [OK r=8 10/DAY] [OK r=1 3/DAY]")
	// a (a token bucket) is taken first, then b refuses: a is given back
	// and c (after b, in the order given) is not asked.
	expectBrief(t, "3", p.ask(t, "aon", b, a, c), "OVER_LIMIT [OVER_LIMIT r=0 2/DAY] [OK r=8 10/DAY] [OK r=0 3/DAY]")
	expectBrief(t, "a alone", p.ask(t, "aon", a), "OK [OK r=7 10/DAY]") // 8 - 1: refunded
	expectBrief(t, "c alone", p.ask(t, "aon", c), "OK [OK r=0 3/DAY]")  // 3 - 2 - 1
}

func slotOf(t *testing.T, n *server, k string) int64 {
	t.Helper()
	s, err := n.rdb.ClusterKeySlot(ctx, k).Result()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRLSShadowMode: a shadow_mode limit reports OK and counts what it
// would have refused; it never blocks the request's other limits.
func TestRLSShadowMode(t *testing.T) {
	s := sharedOf(flavors[1])
	p := startRLS(t, s.addr(), map[string]string{"sh.yaml": `
domain: sh
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: e
    rate_limit: {unit: day, requests_per_unit: 5}
`})
	sd, e := desc("s", "x"), desc("e", "x")
	expectBrief(t, "1", p.ask(t, "sh", sd, e), "OK [OK r=0 1/DAY] [OK r=4 5/DAY]")
	expectBrief(t, "2", p.ask(t, "sh", sd, e), "OK [OK r=0 1/DAY] [OK r=3 5/DAY]")
	expectBrief(t, "3", p.ask(t, "sh", sd, e), "OK [OK r=0 1/DAY] [OK r=2 5/DAY]")
	for series, want := range map[string]string{
		`ratelimit_service_rate_limit_total_hits{domain="sh",key="sh.s"}`:   "3",
		`ratelimit_service_rate_limit_shadow_mode{domain="sh",key="sh.s"}`:  "2",
		`ratelimit_service_rate_limit_over_limit{domain="sh",key="sh.s"}`:   "2",
		`ratelimit_service_rate_limit_within_limit{domain="sh",key="sh.s"}`: "1",
		`ratelimit_service_rate_limit_within_limit{domain="sh",key="sh.e"}`: "3",
		`ratelimit_service_rate_limit_near_limit{domain="sh",key="sh.e"}`:   "0",
	} {
		if got := p.metric(t, series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}

	// The global shadow mode: OVER_LIMIT statuses, an OK answer.
	g := startRLS(t, s.addr(), map[string]string{"sh.yaml": "domain: g\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n"}, "-shadow")
	expectBrief(t, "global 1", g.ask(t, "g", desc("k", "v")), "OK [OK r=0 1/DAY]")
	expectBrief(t, "global 2", g.ask(t, "g", desc("k", "v")), "OK [OVER_LIMIT r=0 1/DAY]")
	if got := g.metric(t, "ratelimit_service_global_shadow_mode"); got != "1" {
		t.Fatalf("global shadow mode count %q", got)
	}
}

// TestRLSReload: a changed file applies within a second or two; a bad one
// leaves the running config in place and says why.
func TestRLSReload(t *testing.T) {
	s := sharedOf(flavors[1])
	cfg := "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: %d}\n%s"
	p := startRLS(t, s.addr(), map[string]string{"r.yaml": fmt.Sprintf(cfg, 1, "")})
	k := desc("k", "v")
	expectBrief(t, "1", p.ask(t, "r", k), "OK [OK r=0 1/DAY]")
	expectBrief(t, "2", p.ask(t, "r", k), "OVER_LIMIT [OVER_LIMIT r=0 1/DAY]")

	probe := desc("probe", "x")
	writeFile(t, filepath.Join(p.dir, "r.yaml"), fmt.Sprintf(cfg, 3, "  - key: probe\n    rate_limit: {unit: day, requests_per_unit: 1000}\n"))
	start := time.Now()
	waitFor(t, 5*time.Second, "the new config", func() bool { return p.ask(t, "r", probe).Statuses[0].CurrentLimit != nil })
	t.Logf("the new config answered %v after the file was written", time.Since(start).Round(time.Millisecond))
	expectBrief(t, "raised", p.ask(t, "r", k), "OK [OK r=1 3/DAY]") // the refusal was never counted

	writeFile(t, filepath.Join(p.dir, "bad.yaml"), "domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	waitFor(t, 5*time.Second, "the bad config's error", func() bool {
		return p.metric(t, `ratelimit_service_config_load{result="error"}`) == "1"
	})
	if out := p.out.String(); !strings.Contains(out, "bad.yaml:4: invalid rate limit unit 'fortnight'") {
		t.Fatalf("the log does not say why:\n%s", out)
	}
	expectBrief(t, "still running", p.ask(t, "r", k), "OK [OK r=0 3/DAY]")
	expectBrief(t, "the old config stays", p.ask(t, "bad", k), "OK [OK r=0 -]")
}

// TestRLSReloadSymlinkSwap: the peer's layout, RUNTIME_ROOT a "current"
// link swapped to a new directory (no file event reaches the config
// directory): the new config applies within a second or two.
func TestRLSReloadSymlinkSwap(t *testing.T) {
	s := sharedOf(flavors[1])
	root := t.TempDir()
	version := func(name string, limit int) {
		dir := filepath.Join(root, name, "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "s.yaml"), fmt.Sprintf("domain: s\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: %d}\n", limit))
	}
	swap := func(name string) {
		tmp := filepath.Join(root, "current.tmp")
		if err := os.Symlink(filepath.Join(root, name), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(root, "current")); err != nil {
			t.Fatal(err)
		}
	}
	version("v1", 1)
	version("v2", 5)
	swap("v1")
	p := startRLS(t, s.addr(), nil, "-config", filepath.Join(root, "current", "config"))
	k := desc("k", "v")
	expectBrief(t, "v1", p.ask(t, "s", k), "OK [OK r=0 1/DAY]")
	swap("v2")
	start := time.Now()
	waitFor(t, 5*time.Second, "the swapped config", func() bool {
		return p.metric(t, `ratelimit_service_config_load{result="success"}`) == "1"
	})
	t.Logf("the swapped config loaded %v after the swap", time.Since(start).Round(time.Millisecond))
	expectBrief(t, "v2", p.ask(t, "s", k), "OK [OK r=3 5/DAY]")
}

// TestRLSRefusalCache: a flood against a key over its limit costs Redis
// one call per retry period with the cache, one per request without; and
// it admits exactly what Redis would.
func TestRLSRefusalCache(t *testing.T) {
	s := startFor(t, flavors[1], opts{module: true})
	files := map[string]string{"c.yaml": `
domain: c
descriptors:
  - key: day
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}
`}
	calls := func() int64 {
		m := commandCalls(t, s.rdb)
		return m["fw.hit"] + m["gcra.throttle"]
	}
	const flood = 200
	for _, size := range []int{0, 1000} {
		p := startRLS(t, s.addr(), files, "-refusal-cache", strconv.Itoa(size))
		before := calls()
		over := 0
		for range flood {
			if p.ask(t, "c", desc("day", "x")).OverallCode == pb.RateLimitResponse_OVER_LIMIT {
				over++
			}
		}
		n := calls() - before
		t.Logf("refusal cache %d: %d requests, %d refused, %d Redis calls (%.3f per request)", size, flood, over, n, float64(n)/flood)
		if over != flood-2 {
			t.Fatalf("cache %d: %d refused of %d, want %d", size, over, flood, flood-2)
		}
		if size == 0 && n != flood || size > 0 && n != 3 {
			t.Fatalf("cache %d: %d Redis calls for %d requests", size, n, flood)
		}
		if size > 0 {
			if got := p.metric(t, "ratelimit_service_refusal_cache_hits"); got != strconv.Itoa(flood-3) {
				t.Fatalf("cache hits %s", got)
			}
		}
	}

	// GCRA, one a second: a 2.5 s flood admits what Redis admits, the
	// first at once and then one a second, no sooner.
	p := startRLS(t, s.addr(), files, "-refusal-cache", "1000")
	var admitted []time.Time
	before := calls()
	start := time.Now()
	for time.Since(start) < 2500*time.Millisecond {
		sent := time.Now()
		if p.ask(t, "c", desc("sec", "x")).OverallCode == pb.RateLimitResponse_OK {
			admitted = append(admitted, sent)
		}
	}
	n := calls() - before
	t.Logf("GCRA 1/s under a 2.5 s flood: admitted at %v, %d Redis calls", admitted, n)
	if len(admitted) != 3 {
		t.Fatalf("admitted %d in 2.5 s, want 3", len(admitted))
	}
	for i := 1; i < len(admitted); i++ {
		if gap := admitted[i].Sub(admitted[i-1]); gap < 900*time.Millisecond { // send times: Redis decided each about a second apart
			t.Fatalf("admitted %v after the previous one", gap)
		}
	}
	if n > 12 {
		t.Fatalf("%d Redis calls in a 2.5 s flood", n)
	}
}

// TestRLSRedisDown: with Redis hung (SIGSTOP) or gone, each request fails
// with UNAVAILABLE within the service's bound (or the gateway's deadline,
// when sooner) and the gateway's failure mode decides; it recovers when
// Redis does.
func TestRLSRedisDown(t *testing.T) {
	s := startFor(t, flavors[1], opts{module: true})
	p := startRLS(t, s.addr(), map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1000}\n"}, "-redis-timeout", "100ms")
	k := desc("k", "v")
	expectBrief(t, "up", p.ask(t, "d", k), "OK [OK r=999 1000/DAY]")

	failing := func(what string, deadline time.Duration) {
		t.Helper()
		var slowest time.Duration
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 20 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				start := time.Now()
				_, err := p.rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{k}})
				took := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				slowest = max(slowest, took)
				if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
					t.Errorf("%s: %v (code %s)", what, err, c)
				}
			})
		}
		wg.Wait()
		t.Logf("%s: 20 concurrent requests failed, the slowest in %v", what, slowest.Round(time.Millisecond))
		if slowest > time.Second {
			t.Fatalf("%s: a request took %v", what, slowest)
		}
	}
	resume := s.hang(t)
	failing("hung, gateway deadline 5 s", 5*time.Second)
	failing("hung, gateway deadline 20 ms", 20*time.Millisecond)
	resume()
	waitFor(t, 10*time.Second, "recovery", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := p.rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{k}})
		return err == nil
	})
	s.stop(ctx)
	failing("stopped", 5*time.Second)
	if got := p.metric(t, `ratelimit_service_should_rate_limit_errors{kind="redis"}`); got == "" || got == "0" {
		t.Fatalf("redis errors not counted: %q", got)
	}
}

// TestRLSBreaker: the rls binary with -breaker-failures 3 over a Redis
// hung with SIGSTOP: three requests wait out -redis-timeout, each a
// failure, and open the breaker; the next 20 are answered UNAVAILABLE
// without a call (no failure more is counted, the breaker opened once);
// once Redis is resumed and the cooldown over, a probe closes the breaker
// and requests are decided again.
func TestRLSBreaker(t *testing.T) {
	s := startFor(t, flavors[1], opts{module: true})
	p := startRLS(t, s.addr(), map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1000}\n"},
		"-redis-timeout", "100ms", "-breaker-failures", "3", "-breaker-cooldown", "3s")
	k := desc("k", "v")
	expectBrief(t, "up", p.ask(t, "d", k), "OK [OK r=999 1000/DAY]")
	code := func() codes.Code {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := p.rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{k}})
		return status.Code(err)
	}
	events := func(event string) string {
		return p.metric(t, `ratelimit_service_breaker_events{event="`+event+`"}`)
	}
	resume := s.hang(t)
	for i := range 3 {
		if c := code(); c != codes.Unavailable {
			t.Fatalf("hung, request %d: %v", i, c)
		}
	}
	if f, o := events("failure"), events("breaker-open"); f != "3" || o != "1" {
		t.Fatalf("after 3 timeouts: failures %q, breaker-open %q", f, o)
	}
	for i := range 20 {
		if c := code(); c != codes.Unavailable {
			t.Fatalf("breaker open, request %d: %v", i, c)
		}
	}
	if f, o := events("failure"), events("breaker-open"); f != "3" || o != "1" {
		t.Fatalf("20 requests with the breaker open: failures %q (were 3: a call was sent), breaker-open %q", f, o)
	}
	resume()
	waitFor(t, 10*time.Second, "the breaker to close", func() bool { return code() == codes.OK })
	if got := events("breaker-closed"); got != "1" {
		t.Fatalf("breaker-closed %q", got)
	}
}

// TestRLSProcess: the binary as an operator runs it: a bad config at start
// exits 1 naming the file and key; /metrics and the IETF fields; SIGTERM
// stops it cleanly.
func TestRLSProcess(t *testing.T) {
	s := sharedOf(flavors[1])
	cmd, _, _, _ := rlsCommand(t, rlsBinary(t), s.addr(), map[string]string{"ok.yaml": "domain: a", "z.yaml": "domain: b\ndescriptors:\n  - key: k\n    ratelimit: {}\n"})
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 || !strings.Contains(string(out), "z.yaml:4: config error, unknown key 'ratelimit' in a descriptor") {
		t.Fatalf("a bad config at start: exit %d, %v:\n%s", code, err, out)
	}

	p := startRLS(t, s.addr(), map[string]string{"apis.yaml": dropInConfig}, "-ietf-headers")
	r := p.ask(t, "apis", desc("remote_address", "5.5.5.5"), desc("gold", "x"))
	hdr := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		hdr[h.Key] = h.Value
	}
	if hdr["RateLimit-Policy"] != `"apis.remote_address";q=3;w=86400` || !regexp.MustCompile(`^"apis.remote_address";r=2;t=\d+$`).MatchString(hdr["RateLimit"]) {
		t.Fatalf("IETF fields: %v", hdr)
	}
	if got := p.metric(t, `ratelimit_service_rate_limit_total_hits{domain="apis",key="apis.remote_address"}`); got != "1" {
		t.Fatalf("total_hits %q", got)
	}
	if got := p.metric(t, `ratelimit_service_redis_call_seconds_count{outcome="ok"}`); got != "1" {
		t.Fatalf("redis calls %q", got)
	}

	// The peer's three fields, by its environment variables.
	ph := startRLSEnv(t, []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_RESET_HEADER=X-Reset"}, s.addr(), map[string]string{"apis.yaml": dropInConfig})
	r = ph.ask(t, "apis", desc("remote_address", "6.6.6.6"), desc("path", "/login"), desc("gold", "x"))
	hdr = map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		hdr[h.Key] = h.Value
	}
	reset, _ := strconv.ParseInt(hdr["X-Reset"], 10, 64)
	if hdr["RateLimit-Limit"] != "2" || hdr["RateLimit-Remaining"] != "1" || reset < untilMidnight()-2 || reset > untilMidnight()+2 || len(hdr) != 3 {
		t.Fatalf("the peer's fields (the login limit has the least left): %v", hdr)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("exit after SIGTERM: %v", p.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15 s after SIGTERM")
	}
	if out := p.out.String(); !strings.Contains(out, "rls: stopping") {
		t.Fatalf("no word of stopping:\n%s", out)
	}
}

// TestRLSContainerSwap: rls in a container started as envoyproxy/ratelimit's
// is (its environment variables, its config layout under RUNTIME_ROOT, no
// flags) answers, and stops cleanly on docker stop.
func TestRLSContainerSwap(t *testing.T) {
	s := sharedOf(flavors[0])
	cfgDir := t.TempDir()
	writeFile(t, filepath.Join(cfgDir, "apis.yaml"), dropInConfig)
	gport, hport := twoPorts(t)
	c, err := testcontainers.Run(ctx, "local/redis:7.0", // a Debian bookworm base, as this machine's
		testcontainers.WithFiles(testcontainers.ContainerFile{HostFilePath: rlsBinary(t), ContainerFilePath: "/usr/local/bin/rls", FileMode: 0o755}),
		testcontainers.WithCmd("/usr/local/bin/rls"),
		testcontainers.WithEnv(map[string]string{
			"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": s.addr(), "REDIS_POOL_SIZE": "4",
			"RUNTIME_ROOT": "/srv/runtime_data/current", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
			"USE_STATSD": "false", "LOG_LEVEL": "WARNING", "CACHE_KEY_PREFIX": key(t, "swap") + ":",
			"HOST": "127.0.0.1", "PORT": strconv.Itoa(hport), "GRPC_HOST": "127.0.0.1", "GRPC_PORT": strconv.Itoa(gport),
		}),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			hc.Binds = append(hc.Binds, cfgDir+":/srv/runtime_data/current/ratelimit/config:ro")
		}),
	)
	if err != nil {
		if c != nil {
			logs, _ := c.Logs(ctx)
			if logs != nil {
				b, _ := io.ReadAll(logs)
				t.Logf("rls container log:\n%s", b)
			}
			c.Terminate(ctx)
		}
		t.Fatal(err)
	}
	defer c.Terminate(ctx)
	waitFor(t, 30*time.Second, "the container's health check", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthcheck", hport))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	expectDropIn(t, &rlsProc{rl: dialRLS(t, fmt.Sprintf("127.0.0.1:%d", gport))}, "7.7.7.7")

	timeout := 15 * time.Second
	if err := c.Stop(ctx, &timeout); err != nil {
		t.Fatal(err)
	}
	st, err := c.State(ctx)
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("after docker stop: %+v %v", st, err)
	}
}

// holdConfig holds 3 requests of a user at once, each named by its
// request id, each for at most 2 s unless released.
// admittedAtOnce sends n requests of one descriptor each (desc(i)) to
// domain at once, request i to procs[i % len(procs)], and returns those
// answered OK, in order.
func admittedAtOnce(t *testing.T, domain string, n int, procs []*rlsProc, desc func(i int) *rlv3.RateLimitDescriptor) []int {
	t.Helper()
	var wg sync.WaitGroup
	codes := make([]pb.RateLimitResponse_Code, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := procs[i%len(procs)].rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{desc(i)}})
			codes[i], errs[i] = r.GetOverallCode(), err
		})
	}
	wg.Wait()
	var ok []int
	for i, c := range codes {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if c == pb.RateLimitResponse_OK {
			ok = append(ok, i)
		}
	}
	return ok
}

const holdConfig = `
domain: h
descriptors:
  - key: user
    descriptors:
      - key: request_id
        holder: true
        rate_limit: {algorithm: concurrency, limit: 3, hold_ttl: 2s}
`

// TestRLSHolds: algorithm: concurrency through two rls processes on every
// server, with requests as Envoy builds them: the request phase's
// descriptor (user, then x-request-id) takes a slot named by the request
// id; the stream-done call (is_negative_hits) gives it back. 12 requests
// at once through both take exactly 3 slots; a release through the other
// process frees one; killing a process (SIGKILL) loses nothing, since the
// holds are in Redis; holds never released (an Envoy gone mid-request)
// lapse after hold_ttl.
func TestRLSHolds(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		prefix := key(t, "rls") + ":" // one for both: two replicas of one service
		a := startRLS(t, s.addr(), map[string]string{"h.yaml": holdConfig}, "-prefix", prefix)
		b := startRLS(t, s.addr(), map[string]string{"h.yaml": holdConfig}, "-prefix", prefix)
		u := key(t, "u")
		hold := func(id string, done bool) *rlv3.RateLimitDescriptor {
			d := desc("user", u, "request_id", id)
			d.IsNegativeHits = done
			return d
		}
		var holders []string
		for _, i := range admittedAtOnce(t, "h", 12, []*rlsProc{a, b}, func(i int) *rlv3.RateLimitDescriptor { return hold(fmt.Sprint("r", i), false) }) {
			holders = append(holders, fmt.Sprint("r", i))
		}
		if len(holders) != 3 {
			t.Fatalf("%d of 12 requests at once took a slot of 3: %v", len(holders), holders)
		}
		expectBrief(t, "a fourth", a.ask(t, "h", hold("late", false)), "OVER_LIMIT [OVER_LIMIT r=0 3/UNKNOWN]")
		expectBrief(t, "a holder's retry renews", b.ask(t, "h", hold(holders[0], false)), "OK [OK r=0 3/UNKNOWN]")
		// The stream ends: released through the other process.
		expectBrief(t, "stream done", b.ask(t, "h", hold(holders[0], true)), "OK [OK r=0 3/UNKNOWN]")
		expectBrief(t, "a slot free", a.ask(t, "h", hold("late", false)), "OK [OK r=0 3/UNKNOWN]")
		// An rls killed mid-request: the holds are Redis's, released
		// through the one left.
		if err := a.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		expectBrief(t, "released after a kill", b.ask(t, "h", hold("late", true)), "OK [OK r=0 3/UNKNOWN]")
		expectBrief(t, "taken again", b.ask(t, "h", hold("next", false)), "OK [OK r=0 3/UNKNOWN]")
		// Nobody releases the rest: within hold_ttl (2 s) after their
		// last acquire, three new requests are admitted.
		time.Sleep(2100 * time.Millisecond)
		for i := range 3 {
			expectBrief(t, "after the holds lapsed", b.ask(t, "h", hold(fmt.Sprint("new", i), false)), fmt.Sprintf("OK [OK r=%d 3/UNKNOWN]", 2-i))
		}
		if got := b.metric(t, `ratelimit_service_rate_limit_total_negative_hits{domain="h",key="h.user.request_id"}`); got != "2" {
			t.Errorf("total_negative_hits %q on the process that released twice, want 2", got)
		}
	})
}

const reserveConfig = `
domain: r
descriptors:
  - key: user
    descriptors:
      - key: request_id
        holder: true
        rate_limit: {unit: day, requests_per_unit: 1000, algorithm: token_bucket, reserve: true, hold_ttl: 2s}
`

// TestRLSReserve: reserve: true through two rls processes on every server,
// with requests as Envoy builds them: the request phase holds its
// hits_addend (the estimate) under the request id, the stream-done call
// (is_negative_hits) settles it at its hits_addend (the actual cost).
// 20 requests at once estimating 100 each of a budget of 1000: exactly 10
// held. Settled at 150 through the other process, each takes 50 more, so
// the budget ends 500 past its limit and refuses even an estimate of 0;
// every hold is gone, and a settlement repeated changes nothing. A hold
// whose rls was killed before its stream ended lapses after hold_ttl.
func TestRLSReserve(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		prefix := key(t, "rls") + ":"
		a := startRLS(t, s.addr(), map[string]string{"r.yaml": reserveConfig}, "-prefix", prefix)
		b := startRLS(t, s.addr(), map[string]string{"r.yaml": reserveConfig}, "-prefix", prefix)
		u := key(t, "u")
		req := func(id string, hits uint64, done bool) *rlv3.RateLimitDescriptor {
			d := desc("user", u, "request_id", id)
			d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(hits), done
			return d
		}
		held := admittedAtOnce(t, "r", 20, []*rlsProc{a, b}, func(i int) *rlv3.RateLimitDescriptor { return req(fmt.Sprint("q", i), 100, false) })
		if len(held) != 10 {
			t.Fatalf("%d of 20 estimates of 100 held from 1000: %v", len(held), held)
		}
		for _, i := range held { // each settled through the process that did not hold it
			p := []*rlsProc{b, a}[i%2]
			expectBrief(t, "a settlement", p.ask(t, "r", req(fmt.Sprint("q", i), 150, true)), "OK [OK r=0 1000/DAY]")
		}
		expectBrief(t, "in debt", a.ask(t, "r", req("late", 0, false)), "OVER_LIMIT [OVER_LIMIT r=0 1000/DAY]")
		if holds := s.rdb.Keys(ctx, "*"+prefix+"*:hold:*").Val(); len(holds) != 0 {
			t.Fatalf("holds left after every settlement: %v", holds)
		}
		tokens := func() string { return s.rdb.Get(ctx, prefix+"r_user_"+u+"_tb86400").Val() }
		before := tokens()
		b.ask(t, "r", req(fmt.Sprint("q", held[0]), 999, true))
		if after := tokens(); after != before || !strings.HasSuffix(after, ":debt") {
			t.Fatalf("a settlement repeated: the state went from %q to %q", before, after)
		}

		// A budget with room again (another user's), a hold whose rls dies
		// before the stream ends: it lapses after hold_ttl (2 s).
		u = key(t, "u")
		expectBrief(t, "a hold", a.ask(t, "r", req("z", 300, false)), "OK [OK r=700 1000/DAY]")
		if err := a.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if n := len(s.rdb.Keys(ctx, "*"+prefix+"*"+u+"*:hold:z").Val()); n != 1 {
			t.Fatalf("%d holds for z", n)
		}
		waitFor(t, 10*time.Second, "the hold to lapse", func() bool { return len(s.rdb.Keys(ctx, "*"+prefix+"*"+u+"*:hold:z").Val()) == 0 })
		expectBrief(t, "settled after the lapse: the estimate stands", b.ask(t, "r", req("z", 10, true)), "OK [OK r=700 1000/DAY]")
	})
}
