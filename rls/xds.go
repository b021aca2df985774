package rls

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// RateLimitConfigType is the type URL of the resources WatchXDS asks
// for: go-control-plane's ratelimit.config.ratelimit.v3.RateLimitConfig,
// as Envoy Gateway serves them.
const RateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// DefaultMaxDescriptors is the most descriptors (nested ones included) an
// xDS update may hold unless XDS.MaxDescriptors says otherwise. An update
// costs about its descriptors' worth of memory, however few bytes they take
// on the wire: gRPC's 4 MiB carry 33,000 descriptors of routes and their
// rules' matches (TestXDSUpdateMemory's update), or 2 million empty ones.
// 100,000 is three times the first and holds a config to about 55 MB (536
// bytes a descriptor in that update).
const DefaultMaxDescriptors = 100000

// XDS is where WatchXDS takes the config from: an xDS server's aggregated
// discovery service (state of the world), as envoyproxy/ratelimit does
// with CONFIG_TYPE=GRPC_XDS_SOTW.
type XDS struct {
	// Conn is the connection to the xDS server (grpc.NewClient; its
	// transport credentials carry any TLS). WatchXDS does not close it.
	Conn grpc.ClientConnInterface
	// Node is who this service is to the server: Envoy Gateway serves
	// the node id "envoy-ratelimit".
	Node *corev3.Node
	// Headers are sent as gRPC metadata on each stream.
	Headers map[string]string
	// Backoff is the wait before a new stream after one fails.
	Backoff Backoff
	// CallOptions are added to each stream (grpc.MaxCallRecvMsgSize).
	CallOptions []grpc.CallOption
	// MaxDescriptors is the most descriptors an update may hold, nested
	// ones included: a larger one is refused (a NACK naming the limit)
	// before it is read. 0 is DefaultMaxDescriptors; below 0, no limit.
	MaxDescriptors int

	// parsed, where set (tests), is called once each response is parsed,
	// before it is answered, with what tells the version of the newest
	// response received since ("" for none).
	parsed func(version string, newest func() string)
}

// Backoff is the wait before the nth new stream in a row after a failure
// (n from 0): Initial × Factor^n, at least Initial and at most Max; with
// Jitter, a uniform draw between Initial and that. It starts again from
// n = 0 once a stream has delivered a response. The zero Backoff is the
// peer's defaults: 10 s, at most 60 s, factor 0.5 (so, as the peer's,
// always 10 s), with jitter.
type Backoff struct {
	Initial, Max time.Duration
	Factor       float64
	Jitter       bool
}

// wait is the nth wait.
func (b Backoff) wait(n int) time.Duration {
	lo, hi, f := b.Initial, b.Max, b.Factor
	if lo <= 0 {
		lo = 10 * time.Second
	}
	if hi <= 0 {
		hi = 60 * time.Second
	}
	if f <= 0 {
		f = 0.5
	}
	d := float64(lo) * math.Pow(f, float64(min(n, 64)))
	if b.Jitter && d > float64(lo) {
		d = float64(lo) + rand.Float64()*(d-float64(lo))
	}
	return time.Duration(min(max(d, float64(lo)), float64(hi)))
}

// renack is the least time between two NACKs of the same version: the
// peer's xDS server (go-control-plane's) sends a refused version again at
// once, and would otherwise do so in a loop until it has a new one.
const renack = time.Second

