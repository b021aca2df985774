package rls

import (
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const refundConfig = `
domain: d
descriptors:
  - key: gcra
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: gcra}
  - key: tb
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token_bucket}
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
  - key: sl
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_log}
`

// TestNegativeHits: a descriptor with is_negative_hits gives its hits back
// (Envoy's refund, as the peer's), on the fake at a fixed instant. GCRA and
// the token bucket take them back at once, and a request refused before
// is admitted after; the windows take them off the current window's count
// (the sliding log its newest entries); a refund goes all or nothing with
// the request's other descriptors (refused by one, it is not kept); a
// refund is no hit (total_hits, total_negative_hits), and forgets a
// remembered refusal.
func TestNegativeHits(t *testing.T) {
	s, _ := onFake(t, refundConfig, Options{RefusalCache: 10})
	hitOf := func(key, user string, n uint64) *rlv3.RateLimitDescriptor {
		d := descriptor(key, user)
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	hit := func(key string, n uint64) *rlv3.RateLimitDescriptor { return hitOf(key, "u1", n) }
	back := func(key string, n uint64) *rlv3.RateLimitDescriptor {
		d := hit(key, n)
		d.IsNegativeHits = true
		return d
	}
	for i, step := range []struct {
		ds   []*rlv3.RateLimitDescriptor
		want string
	}{
		{[]*rlv3.RateLimitDescriptor{hit("gcra", 3)}, "OK OK/3:0:60s"},
		{[]*rlv3.RateLimitDescriptor{hit("gcra", 1)}, "OVER_LIMIT OVER_LIMIT/3:0:20s"}, // remembered
		{[]*rlv3.RateLimitDescriptor{back("gcra", 2)}, "OK OK/3:2:20s"},
		{[]*rlv3.RateLimitDescriptor{hit("gcra", 2)}, "OK OK/3:0:60s"}, // asked of Redis, not the refusal cache
		{[]*rlv3.RateLimitDescriptor{hit("tb", 3)}, "OK OK/3:0:60s"},
		{[]*rlv3.RateLimitDescriptor{back("tb", 3)}, "OK OK/3:3:0s"},
		{[]*rlv3.RateLimitDescriptor{hit("tb", 3)}, "OK OK/3:0:60s"},
		{[]*rlv3.RateLimitDescriptor{hit("fw", 3)}, "OK OK/3:0:40s"},
		{[]*rlv3.RateLimitDescriptor{hit("fw", 1)}, "OVER_LIMIT OVER_LIMIT/3:0:40s"}, // remembered
		{[]*rlv3.RateLimitDescriptor{back("fw", 2)}, "OK OK/3:2:40s"},
		{[]*rlv3.RateLimitDescriptor{hit("fw", 2)}, "OK OK/3:0:40s"},
		{[]*rlv3.RateLimitDescriptor{back("fw", 5)}, "OK OK/3:3:40s"}, // never below zero
		{[]*rlv3.RateLimitDescriptor{hit("fw", 3)}, "OK OK/3:0:40s"},
		{[]*rlv3.RateLimitDescriptor{hit("fw", 1)}, "OVER_LIMIT OVER_LIMIT/3:0:40s"},
		{[]*rlv3.RateLimitDescriptor{hit("sw", 3)}, "OK OK/3:0:100s"},
		{[]*rlv3.RateLimitDescriptor{back("sw", 1)}, "OK OK/3:1:100s"},
		{[]*rlv3.RateLimitDescriptor{hit("sw", 1)}, "OK OK/3:0:100s"},
		{[]*rlv3.RateLimitDescriptor{hit("sl", 3)}, "OK OK/3:0:60s"},
		{[]*rlv3.RateLimitDescriptor{back("sl", 3)}, "OK OK/3:3:0s"},
		{[]*rlv3.RateLimitDescriptor{hit("sl", 3)}, "OK OK/3:0:60s"},
		// All or nothing: a window refuses (in the same RL.ALL), so the
		// GCRA's refund is not kept; then one refused from the refusal cache.
		{[]*rlv3.RateLimitDescriptor{hitOf("fw", "u2", 3)}, "OK OK/3:0:40s"},
		{[]*rlv3.RateLimitDescriptor{back("gcra", 1), hitOf("fw", "u2", 1)}, "OVER_LIMIT OK/3:0:60s OVER_LIMIT/3:0:40s"},
		{[]*rlv3.RateLimitDescriptor{back("gcra", 1), hit("fw", 1)}, "OVER_LIMIT OK/3:0 OVER_LIMIT/3:0:40s"},
		{[]*rlv3.RateLimitDescriptor{hit("gcra", 1)}, "OVER_LIMIT OVER_LIMIT/3:0:20s"},
	} {
		if got := line(ask(t, s, step.ds)); got != step.want {
			t.Errorf("step %d: %s, want %s", i, got, step.want)
		}
	}
	for key, want := range map[string][2]float64{"d.gcra": {7, 4}, "d.tb": {6, 3}, "d.fw": {15, 7}, "d.sw": {4, 1}, "d.sl": {6, 3}} {
		if got := testutil.ToFloat64(s.m.totalHits.WithLabelValues("d", key)); got != want[0] {
			t.Errorf("total_hits of %s: %v, want %v (the refunds not counted)", key, got, want[0])
		}
		if got := testutil.ToFloat64(s.m.negativeHits.WithLabelValues("d", key)); got != want[1] {
			t.Errorf("total_negative_hits of %s: %v, want %v", key, got, want[1])
		}
	}
}
