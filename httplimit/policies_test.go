package httplimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// fakeServer serves h behind a limiter of the given options and policies,
// its limits decided on the shared fake Redis at a fixed instant.
func fakeServer(t *testing.T, h http.Handler, opt Options, policies ...Policy) (*httptest.Server, *fakeredis.Server) {
	t.Helper()
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_000, 0)
	f.Clock = func() time.Time { return t0 }
	lim, err := New(f.Client(), opt, policies...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(h))
	t.Cleanup(srv.Close)
	return srv, f
}

// send sends one request as a real client would: method, path, a header
// pair or none; it returns the response with its body read.
func send(t *testing.T, srv *httptest.Server, method, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// onPath keys a request by its path when it is path, else not at all.
func onPath(path string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.URL.Path != path {
			return "", nil
		}
		return "k", nil
	}
}

// TestPolicyOnError: with Redis refusing connections, a Limiter that fails
// open serves /feed, whose policy inherits it, answers /login, whose
// policy fails closed, 503, and a request under both the strictest, 503.
func TestPolicyOnError(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	lim, err := New(rdb, Options{OnError: FailOpen, Timeout: 20 * time.Millisecond},
		Policy{Name: "feed", Limit: client.PerSecond(10), Key: onPath("/feed")},
		Policy{Name: "login", Limit: client.PerSecond(10), Key: onPath("/login"), OnError: FailClosed},
		Policy{Name: "both", Limit: client.PerSecond(10), Key: Combine(onPath("/both"), Global())},
		Policy{Name: "both-closed", Limit: client.PerSecond(10), Key: onPath("/both"), OnError: FailClosed},
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := lim.policies[0].OnError; got != FailOpen {
		t.Errorf("an unset policy OnError is %v, want the Limiter's, open", got)
	}
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for _, c := range []struct {
		path string
		want int
	}{{"/feed", 200}, {"/login", 503}, {"/both", 503}, {"/other", 200}} {
		if resp, _ := send(t, srv, "GET", c.path); resp.StatusCode != c.want {
			t.Errorf("%s while Redis is down: %d, want %d", c.path, resp.StatusCode, c.want)
		}
	}
	if _, err := New(rdb, Options{}, Policy{Name: "p", Limit: client.PerSecond(1), Key: Global(), OnError: 7}); err == nil {
		t.Error("New took OnError 7")
	}
}

// TestPolicyQuietAndDeny: a quiet policy is in no field and its refusal
// names nothing; a Deny of its own (a shadow ban) answers 200 with a body
// of its own and the handler never runs, the refusal still reported.
func TestPolicyQuietAndDeny(t *testing.T) {
	var served atomic.Int64
	ev := &events{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1); io.WriteString(w, "real") })
	srv, _ := fakeServer(t, h, Options{Event: ev.add},
		Policy{Name: "visible", Limit: client.FixedWindow(10, time.Minute), Key: Global()},
		Policy{Name: "hidden", Quiet: true, Limit: client.FixedWindow(2, time.Minute), Key: Header("X-User")},
		Policy{Name: "banned", Quiet: true, Limit: client.FixedWindow(1, time.Minute), Key: Header("X-Bot"),
			Deny: func(w http.ResponseWriter, r *http.Request, d Decision) { io.WriteString(w, `{"ok":true}`) }},
	)
	check := func(resp *http.Response) {
		t.Helper()
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if v := resp.Header.Get(f); strings.Contains(v, "hidden") || strings.Contains(v, "banned") {
				t.Errorf("%s: %q names a quiet policy", f, v)
			}
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"visible";q=10;w=60` {
			t.Errorf("RateLimit-Policy %q, want the visible policy alone", got)
		}
	}
	for i, want := range []int{200, 200, 429} {
		resp, body := send(t, srv, "GET", "/", "X-User", "u1")
		check(resp)
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
		if want == 429 && (strings.Contains(body, "hidden") || !strings.Contains(body, "too many requests") || resp.Header.Get("Retry-After") == "") {
			t.Errorf("the quiet refusal: body %s, Retry-After %q", body, resp.Header.Get("Retry-After"))
		}
	}
	before := served.Load()
	for i := range 3 {
		resp, body := send(t, srv, "GET", "/", "X-Bot", "b1")
		check(resp)
		if i > 0 && (resp.StatusCode != 200 || body != `{"ok":true}` || resp.Header.Get("Retry-After") != "") {
			t.Errorf("banned request %d: %d %q %v, want 200 and the ban's body", i+1, resp.StatusCode, body, resp.Header)
		}
	}
	if got := served.Load() - before; got != 1 {
		t.Errorf("the handler ran %d times for the banned client, want once (its first request)", got)
	}
	if got := strings.Count(ev.decisions(), "refused:banned"); got != 2 {
		t.Errorf("events %s: want 2 refusals by banned", ev.decisions())
	}
}

// TestPolicyCount: a login policy counting only 401s, on a limit of 3:
// successful logins never count, the 4th failure is refused before its
// handler, and a handler's own count (Use) is charged with DEBT.
func TestPolicyCount(t *testing.T) {
	var ran atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		if n := r.URL.Query().Get("tokens"); n != "" {
			Use(r, int64(len(n)))
			return
		}
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	failures := func(status int, _ *http.Request) int64 {
		if status == http.StatusUnauthorized {
			return 1
		}
		return 0
	}
	srv, f := fakeServer(t, h, Options{},
		Policy{Name: "login", Limit: client.FixedWindow(3, time.Minute), Key: onPath("/login"), Count: failures},
		Policy{Name: "tokens", Limit: client.FixedWindow(10, time.Minute), Key: onPath("/tokens"),
			Count: func(_ int, r *http.Request) int64 { return Used(r) }},
	)
	for range 5 {
		if resp, _ := send(t, srv, "POST", "/login", "X-Password", "right"); resp.StatusCode != 200 {
			t.Fatalf("a successful login: %d", resp.StatusCode)
		}
	}
	for i := range 3 {
		if resp, _ := send(t, srv, "POST", "/login"); resp.StatusCode != 401 {
			t.Fatalf("failed login %d: %d, want 401", i+1, resp.StatusCode)
		}
	}
	before := ran.Load()
	resp, _ := send(t, srv, "POST", "/login")
	if resp.StatusCode != 429 || ran.Load() != before {
		t.Errorf("the 4th failure: %d, handler ran %d more, want 429 before the handler", resp.StatusCode, ran.Load()-before)
	}
	// tokens: the first request takes 1, its handler reports 12: 11 more
	// charged, past nothing (12 of 10: debt); the next is refused.
	if resp, _ := send(t, srv, "GET", "/tokens?tokens=123456789012"); resp.StatusCode != 200 {
		t.Fatalf("tokens: %d", resp.StatusCode)
	}
	if resp, _ := send(t, srv, "GET", "/tokens?tokens=1"); resp.StatusCode != 429 {
		t.Errorf("after 12 tokens of 10: %d, want 429", resp.StatusCode)
	}
	var debts int
	for _, c := range f.Calls() {
		if strings.Contains(strings.ToUpper(fmt.Sprint(c...)), "DEBT") {
			debts++
		}
	}
	if debts != 1 {
		t.Errorf("%d calls with DEBT, want 1 (the tokens' charge): %v", debts, f.Calls())
	}
}

// TestPolicyLimitFunc: a plan per key, looked up once per key by
// CacheLimits however many requests wait for it; RateLimit-Policy states
// each request's own; no plan and no default: not limited.
func TestPolicyLimitFunc(t *testing.T) {
	var lookups atomic.Int64
	gate := make(chan struct{})
	plans := map[string]client.Limit{"free": client.FixedWindow(2, time.Minute), "pro": client.FixedWindow(5, time.Minute)}
	limit := CacheLimits(func(ctx context.Context, key string) (client.Limit, error) {
		lookups.Add(1)
		<-gate
		return plans[strings.TrimPrefix(key, "h:")], nil
	}, time.Hour, 0)
	srv, _ := fakeServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), Options{},
		Policy{Name: "plan", Key: func(r *http.Request) (string, error) { return r.Header.Get("X-Plan"), nil }, LimitFunc: limit})
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for range 8 {
		wg.Go(func() { resp, _ := send(t, srv, "GET", "/", "X-Plan", "pro"); codes <- resp.StatusCode })
	}
	time.Sleep(100 * time.Millisecond) // let them all wait on the one lookup
	close(gate)
	wg.Wait()
	close(codes)
	n200 := 0
	for c := range codes {
		if c == 200 {
			n200++
		}
	}
	if n200 != 5 || lookups.Load() != 1 {
		t.Errorf("8 pro requests at once: %d admitted with %d lookups, want 5 with 1", n200, lookups.Load())
	}
	for i, want := range []int{200, 200, 429} {
		resp, _ := send(t, srv, "GET", "/", "X-Plan", "free")
		if resp.StatusCode != want || resp.Header.Get("RateLimit-Policy") != `"plan";q=2;w=60` {
			t.Errorf("free request %d: %d %q", i+1, resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
		}
	}
	for range 3 {
		if resp, _ := send(t, srv, "GET", "/", "X-Plan", "enterprise"); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != "" {
			t.Errorf("an unlimited plan: %d %v", resp.StatusCode, resp.Header)
		}
	}
	if lookups.Load() != 3 {
		t.Errorf("%d lookups, want one per plan", lookups.Load())
	}
}

// TestPolicyXRateLimit: the X-RateLimit trio for the policy with the
// least remaining, and the refusing one; IETF fields only when asked.
func TestPolicyXRateLimit(t *testing.T) {
	for _, c := range []struct {
		h    Headers
		ietf bool
	}{{XRateLimit, false}, {IETF | XRateLimit, true}} {
		srv, _ := fakeServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), Options{Headers: c.h},
			Policy{Name: "wide", Limit: client.FixedWindow(10, time.Minute), Key: Global()},
			Policy{Name: "narrow", Limit: client.FixedWindow(2, time.Minute), Key: Global()})
		for i, want := range []struct {
			code      int
			remaining string
		}{{200, "1"}, {200, "0"}, {429, "0"}} {
			resp, _ := send(t, srv, "GET", "/")
			hd := resp.Header
			if resp.StatusCode != want.code || hd.Get("X-RateLimit-Limit") != "2" || hd.Get("X-RateLimit-Remaining") != want.remaining || hd.Get("X-RateLimit-Reset") != "40" {
				t.Errorf("%v request %d: %d %v", c.h, i+1, resp.StatusCode, hd)
			}
			if got := hd.Get("RateLimit-Policy") != "" && hd.Get("RateLimit") != ""; got != c.ietf {
				t.Errorf("%v: IETF fields %v, want %v", c.h, got, c.ietf)
			}
		}
	}
}

// TestPolicyShedAt: any number of tiers, each from its own share.
func TestPolicyShedAt(t *testing.T) {
	l := &Limiter{opt: Options{MaxInFlight: 10, ShedLow: 0.7, ShedDefault: 0.9}}
	at := &Limiter{opt: Options{MaxInFlight: 10, ShedAt: map[Priority]float64{-3: 0.2, Lowest: 0.4, Critical: 1.5}}}
	for _, c := range []struct {
		l    *Limiter
		p    Priority
		n    int64
		shed bool
	}{{l, Lowest, 5, false}, {l, Lowest, 6, true}, {l, -3, 1000, false},
		{at, -3, 2, false}, {at, -3, 3, true}, {at, Lowest, 5, true}, {at, Default, 1000, false}, {at, Critical, 15, false}, {at, Critical, 16, true}} {
		if got := c.l.shed(c.p, c.n); got != c.shed {
			t.Errorf("%v at %d in flight (ShedAt %v): shed %v", c.p, c.n, c.l.opt.ShedAt, got)
		}
	}
}

// TestConcurrencyStatus: a concurrency policy keyed per client answers
// 429, one every client shares 503.
func TestConcurrencyStatus(t *testing.T) {
	for _, c := range []struct {
		key  KeyFunc
		want int
	}{{Header("X-User"), 429}, {Global(), 503}, {Route(), 503}, {APIKey("X-Key"), 429}} {
		if got := concStatus(&Policy{Key: c.key}); got != c.want {
			t.Errorf("%d, want %d", got, c.want)
		}
	}
}

// TestPolicyCountConcurrent: ten wrong passwords at once on a limit of 3
// that counts failures: the check takes a unit rather than peeking, so
// exactly 3 reach the handler while they run, and the rest are refused.
func TestPolicyCountConcurrent(t *testing.T) {
	var ran atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		time.Sleep(100 * time.Millisecond) // all ten overlap
		w.WriteHeader(http.StatusUnauthorized)
	})
	srv, _ := fakeServer(t, h, Options{},
		Policy{Name: "login", Limit: client.FixedWindow(3, time.Minute), Key: Global(),
			Count: func(status int, _ *http.Request) int64 { return int64(min(max(status-400, 0), 1)) }})
	var wg sync.WaitGroup
	var n401, n429 atomic.Int64
	for range 10 {
		wg.Go(func() {
			switch resp, _ := send(t, srv, "POST", "/login"); resp.StatusCode {
			case 401:
				n401.Add(1)
			case 429:
				n429.Add(1)
			}
		})
	}
	wg.Wait()
	if n401.Load() != 3 || n429.Load() != 7 || ran.Load() != 3 {
		t.Errorf("10 at once: %d 401s, %d 429s, handler ran %d, want 3, 7, 3", n401.Load(), n429.Load(), ran.Load())
	}
}