// WatchXDS subscribes to RateLimitConfig resources until ctx ends, and
// makes each update the service's config: all the resources of the
// update, each read as a config file named after the resource, with the
// validation a directory's files get (the same code checks both). An
// update that does not load is refused (a NACK whose message is the
// reason, the config in force staying) and counted
// (ratelimit_service_config_load{result="error"}) once, however often the
// server sends it again (it is refused again no oftener than once a
// second); refusals for the same reason, whatever their versions, are
// logged once per 10 s with their count. One that loads is acknowledged.
// An update of more than x.MaxDescriptors descriptors is refused before it
// is read.
//
// Responses that arrive while one is parsed are not queued: only the
// newest is parsed and answered next, and one overtaken while it was
// parsed is not answered (go-control-plane's server ignores an answer
// that does not bear the nonce of the last response it sent).
//
// A stream that fails (the server gone, a connection cut) is opened again
// after x.Backoff, asking for the whole state again; while the server
// cannot be reached, gRPC is asked to connect again each time the backoff
// ends, so that its own wait between connection attempts (up to two
// minutes after a long outage) does not add to it.
//
// The resource has no field for this service's own keys, nor for
// value_to_metric and share_threshold; a descriptor carries them in its
// metadata (extensionKeys): metadata {algorithm: "gcra", debt: true}
// beside a rate_limit reads as rate_limit {…, algorithm: gcra, debt:
// true}, and {holder: true, algorithm: "concurrency", limit: 10,
// hold_ttl: "30s"} beside an empty one as holder: true and rate_limit
// {algorithm: concurrency, limit: 10, hold_ttl: 30s}. Its other metadata
// is the descriptor's metadata, and quota_mode its quota_mode, as in a
// file; a value a file would refuse is refused in the same words.
//
// The channel returned is closed once the first update is in force.
func (s *Service) WatchXDS(ctx context.Context, x XDS) <-chan struct{} {
	loaded := make(chan struct{})
	w := &xdsWatch{s: s, x: x, loaded: loaded,
		refused:     newRepeats(s.log, slog.LevelError, "rls: xDS config refused; the config in force stays", logEvery),
		ended:       newRepeats(s.log, slog.LevelWarn, "rls: xDS stream ended; opening another", logEvery),
		unreachable: newRepeats(s.log, slog.LevelWarn, "rls: xDS server not reachable; trying again", logEvery),
	}
	go w.run(ctx)
	return loaded
}

type xdsWatch struct {
	s      *Service
	x      XDS
	loaded chan struct{} // closed by the first update in force

	refused, ended, unreachable *repeats

	acked         string    // the version in force
	nacked        string    // the last version refused
	nackedAt      time.Time // when it was last refused
	streamsFailed int
}

