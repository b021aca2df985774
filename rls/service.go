package rls

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/admit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
	"github.com/seed-6b3823f5/ratelimit/lease"
	"github.com/seed-6b3823f5/ratelimit/window"
)

// Options tunes a Service. The zero value is the peer's behaviour with
// 100 ms per Redis call.
type Options struct {
	// Prefix starts every Redis key (the peer's CACHE_KEY_PREFIX).
	Prefix string
	// Timeout bounds each Redis call (and so each request, which makes one
	// call, or one per cluster slot); a call still running then fails the
	// request with UNAVAILABLE, and the gateway's failure mode decides.
	// The gRPC deadline, when sooner, wins. Default 100 ms.
	Timeout time.Duration
	// NearLimitRatio is the share of a limit past which hits count as near
	// the limit in the metrics (default 0.8, the peer's).
	NearLimitRatio float64
	// ShadowMode answers OK whatever the limits decide (the peer's
	// SHADOW_MODE); descriptors' statuses still say what was decided.
	ShadowMode bool
	// RefusalCache is the number of refused keys remembered, each until its
	// retry_after, so that a flood against a key that is over its limit is
	// answered here without Redis (0, the default, turns it off).
	RefusalCache int
	// BreakerFailures, when above 0, puts a circuit breaker per Redis
	// server in front of the calls: that many failures in a row (Redis
	// down, hung past Timeout, refusing connections) open the server's
	// breaker, and for BreakerCooldown (5 s when 0) requests whose keys it
	// holds are answered UNAVAILABLE at once, with no call; then one
	// request probes it. As httplimit's breaker; 0, the default, turns it
	// off (each request then waits out Timeout while Redis hangs).
	BreakerFailures int
	BreakerCooldown time.Duration
	// FailLocal, when Redis cannot decide (down, hung past Timeout, its
	// breaker open), decides the request in this service instead of
	// failing it: each limit's quota q per unit as a GCRA of q at once and
	// q per unit, per key (N services admit up to N times a limit while
	// Redis is away: a floor, not the limit), and once Redis answers again
	// charges it what was admitted here, with DEBT, so the limit resumes
	// as if Redis had seen it. Off, the default, the request fails with
	// UNAVAILABLE and the gateway's failure_mode_deny decides. As
	// httplimit's FailLocal.
	FailLocal bool
	// RefusalCacheBytes bounds the refusal cache in bytes: each entry counts
	// its key's length and 160 bytes (0: 16 MiB, which holds 1,000 keys of
	// 16 KiB or about 80,000 of 60 bytes). The least recently used go first.
	RefusalCacheBytes int64
	// MetricKeys is how many stat keys made of a request's own values
	// (detailed_metric, and Envoy's limit override on a descriptor) get
	// metric series of their own, five each; those past it, and any longer
	// than 256 bytes, count together under key="_overflow" (0: 1000; a
	// negative number: none). The config's own stat keys always have theirs.
	MetricKeys int
	// Headers adds the IETF RateLimit and RateLimit-Policy fields to every
	// response with a limit (response_headers_to_add).
	Headers bool
	// LimitHeaders, when its names are set, adds the peer's three fields
	// (its LIMIT_RESPONSE_HEADERS_ENABLED) for the descriptor closest to
	// its limit, or the last refused: the limit, what remains, and the
	// seconds until the unit's window ends.
	LimitHeaders LimitHeaders
	// Engine picks how commands run: client.Auto (the module where loaded,
	// else the Lua library) or one forced.
	Engine client.Engine
	// Lease, when set, decides a request whose enforcing limits all say
	// lease: true (fixed_window, gcra or token_bucket) through a local tier
	// (lease.New with these options): on descriptors hot on this
	// service, from units granted ahead, with no Redis call (several all
	// or nothing: lease.Tier.AllHere). Its
	// limit_remaining is then what this service holds, a lower bound. Its
	// counts are the ratelimit_lease_* metrics (prom.LeaseCollector, as
	// httplimit's tier).
	Lease *lease.Options
	// DebtCharges charges a descriptor that carries its own hits_addend
	// above 0 as a debt: true limit's hits are charged (counted even past
	// the limit), on every limit but a sliding_log. Envoy sends such a
	// descriptor for a rate limit with a cost (hits_addend): Envoy
	// Gateway's cost.response, Envoy AI Gateway's token budgets, charged
	// after the response. A config from xDS cannot say debt: true of a
	// limit Envoy Gateway made; this says it of its charges, so that a
	// budget stops its client once spent, as the peer's does. A
	// descriptor without a hits_addend of its own is charged so when the
	// request's hits_addend is above 0 (Envoy's request-level cost).
	// Checks (the descriptor's hits_addend 0) and requests with no
	// hits_addend at all are decided as without it.
	DebtCharges bool
	// QuotaMode makes every descriptor with a limit a quota, as quota_mode
	// does one (the peer's QUOTA_MODE).
	QuotaMode bool
	// DynamicMetadata sets each response's dynamic_metadata as the peer's
	// RESPONSE_DYNAMIC_METADATA does: the domain, each descriptor's entries
	// ("key=value"), hits_addend and Envoy's limit, and the config's
	// metadata of every descriptor that passed, merged (the first wins).
	DynamicMetadata bool
	// TracerProvider, when set, makes an OpenTelemetry span of each Redis
	// call a request makes — a client span "redis <command>" (RL.ALL,
	// GCRA.THROTTLE, CONC.ACQUIRE, …) under the request's span, its round
	// trip shared with other requests' when pipelined — and sets the
	// request's span's attributes (the domain, the descriptors, the overall
	// code). cmd/rls sets it from the peer's TRACING_* variables; nil: none.
	TracerProvider trace.TracerProvider
	// Registerer receives the service's metrics (nil: none are kept).
	Registerer prometheus.Registerer
	// Logger receives config reloads and Redis failures (nil: slog's default).
	Logger *slog.Logger
}

