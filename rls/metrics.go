package rls

import (
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
	c := &keyCounters{
		total:  m.totalHits.WithLabelValues(domain, key),
		over:   m.overLimit.WithLabelValues(domain, key),
		near:   m.nearLimit.WithLabelValues(domain, key),
		within: m.withinLimit.WithLabelValues(domain, key),
		shadow: m.shadowMode.WithLabelValues(domain, key),

		negative: m.negativeHits.WithLabelValues(domain, key),
	}
	actual, loaded := m.byKey.LoadOrStore(labels{domain, key}, c)
	if loaded && perValue {
		m.perValue.Add(-1) // another request made them first
	}
	return actual.(*keyCounters)
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
