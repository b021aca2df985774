package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
)

// The per-policy options of httplimit (Count, Quiet, Deny, OnError,
// LimitFunc, Headers, a concurrency policy's status), each through a real
// HTTP client against a real server: with the module, and with the Lua
// library on a server without it.

// policyEngines runs fn as a parallel subtest per engine, each on a server
// of its own (flavors[1]): with the module, and without it (the Lua
// library, which httplimit.New picks by itself).
func policyEngines(t *testing.T, fn func(t *testing.T, s *server, engine client.Engine)) {
	t.Helper()
	for _, e := range bothEngines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			s := startFor(t, flavors[1], opts{module: e.module})
			fn(t, s, e.engine)
		})
	}
}

// assertEngine checks that lim decided on s's server with the engine the
// subtest is about (call it after a request Redis decided).
func assertEngine(t *testing.T, lim *httplimit.Limiter, s *server, want client.Engine) {
	t.Helper()
	if got := lim.Engines()[s.addr()]; got != want {
		t.Fatalf("the limiter runs %v on %s, want %v (engines %v)", got, s.addr(), want, lim.Engines())
	}
}

// polDo sends one request (a form body when form is not nil), reads the
// whole response and returns it with its body.
func polDo(t *testing.T, method, target string, form url.Values, header ...string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// clearOfBoundary waits, when a window of that length (aligned to the Unix
// epoch, as the fixed and sliding windows are) ends within need, until it
// has: the requests that follow all fall in one window. time.Truncate
// counts from year 1, whose distance to the epoch is whole days.
func clearOfBoundary(window, need time.Duration) {
	if left := time.Until(time.Now().Truncate(window).Add(window)); left < need {
		time.Sleep(left + 100*time.Millisecond)
	}
}

// headerMentions lists the rate limit fields of resp (RateLimit,
// RateLimit-Policy, Retry-After, the X-RateLimit trio) whose value holds
// name.
func headerMentions(resp *http.Response, name string) []string {
	var found []string
	for _, f := range []string{"RateLimit", "RateLimit-Policy", "Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		for _, v := range resp.Header.Values(f) {
			if strings.Contains(v, name) {
				found = append(found, f+": "+v)
			}
		}
	}
	return found
}

