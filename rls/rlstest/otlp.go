package rlstest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Collector is an OTLP trace receiver on 127.0.0.1, over HTTP
// (protobuf, /v1/traces) or gRPC: what rls's tracing sends a collector.
type Collector struct {
	collector.UnimplementedTraceServiceServer
	// Endpoint is its OTEL_EXPORTER_OTLP_ENDPOINT: http://127.0.0.1:port.
	Endpoint string

	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

// StartCollector starts a collector speaking protocol ("http" or
// "grpc"), stopped when the test ends.
func StartCollector(t testing.TB, protocol string) *Collector {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{Endpoint: "http://" + l.Addr().String()}
	if protocol == "grpc" {
		gs := grpc.NewServer()
		collector.RegisterTraceServiceServer(gs, c)
		go gs.Serve(l)
		t.Cleanup(gs.Stop)
		return c
	}
	web := &http.Server{Handler: http.HandlerFunc(c.serveHTTP)}
	go web.Serve(l)
	t.Cleanup(func() { web.Close() })
	return c
}

func (c *Collector) take(req *collector.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				c.services = append(c.services, a.Value.GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
}

// Export receives spans over gRPC.
func (c *Collector) Export(_ context.Context, req *collector.ExportTraceServiceRequest) (*collector.ExportTraceServiceResponse, error) {
	c.take(req)
	return &collector.ExportTraceServiceResponse{}, nil
}

func (c *Collector) serveHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var in collector.ExportTraceServiceRequest
	if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &in) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	c.take(&in)
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// Services are the service.name of every export's resources.
func (c *Collector) Services() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.services)
}

// Wait waits up to 10 s for a span that match accepts, and returns every
// span received then.
func (c *Collector) Wait(t testing.TB, what string, match func(*tracepb.Span) bool) []*tracepb.Span {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		spans := slices.Clone(c.spans)
		c.mu.Unlock()
		if slices.ContainsFunc(spans, match) {
			return spans
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range spans {
				names = append(names, s.Name+" in "+hex.EncodeToString(s.TraceId))
			}
			t.Fatalf("no span %s among %q", what, names)
		}
	}
}

// Named is the first span named name (waited for), and every span then.
func (c *Collector) Named(t testing.TB, name string) (*tracepb.Span, []*tracepb.Span) {
	t.Helper()
	is := func(s *tracepb.Span) bool { return s.Name == name }
	spans := c.Wait(t, name, is)
	return spans[slices.IndexFunc(spans, is)], spans
}

// Attr is a span's attribute key, a string or an integer, as text ("":
// none).
func Attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			if v := a.Value.GetIntValue(); v != 0 || a.Value.GetStringValue() == "" {
				return strconv.FormatInt(v, 10)
			}
			return a.Value.GetStringValue()
		}
	}
	return ""
}
