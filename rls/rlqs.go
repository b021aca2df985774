package rls

// The rate limit quota service (RLQS): Envoy's rate_limit_quota filter
// reports each bucket's requests every few seconds on one stream and
// enforces what the server assigns, with no call per request. Quotas turns
// each bucket's limit into per-Envoy token buckets that together stay
// within it.

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// QuotaOptions tune Quotas; the zero value is the defaults.
type QuotaOptions struct {
	// Interval is the reporting interval assumed for a bucket until its
	// reports show their own (a report's time_elapsed, whole seconds):
	// Envoy's, 5 s, hard-coded in its filter.
	Interval time.Duration
	// MaxBuckets bounds the buckets one stream may have (default 1,000);
	// reports of more are not answered, and Envoy keeps its
	// no-assignment behaviour for them.
	MaxBuckets int
	// AbandonAfter is how many reports in a row with no request make a
	// bucket abandoned (abandon_action: Envoy forgets it, and so does the
	// server; default 12, a minute of Envoy's reports).
	AbandonAfter int
	// Registerer takes the RLQS metrics (nil: none).
	Registerer prometheus.Registerer
}

// Quotas serves envoy.service.rate_limit_quota.v3.RateLimitQuotaService
// beside a Service's ShouldRateLimit, with its config and its Redis: a
// bucket id's keys and values are matched as a descriptor's entries, in
// the order the domain's descriptors nest them, and the rule found is the
// bucket's limit, L per unit (a bucket no rule matches is allowed).
//
// One global limit across Envoys: each stream's bucket is registered in
// Redis with the Envoy's demand, (allowed + denied) / time_elapsed from
// its last report, so every rls process sharing the Redis sees every
// Envoy's; the limit's rate R = L / unit is shared out max-min fair by
// demand (each Envoy asks a quarter more than its demand and 1 a second,
// at most R / N, more), and each Envoy is assigned a token_bucket of its
// share: tokens_per_fill its rate × 60 a fill_interval of 60 s (Envoy
// refills continuously, so the rate is exact to 1/60 a second) and
// max_tokens its share of L. The rates assigned add up to at most R, the
// bursts to at most L (and 1 each). What each Envoy reports it admitted is
// charged to a GCRA limit of L per unit in Redis (with DEBT: counted past
// the limit), the single account of what was admitted, shared with
// ShouldRateLimit where a rule is gcra; when it is behind by more than
// the bound below (other traffic spent it, or an Envoy admitted more than
// it was assigned), the bucket is assigned DENY_ALL until it is not.
//
// Assignments last two reporting intervals and a second (whole seconds,
// as Envoy reads them), so one late report does not expire them. The bound
// across all Envoys: in any interval, at most what the exact limiter
// admits plus R × (TTL + reporting interval), from assignments made before
// a change of demand or of Envoys reached the others.
//
// A bucket idle for AbandonAfter reports is abandoned; a stream has at
// most MaxBuckets; its registrations go when it ends and lapse two
// intervals after its last report if it vanishes. Drain, on shutdown,
// sends every bucket a TTL of 0, which puts each Envoy on its expired
// assignment behaviour (configure a fallback_rate_limit of L / N).
type Quotas struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer

	s    *Service
	rdb  redis.UniversalClient
	o    QuotaOptions
	id   string
	seq  atomic.Int64
	done chan struct{}
	once sync.Once
	m    *quotaMetrics

	mu       sync.Mutex
	assigned map[string]float64 // stat key → the rate assigned by this process, summed over its streams
	limits   map[string]float64 // stat key → R
}

// quotaMetrics are what Quotas exports.
type quotaMetrics struct {
	streams  prometheus.Gauge
	buckets  prometheus.Gauge
	rate     *prometheus.GaugeVec
	ratio    *prometheus.GaugeVec
	reported *prometheus.CounterVec
	ignored  prometheus.Counter
}

func newQuotaMetrics(reg prometheus.Registerer) *quotaMetrics {
	m := &quotaMetrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ratelimit_rlqs_streams", Help: "RLQS streams open"}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ratelimit_rlqs_buckets", Help: "RLQS buckets tracked, over every stream"}),
		rate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ratelimit_rlqs_assigned_rate",
			Help: "requests per second assigned by this process to its streams' buckets of a rule"}, []string{"domain", "key"}),
		ratio: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ratelimit_rlqs_assigned_ratio",
			Help: "the rate assigned by this process over the rule's rate"}, []string{"domain", "key"}),
		reported: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_rlqs_reported_requests_total",
			Help: "requests Envoys reported, allowed or denied"}, []string{"domain", "key", "outcome"}),
		ignored: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_rlqs_ignored_buckets_total",
			Help: "bucket reports not answered: past a stream's MaxBuckets, or with no bucket id"}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.buckets, m.rate, m.ratio, m.reported, m.ignored)
	}
	return m
}

