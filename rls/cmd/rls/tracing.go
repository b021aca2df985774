package main

import (
	"context"
	"crypto/rand"
	"fmt"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracer is rls's OpenTelemetry set-up, as the peer's TRACING_* variables
// say: spans exported over OTLP (TRACING_EXPORTER_PROTOCOL http, the
// default, or grpc; the endpoint, headers and the rest from the SDK's own
// OTEL_EXPORTER_OTLP_* variables), sampled at TRACING_SAMPLING_RATE of
// the traces that start here and as the caller decided for the others
// (parent-based), the service named by TRACING_SERVICE_NAME, _NAMESPACE
// and _INSTANCE_ID (a random UUID when unset). Incoming W3C trace context,
// b3 (single and multiple headers: Envoy's Zipkin tracer) and baggage
// are honoured.
type tracer struct {
	provider    *sdktrace.TracerProvider
	propagators propagation.TextMapPropagator
}

// newTracer makes the set-up; nil when tracing is off.
func newTracer(ctx context.Context, f *flags) (*tracer, error) {
	if !f.tracing {
		return nil, nil
	}
	client := otlptracehttp.NewClient() // parse took http or grpc
	if f.tracingProtocol == "grpc" {
		client = otlptracegrpc.NewClient()
	}
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	instance := f.serviceInstance
	if instance == "" {
		instance = randomUUID()
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", f.serviceName),
		attribute.String("service.namespace", f.serviceNamespace),
		attribute.String("service.instance.id", instance),
	))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return &tracer{
		provider: sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(exporter),
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(f.samplingRate))),
		),
		propagators: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{},
			b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader|b3.B3SingleHeader)), propagation.Baggage{}),
	}, nil
}

// randomUUID is a version 4 UUID.
func randomUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
