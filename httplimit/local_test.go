package httplimit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// TestFailLocalCharged: FailLocal's decisions are charged to Redis when it
// answers again. PerMinute(10): Redis refuses connections while 10
// requests are admitted here and the 11th refused (the local GCRA); once
// it answers, the next request is decided there (admitted: it never saw
// the 10) and what the local limiter still counts, the 10, is charged to
// the key with DEBT, so the requests after are refused, as they would
// have been had Redis seen the 10, and the limiter's key holds 11 taken.
// Unfixed, Redis admitted 10 more.
func TestFailLocalCharged(t *testing.T) {
	f := fakeredis.New()
	var down atomic.Bool
	f.Before = func(redis.Cmder) error {
		if down.Load() {
			return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return nil
	}
	lim, err := New(f.Client(), Options{OnError: FailLocal, BreakerFailures: 100, Prefix: "rl:"},
		Policy{Name: "p", Limit: client.PerMinute(10), Key: Global()})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w.Code
	}
	down.Store(true)
	for i := range 11 {
		want := http.StatusOK
		if i == 10 {
			want = http.StatusTooManyRequests
		}
		if code := serve(); code != want {
			t.Fatalf("Redis down, request %d: %d, want %d", i+1, code, want)
		}
	}
	down.Store(false)
	if code := serve(); code != http.StatusOK {
		t.Fatalf("Redis back, the first request: %d", code)
	}
	deadline := time.Now().Add(5 * time.Second)
	for st := lim.gate.Stats(); st.Charged == 0 || st.Charging; st = lim.gate.Stats() {
		if time.Now().After(deadline) {
			t.Fatal("nothing charged 5 s after Redis answered")
		}
		time.Sleep(time.Millisecond)
	}
	if n := lim.gate.Stats().Charged; n != 10 {
		t.Fatalf("charged %d units, want the 10 decided here", n)
	}
	if code := serve(); code != http.StatusTooManyRequests {
		t.Fatalf("after the charge: %d, want 429", code)
	}
	r, err := client.New(f.Client()).Peek(context.Background(), "rl:{global}:p", client.PerMinute(10), 0)
	if err != nil || !r.Limited || r.RetryAfter < 5*time.Second {
		t.Fatalf("the limiter after the charge: %+v %v, want 11 taken of 10 (in debt by one: about 6 s to wait)", r, err)
	}
	if st := lim.gate.Stats(); st.LocalKeys != 0 || st.Owing {
		t.Fatalf("after the charge: %d keys kept here, owing %v", st.LocalKeys, st.Owing)
	}
}
