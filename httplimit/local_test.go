package httplimit

import (
	"context"
	"fmt"
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
	for lim.local.charged.Load() == 0 || lim.local.settling.Load() {
		if time.Now().After(deadline) {
			t.Fatal("nothing charged 5 s after Redis answered")
		}
		time.Sleep(time.Millisecond)
	}
	if n := lim.local.charged.Load(); n != 10 {
		t.Fatalf("charged %d units, want the 10 decided here", n)
	}
	if code := serve(); code != http.StatusTooManyRequests {
		t.Fatalf("after the charge: %d, want 429", code)
	}
	r, err := client.New(f.Client()).Peek(context.Background(), "rl:{global}:p", client.PerMinute(10), 0)
	if err != nil || !r.Limited || r.RetryAfter < 5*time.Second {
		t.Fatalf("the limiter after the charge: %+v %v, want 11 taken of 10 (in debt by one: about 6 s to wait)", r, err)
	}
	if lim.local.keys() != 0 || lim.local.owing.Load() {
		t.Fatalf("after the charge: %d keys kept here, owing %v", lim.local.keys(), lim.local.owing.Load())
	}
}

// takeOnly is a decider whose Take is take (the rest unused).
type takeOnly struct {
	decider
	take func(key string, cost int64) error
}

func (d takeOnly) Take(_ context.Context, key string, _ client.Limit, cost int64, _ ...client.Option) (client.Result, error) {
	return client.Result{}, d.take(key, cost)
}

// A key decided here long ago owes nothing; decided here again while the
// settle charges another key, it keeps its local GCRA as that decision
// left it: the settle takes off only what it charged (it moved the key an
// hour ahead, a whole quota owed, refused here at the next outage).
func TestFailLocalSettleKeepsLaterDecisions(t *testing.T) {
	ll := newLocal(10)
	p := &Policy{Name: "p", Limit: client.PerMinute(10)}
	now := time.Now().UnixNano()
	w := int64(time.Minute)
	ll.tats.Add("b", localKey{tat: now + w/10, limit: p.Limit, q: 10, w: w})             // owes 1
	ll.tats.Add("a", localKey{tat: now - int64(time.Hour), limit: p.Limit, q: 10, w: w}) // owes nothing
	var charged []string
	d := takeOnly{take: func(key string, cost int64) error {
		charged = append(charged, fmt.Sprint(key, ":", cost))
		if key == "b" { // "a" is decided here meanwhile
			ll.decide([]applied{{Want: client.Want{Key: "a", Cost: 1}, p: p}}, time.Now().UnixNano())
		}
		return nil
	}}
	if _, _, err := ll.settle(d, time.Second); err != nil {
		t.Fatal(err)
	}
	k, ok := ll.tats.Peek("a")
	if !ok || k.tat > time.Now().UnixNano()+w/10+int64(time.Second) {
		t.Fatalf("after the settle: %q's local GCRA %v ahead, want one unit's 6 s at most (charged %v)", "a", time.Duration(k.tat-time.Now().UnixNano()), charged)
	}
	if fmt.Sprint(charged) != "[b:1]" {
		t.Fatalf("charged %v, want b's one unit", charged)
	}
}
