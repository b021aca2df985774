package rls

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// heap is the bytes the heap and the goroutines' stacks hold after a
// collection.
func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

const mib = 1 << 20

// offline is a service whose Redis is nowhere: the tests using it decide
// everything without Redis (limits of 0).
func offline(t *testing.T, cfg string, o Options) *Service {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s := New(rdb, mustParse(t, map[string]string{"d.yaml": cfg}), o)
	t.Cleanup(s.Close)
	return s
}

// TestMetricSeriesBounded: 200,000 distinct values, half with Envoy's own
// limit on the descriptor and half matching a detailed_metric rule, make
// at most MetricKeys keys of series of their own (five series each); the
// rest count under "_overflow", every hit counted once. Unbounded, the
// same flood made 1,000,000 series, a /metrics of 181 MB and 876 MiB more
// memory.
func TestMetricSeriesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := offline(t, `
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 0}
`, Options{Registerer: reg})
	before := heap()
	const n = 200000
	ctx := context.Background()
	for i := range n {
		d := descriptor("user", fmt.Sprint("u", i))
		if i%2 == 1 {
			d = descriptor("ip", fmt.Sprint("10.", i))
			d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typev3.RateLimitUnit_MINUTE}
		}
		if _, err := s.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	grown := heap() - before
	series := testutil.CollectAndCount(s.m.totalHits)
	rec := httptest.NewRecorder()
	HTTPHandler(&Health{}, reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	size := rec.Body.Len()
	t.Logf("%d distinct values: heap and stacks +%.1f MiB after GC, %d total_hits series, /metrics %d bytes", n, float64(grown)/mib, series, size)
	if series > defaultMetricKeys+1 {
		t.Fatalf("%d total_hits series, want at most %d (the bound and one overflow)", series, defaultMetricKeys+1)
	}
	if size > 10e6 {
		t.Fatalf("/metrics is %d bytes", size)
	}
	if grown > 100*mib {
		t.Fatalf("the heap grew %d MiB", grown/mib)
	}
	over := testutil.ToFloat64(s.m.totalHits.WithLabelValues("d", overflowKey))
	if over != n-defaultMetricKeys {
		t.Fatalf("overflow counted %v hits, want %d", over, n-defaultMetricKeys)
	}
	if got := testutil.ToFloat64(s.m.totalHits.WithLabelValues("d", "d.user_u0")); got != 1 {
		t.Fatalf("the first value's own series: %v", got)
	}
}

