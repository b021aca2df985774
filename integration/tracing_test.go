package integration

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver collects the spans sent to it over OTLP/HTTP.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var in collector.ExportTraceServiceRequest
	if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &in) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range in.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// inTrace waits up to 10 s for n spans of trace id and returns them.
func (r *otlpReceiver) inTrace(t *testing.T, id string, n int) []*tracepb.Span {
	t.Helper()
	var got []*tracepb.Span
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && len(got) < n; time.Sleep(20 * time.Millisecond) {
		r.mu.Lock()
		got = slices.DeleteFunc(slices.Clone(r.spans), func(s *tracepb.Span) bool { return hex.EncodeToString(s.TraceId) != id })
		r.mu.Unlock()
	}
	if len(got) < n {
		t.Fatalf("%d spans of trace %s, want %d", len(got), id, n)
	}
	return got
}

const tracingConfig = `
domain: t
descriptors:
  - key: fw
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: gcra
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: gcra}
`

// TestRLSTracing: the rls binary with Envoy Gateway's tracing variables
// (TRACING_ENABLED, OTEL_EXPORTER_OTLP_ENDPOINT) on every server sends a
// collector started here the request's span, a child of the W3C context
// the caller sent, and the Redis call's span (RL.ALL, one call for both
// descriptors) under it, without error.
func TestRLSTracing(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		rcv := &otlpReceiver{}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		web := &http.Server{Handler: rcv}
		go web.Serve(l)
		t.Cleanup(func() { web.Close() })
		p := startRLSEnv(t, []string{"TRACING_ENABLED=true", "TRACING_SERVICE_NAME=rls", "OTEL_BSP_SCHEDULE_DELAY=50",
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + l.Addr().String()}, s.addr(), map[string]string{"t.yaml": tracingConfig})
		u := key(t, "u")
		const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+parent+"-01")
		r, err := p.rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "t", Descriptors: []*rlv3.RateLimitDescriptor{desc("fw", u), desc("gcra", u)}})
		if err != nil || r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("%v %v", r, err)
		}
		spans := rcv.inTrace(t, traceID, 2)
		server := spans[slices.IndexFunc(spans, func(s *tracepb.Span) bool { return s.Kind == tracepb.Span_SPAN_KIND_SERVER })]
		if server.Name != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" || hex.EncodeToString(server.ParentSpanId) != parent {
			t.Errorf("request span %q under %x, want under %s", server.Name, server.ParentSpanId, parent)
		}
		i := slices.IndexFunc(spans, func(s *tracepb.Span) bool { return s.Name == "redis RL.ALL" })
		if i < 0 {
			t.Fatalf("no span redis RL.ALL in %v", spans)
		}
		redis := spans[i]
		if !slices.Equal(redis.ParentSpanId, server.SpanId) || redis.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR ||
			redis.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("Redis span %v, want an OK client span under %x", redis, server.SpanId)
		}
	})
}
