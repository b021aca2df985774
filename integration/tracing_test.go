package integration

import (
	"context"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

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
		c := rlstest.StartCollector(t, "http")
		p := startRLSEnv(t, []string{"TRACING_ENABLED=true", "TRACING_SERVICE_NAME=rls", "OTEL_BSP_SCHEDULE_DELAY=50",
			"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.Endpoint}, s.addr(), map[string]string{"t.yaml": tracingConfig})
		u := key(t, "u")
		const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+parent+"-01")
		r, err := p.rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "t", Descriptors: []*rlv3.RateLimitDescriptor{desc("fw", u), desc("gcra", u)}})
		if err != nil || r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("%v %v", r, err)
		}
		inTrace := func(s *tracepb.Span) bool { return hex.EncodeToString(s.TraceId) == traceID }
		redis, _ := c.Named(t, "redis RL.ALL")
		spans := c.Wait(t, "of the request", func(s *tracepb.Span) bool { return inTrace(s) && s.Kind == tracepb.Span_SPAN_KIND_SERVER })
		server := spans[slices.IndexFunc(spans, func(s *tracepb.Span) bool { return inTrace(s) && s.Kind == tracepb.Span_SPAN_KIND_SERVER })]
		if server.Name != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" || hex.EncodeToString(server.ParentSpanId) != parent {
			t.Errorf("request span %q under %x, want under %s", server.Name, server.ParentSpanId, parent)
		}
		if !inTrace(redis) || !slices.Equal(redis.ParentSpanId, server.SpanId) || redis.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR ||
			redis.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("Redis span %v, want an OK client span under %x", redis, server.SpanId)
		}
	})
}
