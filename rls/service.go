package rls

import (
	"context"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/seed-6b3823f5/ratelimit/client"
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
	cluster bool // keys of one request may live in different slots
	cfg     atomic.Pointer[Config]
	opts    Options
	m       *metrics
	pipe    *pipeline
	cache   *refusals
	log     *slog.Logger
	now     func() time.Time
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
		c:    client.NewEngine(rdb, o.Engine),
		opts: o,
		m:    newMetrics(o.Registerer),
		log:  o.Logger,
		now:  time.Now,
	}
	s.pipe = newPipeline(s.c, o.Timeout, s.m)
	_, single := rdb.(*redis.Client)
	s.cluster = !single
	if s.log == nil {
		s.log = slog.Default()
	}
	if o.RefusalCache > 0 {
		s.cache = newRefusals(o.RefusalCache)
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
	if s.cache != nil {
		s.cache.purge()
	}
}

// Close stops the service's Redis sender: calls made after it fail. It
// does not close the Redis client, which is the caller's.
func (s *Service) Close() { s.pipe.close() }

// Config is the config in use (nil before the first).
func (s *Service) Config() *Config { return s.cfg.Load() }

// Engines reports each Redis node's engine once it has been asked.
func (s *Service) Engines() map[string]client.Engine { return s.c.Engines() }

// item is one descriptor with a limit, as one request decides it.
type item struct {
	i       int // the descriptor's position
	r       *rule
	key     string
	stat    string
	cost    int64
	slot    int
	res     client.Result
	known   bool // res holds the answer
	taken   bool // counted in Redis (a later refusal refunds it)
	cached  bool // answered by the refusal cache
	started time.Time

	counters *keyCounters
}

// maxCost is the largest cost sent: above every limit, so refused.
const maxCost = 1<<53 - 1

// maxAll is the most limits one RL.ALL decides.
const maxAll = 16

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
	rules := make([]*rule, len(req.Descriptors))
	stats := make([]string, len(req.Descriptors))
	var replaced map[string]bool // names of limits other matched limits replace
	for i, d := range req.Descriptors {
		rules[i], stats[i] = s.ruleOf(cfg, req.Domain, d)
		if rules[i] != nil {
			for _, name := range rules[i].replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[name] = true
			}
		}
	}
	var enforcing, shadow []*item
	for i, d := range req.Descriptors {
		r := rules[i]
		switch {
		case r == nil || (r.name != "" && replaced[r.name]):
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
			continue
		case r.unlimited:
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		it := &item{i: i, r: r, stat: stats[i], cost: hits(req, d)}
		if r.perUnit > 0 {
			it.key = s.key(req.Domain, d, r)
			if s.cluster {
				it.slot = slot(it.key)
			}
		}
		s.m.hit(req.Domain, it)
		if r.shadow {
			shadow = append(shadow, it)
		} else {
			enforcing = append(enforcing, it)
		}
	}

	if err := s.decide(ctx, enforcing); err != nil {
		return nil, s.fail(err)
	}
	if err := s.decideEach(ctx, shadow); err != nil {
		return nil, s.fail(err)
	}

	over := false
	for _, it := range enforcing {
		if it.known && it.res.Limited {
			over = true
		}
	}
	for _, list := range [][]*item{enforcing, shadow} {
		for _, it := range list {
			resp.Statuses[it.i] = statusOf(it)
			s.m.decided(it, s.opts.NearLimitRatio)
			if s.cache != nil && !it.r.shadow && it.known && !it.cached && it.res.Limited && it.res.RetryAfter > 0 && it.key != "" {
				s.cache.add(it.key, it.cost, it.started.Add(it.res.RetryAfter))
			}
		}
	}
	resp.OverallCode = pb.RateLimitResponse_OK
	if over && !s.opts.ShadowMode {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	} else if over {
		s.m.globalShadow()
	}
	if s.opts.Headers {
		resp.ResponseHeadersToAdd = headers(enforcing, shadow)
	}
	if s.opts.LimitHeaders.Limit != "" {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, s.limitHeaders(resp.Statuses)...)
	}
	return resp, nil
}

