package rls

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

const spreadConfig = `
domain: d
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: spread
    rate_limit: {unit: minute, requests_per_unit: 2, spread: true}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window, spread: true}
`

// TestSpread: spread: true starts each key's windows at its own offset
// (window.SpreadOffset of the Redis key, which names the spread):
// the minute of "d_spread_u1_fw60_spread" ends at hh:mm:01.472, 41.472 s
// after t0 (20 s into a minute), and that of "d_spread_u2_fw60_spread" at
// hh:mm:13.556, where an unspread minute ends at hh:(mm+1):00.
func TestSpread(t *testing.T) {
	s, f := onFake(t, spreadConfig, Options{})
	for _, step := range []struct {
		advance    time.Duration
		key, value string
		want       string
	}{
		{0, "plain", "u1", "OK OK/2:1:40s"},
		{0, "spread", "u1", "OK OK/2:1:42s"},
		{0, "spread", "u2", "OK OK/2:1:54s"},
		{0, "spread", "u1", "OK OK/2:0:42s"},
		{0, "spread", "u1", "OVER_LIMIT OVER_LIMIT/2:0:42s"},
		{41472 * time.Millisecond, "spread", "u1", "OK OK/2:1:60s"},
	} {
		f.Advance(step.advance)
		if got := line(ask(t, s, []*rlv3.RateLimitDescriptor{descriptor(step.key, step.value)})); got != step.want {
			t.Fatalf("at t0+%v: %s=%s answered %s, want %s", f.Now().Sub(t0), step.key, step.value, got, step.want)
		}
	}
	if n, err := f.Client().Get(context.Background(), "d_spread_u1_fw60_spread").Int64(); err != nil || n != 1 {
		t.Fatalf("the spread key's count: %d %v, want 1", n, err)
	}
	// The peer's X-RateLimit-Reset and the IETF field's t count to the
	// key's own window end: 42 s (41.472 s, rounded up), not 40.
	h, _ := onFake(t, spreadConfig, Options{Headers: true, LimitHeaders: LimitHeaders{"X-Limit", "X-Remaining", "X-Reset"}})
	got := map[string]string{}
	for _, v := range ask(t, h, []*rlv3.RateLimitDescriptor{descriptor("spread", "u1")}).ResponseHeadersToAdd {
		got[v.Key] = v.Value
	}
	if got["X-Reset"] != "42" || got["RateLimit"] != `"d.spread";r=1;t=42` {
		t.Errorf("headers %v, want X-Reset 42 and t=42", got)
	}
	for _, bad := range []string{"spread: true, algorithm: gcra", "spread: true, algorithm: sliding_log", "spread: 2"} {
		cfg := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, " + bad + "}\n"
		if _, err := Parse(map[string][]byte{"d.yaml": []byte(cfg)}); err == nil || !strings.Contains(err.Error(), "spread") {
			t.Errorf("%s: %v, want an error naming spread", bad, err)
		}
	}
}
