package rls

import (
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-6b3823f5/ratelimit/lease"
	"github.com/seed-6b3823f5/ratelimit/prom"
)

// metrics are the service's counters, named as envoyproxy/ratelimit's
// Prometheus mapping names its own (ratelimit_service_rate_limit_*{domain,
// key}), with the peer's meanings: hits in total, over the limit, near it
// (past NearLimitRatio of it), within it, and refused in shadow mode.
type metrics struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	negativeHits                                             *prometheus.CounterVec

	redisSeconds  *prometheus.HistogramVec
	errors        *prometheus.CounterVec
	cacheHits     prometheus.Counter
	globalShadowN prometheus.Counter
	configLoads   *prometheus.CounterVec
	breakers      *prometheus.CounterVec
	localDecided  prometheus.Counter // requests decided here while Redis could not (Options.FailLocal)
	localUnits    prometheus.Counter // units admitted so, charged to Redis once it answered

	byKey sync.Map // labels -> *keyCounters

	// perValue counts the stat keys made of a request's own values
	// (detailed_metric, Envoy's limit override) that have series of their
	// own; at maxPerValue, later ones count under overflowKey.
	perValue    atomic.Int64
	maxPerValue int64
}

// Series for keys made of a request's own values are bounded: a gateway
// sending a new value in every request (a client's address, a user id with
// Envoy's own limit) would otherwise add five series per value, for ever
// (200,000 values took the service from 30 to 906 MiB and /metrics to
// 181 MB). The first defaultMetricKeys such keys, each of at most
// maxStatKey bytes, get series of their own; the rest count together under
// the key overflowKey of their domain. At the bound /metrics holds at most
// 1000 × 5 series of keys up to 256 bytes: 1.6 MB. Keys of the config (the
// peer's stat keys) are bounded by the config and always have their own.
const (
	defaultMetricKeys = 1000
	maxStatKey        = 256
	overflowKey       = "_overflow" // never a stat key: those start with the domain and a dot
)

func newMetrics(reg prometheus.Registerer) *metrics {
	perKey := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help}, []string{"domain", "key"})
	}
	m := &metrics{
		totalHits:   perKey("total_hits", "Hits asked of a descriptor's limit (hits_addend each)."),
		overLimit:   perKey("over_limit", "Hits past the limit (refused, or counted in shadow mode)."),
		nearLimit:   perKey("near_limit", "Hits past the near-limit share of the limit and within it."),
		withinLimit: perKey("within_limit", "Hits admitted."),
		shadowMode:  perKey("shadow_mode", "Hits a shadow_mode limit would have refused."),
		negativeHits: perKey("total_negative_hits",
			"Hits given back (a descriptor's hits_addend with is_negative_hits, Envoy's refund); not in total_hits."),
		redisSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratelimit_service_redis_call_seconds",
			Help:    "Time of each Redis call deciding a request, by outcome (ok, error).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_should_rate_limit_errors", Help: "Requests answered with an error, by kind (service: a bad request or no config; redis).",
		}, []string{"kind"}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_refusal_cache_hits", Help: "Requests refused from the refusal cache without a Redis call.",
		}),
		globalShadowN: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_global_shadow_mode", Help: "Requests over the limit answered OK by the global shadow mode.",
		}),
		configLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load", Help: "Config loads, by result (success, error).",
		}, []string{"result"}),
		breakers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_breaker_events", Help: "What happened to the circuit breakers of the Redis servers (Options.BreakerFailures), by event: failure, breaker-open, breaker-half-open, breaker-closed.",
		}, []string{"event"}),
		localDecided: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_fail_local_requests", Help: "Requests decided in this service while Redis could not decide them (-fail-local).",
		}),
		localUnits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_fail_local_units_charged", Help: "Units admitted in this service while Redis was away (-fail-local), charged to Redis with DEBT once it answered.",
		}),
		maxPerValue: defaultMetricKeys,
	}
	if reg != nil {
		reg.MustRegister(m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode, m.negativeHits,
			m.redisSeconds, m.errors, m.cacheHits, m.globalShadowN, m.configLoads, m.breakers, m.localDecided, m.localUnits)
	}
	return m
}

// keyCounters are one domain and key's counters, looked up once.
type keyCounters struct {
	total, over, near, within, shadow, negative prometheus.Counter
}

type labels struct{ domain, key string }