// NewQuotas serves RLQS on s's config and Redis (rdb, the client s was
// made with).
func NewQuotas(s *Service, rdb redis.UniversalClient, o QuotaOptions) *Quotas {
	if o.Interval < time.Second {
		o.Interval = 5 * time.Second
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = 1000
	}
	if o.AbandonAfter <= 0 {
		o.AbandonAfter = 12
	}
	return &Quotas{s: s, rdb: rdb, o: o, id: strconv.FormatInt(time.Now().UnixNano(), 36), done: make(chan struct{}),
		m: newQuotaMetrics(o.Registerer), assigned: map[string]float64{}, limits: map[string]float64{}}
}

// Drain sends every stream's buckets an assignment with a TTL of 0 (Envoy
// falls back to its expired assignment behaviour at once) and ends the
// streams; call it before the gRPC server's GracefulStop, which would
// otherwise wait for streams that never end.
func (q *Quotas) Drain() { q.once.Do(func() { close(q.done) }) }

// quotaBucket is one bucket of one stream.
type quotaBucket struct {
	id       *rlqspb.BucketId // echoed as it came
	field    string           // this stream's field in the bucket's registry
	registry string           // "" while no rule matches
	stat     string
	interval time.Duration
	idle     int
	rate     float64 // the token bucket assigned (0: none)
	tb       *typev3.TokenBucket
	deny     bool
}

// maxElapsed bounds a report's time_elapsed: more says nothing more.
const maxElapsed = time.Hour

