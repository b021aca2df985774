package prom

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
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
	if strings.Count(text, "ratelimit_decisions_total{") != 10 {
		t.Errorf("want 9 decisions of per-ip and the shedder's, got\n%s", text)
	}
}
