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

	"github.com/seed-6b3823f5/ratelimit"
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
	rdb     redis.UniversalClient
	cluster bool // keys of one request may live in different slots
	cfg     atomic.Pointer[Config]
	opts    Options
	m       *metrics
	pipe    *pipeline
	txNodes nodes // transactions' engines by node (txn.go)
	cache   *refusals
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
		rdb:     rdb,
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
	s.pipe = newPipeline(s.c, o.Timeout, s.m)
	_, single := rdb.(*redis.Client)
	s.cluster = !single
	if s.log == nil {
		s.log = slog.Default()
	}
	if o.RefusalCache > 0 {
		if o.RefusalCacheBytes <= 0 {
			o.RefusalCacheBytes = defaultRefusalBytes
		}
		s.cache = newRefusalsBounded(o.RefusalCache, o.RefusalCacheBytes)
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
	i        int // the descriptor's position
	r        *rule
	key      string
	stat     string
	perValue bool // stat is made of the request's own values
	cost     int64
	slot     int
	res      client.Result
	known    bool // res holds the answer
	taken    bool // counted in Redis (a later refusal refunds it)
	cached   bool // answered by the refusal cache
	started  time.Time

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
		it := &item{i: i, r: r, stat: stats[i], perValue: perValue[i], cost: hits(req, d), started: now}
		if r.perUnit > 0 {
			it.key = s.key(req.Domain, d, r)
			if s.cluster {
				it.slot = client.Slot(it.key)
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
// carries one (a fixed window, as the peer counts it), else the config's;
// its stat key; and whether that key is made of the request's own values
// (an override's, or detailed_metric's), whose metric series are bounded.
func (s *Service) ruleOf(cfg *Config, domain string, d *rlv3.RateLimitDescriptor) (*rule, string, bool) {
	o := d.GetLimit()
	if o == nil {
		r, stat := cfg.lookup(domain, d)
		return r, stat, r != nil && r.detailed
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
// limit of 0 or a remembered refusal already refuses the request, else by
// the steps groups plans, taken in order and refunded where a later step
// refuses.
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
			it.res = client.Result{Verdict: ratelimit.Verdict{Limited: it.cost > 0, RetryAfter: client.Never, ResetAfter: untilEdge(now, it.r.unit)}}
			refused = refused || it.cost > 0
		case s.cache != nil && s.cache.refuses(it.key, it.cost, now, &until):
			it.known, it.cached = true, true
			it.res = client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: it.r.perUnit, RetryAfter: until.Sub(now), ResetAfter: until.Sub(now)}}
			refused = true
			s.m.cacheHit()
		default:
			remote = append(remote, it)
		}
	}
	if refused || len(remote) == 0 {
		return nil
	}
	steps := s.groups(remote)
	for g, step := range steps {
		var err error
		if step.watched {
			err = s.takeWatched(ctx, step.items)
		} else {
			err = s.take(ctx, step.items)
		}
		if err != nil {
			s.refund(ctx, steps[:g])
			return err
		}
		if slices.ContainsFunc(step.items, func(it *item) bool { return it.known && it.res.Limited }) {
			s.refund(ctx, steps[:g])
			return nil
		}
	}
	return nil
}

// step is items decided at once: in one call (RL.ALL when several), or,
// watched, in one optimistic transaction of several RL.ALL (see
// takeWatched).
type step struct {
	items   []*item
	watched bool
}

// groups plans the steps that decide items all or nothing. Per cluster
// slot (a single node is one slot):
//
//   - at most maxAll (16) limits: one RL.ALL;
//   - more, of which at most 16 cannot be given back (windows): the others
//     (GCRA, token buckets) in RL.ALL calls of 16 first, then the windows
//     in one last call, filled up to 16 with the rest, so that a refusal
//     anywhere is undone by refunds;
//   - more than 16 windows: one watched step, every limit of the slot in an
//     optimistic transaction (takeWatched).
//
// Steps whose limits can all be given back come first, slot by slot; then
// the others. Across slots, two steps that cannot be given back can still
// leave the first counted when the second refuses: a cluster offers no
// transaction across slots.
func (s *Service) groups(items []*item) []step {
	if !s.cluster && len(items) <= maxAll {
		return []step{{items: items}} // a single node: one call
	}
	var slots [][]*item
	index := map[int]int{}
	for _, it := range items {
		k, ok := index[it.slot]
		if !ok {
			k = len(slots)
			index[it.slot] = k
			slots = append(slots, nil)
		}
		slots[k] = append(slots[k], it)
	}
	var first, last []step
	for _, in := range slots {
		var give, keep []*item // limits that can be given back, and the others
		for _, it := range in {
			if it.r.limit.Refundable() {
				give = append(give, it)
			} else {
				keep = append(keep, it)
			}
		}
		switch {
		case len(in) <= maxAll && len(keep) == 0:
			first = append(first, step{items: in})
		case len(in) <= maxAll:
			last = append(last, step{items: in})
		case len(keep) > maxAll:
			last = append(last, step{items: in, watched: true})
		default:
			n := len(give) - min(len(give), maxAll-len(keep)) // the refundable ones in calls of their own
			for c := range slices.Chunk(give[:n], maxAll) {
				first = append(first, step{items: c})
			}
			if tail := append(keep, give[n:]...); len(keep) > 0 {
				last = append(last, step{items: tail})
			} else {
				first = append(first, step{items: tail})
			}
		}
	}
	return append(first, last...)
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

// refund gives back what the steps took, where their limits allow it
// (GCRA and the token bucket take a negative cost; a window's count stays:
// steps of windows are taken last for that reason).
func (s *Service) refund(ctx context.Context, steps []step) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	for _, g := range steps {
		for _, it := range g.items {
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
			it.res = client.Result{Verdict: ratelimit.Verdict{Limited: it.cost > 0, RetryAfter: client.Never, ResetAfter: untilEdge(now, it.r.unit)}}
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
	if client.Unavailable(err) || errors.Is(err, context.Canceled) || errors.Is(err, errContended) {
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
	r := it.res
	switch {
	case r.Limited && r.RetryAfter >= 0:
		return r.RetryAfter
	case r.Limited, it.r.algorithm == FixedWindow && r.ResetAfter <= 0:
		return untilEdge(it.started, it.r.unit)
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
			state = append(state, fmt.Sprintf("%q;r=%d;t=%d", name, r, int64(ceilSecond(resetOf(it))/time.Second)))
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