// TestMetricKeysOption: a key longer than 256 bytes never has series of
// its own; MetricKeys -1 gives none any; the config's keys always have
// theirs.
func TestMetricKeysOption(t *testing.T) {
	cfg := "domain: d\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 0}\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 0}\n"
	ask := func(s *Service, d *rlv3.RateLimitDescriptor) {
		if _, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	s := offline(t, cfg, Options{})
	ask(s, descriptor("user", strings.Repeat("x", maxStatKey)))
	ask(s, descriptor("user", "short"))
	if got := testutil.ToFloat64(s.m.totalHits.WithLabelValues("d", overflowKey)); got != 1 {
		t.Fatalf("a long key: overflow %v, want 1", got)
	}
	if got := testutil.ToFloat64(s.m.totalHits.WithLabelValues("d", "d.user_short")); got != 1 {
		t.Fatalf("a short key: %v, want 1", got)
	}
	none := offline(t, cfg, Options{MetricKeys: -1})
	ask(none, descriptor("user", "short"))
	ask(none, descriptor("ip", "1.2.3.4"))
	if got := testutil.ToFloat64(none.m.totalHits.WithLabelValues("d", overflowKey)); got != 1 {
		t.Fatalf("MetricKeys -1: overflow %v, want 1", got)
	}
	if got := testutil.ToFloat64(none.m.totalHits.WithLabelValues("d", "d.ip")); got != 1 {
		t.Fatalf("MetricKeys -1: the config's key %v, want 1", got)
	}
}

// blocking answers no request until release is closed.
type blocking struct {
	pb.UnimplementedRateLimitServiceServer
	release chan struct{}
}

func (b *blocking) ShouldRateLimit(ctx context.Context, _ *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

// TestStreamsBounded: 10 connections each open 2,000 streams of headers
// alone, ignoring the server's SETTINGS_MAX_CONCURRENT_STREAMS (as the
// hostile client did that took the service to 1,088 MiB): at most 100 are
// open on a connection and 500 in all, the rest reset or refused; and a
// well-behaved client past the bound waits, or is refused with
// RESOURCE_EXHAUSTED, never crashing the server.
func TestStreamsBounded(t *testing.T) {
	const conns, each, perConn, total = 10, 2000, 100, 500
	limit := NewStreams(total)
	svc := &blocking{release: make(chan struct{})}
	gs := grpc.NewServer(limit.ServerOptions(perConn)...)
	pb.RegisterRateLimitServiceServer(gs, svc)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	defer gs.Stop()

	before, routines := heap(), runtime.NumGoroutine()
	var open []net.Conn
	for range conns {
		c := headerFlood(t, l.Addr().String(), each)
		defer c.Close()
		open = append(open, c)
	}
	grown := heap() - before
	extra := runtime.NumGoroutine() - routines
	t.Logf("%d connections × %d streams of headers alone: %d open, %d refused by the bound in all, %d more goroutines, heap and stacks +%.1f MiB after GC",
		conns, each, limit.Open(), limit.Refused(), extra, float64(grown)/mib)
	if limit.Open() > total || limit.Refused() == 0 {
		t.Fatalf("%d streams open, %d refused: the bound is %d", limit.Open(), limit.Refused(), total)
	}
	if extra > total+4*conns+50 {
		t.Fatalf("%d more goroutines for %d streams at most", extra, total)
	}
	if grown > 32*mib {
		t.Fatalf("the heap grew %d MiB", grown/mib)
	}

	// The hostile connections gone, their streams are counted closed.
	for _, c := range open {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for limit.Open() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if limit.Open() != 0 {
		t.Fatalf("%d streams still counted open after their connections closed", limit.Open())
	}

	// A gRPC client's calls past the bound: refused with
	// RESOURCE_EXHAUSTED, or waiting for a stream; all answered once
	// released.
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rl := pb.NewRateLimitServiceClient(cc)
	const calls = 150
	results := make(chan error, calls)
	for range calls {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d"})
			results <- err
		}()
	}
	for limit.Open() < perConn && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := limit.Open(); got > perConn {
		t.Fatalf("%d streams open on one connection, bound %d", got, perConn)
	}
	close(svc.release)
	for range calls {
		if err := <-results; err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a call: %v", err)
		}
	}
}

// headerFlood opens a connection to a gRPC server at addr and starts n
// streams of headers alone (no request, no end of stream), sent whatever
// the server allows, then waits until the server has read them all (the
// answer to a ping sent after them).
func headerFlood(t *testing.T, addr string, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	pinged := make(chan struct{})
	go func() { // read what the server sends until the ping's answer
		defer close(pinged)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == [8]byte{1} {
				return
			}
		}
	}()
	for i := range n {
		// The encoder's dynamic table makes every block after the first
		// refer to it: send the same bytes each time.
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pinged:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not answer the ping")
	}
	return c
}

// TestResetOf: duration_until_reset where Redis's reply says nothing: the
// end of the unit's window, as the peer reports it (20 s after 12:00:40
// for a minute), for a check of an empty fixed window and for a cost above
// the whole limit; otherwise retry_after when refused, reset_after when
// admitted.
func TestResetOf(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 40, 0, time.UTC)
	fw := &rule{algorithm: FixedWindow, perUnit: 10, unit: time.Minute}
	gcra := &rule{algorithm: GCRA, perUnit: 10, unit: time.Minute}
	for _, c := range []struct {
		name string
		r    *rule
		res  client.Result
		want time.Duration
	}{
		{"fixed window, a check of an empty key", fw, client.Result{Verdict: ratelimit.Verdict{Limit: 10, Remaining: 10, RetryAfter: ratelimit.Never}}, 20 * time.Second},
		{"fixed window, a cost above the limit", fw, client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: 10, Remaining: 10, RetryAfter: ratelimit.Never}}, 20 * time.Second},
		{"GCRA, a cost above the limit", gcra, client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: 10, Remaining: 10, RetryAfter: ratelimit.Never}}, 20 * time.Second},
		{"fixed window, admitted", fw, client.Result{Verdict: ratelimit.Verdict{Limit: 10, Remaining: 9, RetryAfter: ratelimit.Never, ResetAfter: 19500 * time.Millisecond}}, 19500 * time.Millisecond},
		{"fixed window, refused", fw, client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: 10, RetryAfter: 19500 * time.Millisecond, ResetAfter: 19500 * time.Millisecond}}, 19500 * time.Millisecond},
		{"GCRA, a check of an empty key: full now", gcra, client.Result{Verdict: ratelimit.Verdict{Limit: 10, Remaining: 10, RetryAfter: ratelimit.Never}}, 0},
		{"GCRA, refused", gcra, client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: 10, RetryAfter: 6 * time.Second, ResetAfter: time.Minute}}, 6 * time.Second},
	} {
		it := &item{r: c.r, started: at}
		it.Result, it.Known = c.res, true
		if got := resetOf(it); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
