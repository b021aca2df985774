package rls

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// TestMetricsSplit: hits are split between within, near and over the limit
// as the peer splits them (limit 10, near from 8).
func TestMetricsSplit(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		cost, remaining             int64
		refused, shadow             bool
		within, near, over, shadowN float64
	}{
		{"admitted below the near share", 1, 2, false, false, 1, 0, 0, 0},
		{"admitted past the near share", 1, 1, false, false, 1, 1, 0, 0},
		{"admitted across the near share", 3, 0, false, false, 3, 2, 0, 0},
		{"refused when full", 1, 0, true, false, 0, 0, 1, 0},
		{"refused across the limit", 5, 2, true, false, 0, 2, 3, 0},
		{"shadow, across the limit", 5, 2, true, true, 0, 2, 3, 3},
		{"a check (cost 0)", 0, 5, false, false, 0, 0, 0, 0},
	} {
		m := newMetrics(nil)
		r := &rule{perUnit: 10, shadow: tc.shadow}
		it := &item{r: r, stat: "d.k"}
		it.Cost, it.Known, it.Result = tc.cost, true, client.Result{Verdict: ratelimit.Verdict{Limited: tc.refused, Limit: 10, Remaining: tc.remaining}}
		m.hit("d", it)
		m.decided(it, 0.8)
		for what, c := range map[string]struct {
			got  float64
			want float64
		}{
			"total":  {testutil.ToFloat64(m.totalHits.WithLabelValues("d", "d.k")), float64(tc.cost)},
			"within": {testutil.ToFloat64(m.withinLimit.WithLabelValues("d", "d.k")), tc.within},
			"near":   {testutil.ToFloat64(m.nearLimit.WithLabelValues("d", "d.k")), tc.near},
			"over":   {testutil.ToFloat64(m.overLimit.WithLabelValues("d", "d.k")), tc.over},
			"shadow": {testutil.ToFloat64(m.shadowMode.WithLabelValues("d", "d.k")), tc.shadowN},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s %v, want %v", tc.name, what, c.got, c.want)
			}
		}
	}
}
