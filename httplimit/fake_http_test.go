package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// TestOnFake: the middleware in front of a real HTTP server, its limits
// decided on the shared fake Redis (the module's engine, a clock at 20 s
// into a minute), seen by a real HTTP client: a fixed window of 2 a minute
// per route admits two requests with the IETF fields, refuses the third
// with 429, Retry-After (40 s, plus up to the spread) and r=0, and admits
// again once the minute ends; a concurrency limit of 1 sheds a second
// request while the first holds its slot (503), and frees the slot when
// the first ends.
func TestOnFake(t *testing.T) {
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_000, 0)
	f.Clock = func() time.Time { return t0 }
	rdb := f.Client()
	lim, err := New(rdb, Options{OnError: FailClosed},
		Policy{Name: "per-route", Limit: client.FixedWindow(2, time.Minute), Key: Route()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()
	get := func() *http.Response {
		resp, err := http.Get(srv.URL + "/a")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i, want := range []struct {
		code  int
		state string
	}{{200, `"per-route";r=1;t=40`}, {200, `"per-route";r=0;t=40`}, {429, `"per-route";r=0;t=40`}} {
		resp := get()
		if resp.StatusCode != want.code || resp.Header.Get("RateLimit") != want.state || resp.Header.Get("RateLimit-Policy") != `"per-route";q=2;w=60` {
			t.Fatalf("request %d: %d %v, want %d and RateLimit %s", i+1, resp.StatusCode, resp.Header, want.code, want.state)
		}
		if want.code == 429 {
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 40 || s > 50 {
				t.Errorf("Retry-After %q, want 40 s and a spread", resp.Header.Get("Retry-After"))
			}
		}
	}
	f.Advance(40 * time.Second)
	if resp := get(); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"per-route";r=1;t=60` {
		t.Fatalf("in the next minute: %d %v", resp.StatusCode, resp.Header)
	}

	conc, err := New(rdb, Options{OnError: FailClosed},
		Policy{Name: "one", Concurrency: client.Concurrency{Limit: 1, Lease: time.Minute}, Key: Route()})
	if err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	slow := httptest.NewServer(conc.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			close(inside)
			<-release
		}
	})))
	defer slow.Close()
	done := make(chan int)
	go func() {
		resp, err := http.Get(slow.URL + "/x?slow=1")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-inside
	resp, err := http.Get(slow.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("while the slot is held: %d %v, want 503 with Retry-After", resp.StatusCode, resp.Header)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("the slow request: %d", code)
	}
	resp, err = http.Get(slow.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after the slot was freed: %d, want 200", resp.StatusCode)
	}
}

// TestLeasedOnFake: with Options.Lease, a hot route's requests are decided
// from units granted ahead: 300 requests at 1000 a second on PerSecond(100)
// (the clock moved by hand) are admitted within the limit's burst and rate
// and τ more, with a small fraction of the Redis calls, each response with
// its RateLimit fields; Close gives the units held back.
func TestLeasedOnFake(t *testing.T) {
	leasedOnFake(t, func(resp *http.Response) bool {
		return resp.Header.Get("RateLimit") != "" && (resp.StatusCode == 200 || resp.StatusCode == 429)
	}, Policy{Name: "api", Limit: client.PerSecond(100), Key: Global()})
}

// leasedOnFake serves 300 requests at 1000 a second (the clock moved by
// hand) through a Limiter with Options.Lease over policies, the tightest
// PerSecond(100); each response must pass ok. It fails t unless they admit
// within that limit's burst and rate and τ more with at most 40 Redis
// calls, and Close gives back every unit not spent.
func leasedOnFake(t *testing.T, ok func(*http.Response) bool, policies ...Policy) {
	t.Helper()
	f := fakeredis.New()
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	f.Clock = clock
	var calls atomic.Int64
	f.Before = func(redis.Cmder) error { calls.Add(1); return nil }
	lim, err := New(f.Client(), Options{OnError: FailClosed, Lease: &lease.Options{Now: clock}}, policies...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()
	admitted := 0
	for i := range 300 {
		resp, err := http.Get(srv.URL + "/a")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			admitted++
		}
		if !ok(resp) {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, resp.Header)
		}
		now.Add(int64(time.Millisecond))
	}
	// 0.3 s: the burst of 100 and 30; leasing may add rate × τ (20).
	if s := lim.Leased(); admitted < 120 || admitted > 150 || calls.Load() > 40 || s.Grants == 0 {
		t.Fatalf("%d admitted, %d Redis calls; tier %+v", admitted, calls.Load(), s)
	}
	if err := lim.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := lim.Leased()
	if s.Granted != s.Local+s.Returned {
		t.Fatalf("after Close: %+v: granted units neither spent nor given back", s)
	}
	t.Logf("%d admitted of 300, %d Redis calls; tier %+v", admitted, calls.Load(), s)
}

// Options.RefusalCache: once Redis refuses a client's key, its requests
// are refused from the remembered refusal until its RetryAfter, with no
// Redis call: PerMinute(2) per IP, 2 admitted, the third refused by Redis
// (Retry-After 30), the next 50 refused with no call (Remembered, the
// same Retry-After, RateLimit naming the policy); another client is
// still decided by Redis.
func TestRefusalCacheOnFake(t *testing.T) {
	f := fakeredis.New()
	var calls atomic.Int64
	f.Before = func(redis.Cmder) error { calls.Add(1); return nil }
	var remembered atomic.Int64
	lim, err := New(f.Client(), Options{OnError: FailClosed, RefusalCache: 100, Event: func(e Event) {
		if e.Kind == Remembered {
			remembered.Add(1)
		}
	}}, Policy{Name: "login", Limit: client.PerMinute(2), Key: ClientIP(IPOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	get := func(ip string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/login", nil)
		req.RemoteAddr = ip + ":40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for i, want := range []int{200, 200, 429} {
		if w := get("10.0.0.1"); w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
	}
	c0 := calls.Load()
	for i := range 50 {
		w := get("10.0.0.1")
		if ra := w.Header().Get("Retry-After"); w.Code != 429 || ra == "" || ra == "0" || !strings.HasPrefix(w.Header().Get("RateLimit"), `"login";r=0;t=`) {
			t.Fatalf("remembered request %d: %d, Retry-After %q, RateLimit %q", i, w.Code, ra, w.Header().Get("RateLimit"))
		}
	}
	if c := calls.Load() - c0; c != 0 || remembered.Load() != 50 {
		t.Fatalf("50 remembered refusals: %d Redis calls, %d Remembered events", c, remembered.Load())
	}
	if w := get("10.0.0.2"); w.Code != 200 || calls.Load() == c0 {
		t.Fatalf("another client: %d, %d calls", w.Code, calls.Load()-c0)
	}
}

// Two policies through the local tier (Options.Lease): a per-IP
// PerSecond(100) and a route's PerSecond(1000), 300 requests at 1000 a
// second. They are decided together from units granted ahead, as one
// policy is: within the tighter limit's burst and rate and τ more, with
// as few Redis calls as one policy takes, each admitted response stating
// both.
func TestLeasedTwoPoliciesOnFake(t *testing.T) {
	leasedOnFake(t, func(resp *http.Response) bool {
		f := resp.Header.Get("RateLimit")
		return resp.StatusCode == 429 || resp.StatusCode == 200 && strings.Contains(f, `"per-ip";r=`) && strings.Contains(f, `"route";r=`)
	}, Policy{Name: "per-ip", Limit: client.PerSecond(100), Key: ClientIP(IPOptions{})},
		Policy{Name: "route", Limit: client.PerSecond(1000), Key: Route()})
}

// A concurrency policy through the local tier (Options.Lease), seen by a
// real HTTP client: 200 requests one after another cost a few Redis calls
// (the slot comes from those this process holds at the key); with 6
// requests in flight on a limit of 4, exactly 4 reach the handler and 2
// are shed (503); the slots come back when the requests end, and Close
// leaves the key with every slot free.
func TestLeasedSlotsOnFake(t *testing.T) {
	f := fakeredis.New()
	var calls atomic.Int64
	f.Before = func(redis.Cmder) error { calls.Add(1); return nil }
	var inside atomic.Int64
	gate := make(chan struct{})
	lim, err := New(f.Client(), Options{OnError: FailClosed, Lease: &lease.Options{Hot: 2}},
		Policy{Name: "exports", Concurrency: client.Concurrency{Limit: 4, Lease: 30 * time.Second}, Key: Global()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			inside.Add(1)
			<-gate
		}
	})))
	defer srv.Close()
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 200 {
		if code := get("/a"); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	if c, s := calls.Load(), lim.Leased(); c > 20 || s.Local < 190 {
		t.Fatalf("200 requests one after another: %d Redis calls; tier %+v", c, s)
	}
	codes := make(chan int, 6)
	for range 6 {
		go func() { codes <- get("/slow") }()
	}
	shed := 0
	for range 2 {
		if code := <-codes; code == http.StatusServiceUnavailable {
			shed++
		}
	}
	for i := 0; inside.Load() < 4 && i < 200; i++ { // the admitted requests reach the handler
		time.Sleep(5 * time.Millisecond)
	}
	if shed != 2 || inside.Load() != 4 {
		t.Fatalf("6 in flight on a limit of 4: %d shed, %d inside", shed, inside.Load())
	}
	const key = "rl:http:{global}:exports"
	if r, err := client.New(f.Client()).PeekConcurrency(context.Background(), key, 4); err != nil || !r.Limited {
		t.Fatalf("with 4 in flight the key: %+v %v; want none free", r, err)
	}
	close(gate)
	for range 4 {
		if code := <-codes; code != 200 {
			t.Fatalf("a held request ended with %d", code)
		}
	}
	if code := get("/a"); code != 200 {
		t.Fatalf("after the requests ended: %d", code)
	}
	if err := lim.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := client.New(f.Client()).PeekConcurrency(context.Background(), key, 4)
	if err != nil || r.Limited || r.Remaining != 3 {
		t.Fatalf("after Close the key: %+v %v; want every slot free", r, err)
	}
	t.Logf("%d Redis calls; tier %+v", calls.Load(), lim.Leased())
}
