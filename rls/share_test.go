package rls

import (
	"slices"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const shareConfig = `
domain: d
descriptors:
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: org
    value: /t*
    value_to_metric: true
    descriptors:
      - key: plan
        rate_limit: {unit: minute, requests_per_unit: 3}
`

// TestShareThreshold: values a share_threshold wildcard matches count at
// one key (the pattern's) and one stat key, as the peer's; without it each
// value counts apart, under the pattern's stat key.
func TestShareThreshold(t *testing.T) {
	s, f := onFake(t, shareConfig, Options{})
	for i, step := range []struct {
		d    *rlv3.RateLimitDescriptor
		want string
	}{
		{descriptor("path", "/files/a"), "OK OK/3:2:40s"},
		{descriptor("path", "/files/b"), "OK OK/3:1:40s"}, // the same counter
		{descriptor("path", "/files/c/d"), "OK OK/3:0:40s"},
		{descriptor("path", "/files/e"), "OVER_LIMIT OVER_LIMIT/3:0:40s"},
		{descriptor("path", "/api/a"), "OK OK/3:2:40s"},
		{descriptor("path", "/api/b"), "OK OK/3:2:40s"}, // a counter of its own
	} {
		if got := line(ask(t, s, []*rlv3.RateLimitDescriptor{step.d})); got != step.want {
			t.Errorf("step %d (%v): %s, want %s", i, step.d, got, step.want)
		}
	}
	keys := f.Keys()
	for _, want := range []string{"d_path_/files/*_fw60", "d_path_/api/a_fw60", "d_path_/api/b_fw60"} {
		if !slices.Contains(keys, want) {
			t.Errorf("no key %s in %v", want, keys)
		}
	}
	for stat, want := range map[string]float64{"d.path_/files/*": 4, "d.path_/api/*": 2} {
		if got := testutil.ToFloat64(s.m.totalHits.WithLabelValues("d", stat)); got != want {
			t.Errorf("total_hits of %s: %v, want %v", stat, got, want)
		}
	}
}

// TestValueToMetric: value_to_metric puts the request's value in the stat
// key where the config matched a key alone or a wildcard, at every level
// that says it, as the peer's; the Redis key is as without it.
func TestValueToMetric(t *testing.T) {
	s, _ := onFake(t, shareConfig, Options{})
	ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("user", "alice")})
	ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("org", "/team-a", "plan", "gold")})
	for stat, want := range map[string]float64{"d.user_alice": 1, "d.user": 0, "d.org_/team-a.plan": 1, "d.org_/t*.plan": 0} {
		if got := testutil.ToFloat64(s.m.totalHits.WithLabelValues("d", stat)); got != want {
			t.Errorf("total_hits of %s: %v, want %v", stat, got, want)
		}
	}
}
