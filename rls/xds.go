package rls

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"gopkg.in/yaml.v3"
)

// RateLimitConfigType is the type URL of the resources WatchXDS asks
// for: go-control-plane's ratelimit.config.ratelimit.v3.RateLimitConfig,
// as Envoy Gateway serves them.
const RateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

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
// validation a directory's files get (Parse). An update that does not
// load is refused (a NACK whose message is the reason, the config in
// force staying), logged and counted (ratelimit_service_config_load
// {result="error"}) once, however often the server sends it again (it is
// refused again no oftener than once a second); one that loads is
// acknowledged. A stream that fails
// (the server gone, a connection cut) is opened again after x.Backoff,
// asking for the whole state again.
//
// The resource has no field for this service's own keys of rate_limit;
// a descriptor carries them in its metadata, beside its rate_limit:
// metadata {algorithm: "gcra", debt: true, lease: true} reads as
// rate_limit {…, algorithm: gcra, debt: true, lease: true}. Other
// metadata, and quota_mode, are refused as in a file.
//
// The channel returned is closed once the first update is in force.
func (s *Service) WatchXDS(ctx context.Context, x XDS) <-chan struct{} {
	loaded := make(chan struct{})
	w := &xdsWatch{s: s, x: x, loaded: loaded}
	go w.run(ctx)
	return loaded
}

type xdsWatch struct {
	s      *Service
	x      XDS
	loaded chan struct{} // closed by the first update in force

	acked         string    // the version in force
	nacked        string    // the last version refused
	nackedAt      time.Time // when it was last refused
	streamsFailed int
}

