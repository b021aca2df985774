package prom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-6b3823f5/ratelimit/lease"
)

// The local tier's metrics (lease.Tier), read from its Stats at each
// scrape.
var (
	leaseGrants = prometheus.NewDesc("ratelimit_lease_grants_total",
		"Grant calls the local tier sent (a Take with UpTo).", nil, nil)
	leaseUnits = prometheus.NewDesc("ratelimit_lease_units_total",
		"Units through the local tier, by event: granted (by the limiter), spent (on decisions made here), returned (given back unspent), stranded (could not be given back), charged (what the fallback admitted, charged when Redis answered again), uncharged (what the fallback admitted that could not be charged: a fixed window's once its window had ended, and charges that failed at Close).",
		[]string{"event"}, nil)
	leaseDecisions = prometheus.NewDesc("ratelimit_lease_decisions_total",
		"Decisions the local tier made other than spending a unit, by decision: refused (here, between paced grants), exact (sent to the limiter one by one), coalesced (on a cold key, sharing one call with others), fallback (made here while grants failed).",
		[]string{"decision"}, nil)
	leaseWaits = prometheus.NewDesc("ratelimit_lease_waits_total",
		"Decisions that found the pool empty and waited on a grant.", nil, nil)
	leaseUnclaimed = prometheus.NewDesc("ratelimit_lease_unclaimed_total",
		"Grants whose answer never came (Redis failed or took past the tier's Timeout).", nil, nil)
	leaseRegisters = prometheus.NewDesc("ratelimit_lease_registrations_total",
		"Renewals of this process's slot in the leased keys' registries (calls).", nil, nil)
	leaseDown = prometheus.NewDesc("ratelimit_lease_fallback_seconds_total",
		"Time keys spent deciding here while grants failed, summed over keys, up to their last recovery.", nil, nil)
)

// LeaseCollector exports a local tier's counts at each scrape: pass its
// Stats method (lease.Tier.Stats, or httplimit.Limiter.Leased).
//
//	ratelimit_lease_grants_total                            counter
//	ratelimit_lease_units_total{event="granted"}            counter: also spent, returned, stranded, charged, uncharged
//	ratelimit_lease_decisions_total{decision="refused"}     counter: also exact, coalesced, fallback
//	ratelimit_lease_waits_total                             counter
//	ratelimit_lease_unclaimed_total                         counter
//	ratelimit_lease_registrations_total                     counter
//	ratelimit_lease_fallback_seconds_total                  counter
//
// Granted − spent − returned − stranded is what the tier holds now (and
// what lapsed in flight). Metrics.Watch registers one for a Limiter with
// Options.Lease; register one yourself for a lease.Tier of your own.
func LeaseCollector(stats func() lease.Stats) prometheus.Collector {
	return leaseCollector(func() (lease.Stats, bool) { return stats(), true })
}

// leaseCollector collects what its func returns, when it says there is a
// tier to report.
type leaseCollector func() (lease.Stats, bool)

func (leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{leaseGrants, leaseUnits, leaseDecisions, leaseWaits, leaseUnclaimed, leaseRegisters, leaseDown} {
		ch <- d
	}
}

func (c leaseCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c()
	if !ok {
		return
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	counter(leaseGrants, float64(s.Grants))
	counter(leaseUnits, float64(s.Granted), "granted")
	counter(leaseUnits, float64(s.Local), "spent")
	counter(leaseUnits, float64(s.Returned), "returned")
	counter(leaseUnits, float64(s.Stranded), "stranded")
	counter(leaseUnits, float64(s.Charged), "charged")
	counter(leaseUnits, float64(s.Uncharged), "uncharged")
	counter(leaseDecisions, float64(s.Refused), "refused")
	counter(leaseDecisions, float64(s.Exact), "exact")
	counter(leaseDecisions, float64(s.Coalesced), "coalesced")
	counter(leaseDecisions, float64(s.Fallback), "fallback")
	counter(leaseWaits, float64(s.Waits))
	counter(leaseUnclaimed, float64(s.Unclaimed))
	counter(leaseRegisters, float64(s.Registers))
	counter(leaseDown, s.Down.Seconds())
}
