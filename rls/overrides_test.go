package rls

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
)

const overridesConfig = `
domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 3, overrides: true}
  - key: gtenant
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: gcra, overrides: true}
`

// TestOverrides: overrides: true reads each key's limit from Redis (the
// module's LIMITS): the field "limit" of "{<key>}_limits", in the key's
// slot, holding the algorithm's parameters. A tenant without it gets the
// rule's 3 a minute; one whose hash holds "2 60" is refused at its third
// request, and the response and the headers state 2; a GCRA's "9 10 60"
// admits 10 at once.
func TestOverrides(t *testing.T) {
	s, f := onFake(t, overridesConfig, Options{Headers: true, LimitHeaders: LimitHeaders{"X-Limit", "X-Remaining", "X-Reset"}})
	rdb := f.Client()
	ctx := context.Background()
	if got := overridesKey("d_tenant_beta_fw60"); got != "{d_tenant_beta_fw60}_limits" {
		t.Fatalf("overridesKey = %q", got)
	}
	if got := overridesKey("d_tenant_{b}_fw60"); got != "d_tenant_{b}_fw60_limits" {
		t.Fatalf("overridesKey of a tagged key = %q", got)
	}
	// In the key's slot, but for a key with a '}' and no tag of its own.
	for _, k := range []string{"d_tenant_beta_fw60", "d_tenant_{b}_fw60", "d_t_{}x_fw60", "d_t_x}{y_fw60", "{", "d_{a}{b}_fw60", "d_{x_fw60"} {
		h, i := overridesKey(k), strings.IndexByte(k, '{')
		tagged := i >= 0 && strings.IndexByte(k[i+1:], '}') > 0
		if (tagged || !strings.Contains(k, "}")) && protocol.Slot(h) != protocol.Slot(k) {
			t.Errorf("the hash %q of %q is in slot %d, the key in %d", h, k, protocol.Slot(h), protocol.Slot(k))
		}
	}
	if err := rdb.HSet(ctx, "{d_tenant_beta_fw60}_limits", "limit", "2 60").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "{d_gtenant_g_gcra60}_limits", "limit", "9 10 60").Err(); err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct{ key, value, want string }{
		{"tenant", "acme", "OK OK/3:2:40s"},
		{"tenant", "beta", "OK OK/2:1:40s"},
		{"tenant", "beta", "OK OK/2:0:40s"},
		{"tenant", "beta", "OVER_LIMIT OVER_LIMIT/2:0:40s"},
		{"gtenant", "g", "OK OK/10:9:6s"},
	} {
		if got := line(ask(t, s, []*rlv3.RateLimitDescriptor{descriptor(step.key, step.value)})); got != step.want {
			t.Fatalf("step %d: %s=%s answered %s, want %s", i+1, step.key, step.value, got, step.want)
		}
	}
	got := map[string]string{}
	for _, v := range ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("tenant", "beta")}).ResponseHeadersToAdd {
		got[v.Key] = v.Value
	}
	if got["X-Limit"] != "2" || !strings.HasPrefix(got["RateLimit-Policy"], `"d.tenant";q=2;w=60`) {
		t.Errorf("headers %v, want the overriding limit 2", got)
	}
	for _, bad := range []string{"algorithm: concurrency, limit: 2, hold_ttl: 30, overrides: true", "unit: minute, requests_per_unit: 1, overrides: true, lease: true",
		"unit: minute, requests_per_unit: 1, overrides: 1"} {
		cfg := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {" + bad + "}\n"
		if _, err := Parse(map[string][]byte{"d.yaml": []byte(cfg)}); err == nil || !strings.Contains(err.Error(), "overrides") {
			t.Errorf("%s: %v, want an error naming overrides", bad, err)
		}
	}
}
