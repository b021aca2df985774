package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP trace receiver, over HTTP and gRPC: the spans it
// was sent, with their resources' service.name.
type receiver struct {
	collector.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string
}

func (r *receiver) take(req *collector.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				r.service = append(r.service, a.Value.GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
}

func (r *receiver) Export(_ context.Context, req *collector.ExportTraceServiceRequest) (*collector.ExportTraceServiceResponse, error) {
	r.take(req)
	return &collector.ExportTraceServiceResponse{}, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var in collector.ExportTraceServiceRequest
	if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &in) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	r.take(&in)
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// named waits up to 10 s for a span named name and returns it.
func (r *receiver) named(t *testing.T, name string) *tracepb.Span {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r.mu.Lock()
		i := slices.IndexFunc(r.spans, func(s *tracepb.Span) bool { return s.Name == name })
		var s *tracepb.Span
		if i >= 0 {
			s = r.spans[i]
		}
		r.mu.Unlock()
		if s != nil {
			return s
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for _, s := range r.spans {
		names = append(names, s.Name)
	}
	t.Fatalf("no span %q among %q", name, names)
	return nil
}

// attr is a span's attribute key, a string or an integer, as text.
func attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			if v, ok := a.Value.Value.(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(v.IntValue, 10)
			}
			return a.Value.GetStringValue()
		}
	}
	return ""
}

const tracingConfig = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: r
    rate_limit: {unit: minute, requests_per_unit: 5}
`

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
			rcv := &receiver{}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if protocol == "http" {
				srv := &http.Server{Handler: rcv}
				go srv.Serve(l)
				t.Cleanup(func() { srv.Close() })
			} else {
				gs := grpc.NewServer()
				collector.RegisterTraceServiceServer(gs, rcv)
				go gs.Serve(l)
				t.Cleanup(gs.Stop)
			}
			for k, v := range map[string]string{
				"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": protocol, "TRACING_SERVICE_NAME": "rls-under-test",
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + l.Addr().String(), "OTEL_BSP_SCHEDULE_DELAY": "50",
			} {
				t.Setenv(k, v)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(tracingConfig), 0o600); err != nil {
				t.Fatal(err)
			}
			grpcAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			args := []string{"-config", dir, "-grpc", grpcAddr, "-http", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
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
			server := rcv.named(t, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
			if got := hex.EncodeToString(server.TraceId); got != traceID || hex.EncodeToString(server.ParentSpanId) != parent {
				t.Errorf("server span in trace %s under %x, want the b3 context's %s under %s", got, server.ParentSpanId, traceID, parent)
			}
			if server.Kind != tracepb.Span_SPAN_KIND_SERVER || attr(server, "ratelimit.domain") != "d" || attr(server, "ratelimit.descriptors") != "1" || attr(server, "ratelimit.overall_code") != "OVER_LIMIT" {
				t.Errorf("server span %v", server)
			}
			redis := rcv.named(t, "redis FW.HIT")
			if hex.EncodeToString(redis.TraceId) != traceID || redis.Kind != tracepb.Span_SPAN_KIND_CLIENT ||
				redis.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || attr(redis, "db.system.name") != "redis" || attr(redis, "db.operation.name") != "FW.HIT" {
				t.Errorf("redis span %v", redis)
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			// The Redis span's parent is the second request's server span.
			var parents []string
			for _, s := range rcv.spans {
				if s.Name == server.Name {
					parents = append(parents, hex.EncodeToString(s.SpanId))
				}
			}
			if !slices.Contains(parents, hex.EncodeToString(redis.ParentSpanId)) {
				t.Errorf("the Redis span's parent %x is no request's span (%v)", redis.ParentSpanId, parents)
			}
			if !slices.Contains(rcv.service, "rls-under-test") {
				t.Errorf("service.name %v", rcv.service)
			}
		})
	}
}
