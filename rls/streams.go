package rls

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// The gRPC server's streams are bounded twice. Each costs the server about
// 12 KiB while it waits for its request (a goroutine and the transport's
// buffers), and a stream of headers alone waits for ever: unbounded, 10
// connections opened 95,413 such streams and took the service to 1,088 MiB.
//
//   - Per connection, HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS
//     (grpc.MaxConcurrentStreams): a well-behaved client (Envoy, grpc-go)
//     waits for a stream to end, or opens another connection, before it
//     starts one more; a stream beyond it is reset (REFUSED_STREAM).
//   - In all, Streams: a stream past the bound, on any connection, is
//     answered RESOURCE_EXHAUSTED at once, before a goroutine is started
//     for it, and the gateway's failure mode decides.
//
// With the defaults, 100 and 4,096, streams hold at most about 48 MiB,
// whatever the number of connections.
const (
	DefaultStreamsPerConnection = 100  // HTTP/2's recommended least value
	DefaultStreams              = 4096 // as many as calls may wait for Redis (admit's pipeline: queued)
)

// Streams bounds the streams open at once on a gRPC server, over all its
// connections. Its Tap is the server's InTapHandle.
type Streams struct {
	max     int64
	open    atomic.Int64
	refused atomic.Int64
}

// NewStreams bounds open streams at n (at least 1).
func NewStreams(n int) *Streams { return &Streams{max: int64(max(1, n))} }

// Tap admits a new stream while fewer than the bound are open, and counts it
// open until its context ends (the stream finished, was reset, or its
// connection closed); past the bound it refuses it with RESOURCE_EXHAUSTED.
func (l *Streams) Tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	if l.open.Add(1) > l.max {
		l.open.Add(-1)
		l.refused.Add(1)
		return ctx, status.Error(codes.ResourceExhausted, "rls: too many concurrent streams")
	}
	context.AfterFunc(ctx, func() { l.open.Add(-1) })
	return ctx, nil
}

// Open is the number of streams open now.
func (l *Streams) Open() int64 { return l.open.Load() }

// Refused is the number of streams refused so far.
func (l *Streams) Refused() int64 { return l.refused.Load() }

// ServerOptions are the options bounding a gRPC server's streams: at most
// perConnection on each connection, and l's bound in all.
func (l *Streams) ServerOptions(perConnection uint32) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxConcurrentStreams(max(1, perConnection)), grpc.InTapHandle(l.Tap)}
}