// LimitHeaders names the peer's response fields (its defaults:
// RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset).
type LimitHeaders struct{ Limit, Remaining, Reset string }

// Service answers envoy.service.ratelimit.v3.RateLimitService against
// Redis through the module's commands (or the Lua engine where the module
// is not loaded), with envoyproxy/ratelimit's config and responses. The
// descriptors of one request are decided all or nothing: when the answer
// is OVER_LIMIT, no descriptor's count changed.
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	c       *client.Client
	gate    *admit.Gate // decides: remembered refusals, breakers, the local tier, the plan per slot
	cfg     atomic.Pointer[Config]
	opts    Options
	m       *metrics
	log     *slog.Logger
	now     func() time.Time
	loadDir func(string) (*Config, error) // LoadDir; tests change it
}

// New returns a service on rdb (a single node, a Cluster, a failover client)
// answering by cfg (nil: every request fails until SetConfig).
func New(rdb redis.UniversalClient, cfg *Config, o Options) *Service {
	if o.Timeout <= 0 {
		o.Timeout = 100 * time.Millisecond
	}
	if o.NearLimitRatio <= 0 {
		o.NearLimitRatio = 0.8
	}
	s := &Service{
		c:       client.NewEngine(rdb, o.Engine),
		opts:    o,
		m:       newMetrics(o.Registerer),
		log:     o.Logger,
		now:     time.Now,
		loadDir: LoadDir,
	}
	switch {
	case o.MetricKeys < 0:
		s.m.maxPerValue = 0
	case o.MetricKeys > 0:
		s.m.maxPerValue = int64(o.MetricKeys)
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = 5 * time.Second
		s.opts.BreakerCooldown = o.BreakerCooldown
	}
	onError := admit.Fail
	if o.FailLocal {
		onError = admit.Local
	}
	s.gate = admit.New(s.c, admit.Options{
		Timeout:           localTimeout(o),
		OnError:           onError,
		BreakerFailures:   o.BreakerFailures,
		BreakerCooldown:   o.BreakerCooldown,
		RefusalCache:      o.RefusalCache,
		RefusalCacheBytes: o.RefusalCacheBytes,
		Lease:             o.Lease,
		Pipeline:          true,
		StepTimeout:       o.Timeout,
		Event:             s.gateEvent,
		Now:               func() time.Time { return s.now() },
		Trace:             redisSpans(o.TracerProvider),
	})
	if o.Lease != nil && o.Registerer != nil {
		leaseMetrics(o.Registerer, func() lease.Stats { return s.gate.Stats().Lease })
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg != nil {
		s.SetConfig(cfg)
	}
	return s
}

// SetConfig swaps the config every later request is answered by, and
// forgets remembered refusals (a limit may have been raised).
func (s *Service) SetConfig(c *Config) {
	s.cfg.Store(c)
	s.gate.Forget()
}

// Close gives back what the local tier holds (Options.Lease) and stops the
// service's Redis sender: calls made after it fail. It does not close the
// Redis client, which is the caller's.
func (s *Service) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*s.opts.Timeout) // what the tier holds goes back within a few Redis timeouts
	s.gate.Close(ctx)
	cancel()
}

// Config is the config in use (nil before the first).
func (s *Service) Config() *Config { return s.cfg.Load() }

// Engines reports each Redis node's engine once it has been asked.
func (s *Service) Engines() map[string]client.Engine { return s.c.Engines() }

// item is one descriptor with a limit, as one request decides it: its
// Want (key, limit, cost, and once decided its answer).
type item struct {
	admit.Want
	i        int // the descriptor's position
	r        *rule
	stat     string
	perValue bool      // stat is made of the request's own values
	started  time.Time // when the request was taken up, before any call was sent
	// id names a Concurrency or reserve item's hold (the holder entry's
	// value); release: the request gives a slot back, settle: it settles a
	// reserve (is_negative_hits, Envoy's call when the stream ends).
	id              string
	release, settle bool

	counters *keyCounters
}

