package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// fakeDecider answers as the test says, with no Redis at all, and records
// what it was asked.
type fakeDecider struct {
	mu    sync.Mutex
	calls []string
	take  func(key string, cost int64) client.Result
	all   func(each []client.Result) client.Result
	conc  client.Result
	// server names the server holding a key ("" when nil); fail, when set,
	// fails the calls on a key with its error.
	server func(key string) string
	fail   func(key string) error
}

func (f *fakeDecider) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeDecider) Take(_ context.Context, key string, l client.Limit, cost int64, _ ...client.Option) (client.Result, error) {
	f.record(fmt.Sprintf("take %s %d", key, cost))
	if f.fail != nil {
		if err := f.fail(key); err != nil {
			return client.Result{}, err
		}
	}
	return f.take(key, cost), nil
}

func (f *fakeDecider) AllEach(_ context.Context, limits []client.Keyed, each []client.Result, _ ...client.Option) (client.Result, error) {
	f.record(fmt.Sprintf("all %d", len(limits)))
	return f.all(each), nil
}

func (f *fakeDecider) Acquire(_ context.Context, key string, _ client.Concurrency, _ string, _ ...client.Option) (client.Result, error) {
	f.record("acquire " + key)
	return f.conc, nil
}

func (f *fakeDecider) Release(_ context.Context, key, _ string) (bool, error) {
	f.record("release " + key)
	return true, nil
}

func (f *fakeDecider) Engines() map[string]client.Engine { return nil }

func (f *fakeDecider) ServerFor(_ context.Context, key string) string {
	if f.server == nil {
		return ""
	}
	return f.server(key)
}

// limiterOn is a limiter deciding through f.
func limiterOn(t *testing.T, f *fakeDecider, opt Options, policies ...Policy) *Limiter {
	t.Helper()
	l, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), opt, policies...)
	if err != nil {
		t.Fatal(err)
	}
	l.c = f
	l.gate = l.newGate()
	return l
}

func refusal(retry time.Duration) client.Result {
	return client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: 5, RetryAfter: retry, ResetAfter: time.Minute}}
}

// When several policies refuse, the one with the longest wait decides
// (a "never" longest of all), and every policy's own figures are shown.
func TestVerdictLongestWaitDecides(t *testing.T) {
	for _, c := range []struct {
		waits      [3]time.Duration // 0: admitted
		policy     string
		retryAfter int64 // seconds, before the spread; 0: none
	}{
		{[3]time.Duration{3 * time.Second, 0, 9 * time.Second}, "c", 9},
		{[3]time.Duration{3 * time.Second, ratelimit.Never, 9 * time.Second}, "b", 0},
		{[3]time.Duration{0, 2 * time.Second, 0}, "b", 2},
	} {
		f := &fakeDecider{all: func(each []client.Result) client.Result {
			for i, w := range c.waits {
				each[i] = client.Result{Verdict: ratelimit.Verdict{Limit: 5, Remaining: 4, RetryAfter: ratelimit.Never, ResetAfter: time.Second}}
				if w != 0 {
					each[i] = refusal(w)
				}
			}
			return client.Result{Verdict: ratelimit.Verdict{Limited: true}}
		}}
		var ev events
		l := limiterOn(t, f, Options{Event: ev.add},
			Policy{Name: "a", Limit: client.FixedWindow(5, time.Minute), Key: Global()},
			Policy{Name: "b", Limit: client.FixedWindow(5, time.Minute), Key: Global()},
			Policy{Name: "c", Limit: client.FixedWindow(5, time.Minute), Key: Global()})
		w := serveOne(l, httptest.NewRequest("GET", "/", nil))
		ra := w.Header().Get("Retry-After")
		n, _ := strconv.ParseInt(ra, 10, 64)
		spreadOK := (c.retryAfter == 0 && ra == "") || (n >= c.retryAfter && n <= c.retryAfter+max(1, c.retryAfter/10))
		if w.Code != 429 || !strings.Contains(w.Body.String(), `policy \"`+c.policy+`\"`) || !spreadOK {
			t.Errorf("waits %v: %d %q Retry-After %q, want policy %s and %d s (and its spread)", c.waits, w.Code, w.Body, ra, c.policy, c.retryAfter)
		}
		if n := strings.Count(w.Header().Get("RateLimit"), ";r="); n != 3 {
			t.Errorf("waits %v: RateLimit %q, want all three policies", c.waits, w.Header().Get("RateLimit"))
		}
		if strings.Contains(ev.decisions(), "admitted") {
			t.Errorf("waits %v: a refused request reported admitted policies: %s", c.waits, ev.decisions())
		}
	}
}

// A request shed by a concurrency policy gives back what its rate
// policies took where they can (GCRA), not a window's count.
func TestShedRefundsRate(t *testing.T) {
	f := &fakeDecider{
		all: func(each []client.Result) client.Result {
			for i := range each {
				each[i] = client.Result{Verdict: ratelimit.Verdict{Limit: 10, Remaining: 9, RetryAfter: ratelimit.Never}}
			}
			return client.Result{Verdict: ratelimit.Verdict{Limit: 10, Remaining: 9, RetryAfter: ratelimit.Never}}
		},
		take: func(string, int64) client.Result {
			return client.Result{Verdict: ratelimit.Verdict{Limit: 10, Remaining: 10, RetryAfter: ratelimit.Never}}
		},
		conc: client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: 1, RetryAfter: time.Minute}},
	}
	l := limiterOn(t, f, Options{},
		Policy{Name: "burst", Limit: client.PerMinute(10), Key: Global()},
		Policy{Name: "hourly", Limit: client.FixedWindow(100, time.Hour), Key: Global()},
		Policy{Name: "running", Concurrency: client.Concurrency{Limit: 1, Lease: time.Minute}, Key: Global(), ShedRetryAfter: 3 * time.Second})
	w := serveOne(l, httptest.NewRequest("GET", "/", nil))
	if ra := w.Header().Get("Retry-After"); w.Code != http.StatusServiceUnavailable || (ra != "3" && ra != "4") { // 3 s and its spread
		t.Fatalf("shed: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	want := "[all 2 acquire rl:http:{global}:running take rl:http:{global}:burst -1]"
	if got := fmt.Sprint(f.calls); got != want {
		t.Fatalf("asked %s, want %s (the GCRA refunded, the window not)", got, want)
	}
}