// StreamRateLimitQuotas answers one Envoy's stream: each report is
// answered with an action for each bucket it names (see Quotas).
func (q *Quotas) StreamRateLimitQuotas(st grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) error {
	ctx := st.Context()
	sid := q.id + "." + strconv.FormatInt(q.seq.Add(1), 36)
	buckets := map[string]*quotaBucket{}
	q.m.streams.Inc()
	defer func() {
		q.m.streams.Dec()
		q.m.buckets.Sub(float64(len(buckets)))
		q.forget(buckets)
	}()
	type recv struct {
		r   *rlqspb.RateLimitQuotaUsageReports
		err error
	}
	in := make(chan recv)
	go func() {
		for {
			r, err := st.Recv()
			select {
			case in <- recv{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	domain := ""
	for {
		select {
		case <-q.done:
			resp := &rlqspb.RateLimitQuotaResponse{}
			for _, b := range buckets {
				resp.BucketAction = append(resp.BucketAction, assignment(b, 0)) // a TTL of 0: expired at once
			}
			if len(resp.BucketAction) > 0 {
				_ = st.Send(resp)
			}
			return status.Error(codes.Unavailable, "rls: shutting down")
		case <-ctx.Done():
			return ctx.Err()
		case m := <-in:
			if errors.Is(m.err, io.EOF) {
				return nil
			}
			if m.err != nil {
				return m.err
			}
			if d := m.r.GetDomain(); d != "" && domain == "" {
				domain = d
			} else if d != "" && d != domain {
				return status.Errorf(codes.InvalidArgument, "rls: a stream's reports are for one domain: %q, then %q", domain, d)
			}
			if domain == "" {
				return status.Error(codes.InvalidArgument, "rls: the first report must name a domain")
			}
			resp := q.report(ctx, sid, domain, buckets, m.r.GetBucketQuotaUsages())
			if len(resp.BucketAction) > 0 {
				if err := st.Send(resp); err != nil {
					return err
				}
			}
		}
	}
}

// report takes one report's usages and returns the actions for them.
func (q *Quotas) report(ctx context.Context, sid, domain string, buckets map[string]*quotaBucket, usages []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqspb.RateLimitQuotaResponse {
	cfg := q.s.cfg.Load()
	now := q.s.now()
	type job struct {
		b      *quotaBucket
		r      *rule
		key    string
		demand float64 // requests a second; +Inf: not known yet
		charge int64
		call   *client.Call
		reg    *redis.MapStringStringCmd
	}
	var jobs []*job
	resp := &rlqspb.RateLimitQuotaResponse{}
	seen := map[string]bool{}
	for _, u := range usages {
		id := u.GetBucketId().GetBucket()
		if len(id) == 0 {
			q.m.ignored.Inc()
			continue
		}
		name := bucketName(id)
		if seen[name] { // one action per bucket and report
			continue
		}
		seen[name] = true
		b := buckets[name]
		if b == nil {
			if len(buckets) >= q.o.MaxBuckets {
				q.m.ignored.Inc()
				continue
			}
			b = &quotaBucket{id: u.GetBucketId(), field: sid, interval: q.o.Interval}
			buckets[name] = b
			q.m.buckets.Inc()
		}
		elapsed := min(u.GetTimeElapsed().AsDuration(), maxElapsed)
		if elapsed >= time.Second {
			b.interval = min(elapsed.Truncate(time.Second), time.Minute)
		}
		allowed, denied := min(u.GetNumRequestsAllowed(), uint64(maxCost)), min(u.GetNumRequestsDenied(), uint64(maxCost))
		if allowed+denied == 0 {
			b.idle++
		} else {
			b.idle = 0
		}
		if b.idle >= q.o.AbandonAfter {
			resp.BucketAction = append(resp.BucketAction, &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
				BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}}})
			q.drop(b)
			delete(buckets, name)
			q.m.buckets.Dec()
			continue
		}
		r, stat, d := q.ruleOf(cfg, domain, id)
		if r == nil { // no limit: allowed
			q.drop(b)
			b.rate, b.tb, b.deny = 0, nil, false
			resp.BucketAction = append(resp.BucketAction, assignment(b, q.ttl(b)))
			continue
		}
		if r.perUnit == 0 { // requests_per_unit 0: every request over the limit
			q.drop(b)
			b.rate, b.tb, b.deny = 0, nil, true
			resp.BucketAction = append(resp.BucketAction, assignment(b, q.ttl(b)))
			continue
		}
		if b.stat != stat {
			q.drop(b)
			b.stat = stat
		}
		q.m.reported.WithLabelValues(domain, stat, "allowed").Add(float64(allowed))
		q.m.reported.WithLabelValues(domain, stat, "denied").Add(float64(denied))
		// What an Envoy admitted is charged, up to what its assignments
		// could have let through (the limit's worth for the time elapsed,
		// and two more): a report past it is not believed, and would take
		// the limiter's state past what it can hold.
		most := float64(r.perUnit) * (elapsed.Seconds()/r.unit.Seconds() + 2)
		j := &job{b: b, r: r, key: q.key(domain, d, r), demand: math.Inf(1), charge: int64(min(float64(allowed), most))}
		if elapsed >= time.Second {
			j.demand = float64(allowed+denied) / elapsed.Seconds()
		}
		b.registry = registryOf(j.key)
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return resp
	}
	// One round trip registers every bucket's demand and reads the others';
	// one more charges what was admitted.
	ctx, cancel := context.WithTimeout(ctx, q.s.opts.Timeout*5)
	defer cancel()
	pipe := q.rdb.Pipeline()
	for _, j := range jobs {
		ttl := 2*j.b.interval + time.Second
		pipe.HSet(ctx, j.b.registry, j.b.field, strconv.FormatFloat(j.demand, 'g', 6, 64)+" "+strconv.FormatInt(now.Add(ttl).UnixMilli(), 10))
		j.reg = pipe.HGetAll(ctx, j.b.registry)
		pipe.PExpire(ctx, j.b.registry, ttl+time.Minute)
	}
	_, perr := pipe.Exec(ctx)
	batch := q.s.c.Batch()
	for _, j := range jobs {
		j.call = batch.Take(j.key, gcraOf(j.r), j.charge, client.Debt())
	}
	berr := batch.Exec(ctx)
	for _, j := range jobs {
		b := j.b
		ttl := q.ttl(b)
		res, err := j.call.Result()
		if perr != nil || berr != nil || err != nil { // Redis did not answer: the last assignment stands until its TTL
			continue
		}
		R := float64(j.r.perUnit) / j.r.unit.Seconds()
		if res.RetryAfter > ttl+b.interval { // spent past the bound (other traffic, a lying Envoy): nothing until it is not
			b.deny, b.tb = true, nil
			q.assign(b, 0)
			resp.BucketAction = append(resp.BucketAction, assignment(b, min(ceilSecond(res.RetryAfter), ttl)))
			continue
		}
		share := fairShare(j.reg.Val(), b.field, now, R)
		q.setLimit(b.stat, R)
		b.deny = false
		q.assign(b, share)
		b.tb = tokenBucket(b.tb, share, R, float64(j.r.perUnit))
		resp.BucketAction = append(resp.BucketAction, assignment(b, ttl))
	}
	return resp
}

// ttl is b's assignments' time to live: two intervals and a second.
func (q *Quotas) ttl(b *quotaBucket) time.Duration { return 2*b.interval + time.Second }

// fairShare is field's rate of R from the registry's entries ("demand
// deadline-ms"), live at now: max-min fair over what each asks, a
// quarter more than its demand and min(1, R / N) a second.
func fairShare(entries map[string]string, field string, now time.Time, R float64) float64 {
	type entry struct {
		field string
		want  float64
	}
	var live []entry
	for f, v := range entries {
		d, dl, ok := strings.Cut(v, " ")
		demand, err1 := strconv.ParseFloat(d, 64)
		deadline, err2 := strconv.ParseInt(dl, 10, 64)
		if !ok || err1 != nil || err2 != nil || (deadline <= now.UnixMilli() && f != field) || !(demand >= 0) {
			continue
		}
		live = append(live, entry{f, demand})
	}
	if len(live) == 0 {
		return 0
	}
	floor := min(1, R/float64(len(live)))
	wants := make([]float64, len(live))
	mine := -1
	sort.Slice(live, func(i, j int) bool { return live[i].field < live[j].field })
	for i, e := range live {
		wants[i] = e.want*1.25 + floor
		if e.field == field {
			mine = i
		}
	}
	if mine < 0 {
		return 0
	}
	return maxMin(wants, R)[mine]
}

// maxMin shares capacity out over wants, max-min fair: each gets what it
// wants up to a level, the level such that the shares add up to capacity
// (or every want is met).
func maxMin(wants []float64, capacity float64) []float64 {
	idx := make([]int, len(wants))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return wants[idx[a]] < wants[idx[b]] })
	out := make([]float64, len(wants))
	left := capacity
	for k, i := range idx {
		level := left / float64(len(idx)-k)
		out[i] = min(wants[i], level)
		left -= out[i]
	}
	return out
}