// limitHeaders are the peer's three fields for the status it picks: of
// those with a limit, the one with the least remaining, or the last over
// its limit.
func (s *Service) limitHeaders(statuses []*pb.RateLimitResponse_DescriptorStatus) []*core.HeaderValue {
	var pick *pb.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for _, st := range statuses {
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			pick, least = st, st.LimitRemaining
		}
		if st.Code == pb.RateLimitResponse_OVER_LIMIT {
			pick, least = st, 0
		}
	}
	if pick == nil {
		return nil
	}
	unit := int64(unitLength(pick.CurrentLimit.Unit) / time.Second)
	h := s.opts.LimitHeaders
	return []*core.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(unit-s.now().Unix()%unit, 10)},
	}
}

// ruleOf is a descriptor's rule: Envoy's override where the descriptor
// carries one (a fixed window, as the peer counts it), else the config's.
func (s *Service) ruleOf(cfg *Config, domain string, d *rlv3.RateLimitDescriptor) (*rule, string) {
	o := d.GetLimit()
	if o == nil {
		return cfg.lookup(domain, d)
	}
	if _, ok := cfg.domains[domain]; !ok {
		return nil, "" // the peer looks up the domain first
	}
	unit := pb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	r := &rule{
		proto:     &pb.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit},
		perUnit:   int64(o.GetRequestsPerUnit()),
		unit:      unitLength(unit),
		algorithm: FixedWindow,
	}
	if r.unit == 0 {
		return nil, ""
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
	return r, r.statKey
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

// key is a descriptor's Redis key: the prefix, the domain and every entry
// as the peer writes them, then the algorithm and the unit in seconds, so
// that a config changing either starts afresh rather than reading state
// of another kind.
func (s *Service) key(domain string, d *rlv3.RateLimitDescriptor, r *rule) string {
	var b strings.Builder
	b.WriteString(s.opts.Prefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for _, e := range d.Entries {
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(e.Value)
		b.WriteByte('_')
	}
	b.WriteString(algCode[r.algorithm])
	b.WriteString(strconv.FormatInt(int64(r.unit/time.Second), 10))
	return b.String()
}

var algCode = map[Algorithm]string{FixedWindow: "fw", SlidingWindow: "sw", SlidingLog: "sl", GCRA: "gcra", TokenBucket: "tb"}

// decide decides the enforcing items all or nothing: answered here when a
// limit of 0 or a remembered refusal already refuses the request, else in
// one RL.ALL per cluster slot (one in all on a single node), taken slot by
// slot and refunded where a later slot refuses.
func (s *Service) decide(ctx context.Context, items []*item) error {
	if len(items) == 0 {
		return nil
	}
	now := s.now()
	refused := false
	var remote []*item
	var until time.Time
	for _, it := range items {
		switch {
		case it.r.perUnit == 0:
			it.known = true
			it.res = client.Result{Limited: it.cost > 0, RetryAfter: client.Never, ResetAfter: untilEdge(now, it.r.unit)}
			refused = refused || it.cost > 0
		case s.cache != nil && s.cache.refuses(it.key, it.cost, now, &until):
			it.known, it.cached = true, true
			it.res = client.Result{Limited: true, Limit: it.r.perUnit, RetryAfter: until.Sub(now), ResetAfter: until.Sub(now)}
			refused = true
			s.m.cacheHit()
		default:
			remote = append(remote, it)
		}
	}
	if refused || len(remote) == 0 {
		return nil
	}
	groups := s.groups(remote)
	for g, group := range groups {
		if err := s.take(ctx, group); err != nil {
			s.refund(ctx, groups[:g])
			return err
		}
		if slices.ContainsFunc(group, func(it *item) bool { return it.res.Limited }) {
			s.refund(ctx, groups[:g])
			return nil
		}
	}
	return nil
}

// groups splits items into the calls that decide them: one per slot (all
// in one on a single node), at most maxAll each, those whose limits can be
// refunded first so that a refusal in a later call can give back what the
// earlier ones took.
func (s *Service) groups(items []*item) [][]*item {
	if !s.cluster && len(items) <= maxAll {
		return [][]*item{items} // a single node: one call
	}
	var out [][]*item
	bySlot := map[int]int{}
	for _, it := range items {
		g, ok := bySlot[it.slot]
		if !ok || len(out[g]) == maxAll {
			g = len(out)
			bySlot[it.slot] = g
			out = append(out, nil)
		}
		out[g] = append(out[g], it)
	}
	refundable := func(g []*item) bool {
		return !slices.ContainsFunc(g, func(it *item) bool { return !it.r.limit.Refundable() })
	}
	slices.SortStableFunc(out, func(a, b []*item) int {
		ra, rb := refundable(a), refundable(b)
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return 0
	})
	return out
}

// take decides one group in one call (in the next pipelined round trip).
func (s *Service) take(ctx context.Context, group []*item) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	start := s.now()
	for _, it := range group {
		it.started = start
	}
	return s.pipe.do(ctx, group)
}

// refund gives back what the groups took, where their limits allow it
// (GCRA and the token bucket take a negative cost; a window's count stays:
// groups of windows are taken last for that reason).
func (s *Service) refund(ctx context.Context, groups [][]*item) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	for _, g := range groups {
		for _, it := range g {
			if !it.taken || it.cost == 0 || !it.r.limit.Refundable() {
				continue
			}
			if res, err := s.c.Take(ctx, it.key, it.r.limit, -it.cost); err == nil {
				it.taken = false
				it.res.Remaining, it.res.ResetAfter = res.Remaining, res.ResetAfter // the state it leaves
			} else {
				s.log.Warn("rls: refund failed", "key", it.key, "err", err)
			}
		}
	}
}