func (w *xdsWatch) run(ctx context.Context) {
	defer w.refused.stop()
	defer w.ended.stop()
	defer w.unreachable.stop()
	if len(w.x.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(w.x.Headers))
	}
	for ctx.Err() == nil {
		responded, err := w.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if responded {
			w.streamsFailed = 0
		}
		d := w.x.Backoff.wait(w.streamsFailed)
		w.streamsFailed++
		w.ended.log(errorText(err), "err", err, "after", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// errorText is err's text, "" for none.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// open opens a stream. On a connection whose gRPC backoff can be reset (a
// *grpc.ClientConn), it waits for the connection to be ready, and asks gRPC
// to connect again at once each time x.Backoff's wait ends: a stream
// opened while gRPC waits out its own backoff (1 s, growing 1.6 times at
// each failed attempt up to 2 minutes) would fail at once, so that after a
// minute's outage the server was read up to 20 s after it came back.
func (w *xdsWatch) open(ctx context.Context) (discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesClient, error) {
	client := discoverypb.NewAggregatedDiscoveryServiceClient(w.x.Conn)
	conn, ok := w.x.Conn.(interface{ ResetConnectBackoff() })
	if !ok {
		return client.StreamAggregatedResources(ctx, w.x.CallOptions...)
	}
	type opened struct {
		st  discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesClient
		err error
	}
	done := make(chan opened, 1)
	go func() {
		st, err := client.StreamAggregatedResources(ctx, append(slices.Clip(w.x.CallOptions), grpc.WaitForReady(true))...)
		done <- opened{st, err}
	}()
	for {
		conn.ResetConnectBackoff()
		d := w.x.Backoff.wait(w.streamsFailed)
		t := time.NewTimer(d)
		select {
		case o := <-done:
			t.Stop()
			return o.st, o.err
		case <-t.C:
			w.streamsFailed++
			w.unreachable.log("", "after", d)
		}
	}
}

// inbox holds a stream's newest response not yet taken, and its end.
type inbox struct {
	mu    sync.Mutex
	resp  *discoverypb.DiscoveryResponse
	err   error
	ready chan struct{} // holds a token while resp or err is there
}

func newInbox() *inbox { return &inbox{ready: make(chan struct{}, 1)} }

// put keeps resp, in place of any not taken yet, or the stream's end.
func (b *inbox) put(resp *discoverypb.DiscoveryResponse, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.err = err
	} else {
		b.resp = resp
	}
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take is the newest response not taken yet, or nil, and the stream's
// end, if it has ended.
func (b *inbox) take() (*discoverypb.DiscoveryResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := b.resp
	b.resp = nil
	if b.err == nil {
		select {
		case <-b.ready:
		default:
		}
	}
	return resp, b.err
}

// newest is the version of the response waiting, "" for none.
func (b *inbox) newest() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.resp == nil {
		return ""
	}
	return b.resp.GetVersionInfo()
}

// stream runs one stream until it fails, and tells whether it delivered
// a response.
func (w *xdsWatch) stream(ctx context.Context) (responded bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := w.open(ctx)
	if err != nil {
		return false, err
	}
	// A new stream asks for the state whatever the version in force: a
	// restarted server may count its versions from the start again.
	if err := st.Send(&discoverypb.DiscoveryRequest{Node: w.x.Node, TypeUrl: RateLimitConfigType}); err != nil {
		return false, err
	}
	in := newInbox()
	go func() {
		for {
			resp, err := st.Recv()
			in.put(resp, err)
			if err != nil {
				return
			}
		}
	}()
	for {
		resp, err := in.take()
		if resp == nil {
			if err != nil {
				return responded, err
			}
			select {
			case <-ctx.Done():
				return responded, ctx.Err()
			case <-in.ready:
			}
			continue
		}
		responded = true
		req, ok := w.answer(ctx, resp, in)
		if !ok {
			continue // overtaken: the newer one is answered
		}
		if err := st.Send(req); err != nil {
			return responded, err
		}
	}
}

// answer parses resp, makes it the config if it loads, and returns the
// request that answers it, or false when a newer response came meanwhile
// (or ctx ended) and resp is not to be answered.
func (w *xdsWatch) answer(ctx context.Context, resp *discoverypb.DiscoveryResponse, in *inbox) (*discoverypb.DiscoveryRequest, bool) {
	version := resp.GetVersionInfo()
	req := &discoverypb.DiscoveryRequest{Node: w.x.Node, TypeUrl: RateLimitConfigType, ResponseNonce: resp.GetNonce()}
	cfg, err := xdsConfig(resp, w.x.MaxDescriptors)
	if w.x.parsed != nil {
		w.x.parsed(version, in.newest)
	}
	if err == nil {
		w.s.m.configLoad(true)
		w.s.SetConfig(cfg)
		w.acked, w.nacked = version, ""
		w.s.log.Info("rls: config loaded from xDS", "version", w.acked, "resources", cfg.Files(), "domains", cfg.Domains())
		select {
		case <-w.loaded:
		default:
			close(w.loaded)
		}
	} else {
		if version != w.nacked {
			w.s.m.configLoad(false)
			w.refused.log(err.Error(), "version", version, "err", err)
			w.nacked, w.nackedAt = version, time.Time{}
		}
		// The same version again (the server sends a refused version until
		// it has another): refused no oftener than renack.
		if wait := renack - time.Since(w.nackedAt); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, false
			case <-in.ready: // a newer response, or the stream's end
				t.Stop()
				return nil, false
			case <-t.C:
			}
		}
		w.nackedAt = time.Now()
		if resp.GetTypeUrl() != "" {
			req.TypeUrl = resp.GetTypeUrl() // the refusal answers the type sent
		}
		req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
	}
	if in.newest() != "" {
		return nil, false
	}
	req.VersionInfo = w.acked
	return req, true
}