// fillInterval is the fill_interval of every token bucket assigned: Envoy
// refills continuously at tokens_per_fill / fill_interval (whole seconds),
// so a long one only makes the rate finer.
const fillInterval = 60

// tokenBucket is the token bucket for rate (of R, L per unit): prev when
// rate is within a tenth above prev's (Envoy keeps a bucket's tokens only
// while its parameters stay the same; new ones start full).
func tokenBucket(prev *typev3.TokenBucket, rate, R, L float64) *typev3.TokenBucket {
	if prev != nil {
		old := float64(prev.GetTokensPerFill().GetValue()) / fillInterval
		if rate >= old && rate <= old*1.1 {
			return prev
		}
	}
	perFill := max(1, math.Floor(rate*fillInterval))
	burst := max(1, math.Floor(L*rate/R))
	return &typev3.TokenBucket{MaxTokens: uint32(min(burst, math.MaxUint32)), TokensPerFill: wrapperspb.UInt32(uint32(min(perFill, math.MaxUint32))),
		FillInterval: durationpb.New(fillInterval * time.Second)}
}

// assignment is b's action: its token bucket, DENY_ALL, or (no rule)
// ALLOW_ALL, for ttl.
func assignment(b *quotaBucket, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	strategy := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
	switch {
	case b.deny:
		strategy.Strategy = &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}
	case b.tb != nil:
		strategy.Strategy = &typev3.RateLimitStrategy_TokenBucket{TokenBucket: b.tb}
	}
	return &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl.Truncate(time.Second)), RateLimitStrategy: strategy}}}
}

// assign notes b's rate in the metrics.
func (q *Quotas) assign(b *quotaBucket, rate float64) {
	if b.stat == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.assigned[b.stat] += rate - b.rate
	b.rate = rate
	q.publish(b.stat)
}

// setLimit notes a stat key's R.
func (q *Quotas) setLimit(stat string, R float64) {
	q.mu.Lock()
	q.limits[stat] = R
	q.mu.Unlock()
}