// decideEach decides shadow items one by one: each is counted when its own
// limit admits it, whatever the others say.
func (s *Service) decideEach(ctx context.Context, items []*item) error {
	if len(items) == 0 {
		return nil
	}
	now := s.now()
	for _, it := range items {
		if it.r.perUnit == 0 {
			it.known = true
			it.res = client.Result{Limited: it.cost > 0, RetryAfter: client.Never, ResetAfter: untilEdge(now, it.r.unit)}
			continue
		}
		if err := s.take(ctx, []*item{it}); err != nil {
			return err
		}
	}
	return nil
}

// fail turns a Redis failure into the gRPC error the gateway sees.
func (s *Service) fail(err error) error {
	s.m.redisError()
	s.log.Warn("rls: redis", "err", err)
	if client.Unavailable(err) || errors.Is(err, context.Canceled) {
		return status.Error(codes.Unavailable, "redis: "+err.Error())
	}
	return status.Error(codes.Internal, "redis: "+err.Error())
}

// statusOf is a descriptor's status as the peer fills it: the code, the
// limit, what remains and how long until the limit resets (when refused,
// until the same request would be admitted), in whole seconds rounded up.
// A descriptor not asked because another refused first reports OK, its
// limit and nothing more.
func statusOf(it *item) *pb.RateLimitResponse_DescriptorStatus {
	st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, CurrentLimit: it.r.proto}
	if !it.known {
		return st
	}
	if it.res.Limited && !it.r.shadow {
		st.Code = pb.RateLimitResponse_OVER_LIMIT
	}
	st.LimitRemaining = uint32(min(max(it.res.Remaining, 0), math.MaxUint32))
	if it.res.Limited {
		st.LimitRemaining = 0
	}
	st.DurationUntilReset = durationpb.New(ceilSecond(resetOf(it.res)))
	return st
}

// resetOf is when a result's limit next lets this request through: when
// refused, its retry_after (or its reset where it never can); when admitted,
// its reset.
func resetOf(r client.Result) time.Duration {
	if r.Limited && r.RetryAfter >= 0 {
		return r.RetryAfter
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
// to the epoch, as the peer reports a reset.
func untilEdge(now time.Time, unit time.Duration) time.Duration {
	return unit - time.Duration(now.UnixNano()%int64(unit))
}

// headers are the IETF RateLimit-Policy and RateLimit fields for every
// descriptor with a limit.
func headers(enforcing, shadow []*item) []*core.HeaderValue {
	var policy, state []string
	for _, list := range [][]*item{enforcing, shadow} {
		for _, it := range list {
			if !it.known {
				continue
			}
			name := it.r.name
			if name == "" {
				name = it.r.statKey
			}
			q, w := it.r.perUnit, int64(it.r.unit/time.Second)
			if it.r.perUnit > 0 {
				qq, ww := it.r.limit.Quota()
				q, w = qq, int64(ceilSecond(ww)/time.Second)
			}
			policy = append(policy, fmt.Sprintf("%q;q=%d;w=%d", name, q, w))
			r := max(it.res.Remaining, 0)
			if it.res.Limited {
				r = 0
			}
			state = append(state, fmt.Sprintf("%q;r=%d;t=%d", name, r, int64(ceilSecond(resetOf(it.res))/time.Second)))
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