func (w *xdsWatch) run(ctx context.Context) {
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
		w.s.log.Warn("rls: xDS stream ended; opening another", "err", err, "after", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// stream runs one stream until it fails, and tells whether it delivered
// a response.
func (w *xdsWatch) stream(ctx context.Context) (responded bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(w.x.Conn).StreamAggregatedResources(ctx, w.x.CallOptions...)
	if err != nil {
		return false, err
	}
	// A new stream asks for the state whatever the version in force: a
	// restarted server may count its versions from the start again.
	if err := st.Send(&discoverypb.DiscoveryRequest{Node: w.x.Node, TypeUrl: RateLimitConfigType}); err != nil {
		return false, err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return responded, err
		}
		responded = true
		req := &discoverypb.DiscoveryRequest{Node: w.x.Node, TypeUrl: RateLimitConfigType, ResponseNonce: resp.GetNonce()}
		cfg, err := xdsConfig(resp)
		if err == nil {
			w.s.m.configLoad(true)
			w.s.SetConfig(cfg)
			w.acked, w.nacked = resp.GetVersionInfo(), ""
			w.s.log.Info("rls: config loaded from xDS", "version", w.acked, "resources", cfg.Files(), "domains", cfg.Domains())
			select {
			case <-w.loaded:
			default:
				close(w.loaded)
			}
		} else {
			if resp.GetVersionInfo() == w.nacked {
				// The same version again (the server sends a refused version
				// until it has another): refused no oftener than renack, and
				// logged and counted once.
				if wait := renack - time.Since(w.nackedAt); wait > 0 {
					select {
					case <-ctx.Done():
						return responded, ctx.Err()
					case <-time.After(wait):
					}
				}
			} else {
				w.s.m.configLoad(false)
				w.s.log.Error("rls: xDS config refused; the config in force stays", "version", resp.GetVersionInfo(), "err", err)
			}
			w.nacked, w.nackedAt = resp.GetVersionInfo(), time.Now()
			if resp.GetTypeUrl() != "" {
				req.TypeUrl = resp.GetTypeUrl() // the refusal answers the type sent
			}
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		}
		req.VersionInfo = w.acked
		if err := st.Send(req); err != nil {
			return responded, err
		}
	}
}

// xdsConfig is the config of an update's resources.
func xdsConfig(resp *discoverypb.DiscoveryResponse) (*Config, error) {
	if resp.GetTypeUrl() != RateLimitConfigType {
		return nil, fmt.Errorf("type %s: only %s is asked for", resp.GetTypeUrl(), RateLimitConfigType)
	}
	files := map[string][]byte{}
	for i, res := range resp.GetResources() {
		rc := &rlcfg.RateLimitConfig{}
		if err := res.UnmarshalTo(rc); err != nil {
			return nil, fmt.Errorf("resource %d: %v", i, err)
		}
		name := rc.GetName()
		if name == "" {
			name = fmt.Sprintf("resource %d", i)
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("two resources named %q", name)
		}
		b, err := ConfigYAML(rc)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		files[name] = b
	}
	cfg, err := Parse(files)
	var ce *ConfigError
	if errors.As(err, &ce) {
		ce.Line = 0 // a line of the file made of the resource means nothing to its sender
	}
	return cfg, err
}

// ConfigYAML is a RateLimitConfig resource as the config file it stands
// for (see WatchXDS for the keys a descriptor's metadata adds to its
// rate_limit).
func ConfigYAML(rc *rlcfg.RateLimitConfig) ([]byte, error) {
	descs, err := yamlDescriptors(rc.GetDescriptors())
	if err != nil {
		return nil, err
	}
	root := map[string]any{"domain": rc.GetDomain()}
	if len(descs) > 0 {
		root["descriptors"] = descs
	}
	return yaml.Marshal(root)
}

// extensionKeys are the keys a descriptor's metadata may give its
// rate_limit.
var extensionKeys = []string{"algorithm", "debt", "lease"}

func yamlDescriptors(ds []*rlcfg.RateLimitDescriptor) ([]map[string]any, error) {
	var out []map[string]any
	for _, d := range ds {
		m := map[string]any{"key": d.GetKey()}
		if d.GetValue() != "" {
			m["value"] = d.GetValue()
		}
		if d.GetShadowMode() {
			m["shadow_mode"] = true
		}
		if d.GetDetailedMetric() {
			m["detailed_metric"] = true
		}
		if d.GetQuotaMode() {
			m["quota_mode"] = true // refused by Parse, naming it
		}
		var ext map[string]any
		if md := d.GetMetadata(); md != nil {
			rest := map[string]any{}
			for k, v := range md.GetFields() {
				if !isExtension(k) {
					rest[k] = v.AsInterface()
					continue
				}
				if ext == nil {
					ext = map[string]any{}
				}
				ext[k] = v.AsInterface()
			}
			if len(rest) > 0 {
				m["metadata"] = rest // refused by Parse, naming it
			}
		}
		if p := d.GetRateLimit(); p != nil {
			rl := map[string]any{"requests_per_unit": p.GetRequestsPerUnit()}
			if u := p.GetUnit(); u != rlcfg.RateLimitUnit_UNKNOWN || !p.GetUnlimited() {
				rl["unit"] = strings.ToLower(u.String()) // "unknown" is refused by Parse, naming it
			}
			if p.GetUnlimited() {
				rl["unlimited"] = true
				if p.GetRequestsPerUnit() == 0 {
					delete(rl, "requests_per_unit")
				}
			}
			if p.GetName() != "" {
				rl["name"] = p.GetName()
			}
			if rs := p.GetReplaces(); len(rs) > 0 {
				names := make([]map[string]any, len(rs))
				for i, r := range rs {
					names[i] = map[string]any{"name": r.GetName()}
				}
				rl["replaces"] = names
			}
			for k, v := range ext {
				rl[k] = v
			}
			m["rate_limit"] = rl
		} else if len(ext) > 0 {
			return nil, fmt.Errorf("descriptor %q: metadata %s without a rate_limit", d.GetKey(), strings.Join(slices.Sorted(maps.Keys(ext)), ", "))
		}
		if len(d.GetDescriptors()) > 0 {
			sub, err := yamlDescriptors(d.GetDescriptors())
			if err != nil {
				return nil, err
			}
			m["descriptors"] = sub
		}
		out = append(out, m)
	}
	return out, nil
}

func isExtension(k string) bool { return slices.Contains(extensionKeys, k) }
