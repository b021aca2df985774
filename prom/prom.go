// Package prom turns an httplimit.Limiter's events into Prometheus
// metrics, for those who want them: the library itself depends on no
// metrics package, and this one is a Go module of its own
// (github.com/seed-6b3823f5/ratelimit/prom), so client_golang enters a
// module graph only when it is imported.
//
//	m := prom.New(prometheus.DefaultRegisterer)
//	lim, err := httplimit.New(rdb, httplimit.Options{Event: m.Event}, policies...)
//	m.Watch(lim)
//	http.Handle("/metrics", promhttp.Handler())
//
// The metrics:
//
//	ratelimit_decisions_total{policy="per-ip",decision="refused"}   counter
//	ratelimit_redis_call_seconds{outcome="ok"}                      histogram
//	ratelimit_breaker_open                                          gauge, 0 or 1
//	ratelimit_engine{node="127.0.0.1:6379",engine="module"}         gauge, 1
//	ratelimit_lease_*                                               counters: see LeaseCollector
//
// A decision is one of admitted, refused, shed, shadow_refused,
// failed_open, failed_closed, local_admitted, local_refused, bad_request
// and remembered (refused by Options.RefusalCache, no call), counted once per policy that applied to a request (a policy
// that admitted a request another refused counts nothing; the in-flight
// shedder's sheds have policy ""). A Redis call's outcome is ok, error or
// timeout: the time one decision spent in Redis, refunds included.
// ratelimit_breaker_open is 1 while any watched limiter's breaker keeps
// requests from Redis; ratelimit_engine says which engine each Redis server
// met so far runs, the module or its Lua scripts. The ratelimit_lease_
// counters sum the local tiers (httplimit.Options.Lease) of the watched
// limiters that have one, and are absent while none has.
package prom

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-6b3823f5/ratelimit/httplimit"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// decisionNames are the decision label's values, by event kind.
var decisionNames = map[httplimit.EventKind]string{
	httplimit.Admitted:      "admitted",
	httplimit.Refused:       "refused",
	httplimit.Shed:          "shed",
	httplimit.ShadowRefused: "shadow_refused",
	httplimit.FailedOpen:    "failed_open",
	httplimit.FailedClosed:  "failed_closed",
	httplimit.LocalAdmitted: "local_admitted",
	httplimit.LocalRefused:  "local_refused",
	httplimit.BadRequest:    "bad_request",
	httplimit.Remembered:    "remembered",
}

// Buckets are the Redis call histogram's upper bounds, in seconds: from
// 100 µs (a call on loopback) to 1 s, past any sane call timeout.
var Buckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// Metrics counts what limiters report. Its Event method is an
// httplimit.Options.Event; it is safe for concurrent use.
type Metrics struct {
	decisions *prometheus.CounterVec
	calls     *prometheus.HistogramVec
	outcomes  map[string]prometheus.Observer // ok, error, timeout: looked up once

	mu       sync.RWMutex
	counters map[string]map[httplimit.EventKind]prometheus.Counter // by policy, then decision
	watched  []*httplimit.Limiter
}

// New makes the metrics and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_decisions_total",
			Help: "Requests decided, per policy and decision: admitted, refused, shed, shadow_refused, failed_open, failed_closed, local_admitted, local_refused, bad_request, remembered.",
		}, []string{"policy", "decision"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratelimit_redis_call_seconds",
			Help:    "Time one decision spent calling Redis, by outcome: ok, error, timeout.",
			Buckets: Buckets,
		}, []string{"outcome"}),
		outcomes: map[string]prometheus.Observer{},
		counters: map[string]map[httplimit.EventKind]prometheus.Counter{},
	}
	for _, o := range []string{"ok", "error", "timeout"} {
		m.outcomes[o] = m.calls.WithLabelValues(o)
	}
	breaker := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ratelimit_breaker_open",
		Help: "1 while a limiter's circuit breaker keeps requests from Redis (the failure policy decides them), else 0.",
	}, m.breakerOpen)
	for _, c := range []prometheus.Collector{m.decisions, m.calls, breaker, engines{m}, leaseCollector(m.leased)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Watch adds l's circuit breaker and engines to the gauges, and makes its
// policies' decision counters at once, so each shows 0 before it counts.
func (m *Metrics) Watch(l *httplimit.Limiter) {
	m.mu.Lock()
	m.watched = append(m.watched, l)
	m.mu.Unlock()
	for _, p := range l.Policies() {
		for kind := range decisionNames {
			m.counter(p, kind)
		}
	}
}

// Event counts one event; pass it as httplimit.Options.Event, or call it
// from yours.
func (m *Metrics) Event(e httplimit.Event) {
	switch e.Kind {
	case httplimit.RedisCall:
		if o := m.outcomes[e.Outcome]; o != nil {
			o.Observe(e.Duration.Seconds())
		}
	default:
		if _, ok := decisionNames[e.Kind]; ok {
			m.counter(e.Policy, e.Kind).Inc()
		}
	}
}

// counter is policy's counter of decision kind, made on first use.
func (m *Metrics) counter(policy string, kind httplimit.EventKind) prometheus.Counter {
	m.mu.RLock()
	c := m.counters[policy][kind]
	m.mu.RUnlock()
	if c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counters[policy] == nil {
		m.counters[policy] = map[httplimit.EventKind]prometheus.Counter{}
	}
	if c = m.counters[policy][kind]; c == nil {
		c = m.decisions.WithLabelValues(policy, decisionNames[kind])
		m.counters[policy][kind] = c
	}
	return c
}

func (m *Metrics) breakerOpen() float64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, l := range m.watched {
		if l.BreakerOpen() {
			return 1
		}
	}
	return 0
}

// leased sums the local tiers' counts of the watched limiters that lease.
func (m *Metrics) leased() (sum lease.Stats, any bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, l := range m.watched {
		if !l.Leases() {
			continue
		}
		any = true
		s := l.Leased()
		sum.Local += s.Local
		sum.Refused += s.Refused
		sum.Exact += s.Exact
		sum.Grants += s.Grants
		sum.Granted += s.Granted
		sum.Returned += s.Returned
		sum.Stranded += s.Stranded
		sum.Waits += s.Waits
		sum.Unclaimed += s.Unclaimed
		sum.Fallback += s.Fallback
		sum.Down += s.Down
		sum.Registers += s.Registers
		sum.Coalesced += s.Coalesced
	}
	return sum, any
}

// engines reports ratelimit_engine at each scrape.
type engines struct{ m *Metrics }

var engineDesc = prometheus.NewDesc("ratelimit_engine",
	"1 for the engine each Redis server met so far runs: module (the ratelimit module) or scripts (its Lua scripts).",
	[]string{"node", "engine"}, nil)

func (e engines) Describe(ch chan<- *prometheus.Desc) { ch <- engineDesc }

func (e engines) Collect(ch chan<- prometheus.Metric) {
	e.m.mu.RLock()
	watched := append([]*httplimit.Limiter(nil), e.m.watched...)
	e.m.mu.RUnlock()
	seen := map[string]bool{}
	for _, l := range watched {
		for node, engine := range l.Engines() {
			if k := node + " " + engine.String(); !seen[k] {
				seen[k] = true
				ch <- prometheus.MustNewConstMetric(engineDesc, prometheus.GaugeValue, 1, node, engine.String())
			}
		}
	}
}
