package rls

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed-6b3823f5/ratelimit/admit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// These tests decide on the shared fake Redis (internal/fakeredis): the
// module's own decision code on keys in memory, at a clock the test moves,
// with no server and no network.

// t0 is the fake clock's start: 20 s into a minute (1,700,000,000 s).
var t0 = time.Unix(1_700_000_000, 0)

// onFake is a service on a fake server (its clock at t0) with cfg as the
// file d.yaml; its clock is the server's.
func onFake(t *testing.T, cfg string, o Options) (*Service, *fakeredis.Server) {
	t.Helper()
	f := fakeredis.New()
	f.Clock = func() time.Time { return t0 }
	rdb := f.Client()
	t.Cleanup(func() { rdb.Close() })
	return onClient(t, rdb, cfg, o, f.Now), f
}

// onClient is a service on rdb with cfg, its clock now. Unless o says
// otherwise, each Redis call may take up to 5 s: these tests decide and
// time nothing, and on a loaded machine a call to the fake took longer
// than the default 100 ms (TestAllOrNothingAcrossSlots failed 4 times in
// 8 with every core busy).
func onClient(t *testing.T, rdb redis.UniversalClient, cfg string, o Options, now func() time.Time) *Service {
	t.Helper()
	return onClientConfig(t, rdb, mustParse(t, map[string]string{"d.yaml": cfg}), o, now)
}

// onClientConfig is onClient's service answering by a config loaded
// already (from xDS resources, say).
func onClientConfig(t *testing.T, rdb redis.UniversalClient, cfg *Config, o Options, now func() time.Time) *Service {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	s := New(rdb, cfg, o)
	s.now = now
	t.Cleanup(s.Close)
	return s
}

// line is a response in one line: the overall code, then each status's
// code, limit, remaining and duration_until_reset in seconds.
func line(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, s := range r.Statuses {
		fmt.Fprintf(&b, " %s", s.Code)
		if s.CurrentLimit != nil {
			fmt.Fprintf(&b, "/%d", s.CurrentLimit.RequestsPerUnit)
		}
		fmt.Fprintf(&b, ":%d", s.LimitRemaining)
		if s.DurationUntilReset != nil {
			fmt.Fprintf(&b, ":%ds", int64(s.DurationUntilReset.AsDuration()/time.Second))
		}
	}
	return b.String()
}

