package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
)

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })

// get sends one request as a real HTTP client would, with extra headers.
func get(t *testing.T, url string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// statuses sends n requests with the headers and lists their statuses:
// "200 200 429 ".
func statuses(t *testing.T, url string, n int, header ...string) string {
	t.Helper()
	var b strings.Builder
	for range n {
		fmt.Fprint(&b, get(t, url, header...).StatusCode, " ")
	}
	return b.String()
}

// timedStatuses sends n requests one after the other, lists their statuses
// ("200 200 429 ") and returns the slowest's time; check sees each response.
func timedStatuses(t *testing.T, url string, n int, check func(*http.Response)) (codes string, slowest time.Duration) {
	t.Helper()
	for range n {
		start := time.Now()
		resp := get(t, url)
		slowest = max(slowest, time.Since(start))
		codes += fmt.Sprint(resp.StatusCode, " ")
		check(resp)
	}
	return codes, slowest
}

// refundAcrossTags runs the middleware over rdb (a cluster or a Ring) with
// two policies keyed apart, so in two slots or shards: they are taken one
// by one, and when the second refuses, the first gives back what it took.
func refundAcrossTags(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	burst := client.GCRA(9, 10, time.Hour)
	lim, err := httplimit.New(rdb, httplimit.Options{Prefix: prefix},
		httplimit.Policy{Name: "burst", Limit: burst, Key: httplimit.ClientIP(httplimit.IPOptions{})},
		httplimit.Policy{Name: "per-key", Limit: client.FixedWindow(2, time.Hour), Key: httplimit.APIKey("X-API-Key")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(hello))
	defer srv.Close()
	codes := statuses(t, srv.URL, 4, "X-API-Key", "k-1")
	left, err := client.New(rdb).Peek(ctx, prefix+"{127.0.0.1}:burst", burst, 0)
	if codes != "200 200 429 429 " || err != nil || left.Remaining != 8 {
		t.Fatalf("two tags: %s, burst %+v %v (want 8 left: the refused requests refunded)", codes, left, err)
	}
}

var rateLimitRE = regexp.MustCompile(`^"([^"]+)";r=(\d+);t=(\d+)$`)

// rateLimits reads every item of a RateLimit field: name → r, t.
func rateLimits(t *testing.T, resp *http.Response) map[string][2]int64 {
	t.Helper()
	m := map[string][2]int64{}
	for _, item := range strings.Split(resp.Header.Get("RateLimit"), ", ") {
		f := rateLimitRE.FindStringSubmatch(item)
		if f == nil {
			t.Fatalf("RateLimit %q", resp.Header.Get("RateLimit"))
		}
		r, _ := strconv.ParseInt(f[2], 10, 64)
		tt, _ := strconv.ParseInt(f[3], 10, 64)
		m[f[1]] = [2]int64{r, tt}
	}
	return m
}

// rateLimit reads a RateLimit field of one item.
func rateLimit(t *testing.T, resp *http.Response) (name string, r, tt int64) {
	t.Helper()
	m := rateLimitRE.FindStringSubmatch(resp.Header.Get("RateLimit"))
	if m == nil {
		t.Fatalf("RateLimit %q", resp.Header.Get("RateLimit"))
	}
	r, _ = strconv.ParseInt(m[2], 10, 64)
	tt, _ = strconv.ParseInt(m[3], 10, 64)
	return m[1], r, tt
}

// The example's policy over a run of requests, seen by a real HTTP client:
// ten 200s counting down, then 429 with Retry-After and a problem body.
func TestHTTPHeadersAndStatus(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: key(t, "")}, httplimit.Policy{
			Name: "per-ip", Limit: client.FixedWindow(10, time.Minute), Key: httplimit.ClientIP(httplimit.IPOptions{})})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(lim.Handler(hello))
		defer srv.Close()
		for i := range 10 {
			resp := get(t, srv.URL)
			name, r, tt := rateLimit(t, resp)
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"per-ip";q=10;w=60` ||
				name != "per-ip" || r != int64(9-i) || tt < 1 || tt > 60 {
				t.Fatalf("request %d: %d %v", i+1, resp.StatusCode, resp.Header)
			}
		}
		resp := get(t, srv.URL)
		_, r, tt := rateLimit(t, resp)
		ra, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
		if resp.StatusCode != 429 || r != 0 || err != nil || ra < tt || ra > tt+max(1, tt/10) ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("the 11th: %d %v", resp.StatusCode, resp.Header)
		}
	})
}

// On one node every request's policies are one RL.ALL call (the refunds
// of policies that span cluster slots are TestCluster's): a refusal by one
// takes nothing from the others.
func TestHTTPSeveralPolicies(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		prefix := key(t, "")
		ip := httplimit.ClientIP(httplimit.IPOptions{})
		lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: prefix},
			httplimit.Policy{Name: "burst", Limit: client.GCRA(9, 10, time.Minute), Key: ip},
			httplimit.Policy{Name: "hourly", Limit: client.SlidingWindow(100, time.Hour), Key: ip},
			httplimit.Policy{Name: "per-key", Limit: client.FixedWindow(3, time.Hour), Key: httplimit.APIKey("X-API-Key")},
		)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(lim.Handler(hello))
		defer srv.Close()

		before := counters(t, s.rdb, "rl_all")
		for i := range 3 {
			resp := get(t, srv.URL) // no API key: two policies, one key, one call
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") !=
				`"burst";q=10;w=60, "hourly";q=100;w=3600, "per-key";q=3;w=3600` {
				t.Fatalf("request %d: %d %v", i+1, resp.StatusCode, resp.Header)
			}
			if rl := rateLimits(t, resp); len(rl) != 2 || rl["burst"][0] != int64(9-i) || rl["hourly"][0] != int64(99-i) {
				t.Fatalf("request %d: RateLimit %q (want both policies' own figures)", i+1, resp.Header.Get("RateLimit"))
			}
		}
		if n := counters(t, s.rdb, "rl_all")["calls"] - before["calls"]; n != 3 {
			t.Fatalf("%d RL.ALL calls for 3 requests", n)
		}

		// With an API key: the key's own policy too, still one call. The
		// fourth keyed request is refused by per-key and takes no burst.
		for i := range 3 {
			if resp := get(t, srv.URL, "X-API-Key", "k1"); resp.StatusCode != 200 {
				t.Fatalf("keyed request %d: %d", i+1, resp.StatusCode)
			}
		}
		burst := func() int64 {
			return mustCall(t, s.rdb, "GCRA.PEEK", prefix+"{127.0.0.1}:burst", 9, 10, 60, 0)[2]
		}
		left := burst()
		resp := get(t, srv.URL, "X-API-Key", "k1")
		if rl := rateLimits(t, resp); resp.StatusCode != 429 || len(rl) != 3 || rl["per-key"][0] != 0 || rl["burst"][0] != left {
			t.Fatalf("the 4th keyed request: %d %q (want every policy, per-key at 0, burst untouched at %d)",
				resp.StatusCode, resp.Header.Get("RateLimit"), left)
		}
		if got := burst(); got < left {
			t.Fatalf("the refused request kept its burst unit: %d left before, %d after", left, got)
		}
	})
}

// X-Forwarded-For written by a client that is not a trusted proxy gains
// nothing; behind a trusted proxy, IPv6 clients are keyed by their /64.
func TestHTTPClientAddresses(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		policy := func(o httplimit.IPOptions) *httptest.Server {
			lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: key(t, "")},
				httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(2, time.Hour), Key: httplimit.ClientIP(o)})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(lim.Handler(hello))
			t.Cleanup(srv.Close)
			return srv
		}
		untrusting := policy(httplimit.IPOptions{})
		codes := ""
		for i := range 5 {
			codes += fmt.Sprint(get(t, untrusting.URL, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)).StatusCode, " ")
		}
		if codes != "200 200 429 429 429 " {
			t.Fatalf("spoofed X-Forwarded-For: %s", codes)
		}

		proxied := policy(httplimit.IPOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		codes = ""
		for _, a := range []string{"2001:db8:1:2::1", "2001:db8:1:2::ffff", "2001:db8:1:2:aaaa::9", "2001:db8:1:3::1", "::ffff:203.0.113.9", "203.0.113.9", "203.0.113.9"} {
			codes += fmt.Sprint(get(t, proxied.URL, "X-Forwarded-For", "6.6.6.6, "+a).StatusCode, " ")
		}
		// one /64 three times (the third refused), another /64, then one IPv4 client three times
		if codes != "200 200 429 200 200 200 429 " {
			t.Fatalf("behind a trusted proxy: %s", codes)
		}
	})
}

// A shadow policy counts and reports, and never refuses.
func TestHTTPShadow(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		var mu sync.Mutex
		var refused int
		lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: key(t, ""), Event: func(e httplimit.Event) {
			if e.Kind == httplimit.ShadowRefused && e.Policy == "trial" {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		}}, httplimit.Policy{Name: "trial", Limit: client.FixedWindow(2, time.Hour), Key: httplimit.ClientIP(httplimit.IPOptions{}), Shadow: true})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(lim.Handler(hello))
		defer srv.Close()
		for i := range 5 {
			resp := get(t, srv.URL)
			if _, r, _ := rateLimit(t, resp); resp.StatusCode != 200 || r != max(0, int64(1-i)) {
				t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, resp.Header.Get("RateLimit"))
			}
		}
		if refused != 3 {
			t.Fatalf("%d shadow refusals reported, want 3", refused)
		}
	})
}

// The server stopped mid-run: open serves at once, closed answers 503 at
// once, local goes on limiting; once the server is back the breaker closes
// and Redis decides again.
func TestHTTPRedisOutage(t *testing.T) {
	s := startFor(t, flavors[1], opts{module: true})
	type mode struct {
		name   string
		srv    *httptest.Server
		events chan httplimit.Event
	}
	var modes []*mode
	for _, m := range []httplimit.OnError{httplimit.FailOpen, httplimit.FailClosed, httplimit.FailLocal} {
		md := &mode{name: m.String(), events: make(chan httplimit.Event, 1000)}
		lim, err := httplimit.New(s.rdb, httplimit.Options{
			Prefix: key(t, md.name), OnError: m, Timeout: 50 * time.Millisecond, BreakerCooldown: 300 * time.Millisecond,
			Event: func(e httplimit.Event) {
				select {
				case md.events <- e:
				default:
				}
			},
		}, httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(3, time.Hour), Key: httplimit.ClientIP(httplimit.IPOptions{})})
		if err != nil {
			t.Fatal(err)
		}
		md.srv = httptest.NewServer(lim.Handler(hello))
		defer md.srv.Close()
		modes = append(modes, md)
		if resp := get(t, md.srv.URL); resp.StatusCode != 200 || resp.Header.Get("RateLimit") == "" {
			t.Fatalf("%s, Redis up: %d %v", md.name, resp.StatusCode, resp.Header)
		}
	}

	timeout := 10 * time.Second
	if err := s.c.Stop(context.Background(), &timeout); err != nil {
		t.Fatal(err)
	}
	for _, md := range modes {
		codes, slowest := timedStatuses(t, md.srv.URL, 8, func(resp *http.Response) {
			if resp.StatusCode == 503 && resp.Header.Get("Retry-After") == "" {
				t.Fatalf("%s: 503 without Retry-After", md.name)
			}
		})
		want := map[string]string{
			"open":   "200 200 200 200 200 200 200 200 ",
			"closed": "503 503 503 503 503 503 503 503 ",
			"local":  "200 200 200 429 429 429 429 429 ", // this process's own count of 3
		}[md.name]
		t.Logf("Redis down, %s: %s(slowest %v)", md.name, codes, slowest)
		if codes != want || slowest > 500*time.Millisecond {
			t.Fatalf("Redis down, %s: %s(slowest %v), want %s", md.name, codes, slowest, want)
		}
	}

	if err := s.c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.waitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, md := range modes {
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp := get(t, md.srv.URL)
			if resp.Header.Get("RateLimit") != "" && resp.StatusCode == 200 { // local mode had refused: Redis decides this
				if name, r, _ := rateLimit(t, resp); name != "per-ip" || r != 2 { // a fresh key: Redis restarted empty
					t.Fatalf("%s after the outage: %d %q", md.name, resp.StatusCode, resp.Header.Get("RateLimit"))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Redis never decided again", md.name)
			}
			time.Sleep(100 * time.Millisecond)
		}
		kinds := map[httplimit.EventKind]bool{}
		for len(md.events) > 0 {
			kinds[(<-md.events).Kind] = true
		}
		for _, k := range []httplimit.EventKind{httplimit.Failure, httplimit.BreakerOpen, httplimit.BreakerHalfOpen, httplimit.BreakerClosed} {
			if !kinds[k] {
				t.Fatalf("%s: no %v event (got %v)", md.name, k, kinds)
			}
		}
	}
}

// A concurrency policy: a second request while one runs is shed with 503;
// a handler that panics still gives its slot back.
func TestHTTPConcurrency(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		prefix := key(t, "")
		lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: prefix}, httplimit.Policy{
			Name: "exports", Concurrency: client.Concurrency{Limit: 1, Lease: time.Minute}, Key: httplimit.Route()})
		if err != nil {
			t.Fatal(err)
		}
		running, finish := make(chan struct{}), make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Query().Get("do") {
			case "wait":
				close(running)
				<-finish
			case "panic":
				panic(http.ErrAbortHandler) // the server recovers it quietly
			}
		})
		srv := httptest.NewServer(lim.Handler(h))
		defer srv.Close()
		done := make(chan int)
		go func() { done <- get(t, srv.URL+"/export?do=wait").StatusCode }()
		<-running
		resp := get(t, srv.URL+"/export")
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" ||
			resp.Header.Get("RateLimit-Policy") != `"exports";q=1;qu="concurrent-requests"` {
			t.Fatalf("while one runs: %d %v", resp.StatusCode, resp.Header)
		}
		close(finish)
		if code := <-done; code != 200 {
			t.Fatalf("the running one: %d", code)
		}
		if _, err := http.Get(srv.URL + "/export?do=panic"); err == nil {
			t.Fatal("the panicking handler answered")
		}
		if resp := get(t, srv.URL+"/export"); resp.StatusCode != 200 {
			t.Fatalf("after a panic: %d (the slot was not given back)", resp.StatusCode)
		}
		if n := s.rdb.Exists(ctx, prefix+"{/export}:exports").Val(); n != 0 {
			t.Fatalf("a slot is still held: %v", s.rdb.ZRange(ctx, prefix+"{/export}:exports", 0, -1).Val())
		}
	})
}

// Priorities: a policy's reserve stops low-priority requests first, with
// 503; default ones take the rest, then get 429.
func TestHTTPPriorityReserve(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		lim, err := httplimit.New(s.rdb, httplimit.Options{
			Prefix: key(t, ""),
			Priority: func(r *http.Request) httplimit.Priority {
				if r.Header.Get("X-Priority") == "low" {
					return httplimit.Low
				}
				return httplimit.Default
			},
		}, httplimit.Policy{Name: "api", Limit: client.FixedWindow(5, time.Hour), Key: httplimit.ClientIP(httplimit.IPOptions{}),
			Reserve: map[httplimit.Priority]int64{httplimit.Low: 2}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(lim.Handler(hello))
		defer srv.Close()
		codes := statuses(t, srv.URL, 4, "X-Priority", "low") + statuses(t, srv.URL, 3)
		if codes != "200 200 200 503 200 200 429 " {
			t.Fatalf("low ×4 then default ×3: %s", codes)
		}
	})
}
