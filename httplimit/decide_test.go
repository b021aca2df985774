package httplimit

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// events collects what a limiter reports.
type events struct {
	mu   sync.Mutex
	list []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

// decisions lists the decision events as "kind:policy".
func (e *events) decisions() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var s []string
	for _, ev := range e.list {
		if ev.Kind >= ShadowRefused && ev.Kind <= BadRequest && ev.Kind != Failure {
			s = append(s, ev.Kind.String()+":"+ev.Policy)
		}
	}
	return strings.Join(s, " ")
}

func (e *events) count(k EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.list {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

func serveOne(l *Limiter, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(w, r)
	return w
}

// A cost outside 0..the limit never reaches Redis: 400, reported.
func TestCostOutOfRange(t *testing.T) {
	rdb, f := newFakeRedis(func([]any) (any, error) { return ints(0, 10, 9, -1, 6000), nil })
	var ev events
	var logs bytes.Buffer
	l, err := New(rdb, Options{Event: ev.add, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, Policy{
		Name: "tokens", Limit: client.PerMinute(10), Key: Global(),
		Cost: func(r *http.Request) int64 { n := int64(len(r.URL.Query().Get("n"))); return n - 2 },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		query string
		code  int
	}{{"?n=a", 400}, {"?n=" + strings.Repeat("a", 13), 400}, {"?n=" + strings.Repeat("a", 12), 200}, {"?n=aa", 200}} {
		w := serveOne(l, httptest.NewRequest("GET", "/"+c.query, nil))
		if w.Code != c.code {
			t.Errorf("%s: %d %s, want %d", c.query, w.Code, w.Body, c.code)
		}
	}
	if n := len(f.Calls()); n != 2 {
		t.Fatalf("%d calls to Redis, want 2 (the bad requests cost nothing): %v", n, f.Calls())
	}
	if got := ev.decisions(); got != "bad-request:tokens bad-request:tokens admitted:tokens admitted:tokens" {
		t.Fatalf("decisions %q", got)
	}
	if !strings.Contains(logs.String(), "policy=tokens") || !strings.Contains(logs.String(), "cost -1 is outside 0 to 10") {
		t.Fatalf("log %q", logs.String())
	}
}

// An argument error from Redis is a configuration bug: reported loudly,
// decided by OnError, never counted toward the breaker.
func TestConfigErrorMovesNoBreaker(t *testing.T) {
	rdb, _ := newFakeRedis(func([]any) (any, error) {
		return nil, replyError("ERR limit must be an integer from 1 to 100000")
	})
	for _, mode := range []OnError{FailOpen, FailClosed} {
		var ev events
		var logs bytes.Buffer
		l, err := New(rdb, Options{OnError: mode, BreakerFailures: 2, Event: ev.add, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
			Policy{Name: "big", Limit: client.SlidingLog(200000, time.Minute), Key: Global()})
		if err != nil {
			t.Fatal(err)
		}
		want := map[OnError]int{FailOpen: 200, FailClosed: 503}[mode]
		for i := range 10 {
			if w := serveOne(l, httptest.NewRequest("GET", "/", nil)); w.Code != want {
				t.Fatalf("%v, request %d: %d", mode, i, w.Code)
			}
		}
		if l.BreakerOpen() || ev.count(BreakerOpen) != 0 || ev.count(Failure) != 0 || ev.count(ConfigError) != 10 {
			t.Fatalf("%v: breaker open %v, %d failures, %d config errors", mode, l.BreakerOpen(), ev.count(Failure), ev.count(ConfigError))
		}
		if !strings.Contains(logs.String(), "level=ERROR") || strings.Count(logs.String(), "\n") != 1 {
			t.Fatalf("%v: want one error line (at most one a second), got %q", mode, logs.String())
		}
		if got, kind := ev.decisions(), map[OnError]string{FailOpen: "failed-open:big", FailClosed: "failed-closed:big"}[mode]; got != strings.TrimSpace(strings.Repeat(kind+" ", 10)) {
			t.Fatalf("%v: decisions %q", mode, got)
		}
	}
}

// A client that has hung up costs Redis nothing and moves no breaker.
func TestClientGone(t *testing.T) {
	rdb, f := newFakeRedis(func([]any) (any, error) { return ints(0, 10, 9, -1, 6000), nil })
	var ev events
	l, err := New(rdb, Options{BreakerFailures: 1, Event: ev.add},
		Policy{Name: "p", Limit: client.PerMinute(10), Key: Global()})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		serveOne(l, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	}
	if len(f.Calls()) != 0 || l.BreakerOpen() || ev.count(Failure) != 0 {
		t.Fatalf("hung-up clients: %d calls, breaker open %v", len(f.Calls()), l.BreakerOpen())
	}
}

// Every decision reaches the Event hook, one per policy; a policy that
// admitted a request another refused reports nothing.
func TestDecisionEvents(t *testing.T) {
	rdb, _ := newFakeRedis(func(args []any) (any, error) {
		if args[0] == "RL.ALL" { // the second limit refuses
			return ints(1, 5, 0, 2000, 2000, 1, 0, 10, 9, -1, 6000, 1, 5, 0, 2000, 2000), nil
		}
		return ints(1, 3, 0, 1000, 1000), nil // the shadow policy would refuse
	})
	var ev events
	l, err := New(rdb, Options{Event: ev.add},
		Policy{Name: "a", Limit: client.PerMinute(10), Key: Global()},
		Policy{Name: "b", Limit: client.FixedWindow(5, time.Minute), Key: Global()},
		Policy{Name: "trial", Limit: client.FixedWindow(3, time.Minute), Key: Global(), Shadow: true})
	if err != nil {
		t.Fatal(err)
	}
	if w := serveOne(l, httptest.NewRequest("GET", "/", nil)); w.Code != 429 {
		t.Fatalf("%d", w.Code)
	}
	if got := ev.decisions(); got != "refused:b shadow-refused:trial" {
		t.Fatalf("decisions %q", got)
	}
	if ev.count(RedisCall) != 1 {
		t.Fatalf("%d RedisCall events for one decision", ev.count(RedisCall))
	}
}

// Each Redis server has its own breaker: one that fails opens its own, and
// requests whose keys live on another server are still decided in Redis.
// A call whose slot kept moving until the timeout (client.Moving) is
// decided by OnError and opens no breaker.
func TestBreakerPerServer(t *testing.T) {
	down := &client.ServerError{Server: "10.0.0.1:6379", Err: context.DeadlineExceeded}
	moving := &client.ServerError{Server: "10.0.0.2:6379", Err: replyError("TRYAGAIN Multiple keys request during rehashing of slot")}
	f := &fakeDecider{
		take: func(string, int64) client.Result {
			return client.Result{Verdict: ratelimit.Verdict{Limit: 10, Remaining: 9, RetryAfter: ratelimit.Never}}
		},
		server: func(key string) string {
			switch {
			case strings.Contains(key, "{a"):
				return "10.0.0.1:6379"
			case strings.Contains(key, "{m"):
				return "10.0.0.2:6379"
			}
			return "10.0.0.3:6379"
		},
		fail: func(key string) error {
			switch {
			case strings.Contains(key, "{a"):
				return down
			case strings.Contains(key, "{m"):
				return moving
			}
			return nil
		},
	}
	var ev events
	l := limiterOn(t, f, Options{OnError: FailOpen, BreakerFailures: 3, Event: ev.add},
		Policy{Name: "user", Limit: client.PerMinute(10), Key: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }})
	req := func(user string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", user)
		return serveOne(l, r).Code
	}
	for range 10 {
		req("a")
		req("m")
	}
	if !l.BreakerOpen() || ev.count(BreakerOpen) != 1 || ev.count(Failure) != 3 {
		t.Fatalf("after 10 failures on one server: open %v, %d opened, %d failures; want open, 1, 3",
			l.BreakerOpen(), ev.count(BreakerOpen), ev.count(Failure))
	}
	ev.mu.Lock()
	list := append([]Event(nil), ev.list...)
	ev.mu.Unlock()
	for _, e := range list {
		if (e.Kind == BreakerOpen || e.Kind == Failure) && e.Server != "10.0.0.1:6379" {
			t.Fatalf("%v names server %q", e.Kind, e.Server)
		}
	}
	calls := len(f.calls)
	for range 5 {
		if code := req("b"); code != 200 {
			t.Fatalf("a key on a well server: %d", code)
		}
	}
	if got := len(f.calls) - calls; got != 5 {
		t.Fatalf("5 requests on a well server while another's breaker is open made %d calls", got)
	}
	if n := strings.Count(ev.decisions(), "admitted:user"); n != 5 {
		t.Fatalf("decisions %q: want 5 admitted", ev.decisions())
	}
	calls = len(f.calls)
	req("a")
	req("m")
	if got := len(f.calls) - calls; got != 1 {
		t.Fatalf("a request on the open server and one on the moving slot made %d calls; want 1 (the moving slot's)", got)
	}
}