// maxCost is the largest cost sent: above every limit, so refused.
const maxCost = admit.MaxCost

// ShouldRateLimit answers one request: see the package comment for how it
// differs from envoyproxy/ratelimit.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		s.m.serviceError()
		return nil, errors.New("rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		s.m.serviceError()
		return nil, errors.New("rate limit descriptor list must not be empty")
	}
	cfg := s.cfg.Load()
	if cfg == nil {
		s.m.serviceError()
		return nil, errNoConfig
	}
	resp := &pb.RateLimitResponse{Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	m := s.match(cfg, req, resp)
	if err := s.decide(ctx, m); err != nil {
		return nil, s.fail(err)
	}
	s.respond(resp, m)
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, resp, m.rules)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("ratelimit.domain", req.Domain), attribute.Int("ratelimit.descriptors", len(req.Descriptors)),
			attribute.String("ratelimit.overall_code", resp.OverallCode.String()))
	}
	return resp, nil
}

// matched is a request's descriptors with a limit, as match finds them:
// the items to decide, enforcing, shadow and quota (quota_mode: one of
// them admitting is enough), and each descriptor's rule (nil: none).
type matched struct {
	enforcing, shadow, quota []*item
	rules                    []*rule
	// passes: under QUOTA_MODE, a descriptor without a limit (none,
	// unlimited or replaced), a quota that always passes, as the peer's.
	passes bool
}

// match finds each descriptor's limit under cfg: the items to decide, and
// in resp the statuses of those with none (or unlimited, or replaced by
// another matched limit).
func (s *Service) match(cfg *Config, req *pb.RateLimitRequest, resp *pb.RateLimitResponse) (m matched) {
	rules := make([]*rule, len(req.Descriptors))
	m.rules = rules
	stats := make([]string, len(req.Descriptors))
	perValue := make([]bool, len(req.Descriptors))
	var replaced map[string]bool // names of limits other matched limits replace
	now := s.now()
	for i, d := range req.Descriptors {
		rules[i], stats[i], perValue[i] = s.ruleOf(cfg, req.Domain, d)
		if rules[i] != nil {
			for _, name := range rules[i].replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[name] = true
			}
		}
	}
	for i, d := range req.Descriptors {
		r := rules[i]
		switch {
		case r == nil || (r.name != "" && replaced[r.name]):
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
			rules[i], m.passes = nil, m.passes || s.opts.QuotaMode // a replaced limit sends no metadata back
			continue
		case r.unlimited:
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			rules[i], m.passes = nil, m.passes || s.opts.QuotaMode // nor an unlimited one, as the peer's
			continue
		}
		it := &item{Want: admit.Want{Lease: r.lease}, i: i, r: r, stat: stats[i], perValue: perValue[i], started: now}
		it.Cost, it.Debt = hits(req, d), r.debt || (s.opts.DebtCharges && charge(req, d) && r.algorithm != SlidingLog)
		if r.perUnit > 0 {
			it.Key, it.Limit = s.key(req.Domain, d, r), r.limit
			if r.overrides {
				it.Limit = r.limit.Override(overridesKey(it.Key), overridesField)
			}
		}
		if r.algorithm == Concurrency { // a hold: one slot, taken, or given back
			it.Cost, it.Debt, it.Lease, it.id = 1, false, false, holdID(d.Entries[r.holder].Value)
			it.release = d.GetIsNegativeHits()
		}
		if r.reserve { // its hits held as an estimate, or settled: the actual cost
			it.Debt, it.Lease, it.id, it.settle = false, false, holdID(d.Entries[r.holder].Value), d.GetIsNegativeHits()
		}
		if d.GetIsNegativeHits() && it.Cost > 0 && !r.reserve { // a refund: its hits given back, not counted
			it.Cost, it.Debt = -it.Cost, false
			s.m.negative(req.Domain, it)
		} else {
			s.m.hit(req.Domain, it)
		}
		switch {
		case (r.quota || s.opts.QuotaMode) && r.algorithm != Concurrency && !r.reserve: // a shadow one too: a quota that passes
			m.quota = append(m.quota, it)
		case r.shadow:
			m.shadow = append(m.shadow, it)
		default:
			m.enforcing = append(m.enforcing, it)
		}
	}
	return m
}

// respond fills resp with each item's status, remembers refusals, and
// sets the overall code and the headers asked for.
func (s *Service) respond(resp *pb.RateLimitResponse, m matched) {
	over := refused(m)
	for _, list := range [][]*item{m.enforcing, m.shadow, m.quota} {
		for _, it := range list {
			resp.Statuses[it.i] = statusOf(it)
			s.m.decided(it, s.opts.NearLimitRatio)
		}
	}
	resp.OverallCode = pb.RateLimitResponse_OK
	if over && !s.opts.ShadowMode {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	} else if over {
		s.m.globalShadow()
	}
	if s.opts.Headers {
		resp.ResponseHeadersToAdd = headers(m.enforcing, m.shadow, m.quota)
	}
	if s.opts.LimitHeaders.Limit != "" {
		var edges map[int]time.Duration // the windows' ends of spread and calendar statuses
		for _, list := range [][]*item{m.enforcing, m.shadow, m.quota} {
			for _, it := range list {
				if it.r.spread || it.r.calendar != nil {
					if edges == nil {
						edges = map[int]time.Duration{}
					}
					edges[it.i] = it.untilEdge(s.now())
				}
			}
		}
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, s.limitHeaders(resp.Statuses, edges)...)
	}
}