const stepsConfig = `
domain: d
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: gcra
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: gcra}
  - key: sl
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
  - key: none
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: parent
    descriptors:
      - key: child
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestSteps: requests in order on a virtual clock, each answer as the
// peer gives it: the fixed window (2 a minute, 40 s of it left at t0)
// refuses a third request until the minute ends; GCRA (2 a minute, one
// back every 30 s) and the sliding log (2 in any 60 s) theirs; a limit
// of 0 refuses without Redis; unlimited and unmatched descriptors are OK;
// nested descriptors match their leaf; a shadow rule counts but never
// refuses; the same descriptor twice in one request is decided once, for
// both hits, and both report that answer (it was an INTERNAL error: RL.ALL
// refuses a key named twice).
func TestSteps(t *testing.T) {
	s, f := onFake(t, stepsConfig, Options{})
	for _, step := range []struct {
		advance time.Duration
		ds      []*rlv3.RateLimitDescriptor
		want    string
	}{
		{0, []*rlv3.RateLimitDescriptor{descriptor("fw", "a")}, "OK OK/2:1:40s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("fw", "a")}, "OK OK/2:0:40s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("fw", "a")}, "OVER_LIMIT OVER_LIMIT/2:0:40s"},
		{39 * time.Second, []*rlv3.RateLimitDescriptor{descriptor("fw", "a")}, "OVER_LIMIT OVER_LIMIT/2:0:1s"},
		{time.Second, []*rlv3.RateLimitDescriptor{descriptor("fw", "a")}, "OK OK/2:1:60s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("gcra", "a")}, "OK OK/2:1:30s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("gcra", "a")}, "OK OK/2:0:60s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("gcra", "a")}, "OVER_LIMIT OVER_LIMIT/2:0:30s"},
		{30 * time.Second, []*rlv3.RateLimitDescriptor{descriptor("gcra", "a")}, "OK OK/2:0:60s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("sl", "a"), descriptor("sl", "a")}, "OK OK/2:0:60s OK/2:0:60s"}, // one key twice: decided once, for both hits,
		{10 * time.Second, []*rlv3.RateLimitDescriptor{descriptor("sl", "a")}, "OVER_LIMIT OVER_LIMIT/2:0:50s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("none", "a"), descriptor("free", "a"), descriptor("other", "a")}, "OVER_LIMIT OVER_LIMIT/0:0:20s OK:4294967295 OK:0"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("parent", "p", "child", "c")}, "OK OK/1:0:1s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("parent", "p", "child", "c")}, "OVER_LIMIT OVER_LIMIT/1:0:1s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("shadowed", "a")}, "OK OK/1:0:20s"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("shadowed", "a")}, "OK OK/1:0:20s"},
	} {
		f.Advance(step.advance)
		r := ask(t, s, step.ds)
		if got := line(r); got != step.want {
			t.Fatalf("at t0+%v: %v answered %s, want %s", f.Now().Sub(t0), step.ds, got, step.want)
		}
	}
}

// TestShadowMode: the service's shadow mode answers OK whatever is
// decided; the statuses still say what was, and the refusal is counted
// as a shadow one.
func TestShadowMode(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := onFake(t, stepsConfig, Options{ShadowMode: true, Registerer: reg})
	ds := []*rlv3.RateLimitDescriptor{descriptor("fw", "a"), descriptor("gcra", "a")}
	var got []string
	for range 3 {
		got = append(got, line(ask(t, s, ds)))
	}
	want := []string{"OK OK/2:1:40s OK/2:1:30s", "OK OK/2:0:40s OK/2:0:60s", "OK OVER_LIMIT/2:0:40s OVER_LIMIT/2:0:30s"}
	if !slices.Equal(got, want) {
		t.Fatalf("answers %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(s.m.globalShadowN); n != 1 {
		t.Errorf("global shadow mode counted %v times, want 1", n)
	}
}

// TestHeaders: the IETF fields for every descriptor decided, named by the
// rule's name or stat key, and the peer's three fields for the one
// closest to its limit.
func TestHeaders(t *testing.T) {
	s, _ := onFake(t, stepsConfig, Options{Headers: true, LimitHeaders: LimitHeaders{"X-Limit", "X-Remaining", "X-Reset"}})
	ds := []*rlv3.RateLimitDescriptor{descriptor("fw", "a"), descriptor("gcra", "a"), descriptor("free", "a")}
	ask(t, s, ds)
	r := ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("gcra", "a"), descriptor("fw", "b")})
	want := map[string]string{
		"RateLimit-Policy": `"d.gcra";q=2;w=60, "d.fw";q=2;w=60`,
		"RateLimit":        `"d.gcra";r=0;t=60, "d.fw";r=1;t=40`,
		"X-Limit":          "2",
		"X-Remaining":      "0",
		"X-Reset":          "40",
	}
	got := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("headers %v, want %v", got, want)
	}
	free := ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("free", "a")})
	if len(free.ResponseHeadersToAdd) != 0 {
		t.Errorf("unlimited only: headers %v, want none", free.ResponseHeadersToAdd)
	}
}

// TestAllOrNothingAcrossSlots: limits spread over three primaries are
// decided one RL.ALL per slot, those that can give back first; when the
// last slot refuses, the others are refunded, so a refused request leaves
// every count as it was.
func TestAllOrNothingAcrossSlots(t *testing.T) {
	c := fakeredis.NewCluster(3, func(f *fakeredis.Server) { f.Clock = func() time.Time { return t0 } })
	cc := c.Client(t)
	s := onClient(t, cc, aonConfig, Options{}, func() time.Time { return t0 })
	limit := append(many("gcra", "x", 6), many("tb", "x", 6)...)
	allOrNothing(t, s, "12 refundable over 3 primaries", append(slices.Clone(limit), descriptor("tight", "x")), limit)
	for i, f := range c.Servers {
		if len(f.Keys()) == 0 {
			t.Fatalf("primary %d holds no key: the limits were not spread", i)
		}
	}
}

// TestAllOrNothingOnFake: TestAllOrNothingAnyNumber's requests on the fake,
// with the module and with the Lua library.
func TestAllOrNothingOnFake(t *testing.T) {
	for _, lua := range []bool{false, true} {
		t.Run(fmt.Sprint("lua=", lua), func(t *testing.T) {
			f := fakeredis.New()
			f.NoModule, f.Unknown, f.Functions = lua, lua, true
			s := onClient(t, f.Client(), aonConfig, Options{}, f.Now)
			for _, c := range []struct {
				name  string
				limit []*rlv3.RateLimitDescriptor
				tight *rlv3.RateLimitDescriptor
			}{
				{"16 windows and a 17th refusing", many("fw", "17", 16), descriptor("tight", "17")},
				{"20 refundable and 11 windows", append(append(many("gcra", "m", 10), many("tb", "m", 10)...), many("sl", "m", 11)...), descriptor("tight", "31")},
			} {
				allOrNothing(t, s, c.name, append(slices.Clone(c.limit), c.tight), c.limit)
			}
			want := client.Module
			if lua {
				want = client.Functions
			}
			if got := s.Engines()[f.Addr]; got != want {
				t.Errorf("engine %v, want %v", got, want)
			}
		})
	}
}

// TestContended: a transaction (17 windows) whose watched keys change
// before EXEC is tried again; one that changes 8 times fails UNAVAILABLE
// having counted nothing.
func TestContended(t *testing.T) {
	s, f := onFake(t, aonConfig, Options{})
	ds := many("big", "w", 17)
	f.Lock()
	f.TxFails = 2
	f.Unlock()
	if r := ask(t, s, ds); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 49 {
		t.Fatalf("after two failed EXECs: %s", brief(r))
	}
	f.Lock()
	f.TxFails = 8
	f.Unlock()
	_, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), admit.ErrContended.Error()) {
		t.Fatalf("contended 8 times: %v, want UNAVAILABLE", err)
	}
	if r := ask(t, s, ds); r.Statuses[16].LimitRemaining != 48 {
		t.Fatalf("after the failed request: %s, want remaining 48 (it counted nothing)", brief(r))
	}
}

// TestRedisFailures: an error reply fails the request INTERNAL; a server
// that never answers fails it UNAVAILABLE within the timeout; both are
// counted as Redis errors.
func TestRedisFailures(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, f := onFake(t, stepsConfig, Options{Registerer: reg, Timeout: 50 * time.Millisecond})
	ds := []*rlv3.RateLimitDescriptor{descriptor("fw", "a")}
	req := &pb.RateLimitRequest{Domain: "d", Descriptors: ds}
	f.Lock()
	f.Err = fakeredis.ReplyError("ERR something broke")
	f.Unlock()
	if _, err := s.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Internal {
		t.Fatalf("an error reply: %v, want INTERNAL", err)
	}
	f.Lock()
	f.Err = nil
	hold := make(chan struct{})
	f.Hold = hold
	f.Unlock()
	start := time.Now()
	_, err := s.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a server that never answers: %v, want UNAVAILABLE", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v with a 50 ms timeout", took)
	}
	f.Lock()
	f.Hold = nil
	f.Unlock()
	close(hold)
	if n := testutil.ToFloat64(s.m.errors.WithLabelValues("redis")); n != 2 {
		t.Errorf("%v Redis errors counted, want 2", n)
	}
	if r := ask(t, s, ds); r.OverallCode != pb.RateLimitResponse_OK {
		t.Errorf("once the server answers: %s", brief(r))
	}
	for _, bad := range []*pb.RateLimitRequest{{Descriptors: ds}, {Domain: "d"}} {
		if _, err := s.ShouldRateLimit(context.Background(), bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if n := testutil.ToFloat64(s.m.errors.WithLabelValues("service")); n != 2 {
		t.Errorf("%v service errors counted, want 2", n)
	}
}

// TestRefusalCache: a refused key is answered without Redis until its
// retry_after; a smaller request and a new config ask Redis again.
func TestRefusalCache(t *testing.T) {
	s, f := onFake(t, stepsConfig, Options{RefusalCache: 10})
	gcra := func(hits uint64) []*rlv3.RateLimitDescriptor {
		d := descriptor("gcra", "a")
		d.HitsAddend = wrapperspb.UInt64(hits)
		return []*rlv3.RateLimitDescriptor{d}
	}
	ask(t, s, gcra(2))
	if r := ask(t, s, gcra(2)); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the second request: %s", brief(r))
	}
	calls := len(f.Calls())
	for range 3 {
		if r := ask(t, s, gcra(2)); line(r) != "OVER_LIMIT OVER_LIMIT/2:0:60s" {
			t.Fatalf("a remembered refusal: %s", line(r))
		}
	}
	if n := len(f.Calls()); n != calls {
		t.Fatalf("%d calls to Redis for remembered refusals, want none", n-calls)
	}
	if n := testutil.ToFloat64(s.m.cacheHits); n != 3 {
		t.Errorf("%v cache hits, want 3", n)
	}
	ask(t, s, gcra(1))
	if n := len(f.Calls()); n != calls+1 {
		t.Errorf("a smaller request made %d calls, want 1", n-calls)
	}
	f.Advance(60 * time.Second)
	if r := ask(t, s, gcra(2)); r.OverallCode != pb.RateLimitResponse_OK {
		t.Errorf("after retry_after: %s", line(r))
	}
}

// TestReloadAndHealth: Reload makes a directory's config the service's,
// keeps the old one when the new does not load, and counts both; the
// health check answers 200 until Stop, then 500, beside /metrics.
func TestReloadAndHealth(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := onFake(t, stepsConfig, Options{Registerer: reg})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: d\ndescriptors:\n  - key: fw\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(dir); err != nil {
		t.Fatal(err)
	}
	if got := line(ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("fw", "a")})); got != "OK OK/5:4:40s" {
		t.Fatalf("after the reload: %s", got)
	}
	os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: [\n"), 0o644)
	if err := s.Reload(dir); err == nil {
		t.Fatal("a broken file loaded")
	}
	if got := line(ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("fw", "a")})); got != "OK OK/5:3:40s" {
		t.Fatalf("after a failed reload: %s, want the previous config", got)
	}
	for result, want := range map[string]float64{"success": 1, "error": 1} {
		if n := testutil.ToFloat64(s.m.configLoads.WithLabelValues(result)); n != want {
			t.Errorf("config loads %s: %v, want %v", result, n, want)
		}
	}

	h := &Health{}
	srv := httptest.NewServer(HTTPHandler(h, reg))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	if code, body := get("/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("healthcheck: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "ratelimit_service_config_load") {
		t.Errorf("metrics: %d, config loads missing", code)
	}
	h.Stop()
	if code, _ := get("/healthcheck"); code != 500 {
		t.Errorf("healthcheck after Stop: %d, want 500", code)
	}
}

// A Redis slower than the gateway's deadline opens the breaker too: with
// Envoy's 20 ms and a Redis answering in 200 ms, 3 requests past their
// deadline open it (the gateway's deadline, not -redis-timeout, bounds
// each call), and the next request is not sent.
func TestBreakerGatewayDeadline(t *testing.T) {
	const cfg = "domain: d\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}\n"
	s, f := onFake(t, cfg, Options{Timeout: time.Second, BreakerFailures: 3, BreakerCooldown: time.Minute})
	// The service's clock is not the fake's: reading the fake's waits on
	// its lock, held while it sleeps through the previous request's call,
	// so a request would start past its 20 ms, not asking Redis at all (a
	// request gone before its call counts toward no breaker).
	s.now = time.Now
	var slow atomic.Bool
	f.Before = func(redis.Cmder) error {
		if slow.Load() {
			time.Sleep(200 * time.Millisecond)
		}
		return nil
	}
	req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("api", "all")}}
	askWithin := func(d time.Duration) codes.Code {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := s.ShouldRateLimit(ctx, req)
		return status.Code(err)
	}
	if c := askWithin(5 * time.Second); c != codes.OK {
		t.Fatalf("Redis quick: %v", c)
	}
	slow.Store(true)
	for i := range 3 {
		if c := askWithin(20 * time.Millisecond); c == codes.OK {
			t.Fatalf("request %d past its deadline: OK", i)
		}
	}
	// Sent, this request would be answered OK in 200 ms; the open breaker
	// answers it at once.
	if c, open := askWithin(5*time.Second), testutil.ToFloat64(s.m.breakers.WithLabelValues("breaker-open")); c != codes.Unavailable || open != 1 {
		t.Fatalf("after 3 deadlines passed: %v; breaker-open %v", c, open)
	}
}

// TestBreakerOnFake: with Options.BreakerFailures, Redis refusing
// connections opens the breaker after 3 failures; the next 50 requests
// are answered UNAVAILABLE with no call; after the cooldown one request
// probes Redis, and once Redis answers the breaker closes and requests
// are decided again. Without the option every request calls.
func TestBreakerOnFake(t *testing.T) {
	const cfg = "domain: d\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}\n"
	for _, on := range []bool{true, false} {
		o := Options{Timeout: time.Second}
		if on {
			o.BreakerFailures, o.BreakerCooldown = 3, 2*time.Second // longer than 50 refusals take on a busy machine
		}
		s, f := onFake(t, cfg, o)
		var calls atomic.Int64
		var failing atomic.Bool
		f.Before = func(redis.Cmder) error {
			calls.Add(1)
			if failing.Load() {
				return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			}
			return nil
		}
		req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{descriptor("api", "all")}}
		askCode := func() codes.Code {
			_, err := s.ShouldRateLimit(context.Background(), req)
			return status.Code(err)
		}
		if c := askCode(); c != codes.OK {
			t.Fatalf("Redis up: %v", c)
		}
		failing.Store(true)
		for i := range 3 {
			if c := askCode(); c != codes.Unavailable {
				t.Fatalf("failure %d: %v", i, c)
			}
		}
		c0 := calls.Load()
		for i := range 50 {
			if c := askCode(); c != codes.Unavailable {
				t.Fatalf("request %d after the failures: %v", i, c)
			}
		}
		if n := calls.Load() - c0; on && n != 0 || !on && n < 50 {
			t.Fatalf("breaker %v: 50 requests after 3 failures made %d Redis calls", on, n)
		}
		if !on {
			continue
		}
		time.Sleep(2100 * time.Millisecond)
		failing.Store(false)
		c0 = calls.Load()
		if c := askCode(); c != codes.OK || calls.Load() == c0 {
			t.Fatalf("the probe after the cooldown: %v, %d calls", c, calls.Load()-c0)
		}
		if c := askCode(); c != codes.OK {
			t.Fatalf("closed again: %v", c)
		}
		for event, want := range map[string]float64{"failure": 3, "breaker-open": 1, "breaker-half-open": 1, "breaker-closed": 1} {
			if got := testutil.ToFloat64(s.m.breakers.WithLabelValues(event)); got != want {
				t.Errorf("ratelimit_service_breaker_events{event=%q} %v, want %v", event, got, want)
			}
		}
	}
}

// TestFailLocal: with Options.FailLocal, Redis refusing connections, the
// service decides here (fixed window of 2 a minute: OK, OK, OVER_LIMIT)
// instead of answering UNAVAILABLE; once Redis answers, the 2 admitted
// here are charged to the key with DEBT, so Redis refuses the request
// after, as it would have had it seen the 2. Without the option the same
// requests fail UNAVAILABLE.
func TestFailLocal(t *testing.T) {
	for _, on := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		s, f := onFake(t, stepsConfig, Options{FailLocal: on, Registerer: reg, Timeout: time.Second})
		var down atomic.Bool
		f.Before = func(redis.Cmder) error {
			if down.Load() {
				return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			}
			return nil
		}
		ds := []*rlv3.RateLimitDescriptor{descriptor("fw", "a")}
		req := &pb.RateLimitRequest{Domain: "d", Descriptors: ds}
		down.Store(true)
		for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
			r, err := s.ShouldRateLimit(context.Background(), req)
			switch {
			case !on && status.Code(err) != codes.Unavailable:
				t.Fatalf("without FailLocal, request %d: %v, want UNAVAILABLE", i+1, err)
			case on && (err != nil || r.OverallCode != want):
				t.Fatalf("Redis down, request %d: %v %v, want %v", i+1, brief(r), err, want)
			}
		}
		if !on {
			continue
		}
		down.Store(false)
		if r := ask(t, s, ds); r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("Redis back, the first request: %s (Redis never saw the 2)", brief(r))
		}
		deadline := time.Now().Add(5 * time.Second)
		for st := s.gate.Stats(); st.Charged == 0 || st.Charging; st = s.gate.Stats() {
			if time.Now().After(deadline) {
				t.Fatal("nothing charged 5 s after Redis answered")
			}
			time.Sleep(time.Millisecond)
		}
		if r := ask(t, s, ds); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("after the charge: %s, want OVER_LIMIT (3 taken of 2)", brief(r))
		}
		if n, c := testutil.ToFloat64(s.m.localDecided), testutil.ToFloat64(s.m.localUnits); n != 3 || c != 2 {
			t.Errorf("%v requests decided here, %v units charged; want 3 and 2", n, c)
		}
	}
}
