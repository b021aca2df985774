package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// tracingConfig adds to zeroConfig a limit Redis must decide.
const tracingConfig = zeroConfig + `  - key: r
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// serveConfig runs rls in this process with config in its directory and
// no Redis listening, until the test ends: its gRPC and HTTP addresses.
func serveConfig(t *testing.T, config string) (grpcAddr, httpAddr string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := []string{"-config", dir, "-grpc", grpcAddr, "-http", httpAddr,
		"-redis", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "-log-level", "error"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, args, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rls: %v", err)
		}
	})
	waitListening(t, grpcAddr)
	return grpcAddr, httpAddr
}

// TestJSONServed: the binary answers POST /json on -http beside
// /healthcheck, as the peer's: a limit of 0 is 429 (a JSON body), and a
// GET of /json is no request.
func TestJSONServed(t *testing.T) {
	_, httpAddr := serveConfig(t, tracingConfig)
	resp, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(`{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(strings.ReplaceAll(string(body), " ", ""), `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("POST /json: %d %s", resp.StatusCode, body)
	}
	if resp, err := http.Get("http://" + httpAddr + "/json"); err != nil || resp.StatusCode == http.StatusOK {
		t.Errorf("GET /json: %v %v", resp, err)
	}
	if resp, err := http.Get("http://" + httpAddr + "/healthcheck"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthcheck: %v %v", resp, err)
	}
}

// TestTracing: with the peer's variables (TRACING_ENABLED,
// TRACING_EXPORTER_PROTOCOL http and grpc, OTEL_EXPORTER_OTLP_ENDPOINT)
// rls sends its spans to an OTLP receiver: a server span per request,
// a child of the b3 context Envoy's Zipkin tracer sent, with the domain
// and the overall code; and a client span per Redis call under it (here
// Redis refuses connections: the span says so). Before, TRACING_ENABLED
// =true stopped rls at start.
func TestTracing(t *testing.T) {
	for _, protocol := range []string{"http", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			rcv := rlstest.StartCollector(t, protocol)
			for k, v := range map[string]string{
				"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": protocol, "TRACING_SERVICE_NAME": "rls-under-test",
				"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.Endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50",
			} {
				t.Setenv(k, v)
			}
			grpcAddr, _ := serveConfig(t, tracingConfig)
			conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rl := pb.NewRateLimitServiceClient(conn)
			const traceID, parent = "463ac35c9f6413ad48485a3953bb6124", "0020000000000001"
			ask := func(key string) (*pb.RateLimitResponse, error) {
				c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c = metadata.AppendToOutgoingContext(c, "x-b3-traceid", traceID, "x-b3-spanid", parent, "x-b3-sampled", "1")
				return rl.ShouldRateLimit(c, &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}}}})
			}
			if r, err := ask("k"); err != nil || r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("a limit of 0: %v %v", r, err)
			}
			if _, err := ask("r"); err == nil {
				t.Fatal("answered with no Redis")
			}
			server, _ := rcv.Named(t, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
			if got := hex.EncodeToString(server.TraceId); got != traceID || hex.EncodeToString(server.ParentSpanId) != parent {
				t.Errorf("server span in trace %s under %x, want the b3 context's %s under %s", got, server.ParentSpanId, traceID, parent)
			}
			if server.Kind != tracepb.Span_SPAN_KIND_SERVER || rlstest.Attr(server, "ratelimit.domain") != "d" || rlstest.Attr(server, "ratelimit.descriptors") != "1" || rlstest.Attr(server, "ratelimit.overall_code") != "OVER_LIMIT" {
				t.Errorf("server span %v", server)
			}
			redis, spans := rcv.Named(t, "redis FW.HIT")
			if hex.EncodeToString(redis.TraceId) != traceID || redis.Kind != tracepb.Span_SPAN_KIND_CLIENT ||
				redis.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || rlstest.Attr(redis, "db.system.name") != "redis" || rlstest.Attr(redis, "db.operation.name") != "FW.HIT" {
				t.Errorf("redis span %v", redis)
			}
			// The Redis span's parent is the second request's server span.
			var parents []string
			for _, s := range spans {
				if s.Name == server.Name {
					parents = append(parents, hex.EncodeToString(s.SpanId))
				}
			}
			if !slices.Contains(parents, hex.EncodeToString(redis.ParentSpanId)) {
				t.Errorf("the Redis span's parent %x is no request's span (%v)", redis.ParentSpanId, parents)
			}
			if services := rcv.Services(); !slices.Contains(services, "rls-under-test") {
				t.Errorf("service.name %v", services)
			}
		})
	}
}