// limitHeaders are the peer's three fields for the status it picks: of
// those with a limit, the one with the least remaining, or the last over
// its limit. Its reset is the end of the unit's window: aligned to the
// epoch, or the time until a spread or calendar window's end (edges, by
// status).
func (s *Service) limitHeaders(statuses []*pb.RateLimitResponse_DescriptorStatus, edges map[int]time.Duration) []*core.HeaderValue {
	var pick *pb.RateLimitResponse_DescriptorStatus
	picked := -1
	least := uint32(math.MaxUint32)
	for i, st := range statuses {
		if st.CurrentLimit == nil || st.CurrentLimit.Unit == pb.RateLimitResponse_RateLimit_UNKNOWN {
			continue // none, or a hold's (concurrency has no unit)
		}
		if st.LimitRemaining < least {
			pick, picked, least = st, i, st.LimitRemaining
		}
		if st.Code == pb.RateLimitResponse_OVER_LIMIT {
			pick, picked, least = st, i, 0
		}
	}
	if pick == nil {
		return nil
	}
	unit := int64(unitLength(pick.CurrentLimit.Unit) / time.Second)
	reset := unit - s.now().Unix()%unit
	if d, ok := edges[picked]; ok {
		reset = int64(ceilSecond(d) / time.Second)
	}
	h := s.opts.LimitHeaders
	return []*core.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}

// ruleOf is a descriptor's rule: Envoy's override where the descriptor
// carries one (a fixed window, as the peer counts it), else the config's;
// its stat key; and whether that key is made of the request's own values
// (an override's, detailed_metric's or value_to_metric's), whose metric
// series are bounded.
func (s *Service) ruleOf(cfg *Config, domain string, d *rlv3.RateLimitDescriptor) (*rule, string, bool) {
	o := d.GetLimit()
	if o == nil {
		r, stat := cfg.lookup(domain, d)
		return r, stat, r != nil && (r.detailed || slices.ContainsFunc(r.levels, func(l level) bool { return l.toMetric }))
	}
	if _, ok := cfg.domains[domain]; !ok {
		return nil, "", false // the peer looks up the domain first
	}
	unit := pb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	r := &rule{
		proto:     &pb.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit},
		perUnit:   int64(o.GetRequestsPerUnit()),
		unit:      unitLength(unit),
		algorithm: FixedWindow,
	}
	if r.unit == 0 {
		return nil, "", false
	}
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.Entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	r.statKey = b.String()
	if r.perUnit > 0 {
		r.limit = limitOf(FixedWindow, r.perUnit, r.unit)
	}
	return r, r.statKey, true
}

// hits is what a descriptor adds: its own hits_addend where set (0 is a
// check that counts nothing), else the request's, else 1.
func hits(req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	var n uint64
	if h := d.GetHitsAddend(); h != nil {
		n = h.GetValue()
	} else {
		n = max(1, uint64(req.GetHitsAddend()))
	}
	return int64(min(n, maxCost))
}

// charge tells whether a descriptor is a charge, as DebtCharges takes
// one: its own hits_addend above 0, or, where it has none of its own, the
// request's above 0 (a descriptor's own 0 is a check whatever the
// request's).
func charge(req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) bool {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue() > 0
	}
	return req.GetHitsAddend() > 0
}

