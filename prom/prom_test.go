package prom

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// scrape reads the registry's metrics as Prometheus text.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(w.Result().Body)
	return string(b)
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	lim, err := httplimit.New(rdb, httplimit.Options{Event: m.Event},
		httplimit.Policy{Name: "per-ip", Limit: client.PerMinute(10), Key: httplimit.Global()})
	if err != nil {
		t.Fatal(err)
	}
	m.Watch(lim)
	for range 3 {
		m.Event(httplimit.Event{Kind: httplimit.Admitted, Policy: "per-ip"})
	}
	m.Event(httplimit.Event{Kind: httplimit.Refused, Policy: "per-ip"})
	m.Event(httplimit.Event{Kind: httplimit.Shed}) // the in-flight shedder
	m.Event(httplimit.Event{Kind: httplimit.RedisCall, Outcome: "ok", Duration: 300 * time.Microsecond})
	m.Event(httplimit.Event{Kind: httplimit.RedisCall, Outcome: "timeout", Duration: 50 * time.Millisecond})
	m.Event(httplimit.Event{Kind: httplimit.BreakerOpen}) // not a decision: counts nothing
	text := scrape(t, reg)
	for _, line := range []string{
		`ratelimit_decisions_total{decision="admitted",policy="per-ip"} 3`,
		`ratelimit_decisions_total{decision="refused",policy="per-ip"} 1`,
		`ratelimit_decisions_total{decision="bad_request",policy="per-ip"} 0`,
		`ratelimit_decisions_total{decision="remembered",policy="per-ip"} 0`,
		`ratelimit_decisions_total{decision="shed",policy=""} 1`,
		`ratelimit_redis_call_seconds_bucket{outcome="ok",le="0.0005"} 1`,
		`ratelimit_redis_call_seconds_bucket{outcome="ok",le="0.00025"} 0`,
		`ratelimit_redis_call_seconds_count{outcome="timeout"} 1`,
		`ratelimit_breaker_open 0`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no %q in\n%s", line, text)
		}
	}
	if strings.Count(text, "ratelimit_decisions_total{") != 11 {
		t.Errorf("want 10 decisions of per-ip and the shedder's, got\n%s", text)
	}
}

func TestLeaseMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := httplimit.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), httplimit.Options{},
		httplimit.Policy{Name: "exact", Limit: client.PerMinute(10), Key: httplimit.Global()})
	if err != nil {
		t.Fatal(err)
	}
	m.Watch(exact)
	if text := scrape(t, reg); strings.Contains(text, "ratelimit_lease_") {
		t.Errorf("lease metrics with no tier watched:\n%s", text)
	}
	f := fakeredis.New()
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	f.Clock = clock
	lim, err := httplimit.New(f.Client(), httplimit.Options{Lease: &lease.Options{Now: clock}},
		httplimit.Policy{Name: "api", Limit: client.PerSecond(10000), Key: httplimit.Global()})
	if err != nil {
		t.Fatal(err)
	}
	m.Watch(lim)
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 200 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		now.Add(int64(time.Millisecond))
	}
	if err := lim.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := lim.Leased()
	if s.Grants == 0 || s.Local == 0 || s.Returned == 0 {
		t.Fatalf("the tier did not lease: %+v", s)
	}
	text := scrape(t, reg)
	for _, line := range []string{
		fmt.Sprintf("ratelimit_lease_grants_total %d", s.Grants),
		fmt.Sprintf(`ratelimit_lease_units_total{event="granted"} %d`, s.Granted),
		fmt.Sprintf(`ratelimit_lease_units_total{event="spent"} %d`, s.Local),
		fmt.Sprintf(`ratelimit_lease_units_total{event="returned"} %d`, s.Returned),
		`ratelimit_lease_units_total{event="stranded"} 0`,
		`ratelimit_lease_units_total{event="charged"} 0`,
		`ratelimit_lease_units_total{event="uncharged"} 0`,
		fmt.Sprintf(`ratelimit_lease_decisions_total{decision="exact"} %d`, s.Exact),
		fmt.Sprintf(`ratelimit_lease_decisions_total{decision="refused"} %d`, s.Refused),
		fmt.Sprintf(`ratelimit_lease_decisions_total{decision="coalesced"} %d`, s.Coalesced),
		fmt.Sprintf("ratelimit_lease_waits_total %d", s.Waits),
		"ratelimit_lease_fallback_seconds_total 0",
		fmt.Sprintf("ratelimit_lease_registrations_total %d", s.Registers),
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no %q in\n%s", line, text)
		}
	}
	if s.Granted != s.Local+s.Returned {
		t.Errorf("granted %d, spent %d + returned %d", s.Granted, s.Local, s.Returned)
	}
}
