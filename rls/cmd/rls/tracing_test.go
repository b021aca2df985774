package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
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

// TestJSONServed: the binary answers POST /json on -http beside
// /healthcheck, as the peer's: a limit of 0 is 429 (a JSON body), and a
// GET of /json is no request.
func TestJSONServed(t *testing.T) {
	_, httpAddr := serveIn(t, tracingConfig, true, "-log-level", "error")
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
			grpcAddr, _ := serveIn(t, tracingConfig, true, "-log-level", "error")
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