// key is a descriptor's Redis key: the prefix, the domain and every entry
// as the peer writes them, then the algorithm and the unit in seconds, so
// that a config changing either starts afresh rather than reading state
// of another kind.
func (s *Service) key(domain string, d *rlv3.RateLimitDescriptor, r *rule) string {
	var b strings.Builder
	b.WriteString(s.opts.Prefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range d.Entries {
		if (r.algorithm == Concurrency || r.reserve) && i == r.holder {
			continue // the hold's name: every request's hold counts at one key
		}
		b.WriteString(e.Key)
		b.WriteByte('_')
		if r.levels != nil && r.levels[i].share {
			b.WriteString(r.levels[i].value) // share_threshold: every value matched counts at the pattern's key
		} else {
			b.WriteString(e.Value)
		}
		b.WriteByte('_')
	}
	b.WriteString(algCode[r.algorithm])
	b.WriteString(strconv.FormatInt(int64(r.unit/time.Second), 10))
	switch {
	case r.spread:
		b.WriteString("_spread") // windows of other bounds: a state of another kind
	case r.calendar != nil:
		b.WriteString("_cal")
	}
	return b.String()
}

// overridesKey is the hash that may hold the limit of a rule with
// overrides: true on key, in key's Cluster slot: "{" + key + "}_limits",
// or, for a key with a hash tag of its own, key + "_limits". Its field
// overridesField holds the algorithm's parameters as the module reads
// them (LIMITS): "5000 60" for 5,000 a minute in a fixed window. A key
// with a '}' but no tag (a descriptor value "a{}b") cannot be a tag: its
// hash is key + "_limits", another slot, which a Cluster refuses.
func overridesKey(key string) string {
	if _, tagged := protocol.HashTag(key); tagged || strings.IndexByte(key, '}') >= 0 {
		return key + "_limits" // the same tag; or none to be had
	}
	return "{" + key + "}_limits"
}

// overridesField is the field of an overrides hash that holds the limit.
const overridesField = "limit"

// perUnitOf is the requests per unit an item's limit states: its rule's,
// or, where Redis gave another (overrides: true), the reply's limit (what
// it admits at once: requests_per_unit for every algorithm rls maps).
func perUnitOf(it *item) int64 {
	if it.r.overrides && it.Known && it.Result.Limit != it.r.perUnit {
		return it.Result.Limit
	}
	return it.r.perUnit
}

var algCode = map[Algorithm]string{FixedWindow: "fw", SlidingWindow: "sw", SlidingLog: "sl", GCRA: "gcra", TokenBucket: "tb", Concurrency: "conc"}

// holdID is the holder id of a hold named value: itself when 1 to 128
// bytes (the module's bound), else "sha256:" and the hex of its first 24
// bytes' worth of SHA-256, the same for every call naming it; an empty
// value is "-".
func holdID(value string) string {
	switch {
	case value == "":
		return "-"
	case len(value) <= spec.MaxID:
		return value
	}
	sum := sha256.Sum256([]byte(value))
	return "sha256:" + hex.EncodeToString(sum[:24])
}

// decide decides the items through the gate: the enforcing ones all or
// nothing, the shadow ones each on its own. A limit of 0 refuses here,
// with no call (the enforcing items not asked, the debts still charged);
// the gate answers from a remembered refusal, or through the local tier
// when every enforcing item leases, else by the gate's plan (one
// RL.ALL per slot; those that can give back first; a transaction past 16
// windows in a slot; refunds when a later step refuses), its steps
// pipelined. Holds (Concurrency) come first (see hold), and a request
// refused, or failed, gives back the slots it took.
func (s *Service) decide(ctx context.Context, m matched) error {
	if len(m.enforcing)+len(m.shadow)+len(m.quota) == 0 {
		return nil
	}
	held, refusedHold, err := s.hold(ctx, m.enforcing, m.shadow)
	if err != nil {
		return err
	}
	reserved, refusedReserve, err := s.reserve(ctx, m.enforcing, m.shadow, refusedHold)
	if err != nil {
		for _, h := range held {
			h.Release(ctx)
		}
		return err
	}
	refusedHold = refusedHold || refusedReserve
	err = s.decideQuotas(ctx, m.quota, refusedHold)
	if err == nil {
		err = s.decideLimits(ctx, m.enforcing, m.shadow, refusedHold || refused(matched{quota: m.quota, passes: m.passes}))
	}
	if err != nil || refused(m) {
		for _, h := range held { // a request refused, or failed, holds nothing
			h.Release(ctx)
		}
		s.giveBack(ctx, reserved)
		var taken []*admit.Want // nor keeps what its quotas took (where they can give back)
		for _, it := range m.quota {
			taken = append(taken, &it.Want)
		}
		s.gate.Refund(ctx, taken)
	}
	return err
}

// refused reports a request m refuses: an enforcing item refused (a
// charge taken past its limit too), or every quota refused.
func refused(m matched) bool {
	if slices.ContainsFunc(m.enforcing, func(it *item) bool { return it.Known && it.Result.Limited }) {
		return true
	}
	return len(m.quota) > 0 && !m.passes && !slices.ContainsFunc(m.quota, func(it *item) bool { return !it.Known || !it.Result.Limited || it.r.shadow })
}

// decideQuotas decides a request's quota_mode items, each on its own (one
// admitting is enough, as the peer's: a quota refused is not counted, one
// admitted is), unless a hold refused the request first.
func (s *Service) decideQuotas(ctx context.Context, quota []*item, refused bool) error {
	if len(quota) == 0 || refused {
		return nil
	}
	wants := make([]*admit.Want, 0, len(quota))
	now := s.now()
	for _, it := range quota {
		if it.r.perUnit == 0 {
			s.zero(it, now)
			continue
		}
		it.Shadow = true // each on its own
		wants = append(wants, &it.Want)
	}
	if len(wants) == 0 {
		return nil
	}
	if out, err := s.gate.Decide(ctx, wants); out != admit.Decided {
		return err
	}
	for _, w := range wants { // counted when admitted: given back if the request is refused
		w.Taken = w.Known && !w.Result.Limited && !w.Local
	}
	return nil
}

// hold gives back the holds of the request's Concurrency items that say
// is_negative_hits (Envoy's call when the stream ends), then takes a
// slot for each of the others, enforcing ones first, until one refuses
// (the rest of the request is then not asked). It returns the slots taken,
// whether an enforcing one refused, and the first failure (the slots it
// took are given back then). A hold is never decided in this service
// (-fail-local): another call, to any replica, must be able to release it.
func (s *Service) hold(ctx context.Context, enforcing, shadow []*item) (held []*admit.Held, refused bool, err error) {
	for _, list := range [][]*item{enforcing, shadow} {
		for _, it := range list {
			if it.r.algorithm != Concurrency || !it.release {
				continue
			}
			if _, err := s.gate.Release(ctx, it.Key, it.id); err != nil {
				return nil, false, err
			}
		}
	}
	for _, list := range [][]*item{enforcing, shadow} {
		for _, it := range list {
			if it.r.algorithm != Concurrency || it.release || refused {
				continue
			}
			h, out, err := s.gate.Acquire(ctx, &it.Want, it.r.conc, it.id)
			if err == nil && it.Local {
				h.Release(ctx) // counted in this process: no other call could find it
				it.Known, err = false, errLocalHold
			}
			if out != admit.Decided || err != nil {
				for _, h := range held {
					h.Release(ctx)
				}
				return nil, false, cmp.Or(err, errLocalHold)
			}
			if h != nil {
				held = append(held, h)
			}
			refused = refused || (it.Result.Limited && !it.Shadow && !it.r.shadow)
		}
	}
	return held, refused, nil
}

// reserve settles the request's reserve: true items that say
// is_negative_hits (Envoy's call when the stream ends) at their hits, the
// actual cost, then holds the others' hits as estimates, enforcing ones
// first, until one refuses (the rest are then not asked; none is when the
// request is refused already). It returns the holds taken, whether an
// enforcing one refused, and the first failure (the holds taken are given
// back then). Like a Concurrency hold, a reserve is never decided in this
// service: its settlement may come to another replica.
func (s *Service) reserve(ctx context.Context, enforcing, shadow []*item, refused bool) (held []*item, _ bool, err error) {
	for _, list := range [][]*item{enforcing, shadow} {
		for _, it := range list {
			if !it.r.reserve || !it.settle {
				continue
			}
			if _, err := s.gate.Settle(ctx, &it.Want, it.id); err != nil {
				return nil, false, err
			}
			it.Result.Limited = false // a settlement is never refused: past the limit, the next holds wait
		}
	}
	for _, list := range [][]*item{enforcing, shadow} {
		for _, it := range list {
			if !it.r.reserve || it.settle || refused {
				continue
			}
			if err := s.gate.Hold(ctx, &it.Want, it.id, it.r.holdTTL); err != nil {
				s.giveBack(ctx, held)
				return nil, false, err
			}
			if !it.Result.Limited {
				held = append(held, it)
			}
			refused = refused || (it.Result.Limited && !it.r.shadow)
		}
	}
	return held, refused, nil
}

// giveBack settles the holds a request took at 0, every estimate given
// back, when the request was refused or failed. The request's
// cancellation does not stop it; the holds it cannot reach lapse with
// hold_ttl, their estimates kept.
func (s *Service) giveBack(ctx context.Context, held []*item) {
	ctx = context.WithoutCancel(ctx)
	for _, it := range held {
		w := it.Want // the request's answer keeps the hold's result
		w.Cost = 0
		s.gate.Settle(ctx, &w, it.id)
	}
}

// errLocalHold is a hold asked while Redis could not decide under
// -fail-local: a hold is released by a later call, perhaps to another
// replica, which a count in this service could not see.
var errLocalHold = errors.New("redis could not decide a hold (algorithm: concurrency), which is never decided in this service")

// decideLimits decides the items that are not holds (see decide), refused
// already when a hold refused.
func (s *Service) decideLimits(ctx context.Context, enforcing, shadow []*item, refused bool) error {
	now := s.now()
	var remote, charged, wants []*admit.Want
	for _, it := range enforcing {
		switch {
		case it.r.algorithm == Concurrency, it.r.reserve:
		case it.r.perUnit == 0:
			refused = refused || s.zero(it, now)
		case it.Debt: // counted whatever the others decide, never from the remembered refusals
			charged = append(charged, &it.Want)
		default:
			remote = append(remote, &it.Want)
		}
	}
	if !refused {
		wants = remote
	}
	wants = append(wants, charged...)
	for _, it := range shadow {
		if it.r.algorithm == Concurrency || it.r.reserve {
			continue
		}
		if it.r.perUnit == 0 {
			s.zero(it, now)
			continue
		}
		it.Shadow = true
		wants = append(wants, &it.Want)
	}
	if len(wants) == 0 {
		return nil
	}
	if out, err := s.gate.Decide(ctx, wants); out != admit.Decided {
		return err
	}
	if slices.ContainsFunc(wants, func(w *admit.Want) bool { return w.Local }) {
		s.m.localDecision()
	}
	return nil
}

// redisSpans makes the gate's Trace of tp: a client span per Redis call,
// named "redis <command>", with the OpenTelemetry database attributes;
// nil without tp.
func redisSpans(tp trace.TracerProvider) func(context.Context, string) func(error) {
	if tp == nil {
		return nil
	}
	tracer := tp.Tracer("github.com/seed-6b3823f5/ratelimit/rls")
	return func(ctx context.Context, command string) func(error) {
		_, span := tracer.Start(ctx, "redis "+command, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", command)))
		return func(err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(otelcodes.Error, err.Error())
			}
			span.End()
		}
	}
}

// localTimeout is the gate's own bound on a decision's calls: none (each
// step has Timeout in send) but under FailLocal, where a decision past
// Timeout is decided here rather than waiting for the gateway's deadline;
// a decision of several steps then has Timeout in all.
func localTimeout(o Options) time.Duration {
	if o.FailLocal {
		return o.Timeout
	}
	return 0
}

// zero answers an item whose limit is 0: refused (true) unless its cost is
// 0, until the unit's window ends, with no call.
func (s *Service) zero(it *item, now time.Time) bool {
	it.Known = true
	it.Result = client.Result{Verdict: ratelimit.Verdict{Limited: it.Cost > 0, RetryAfter: ratelimit.Never, ResetAfter: it.untilEdge(now)}}
	return it.Cost > 0
}

// gateEvent counts each step sent to Redis and the remembered refusals,
// and logs and counts a change of a server's breaker. The gate sends each
// step within -redis-timeout, pipelined; its breakers see each decision: a
// decision past the gateway's deadline (Envoy's 20 ms by default, usually
// shorter than -redis-timeout) is a failure, as one past -redis-timeout
// is; one the gateway cancelled is not.
func (s *Service) gateEvent(e admit.Event) {
	switch e.Kind {
	case admit.Sent:
		s.m.redisCall(e.Duration, e.Err)
		return
	case admit.Remembered:
		s.m.cacheHit()
		return
	case admit.BreakerOpen:
		s.log.Warn("rls: a Redis server is failing; its circuit breaker is open: requests on its keys are answered UNAVAILABLE until the cooldown ends",
			"server", e.Server, "cooldown", s.opts.BreakerCooldown, "err", e.Err)
	case admit.BreakerClosed:
		s.log.Info("rls: a Redis server answers again; its circuit breaker is closed", "server", e.Server)
	case admit.Charged:
		if e.Units > 0 {
			s.log.Info("rls: Redis answers again: charged it what was decided here while it was away (-fail-local)", "keys", e.Keys, "units", e.Units)
		}
		if e.Err != nil {
			s.log.Warn("rls: a charge of what was decided here while Redis was away failed; it is tried again after the next call Redis answers", "err", e.Err)
		}
		s.m.localCharged(e.Units)
	}
	if name, ok := breakerEvents[e.Kind]; ok {
		s.m.breaker(name)
	}
}

// breakerEvents name the gate's breaker events in
// ratelimit_service_breaker_events.
var breakerEvents = map[admit.EventKind]string{admit.ServerFailed: "failure", admit.BreakerOpen: "breaker-open",
	admit.BreakerHalfOpen: "breaker-half-open", admit.BreakerClosed: "breaker-closed"}

// fail turns a Redis failure into the gRPC error the gateway sees.
func (s *Service) fail(err error) error {
	s.m.redisError()
	if !errors.Is(err, admit.ErrBreakerOpen) { // the breaker's opening was logged once
		s.log.Warn("rls: redis", "err", err)
	}
	if client.Unavailable(err) || errors.Is(err, context.Canceled) || errors.Is(err, admit.ErrContended) || errors.Is(err, admit.ErrBreakerOpen) {
		return status.Error(codes.Unavailable, "redis: "+err.Error())
	}
	return status.Error(codes.Internal, "redis: "+err.Error())
}

// dynamicMetadata is a response's dynamic_metadata, as the peer makes it
// (Options.DynamicMetadata): {domain, descriptors: [{entries: ["k=v", …],
// limit, hitsAddend}], hitsAddend, metadata}, metadata the config's of
// every descriptor whose status is not OVER_LIMIT, merged in order (nested
// mappings merged, the first value of a key kept).
func dynamicMetadata(req *pb.RateLimitRequest, resp *pb.RateLimitResponse, rules []*rule) *structpb.Struct {
	descriptors := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		entries := make([]*structpb.Value, len(d.Entries))
		for i, e := range d.Entries {
			entries[i] = structpb.NewStringValue(e.Key + "=" + e.Value)
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(fmt.Sprintf("requests_per_unit:%d unit:%s", l.GetRequestsPerUnit(), l.GetUnit()))
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descriptors = append(descriptors, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.Domain),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descriptors}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, r := range rules {
		if r != nil && r.metadata != nil && resp.Statuses[i].Code != pb.RateLimitResponse_OVER_LIMIT {
			merge(passed, r.metadata)
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// merge adds src's fields to dst's: a key dst has keeps its value, but two
// mappings are merged likewise. src is the config's and never changed: a
// mapping taken whole is copied.
func merge(dst, src *structpb.Struct) {
	for k, v := range src.Fields {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			merge(have.GetStructValue(), v.GetStructValue())
		}
	}
}

// statusOf is a descriptor's status as the peer fills it: the code, the
// limit, what remains and how long until the limit resets (when refused,
// until the same request would be admitted), in whole seconds rounded up.
// A descriptor not asked because another refused first reports OK, its
// limit and nothing more.
func statusOf(it *item) *pb.RateLimitResponse_DescriptorStatus {
	st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, CurrentLimit: it.r.proto}
	if !it.Known {
		return st
	}
	if n := perUnitOf(it); n != it.r.perUnit { // the limit Redis held for the key, over the rule's unit
		st.CurrentLimit = &pb.RateLimitResponse_RateLimit{Name: it.r.proto.Name, RequestsPerUnit: uint32(min(max(n, 0), math.MaxUint32)), Unit: it.r.proto.Unit}
	}
	if it.Result.Limited && !it.r.shadow {
		st.Code = pb.RateLimitResponse_OVER_LIMIT
	}
	st.LimitRemaining = uint32(min(max(it.Result.Remaining, 0), math.MaxUint32))
	if it.Result.Limited {
		st.LimitRemaining = 0
	}
	st.DurationUntilReset = durationpb.New(ceilSecond(resetOf(it)))
	return st
}

// resetOf is when an item's limit next lets this request through: when
// refused, its retry_after; when admitted, its reset (when the limit is
// full again). Where that says nothing, the end of the unit's window, as
// the peer reports every reset: a fixed window whose count is 0 (a check
// of hits_addend 0 on an empty key: the window's end, not 0), and a
// refusal no wait can admit (a cost above the whole limit: the peer's
// window end, where retry_after says never).
func resetOf(it *item) time.Duration {
	r := it.Result
	switch {
	case r.Limited && r.RetryAfter >= 0:
		return r.RetryAfter
	case r.Limited, it.r.algorithm == FixedWindow && r.ResetAfter <= 0:
		return it.untilEdge(it.started)
	}
	return max(r.ResetAfter, 0)
}

func ceilSecond(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}

// untilEdge is the time from now to the end of the unit's window aligned
// to the epoch, as the peer reports a reset, or to the key's offset where
// the rule spreads (window.SpreadOffset), or of the calendar's window.
func (it *item) untilEdge(now time.Time) time.Duration {
	if it.r.calendar != nil { // the window of the calendar holding now
		_, end := it.r.calendar.Bounds(now)
		return end.Sub(now)
	}
	return untilEdge(now, it.r.unit, it.offset())
}

// offset is where the item's windows start after the epoch's alignment, in
// ns: its key's offset where its rule spreads, else 0.
func (it *item) offset() int64 {
	if !it.r.spread || it.Key == "" {
		return 0
	}
	return window.SpreadOffset(it.Key, int64(it.r.unit/time.Second)) * int64(time.Millisecond)
}

// untilEdge is the time from now to the end of the unit's window that
// starts offset ns after the epoch's alignment.
func untilEdge(now time.Time, unit time.Duration, offset int64) time.Duration {
	return unit - time.Duration((now.UnixNano()-offset)%int64(unit))
}

// headers are the IETF RateLimit-Policy and RateLimit fields for every
// descriptor with a limit.
func headers(lists ...[]*item) []*core.HeaderValue {
	var policy, state []string
	for _, list := range lists {
		for _, it := range list {
			if !it.Known || it.r.algorithm == Concurrency { // holders at once: no quota per window to state
				continue
			}
			name := it.r.name
			if name == "" {
				name = it.r.statKey
			}
			q, w := it.r.perUnit, it.r.unit
			if it.r.perUnit > 0 {
				q, w = it.r.limit.Quota()
			}
			if n := perUnitOf(it); n != it.r.perUnit {
				q = n // what every algorithm rls maps admits at once: its quota
			}
			policy = append(policy, ratelimit.PolicyItem(name, q, w))
			r := it.Result.Remaining
			if it.Result.Limited {
				r = 0
			}
			state = append(state, ratelimit.StateItem(name, r, resetOf(it)))
		}
	}
	if len(policy) == 0 {
		return nil
	}
	return []*core.HeaderValue{
		{Key: "RateLimit-Policy", Value: strings.Join(policy, ", ")},
		{Key: "RateLimit", Value: strings.Join(state, ", ")},
	}
}
