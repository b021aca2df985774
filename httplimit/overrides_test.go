package httplimit

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// TestPolicyOverrides: a policy's limit held in Redis per key (the
// module's LIMITS): a tenant without a field gets the policy's 3 a
// minute, one whose hash holds 2 is refused at its third request, and
// raising its field to 4 admits two more from the next request; the
// fields a client reads state the limit that decided.
func TestPolicyOverrides(t *testing.T) {
	tenant := func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }
	srv, f := fakeServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), Options{Headers: IETF | XRateLimit},
		Policy{Name: "api", Limit: client.FixedWindow(3, time.Minute), Key: tenant,
			Overrides: func(r *http.Request, key string) string { return "{" + key + "}:limits" }})
	c := client.New(f.Client())
	ctx := context.Background()
	if err := c.SetLimit(ctx, "{beta}:limits", "api", client.FixedWindow(2, time.Minute)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		tenant, policy, limit string
		code                  int
	}{
		{"acme", `"api";q=3;w=60`, "3", 200}, {"acme", `"api";q=3;w=60`, "3", 200}, {"acme", `"api";q=3;w=60`, "3", 200},
		{"acme", `"api";q=3;w=60`, "3", 429},
		{"beta", `"api";q=2;w=60`, "2", 200}, {"beta", `"api";q=2;w=60`, "2", 200}, {"beta", `"api";q=2;w=60`, "2", 429},
	} {
		resp, _ := send(t, srv, "GET", "/", "X-Tenant", want.tenant)
		if resp.StatusCode != want.code || resp.Header.Get("RateLimit-Policy") != want.policy || resp.Header.Get("X-RateLimit-Limit") != want.limit {
			t.Errorf("request %d (%s): %d, RateLimit-Policy %q, X-RateLimit-Limit %q; want %d, %q, %q", i+1, want.tenant, resp.StatusCode,
				resp.Header.Get("RateLimit-Policy"), resp.Header.Get("X-RateLimit-Limit"), want.code, want.policy, want.limit)
		}
	}
	if err := c.SetLimit(ctx, "{beta}:limits", "api", client.FixedWindow(4, time.Minute)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{200, 200, 429} {
		if resp, _ := send(t, srv, "GET", "/", "X-Tenant", "beta"); resp.StatusCode != want || resp.Header.Get("RateLimit-Policy") != `"api";q=4;w=60` {
			t.Errorf("beta raised to 4, request %d: %d %q, want %d", i+1, resp.StatusCode, resp.Header.Get("RateLimit-Policy"), want)
		}
	}
	lim, err := New(f.Client(), Options{Prefix: "rl:"}, Policy{Name: "api", Limit: client.PerMinute(1), Key: tenant})
	if err != nil {
		t.Fatal(err)
	}
	if got := lim.LimitsKey("acme"); got != "rl:{acme}:limits" {
		t.Errorf("LimitsKey = %q", got)
	}
}