// publish sets stat's gauges; q.mu is held.
func (q *Quotas) publish(stat string) {
	domain, _, _ := strings.Cut(stat, ".")
	q.m.rate.WithLabelValues(domain, stat).Set(q.assigned[stat])
	if R := q.limits[stat]; R > 0 {
		q.m.ratio.WithLabelValues(domain, stat).Set(q.assigned[stat] / R)
	}
}

// drop takes b's rate out of the metrics and its registration out of
// Redis (in the background).
func (q *Quotas) drop(b *quotaBucket) {
	q.assign(b, 0)
	if b.registry != "" {
		q.unregister(map[string][]string{b.registry: {b.field}})
		b.registry = ""
	}
}

// forget drops every bucket of an ended stream.
func (q *Quotas) forget(buckets map[string]*quotaBucket) {
	regs := map[string][]string{}
	for _, b := range buckets {
		q.assign(b, 0)
		if b.registry != "" {
			regs[b.registry] = append(regs[b.registry], b.field)
		}
	}
	if len(regs) > 0 {
		q.unregister(regs)
	}
}

// unregister deletes fields of registries, in the background, within a
// few Redis timeouts; what it misses lapses at its deadline.
func (q *Quotas) unregister(regs map[string][]string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*q.s.opts.Timeout)
		defer cancel()
		pipe := q.rdb.Pipeline()
		for reg, fields := range regs {
			pipe.HDel(ctx, reg, fields...)
		}
		_, _ = pipe.Exec(ctx)
	}()
}

// bucketName is a bucket id as one string: its keys in order, each key
// and value with its length.
func bucketName(id map[string]string) string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
		b.WriteString(strconv.Itoa(len(id[k])))
		b.WriteByte(':')
		b.WriteString(id[k])
	}
	return b.String()
}

// descriptorOf is a bucket id as a descriptor, its entries in the order
// the domain's descriptors nest them: at each level the first key (in
// sorted order) with a child there; nil when the id's entries do not all
// fit one path.
func descriptorOf(cfg *Config, domain string, id map[string]string) *rlv3.RateLimitDescriptor {
	level := cfg.domains[domain]
	if level == nil {
		return nil
	}
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	d := &rlv3.RateLimitDescriptor{}
	for len(keys) > 0 && level != nil {
		var next *node
		at := -1
		for i, k := range keys {
			if next = level.child(k, id[k]); next != nil {
				at = i
				break
			}
		}
		if next == nil {
			return nil
		}
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: keys[at], Value: id[keys[at]]})
		keys = slices.Delete(keys, at, at+1)
		level = next
	}
	if len(keys) > 0 {
		return nil
	}
	return d
}

// child is the node an entry leads to from n, as lookup finds it: the
// key and value, a wildcard, or the key alone.
func (n *node) child(key, value string) *node {
	final := key + "_" + value
	if c := n.children[final]; c != nil {
		return c
	}
	for _, w := range n.wild {
		if match(w.parts, final) {
			return n.children[w.key]
		}
	}
	return n.children[key]
}

// ruleOf is a bucket's rule, stat key and descriptor; nil where none
// limits it (no match, unlimited, or a rule of holds or in shadow mode).
func (q *Quotas) ruleOf(cfg *Config, domain string, id map[string]string) (*rule, string, *rlv3.RateLimitDescriptor) {
	if cfg == nil {
		return nil, "", nil
	}
	d := descriptorOf(cfg, domain, id)
	if d == nil {
		return nil, "", nil
	}
	r, _ := cfg.lookup(domain, d)
	if r == nil || r.unlimited || r.perUnit < 0 || r.algorithm == Concurrency || r.reserve || r.shadow {
		return nil, "", nil
	}
	return r, r.statKey, d
}

// key is a bucket's Redis key: the key ShouldRateLimit gives its
// descriptor d under a gcra rule.
func (q *Quotas) key(domain string, d *rlv3.RateLimitDescriptor, r *rule) string {
	g := *r
	g.algorithm = GCRA
	return q.s.key(domain, d, &g)
}

// gcraOf is the GCRA limit that accounts a rule's bucket: L per unit, L
// at once.
func gcraOf(r *rule) client.Limit { return limitOf(GCRA, r.perUnit, r.unit) }

// registryOf is the name of key's registry of streams, in key's slot.
func registryOf(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 && strings.IndexByte(key[i+1:], '}') > 0 {
		return key + ":rlqs"
	}
	return "{" + key + "}:rlqs"
}