// of is the counters of domain and key (a map lookup, not a label hash,
// after the first time). A key made of the request's own values (perValue)
// past the bound, or longer than maxStatKey, gets its domain's overflow
// counters.
func (m *metrics) of(domain, key string, perValue bool) *keyCounters {
	if c, ok := m.byKey.Load(labels{domain, key}); ok {
		return c.(*keyCounters)
	}
	if perValue {
		if len(key) > maxStatKey || m.perValue.Add(1) > m.maxPerValue {
			if len(key) <= maxStatKey {
				m.perValue.Add(-1)
			}
			return m.of(domain, overflowKey, false)
		}
	}
	d, k := statName(domain), statName(key)
	c := &keyCounters{
		total:  m.totalHits.WithLabelValues(d, k),
		over:   m.overLimit.WithLabelValues(d, k),
		near:   m.nearLimit.WithLabelValues(d, k),
		within: m.withinLimit.WithLabelValues(d, k),
		shadow: m.shadowMode.WithLabelValues(d, k),

		negative: m.negativeHits.WithLabelValues(d, k),
	}
	actual, loaded := m.byKey.LoadOrStore(labels{domain, key}, c)
	if loaded && perValue {
		m.perValue.Add(-1) // another request made them first
	}
	return actual.(*keyCounters)
}

// statName is a domain or stat key as the peer names its stats (its
// utils.SanitizeStatName): ":" and "|" made "_", and so the dots of what
// reads as an IPv4 address (four runs of 1 to 3 digits), so that a
// dashboard on the peer's series finds rls's ("d.route_10.0.0.1" is
// "d.route_10_0_0_1"). Made once per key, when its counters are.
func statName(s string) string {
	if !strings.ContainsAny(s, ":|") && !digitDotDigit(s) {
		return s
	}
	return ipv4.ReplaceAllStringFunc(statReplacer.Replace(s), func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

var (
	statReplacer = strings.NewReplacer(":", "_", "|", "_")
	ipv4         = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)
)

// digitDotDigit reports a dot between two digits in s, which an IPv4
// address has.
func digitDotDigit(s string) bool {
	for i := 1; i+1 < len(s); i++ {
		if s[i] == '.' && s[i-1] >= '0' && s[i-1] <= '9' && s[i+1] >= '0' && s[i+1] <= '9' {
			return true
		}
	}
	return false
}

func (m *metrics) hit(domain string, it *item) {
	it.counters = m.of(domain, it.stat, it.perValue)
	it.counters.total.Add(float64(it.Cost))
}

// negative counts a refund's hits (is_negative_hits; it.Cost < 0), as the
// peer's total_negative_hits.
func (m *metrics) negative(domain string, it *item) {
	it.counters = m.of(domain, it.stat, it.perValue)
	it.counters.negative.Add(float64(-it.Cost))
}

// decided counts a descriptor's outcome as the peer splits hits (a
// refund, is_negative_hits, is none): of a
// request that ends past the limit, the hits before the limit are near it
// (past the near share) and the rest over; of one within it, the hits past
// the near share are near it.
func (m *metrics) decided(it *item, ratio float64) {
	if !it.Known || it.Cost <= 0 { // a check, or a refund: no hit
		return
	}
	c := it.counters
	limit, hits := it.r.perUnit, it.Cost
	nearAt := int64(float64(limit) * ratio)
	if it.Remembered {
		c.over.Add(float64(hits))
		return
	}
	if it.Result.Limited {
		before := max(limit-max(it.Result.Remaining, 0), 0)
		after := before + hits
		over, shadow := hits, hits
		if before < limit {
			over, shadow = after-limit, after-limit
			if near := limit - max(nearAt, before); near > 0 {
				c.near.Add(float64(near))
			}
		}
		c.over.Add(float64(over))
		if it.r.shadow {
			c.shadow.Add(float64(shadow))
		}
		return
	}
	after := max(limit-max(it.Result.Remaining, 0), 0)
	before := max(after-hits, 0)
	if after > nearAt {
		near := after - nearAt
		if before >= nearAt {
			near = hits
		}
		c.near.Add(float64(near))
	}
	c.within.Add(float64(hits))
}

func (m *metrics) redisCall(d time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.redisSeconds.WithLabelValues(outcome).Observe(d.Seconds())
}

func (m *metrics) redisError()          { m.errors.WithLabelValues("redis").Inc() }
func (m *metrics) serviceError()        { m.errors.WithLabelValues("service").Inc() }
func (m *metrics) cacheHit()            { m.cacheHits.Inc() }
func (m *metrics) localDecision()       { m.localDecided.Inc() }
func (m *metrics) localCharged(n int64) { m.localUnits.Add(float64(n)) }
func (m *metrics) globalShadow()        { m.globalShadowN.Inc() }
func (m *metrics) breaker(event string) { m.breakers.WithLabelValues(event).Inc() }
func (m *metrics) configLoad(ok bool) {
	if ok {
		m.configLoads.WithLabelValues("success").Inc()
	} else {
		m.configLoads.WithLabelValues("error").Inc()
	}
}

// leaseMetrics registers the local tier's counts (Options.Lease), read
// from stats at each scrape: prom's collector, the ratelimit_lease_*
// metrics httplimit's tier exports too.
func leaseMetrics(reg prometheus.Registerer, stats func() lease.Stats) {
	reg.MustRegister(prom.LeaseCollector(stats))
}