// problemDetail reads the detail of a problem+json body.
func problemDetail(t *testing.T, resp *http.Response, body string) string {
	t.Helper()
	var p struct {
		Detail string `json:"detail"`
		Status int    `json:"status"`
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json (body %q)", ct, body)
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Status != resp.StatusCode {
		t.Fatalf("problem body %q: %v", body, err)
	}
	return p.Detail
}

// retryAfter reads Retry-After as whole seconds (-1 when missing or not a
// number).
func retryAfter(resp *http.Response) int64 {
	n, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// A login form counting only its failures: a policy with a Count that
// charges a 401 and nothing else. Before the handler the policy takes its
// Cost, 1, all or nothing, as any policy does (so a request is refused when
// the window is full); after it the difference Count−1 is settled in
// Redis: a 200 (Count 0) gives its unit back, a 401 (Count 1) keeps it.
// So a user's successful logins never hold them back, five failures lock
// the account for the rest of the window — the right password included,
// since the attempt is refused before its handler could tell — and other
// accounts are not touched.
func TestHTTPPolicyCountLogin(t *testing.T) {
	policyEngines(t, func(t *testing.T, s *server, engine client.Engine) {
		prefix := key(t, "")
		window := client.SlidingWindow(5, time.Hour)
		lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: prefix}, httplimit.Policy{
			Name: "login-failures", Limit: window, Key: httplimit.Account("user"),
			Count: func(status int, r *http.Request) int64 {
				if status == http.StatusUnauthorized {
					return 1
				}
				return 0
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if r.PostFormValue("password") != "right" { // the form Account parsed, still there for the handler
				http.Error(w, "wrong user name or password", http.StatusUnauthorized)
				return
			}
			io.WriteString(w, "welcome")
		})
		srv := httptest.NewServer(lim.Handler(login))
		defer srv.Close()
		attempt := func(user, password string) (*http.Response, string) {
			return polDo(t, "POST", srv.URL+"/login", url.Values{"user": {user}, "password": {password}})
		}
		// The account's key in Redis: Account hashes the folded user name.
		aliceKey := prefix + "{" + httplimit.Hash("alice") + "}:login-failures"
		left := func() int64 {
			t.Helper()
			r, err := client.New(s.rdb).Peek(ctx, aliceKey, window, 0)
			if err != nil {
				t.Fatal(err)
			}
			return r.Remaining
		}
		clearOfBoundary(time.Hour, 10*time.Second) // a sliding window weighs the previous one: keep all in one

		// Ten successful logins: each takes its unit before the handler
		// (the RateLimit field, set then, says 4 left) and gives it back
		// after the 200, so the tenth finds the account untouched.
		for i := range 10 {
			resp, body := attempt("alice", "right")
			if resp.StatusCode != 200 || body != "welcome" {
				t.Fatalf("success %d: %d %q", i+1, resp.StatusCode, body)
			}
			if name, r, _ := rateLimit(t, resp); name != "login-failures" || r != 4 {
				t.Fatalf("success %d: RateLimit %q, want r=4 (its own unit, given back after)", i+1, resp.Header.Get("RateLimit"))
			}
		}
		assertEngine(t, lim, s, engine)
		if n := left(); n != 5 {
			t.Fatalf("after 10 successful logins the account has %d left, want 5: a success must cost nothing", n)
		}

		// Five failures: each keeps its unit.
		for i := range 5 {
			resp, _ := attempt("alice", "wrong")
			if resp.StatusCode != 401 {
				t.Fatalf("failure %d: %d", i+1, resp.StatusCode)
			}
			if _, r, _ := rateLimit(t, resp); r != int64(4-i) {
				t.Fatalf("failure %d: RateLimit %q, want r=%d", i+1, resp.Header.Get("RateLimit"), 4-i)
			}
		}
		if n := left(); n != 0 {
			t.Fatalf("after 5 failed logins the account has %d left, want 0", n)
		}
		if n := calls.Load(); n != 15 {
			t.Fatalf("the handler ran %d times for 15 admitted attempts", n)
		}

		// The 6th attempt is refused before its handler; so is the 7th,
		// with the right password: the account is locked while its
		// failures fill the window.
		for i, password := range []string{"wrong", "right"} {
			resp, body := attempt("alice", password)
			if resp.StatusCode != 429 || retryAfter(resp) < 1 {
				t.Fatalf("attempt %d (%s password): %d %v %q", 6+i, password, resp.StatusCode, resp.Header, body)
			}
			if name, r, _ := rateLimit(t, resp); name != "login-failures" || r != 0 {
				t.Fatalf("attempt %d: RateLimit %q", 6+i, resp.Header.Get("RateLimit"))
			}
			if d := problemDetail(t, resp, body); !strings.Contains(d, "login-failures") {
				t.Fatalf("attempt %d: detail %q", 6+i, d)
			}
		}
		if n := calls.Load(); n != 15 {
			t.Fatalf("the handler ran %d times, want 15: a refused attempt reached it", n)
		}
		if n := left(); n != 0 {
			t.Fatalf("after the refusals the account has %d left, want 0 (a refusal neither takes nor gives back)", n)
		}

		// Another account is not affected.
		resp, body := attempt("bob", "right")
		if _, r, _ := rateLimit(t, resp); resp.StatusCode != 200 || body != "welcome" || r != 4 {
			t.Fatalf("bob: %d %q %q", resp.StatusCode, body, resp.Header.Get("RateLimit"))
		}
		if n := calls.Load(); n != 16 {
			t.Fatalf("the handler ran %d times, want 16", n)
		}
	})
}

// A shadow ban: a Quiet policy whose Deny answers its refusals with a
// plausible 200 and a made-up body, without the handler. The banned
// client cannot tell from the response; Options.Event can.
func TestHTTPPolicyShadowBan(t *testing.T) {
	policyEngines(t, func(t *testing.T, s *server, engine client.Engine) {
		ev := &events{}
		lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: key(t, ""), Event: ev.add},
			httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(100, time.Hour), Key: httplimit.ClientIP(httplimit.IPOptions{})},
			httplimit.Policy{Name: "shadow-ban", Quiet: true, Limit: client.FixedWindow(2, time.Minute), Key: httplimit.Header("X-User"),
				Deny: func(w http.ResponseWriter, r *http.Request, d httplimit.Decision) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusOK)
					io.WriteString(w, `{"ok":true}`)
				}})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		served := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true,"id":42}`)
		})
		srv := httptest.NewServer(lim.Handler(served))
		defer srv.Close()
		clearOfBoundary(time.Minute, 10*time.Second)

		for i := range 5 {
			resp, body := polDo(t, "POST", srv.URL+"/comments", nil, "X-User", "mallory")
			want := `{"ok":true,"id":42}`
			if i >= 2 {
				want = `{"ok":true}`
			}
			if resp.StatusCode != 200 || body != want {
				t.Fatalf("request %d: %d %q, want 200 %q", i+1, resp.StatusCode, body, want)
			}
			if m := headerMentions(resp, "shadow-ban"); len(m) > 0 {
				t.Fatalf("request %d: the quiet policy shows in %q", i+1, m)
			}
			if resp.Header.Get("Retry-After") != "" {
				t.Fatalf("request %d: Retry-After %q on a shadow-banned answer", i+1, resp.Header.Get("Retry-After"))
			}
			if pol := resp.Header.Get("RateLimit-Policy"); pol != `"per-ip";q=100;w=3600` {
				t.Fatalf("request %d: RateLimit-Policy %q", i+1, pol)
			}
			if rl := rateLimits(t, resp); len(rl) != 1 || rl["per-ip"][0] < 95 {
				t.Fatalf("request %d: RateLimit %q, want per-ip alone", i+1, resp.Header.Get("RateLimit"))
			}
			if i == 0 {
				assertEngine(t, lim, s, engine)
			}
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("the real handler ran %d times, want 2 (the ban answers the rest)", n)
		}
		// Another user is served by the real handler.
		if resp, body := polDo(t, "POST", srv.URL+"/comments", nil, "X-User", "alice"); resp.StatusCode != 200 || body != `{"ok":true,"id":42}` {
			t.Fatalf("alice: %d %q", resp.StatusCode, body)
		}
		if n := calls.Load(); n != 3 {
			t.Fatalf("the real handler ran %d times, want 3", n)
		}

		ev.mu.Lock()
		defer ev.mu.Unlock()
		var refused, admitted int
		for _, e := range ev.list {
			switch {
			case e.Policy == "shadow-ban" && e.Kind == httplimit.Refused:
				refused++
			case e.Policy == "shadow-ban" && e.Kind == httplimit.Admitted:
				admitted++
			}
		}
		if refused != 3 || admitted != 3 {
			t.Fatalf("events of shadow-ban: %d refused, %d admitted; want 3 and 3 (%v)", refused, admitted, ev.list)
		}
	})
}

// A Quiet policy next to a visible one: it never appears in
// RateLimit-Policy, RateLimit or the X-RateLimit fields, admitted or
// refusing; its refusal is a 429 with Retry-After and a generic body
// that does not name it. Event still reports it.
func TestHTTPPolicyQuiet(t *testing.T) {
	policyEngines(t, func(t *testing.T, s *server, engine client.Engine) {
		ev := &events{}
		lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: key(t, ""), Headers: httplimit.IETF | httplimit.XRateLimit, Event: ev.add},
			httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(10, time.Hour), Key: httplimit.ClientIP(httplimit.IPOptions{})},
			httplimit.Policy{Name: "secret-cap", Quiet: true, Limit: client.FixedWindow(3, time.Hour), Key: httplimit.ClientIP(httplimit.IPOptions{})})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			io.WriteString(w, "hello")
		})))
		defer srv.Close()
		clearOfBoundary(time.Hour, 10*time.Second)

		for i := range 5 {
			resp, body := polDo(t, "GET", srv.URL, nil)
			if m := headerMentions(resp, "secret"); len(m) > 0 || strings.Contains(body, "secret") {
				t.Fatalf("request %d: the quiet policy shows: %q, body %q", i+1, m, body)
			}
			if pol := resp.Header.Get("RateLimit-Policy"); pol != `"per-ip";q=10;w=3600` {
				t.Fatalf("request %d: RateLimit-Policy %q", i+1, pol)
			}
			rl := rateLimits(t, resp)
			if len(rl) != 1 || resp.Header.Get("X-RateLimit-Limit") != "10" {
				t.Fatalf("request %d: RateLimit %q, X-RateLimit-Limit %q: want per-ip's alone", i+1, resp.Header.Get("RateLimit"), resp.Header.Get("X-RateLimit-Limit"))
			}
			if i < 3 {
				if resp.StatusCode != 200 || body != "hello" || rl["per-ip"][0] != int64(9-i) {
					t.Fatalf("request %d: %d %q %q", i+1, resp.StatusCode, body, resp.Header.Get("RateLimit"))
				}
				if i == 0 {
					assertEngine(t, lim, s, engine)
				}
				continue
			}
			// Refused by the quiet policy: all or nothing, so per-ip was
			// not charged (7 left after the three admitted).
			if resp.StatusCode != 429 || retryAfter(resp) < 1 || rl["per-ip"][0] != 7 {
				t.Fatalf("request %d: %d Retry-After %q RateLimit %q", i+1, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"))
			}
			if d := problemDetail(t, resp, body); d != "too many requests" {
				t.Fatalf("request %d: detail %q, want the generic one", i+1, d)
			}
		}
		if n := calls.Load(); n != 3 {
			t.Fatalf("the handler ran %d times, want 3", n)
		}
		if n := func() int {
			ev.mu.Lock()
			defer ev.mu.Unlock()
			n := 0
			for _, e := range ev.list {
				if e.Kind == httplimit.Refused && e.Policy == "secret-cap" {
					n++
				}
			}
			return n
		}(); n != 2 {
			t.Fatalf("%d refusals of the quiet policy reported, want 2", n)
		}
	})
}

// One Limiter failing open for GET /feed (the policy's OnError unset:
// Options.OnError's FailOpen) and closed for POST /login (its own
// FailClosed). With the server hung (SIGSTOP), /feed answers 200 and
// /login 503 with Retry-After, each within a fraction of a second; once
// the server resumes, Redis decides both again.
func TestHTTPPolicyOnError(t *testing.T) {
	policyEngines(t, func(t *testing.T, s *server, engine client.Engine) {
		route := func(method, path string) httplimit.KeyFunc {
			return func(r *http.Request) (string, error) {
				if r.Method == method && r.URL.Path == path {
					return path, nil
				}
				return "", nil // the policy does not apply
			}
		}
		ev := &events{}
		lim, err := httplimit.New(s.rdb, httplimit.Options{
			Prefix: key(t, ""), OnError: httplimit.FailOpen, Timeout: 100 * time.Millisecond,
			BreakerCooldown: 300 * time.Millisecond, Event: ev.add,
		},
			httplimit.Policy{Name: "feed", Limit: client.FixedWindow(1000, time.Hour), Key: route("GET", "/feed")},
			httplimit.Policy{Name: "login", Limit: client.FixedWindow(1000, time.Hour), Key: route("POST", "/login"), OnError: httplimit.FailClosed})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(lim.Handler(hello))
		defer srv.Close()
		feed := func() *http.Response { resp, _ := polDo(t, "GET", srv.URL+"/feed", nil); return resp }
		login := func() *http.Response { resp, _ := polDo(t, "POST", srv.URL+"/login", nil); return resp }

		// Redis up: each policy applies to its own endpoint alone.
		if resp := feed(); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"feed";r=999;`) {
			t.Fatalf("/feed, Redis up: %d %q", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
		if resp := login(); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"login";r=999;`) {
			t.Fatalf("/login, Redis up: %d %q", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
		assertEngine(t, lim, s, engine)

		resume := s.hang(t)
		var feeds, logins string
		var slowest time.Duration
		for range 8 {
			start := time.Now()
			f := feed()
			slowest = max(slowest, time.Since(start))
			start = time.Now()
			l := login()
			slowest = max(slowest, time.Since(start))
			feeds += strconv.Itoa(f.StatusCode) + " "
			logins += strconv.Itoa(l.StatusCode) + " "
			if f.StatusCode == 200 && f.Header.Get("RateLimit") != "" {
				t.Fatalf("/feed, Redis hung: a RateLimit field %q with no decision", f.Header.Get("RateLimit"))
			}
			if l.StatusCode == 503 && retryAfter(l) < 1 {
				t.Fatalf("/login, Redis hung: 503 with Retry-After %q", l.Header.Get("Retry-After"))
			}
		}
		t.Logf("Redis hung: /feed %s/login %s(slowest %v)", feeds, logins, slowest)
		if feeds != strings.Repeat("200 ", 8) || logins != strings.Repeat("503 ", 8) {
			t.Fatalf("Redis hung: /feed %s, /login %s; want every /feed 200 (open) and every /login 503 (closed)", feeds, logins)
		}
		if slowest > time.Second {
			t.Fatalf("Redis hung: a request took %v", slowest)
		}
		count := func(kind httplimit.EventKind, policy string) int {
			ev.mu.Lock()
			defer ev.mu.Unlock()
			n := 0
			for _, e := range ev.list {
				if e.Kind == kind && e.Policy == policy {
					n++
				}
			}
			return n
		}
		if o, c := count(httplimit.FailedOpen, "feed"), count(httplimit.FailedClosed, "login"); o != 8 || c != 8 ||
			count(httplimit.FailedClosed, "feed") != 0 || count(httplimit.FailedOpen, "login") != 0 || ev.count(httplimit.BreakerOpen) == 0 {
			t.Fatalf("events: feed failed open %d, login failed closed %d, breaker opened %d times", o, c, ev.count(httplimit.BreakerOpen))
		}

		resume()
		waitFor(t, 10*time.Second, "/login decided in Redis again", func() bool {
			resp := login()
			return resp.StatusCode == 200 && resp.Header.Get("RateLimit") != ""
		})
		// Redis decides /feed again. The calls sent to the hung server
		// before the breaker opened sat in its socket and ran when it
		// resumed (their callers had given up): so /feed's count holds the
		// first request and maybe those, not only this one.
		resp := feed()
		if name, r, _ := rateLimit(t, resp); resp.StatusCode != 200 || name != "feed" || r > 998 || r < 990 {
			t.Fatalf("/feed after the outage: %d %q", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	})
}

// Plans: a LimitFunc through CacheLimits gives each account its plan's
// limit, looked up once per account; the RateLimit-Policy field states
// each request's own. An account with no plan (and no default Limit) is
// not limited.
func TestHTTPPolicyPlans(t *testing.T) {
	policyEngines(t, func(t *testing.T, s *server, engine client.Engine) {
		plans := map[string]client.Limit{"free": client.FixedWindow(2, time.Minute), "pro": client.FixedWindow(5, time.Minute)}
		var mu sync.Mutex
		seen := map[string]int{} // lookups by key
		lookup := func(_ context.Context, key string) (client.Limit, error) {
			mu.Lock()
			seen[key]++
			mu.Unlock()
			return plans[key], nil
		}
		account := func(r *http.Request) (string, error) { return r.Header.Get("X-Account"), nil }
		lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: key(t, "")},
			httplimit.Policy{Name: "plan", Key: account, LimitFunc: httplimit.CacheLimits(lookup, time.Minute, 0)})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(lim.Handler(hello))
		defer srv.Close()
		clearOfBoundary(time.Minute, 10*time.Second)

		for _, c := range []struct {
			account string
			q       int
		}{{"free", 2}, {"pro", 5}} {
			wantPolicy := `"plan";q=` + strconv.Itoa(c.q) + ";w=60"
			codes := ""
			for i := range c.q + 2 {
				resp, _ := polDo(t, "GET", srv.URL, nil, "X-Account", c.account)
				codes += strconv.Itoa(resp.StatusCode) + " "
				if pol := resp.Header.Get("RateLimit-Policy"); pol != wantPolicy {
					t.Fatalf("%s, request %d: RateLimit-Policy %q, want %q", c.account, i+1, pol, wantPolicy)
				}
				if name, r, _ := rateLimit(t, resp); name != "plan" || r != int64(max(0, c.q-1-i)) {
					t.Fatalf("%s, request %d: RateLimit %q", c.account, i+1, resp.Header.Get("RateLimit"))
				}
				if resp.StatusCode == 429 && retryAfter(resp) < 1 {
					t.Fatalf("%s, request %d: 429 without Retry-After", c.account, i+1)
				}
			}
			if want := strings.Repeat("200 ", c.q) + "429 429 "; codes != want {
				t.Fatalf("%s: %s, want %s", c.account, codes, want)
			}
		}
		assertEngine(t, lim, s, engine)

		// No plan, no default: the policy does not apply.
		for i := range 3 {
			resp, _ := polDo(t, "GET", srv.URL, nil, "X-Account", "internal")
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" || resp.Header.Get("RateLimit-Policy") != "" {
				t.Fatalf("internal, request %d: %d %v", i+1, resp.StatusCode, resp.Header)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 3 || seen["free"] != 1 || seen["pro"] != 1 || seen["internal"] != 1 {
			t.Fatalf("lookups %v for 14 requests of 3 accounts, want one per account", seen)
		}
	})
}

// Options.Headers: with IETF|XRateLimit a response carries both the IETF
// fields and X-RateLimit-Limit/Remaining/Reset (remaining counting down, 0
// on a refusal, reset the seconds the RateLimit field states); with
// XRateLimit alone, the trio and no IETF field.
func TestHTTPPolicyXRateLimit(t *testing.T) {
	policyEngines(t, func(t *testing.T, s *server, engine client.Engine) {
		newServer := func(h httplimit.Headers) (*httplimit.Limiter, *httptest.Server) {
			lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: key(t, ""), Headers: h},
				httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(3, time.Minute), Key: httplimit.ClientIP(httplimit.IPOptions{})})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(lim.Handler(hello))
			t.Cleanup(srv.Close)
			return lim, srv
		}
		trio := func(resp *http.Response) (limit, remaining, reset int64) {
			t.Helper()
			var v [3]int64
			for i, f := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
				n, err := strconv.ParseInt(resp.Header.Get(f), 10, 64)
				if err != nil {
					t.Fatalf("%s %q: %v", f, resp.Header.Get(f), err)
				}
				v[i] = n
			}
			return v[0], v[1], v[2]
		}
		clearOfBoundary(time.Minute, 10*time.Second)

		both, bothSrv := newServer(httplimit.IETF | httplimit.XRateLimit)
		for i := range 5 {
			resp, _ := polDo(t, "GET", bothSrv.URL, nil)
			l, r, reset := trio(resp)
			_, rr, tt := rateLimit(t, resp)
			want := int64(max(0, 2-i))
			if resp.Header.Get("RateLimit-Policy") != `"per-ip";q=3;w=60` || l != 3 || r != want || rr != want || reset != tt || reset < 1 || reset > 60 {
				t.Fatalf("IETF|XRateLimit, request %d: %d %v (want remaining %d, reset = RateLimit's t)", i+1, resp.StatusCode, resp.Header, want)
			}
			if wantCode := map[bool]int{true: 200, false: 429}[i < 3]; resp.StatusCode != wantCode {
				t.Fatalf("IETF|XRateLimit, request %d: %d, want %d", i+1, resp.StatusCode, wantCode)
			}
			if resp.StatusCode == 429 && retryAfter(resp) < reset {
				t.Fatalf("request %d: Retry-After %q under X-RateLimit-Reset %d", i+1, resp.Header.Get("Retry-After"), reset)
			}
		}
		assertEngine(t, both, s, engine)

		_, xSrv := newServer(httplimit.XRateLimit)
		for i := range 5 {
			resp, _ := polDo(t, "GET", xSrv.URL, nil)
			if resp.Header.Get("RateLimit") != "" || resp.Header.Get("RateLimit-Policy") != "" {
				t.Fatalf("XRateLimit alone, request %d: IETF fields %v", i+1, resp.Header)
			}
			l, r, reset := trio(resp)
			if want := int64(max(0, 2-i)); l != 3 || r != want || reset < 1 || reset > 60 {
				t.Fatalf("XRateLimit alone, request %d: %d %v (want remaining %d)", i+1, resp.StatusCode, resp.Header, want)
			}
			if wantCode := map[bool]int{true: 200, false: 429}[i < 3]; resp.StatusCode != wantCode || (wantCode == 429 && retryAfter(resp) < 1) {
				t.Fatalf("XRateLimit alone, request %d: %d %v", i+1, resp.StatusCode, resp.Header)
			}
		}
	})
}

// A concurrency policy keyed per client refuses a client's request past
// its share with 429 (the client runs too many), while other clients go
// on; one keyed by Global() sheds with 503 (the service is full).
func TestHTTPPolicyConcurrencyStatus(t *testing.T) {
	policyEngines(t, func(t *testing.T, s *server, engine client.Engine) {
		// holding serves /hold by waiting for finish, after saying so on
		// running; anything else at once.
		type holding struct {
			srv             *httptest.Server
			lim             *httplimit.Limiter
			ev              *events
			running, finish chan struct{}
			done            chan int
		}
		start := func(p httplimit.Policy) *holding {
			h := &holding{ev: &events{}, running: make(chan struct{}), finish: make(chan struct{}), done: make(chan int, 1)}
			lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: key(t, ""), Event: h.ev.add}, p)
			if err != nil {
				t.Fatal(err)
			}
			h.lim = lim
			h.srv = httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					close(h.running)
					<-h.finish
				}
				io.WriteString(w, "done")
			})))
			t.Cleanup(h.srv.Close)
			t.Cleanup(func() {
				select {
				case <-h.finish:
				default:
					close(h.finish)
				}
			})
			return h
		}
		// hold sends user's request to /hold and waits until its handler
		// runs; its status arrives on h.done.
		hold := func(h *holding, user string) {
			go func() {
				req, _ := http.NewRequest("GET", h.srv.URL+"/hold", nil)
				req.Header.Set("X-User", user)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					h.done <- -1
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				h.done <- resp.StatusCode
			}()
			select {
			case <-h.running:
			case code := <-h.done:
				t.Fatalf("the held request ended first: %d", code)
			case <-time.After(10 * time.Second):
				t.Fatal("the held request never reached its handler")
			}
		}
		release := func(h *holding) {
			close(h.finish)
			if code := <-h.done; code != 200 {
				t.Fatalf("the held request: %d", code)
			}
		}

		lease := client.Concurrency{Limit: 1, Lease: time.Minute}
		perUser := start(httplimit.Policy{Name: "per-user", Concurrency: lease, Key: httplimit.Header("X-User")})
		hold(perUser, "alice")
		assertEngine(t, perUser.lim, s, engine)
		resp, body := polDo(t, "GET", perUser.srv.URL+"/x", nil, "X-User", "alice")
		if resp.StatusCode != 429 || retryAfter(resp) < 1 || resp.Header.Get("RateLimit-Policy") != `"per-user";q=1;qu="concurrent-requests"` {
			t.Fatalf("alice's second request at once: %d %v %q, want 429 with Retry-After", resp.StatusCode, resp.Header, body)
		}
		if d := problemDetail(t, resp, body); !strings.Contains(d, "per-user") {
			t.Fatalf("alice's refusal: detail %q", d)
		}
		if resp, body := polDo(t, "GET", perUser.srv.URL+"/x", nil, "X-User", "bob"); resp.StatusCode != 200 || body != "done" {
			t.Fatalf("bob while alice's request runs: %d %q", resp.StatusCode, body)
		}
		release(perUser)
		if resp, _ := polDo(t, "GET", perUser.srv.URL+"/x", nil, "X-User", "alice"); resp.StatusCode != 200 {
			t.Fatalf("alice after her request ended: %d", resp.StatusCode)
		}
		if n := perUser.ev.count(httplimit.Refused); n != 1 || perUser.ev.count(httplimit.Shed) != 0 {
			t.Fatalf("per-user: %d Refused and %d Shed events, want 1 and 0", n, perUser.ev.count(httplimit.Shed))
		}

		global := start(httplimit.Policy{Name: "everyone", Concurrency: lease, Key: httplimit.Global()})
		hold(global, "alice")
		resp, body = polDo(t, "GET", global.srv.URL+"/x", nil, "X-User", "bob")
		if resp.StatusCode != 503 || retryAfter(resp) < 1 || resp.Header.Get("RateLimit-Policy") != `"everyone";q=1;qu="concurrent-requests"` {
			t.Fatalf("bob while the global slot is held: %d %v %q, want 503 with Retry-After", resp.StatusCode, resp.Header, body)
		}
		if d := problemDetail(t, resp, body); d != "the service is shedding load" {
			t.Fatalf("the global refusal: detail %q", d)
		}
		release(global)
		if resp, _ := polDo(t, "GET", global.srv.URL+"/x", nil, "X-User", "bob"); resp.StatusCode != 200 {
			t.Fatalf("bob after the slot was released: %d", resp.StatusCode)
		}
		if n := global.ev.count(httplimit.Shed); n != 1 || global.ev.count(httplimit.Refused) != 0 {
			t.Fatalf("global: %d Shed and %d Refused events, want 1 and 0", n, global.ev.count(httplimit.Refused))
		}
	})
}
