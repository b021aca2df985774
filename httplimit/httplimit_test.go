package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
)

func TestNewValidates(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	ip := ClientIP(IPOptions{})
	for _, c := range []struct {
		what     string
		policies []Policy
	}{
		{"no policy", nil},
		{"a bad name", []Policy{{Name: "per ip", Limit: client.FixedWindow(1, time.Second), Key: ip}}},
		{"a name twice", []Policy{{Name: "a", Limit: client.FixedWindow(1, time.Second), Key: ip}, {Name: "a", Limit: client.FixedWindow(1, time.Second), Key: ip}}},
		{"no key", []Policy{{Name: "a", Limit: client.FixedWindow(1, time.Second)}}},
		{"no limit", []Policy{{Name: "a", Key: ip}}},
		{"both", []Policy{{Name: "a", Limit: client.FixedWindow(1, time.Second), Concurrency: client.Concurrency{Limit: 1, Lease: time.Second}, Key: ip}}},
		{"a shaper", []Policy{{Name: "a", Limit: client.Shaper(1, 1, time.Second), Key: ip}}},
	} {
		if _, err := New(rdb, Options{}, c.policies...); err == nil {
			t.Errorf("%s: no error", c.what)
		}
	}
	l, err := New(rdb, Options{},
		Policy{Name: "per-ip", Limit: client.GCRA(9, 10, time.Minute), Key: ip},
		Policy{Name: "exports", Concurrency: client.Concurrency{Limit: 4, Lease: time.Minute}, Key: Route()})
	if err != nil || l.header != `"per-ip";q=10;w=60, "exports";q=4;qu="concurrent-requests"` {
		t.Fatalf("%v: RateLimit-Policy %q", err, l.header)
	}
}

// Retry-After is the wait rounded up plus up to a tenth of it (at least a
// second) at random, so refused clients spread out.
func TestRetryAfterSpread(t *testing.T) {
	l := &Limiter{}
	seen := map[int64]bool{}
	for range 500 {
		w := httptest.NewRecorder()
		l.refuse(w, httptest.NewRequest("GET", "/", nil), Decision{Status: http.StatusTooManyRequests, Policy: "p", RetryAfter: 19500 * time.Millisecond}, nil)
		v, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
		if err != nil || v < 20 || v > 22 || w.Code != 429 || !strings.Contains(w.Body.String(), `"status":429`) {
			t.Fatalf("Retry-After %q, status %d, body %s", w.Header().Get("Retry-After"), w.Code, w.Body)
		}
		seen[v] = true
	}
	if len(seen) != 3 {
		t.Fatalf("Retry-After took %v over 500 refusals, want 20, 21 and 22", seen)
	}
}

func TestShedThresholds(t *testing.T) {
	l := &Limiter{opt: Options{MaxInFlight: 10, ShedLow: 0.7, ShedDefault: 0.9}}
	for _, c := range []struct {
		p    Priority
		n    int64
		shed bool
	}{{Low, 7, false}, {Low, 8, true}, {Default, 9, false}, {Default, 10, true}, {Critical, 1000, false}} {
		if got := l.shed(c.p, c.n); got != c.shed {
			t.Errorf("%v at %d in flight: shed %v", c.p, c.n, got)
		}
	}
}

// The in-flight shedder on a real handler: a maximum of 2, low priority shed
// from half of it; with 2 default requests running, a low one is shed with
// 503 and a critical one still served. (The policy never applies, so Redis
// is never asked.)
func TestInFlightShedder(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	var shed int
	l, err := New(rdb, Options{MaxInFlight: 2, ShedLow: 0.5, ShedDefault: 1,
		Priority: func(r *http.Request) Priority {
			return map[string]Priority{"low": Low, "critical": Critical}[r.Header.Get("X-Priority")]
		},
		Event: func(e Event) {
			if e.Kind == Shed {
				shed++
			}
		}},
		Policy{Name: "never", Limit: client.FixedWindow(1, time.Second), Key: Header("X-None")})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Priority") == "" {
			started <- struct{}{}
			<-release
		}
	}))
	done := make(chan int, 2)
	for range 2 {
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			done <- w.Code
		}()
	}
	<-started
	<-started
	for p, want := range map[string]int{"low": 503, "critical": 200} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Priority", p)
		h.ServeHTTP(w, r)
		if w.Code != want || (want == 503 && w.Header().Get("Retry-After") == "") {
			t.Errorf("%s with 2 in flight: %d %v", p, w.Code, w.Header())
		}
	}
	close(release)
	if a, b := <-done, <-done; a != 200 || b != 200 || shed != 1 {
		t.Fatalf("the running ones: %d %d; %d shed", a, b, shed)
	}
}
