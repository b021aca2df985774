package httplimit

import (
	"context"
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
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// slowStart holds the client's start-up work on a server (COMMAND INFO,
// FUNCTION and the library's version check, SCRIPT LOAD) until release is
// closed; every other command passes at once. A go-redis hook added before
// the fake's, so that it runs first.
type slowStart struct {
	release chan struct{}
	arrived atomic.Int32
}

func (h *slowStart) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowStart) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		name, _ := args[0].(string)
		switch name = strings.ToLower(name); {
		case name == "command" || name == "function" || name == "script",
			name == "fcall_ro" && len(args) > 1 && args[1] == lua.VersionFunction+lua.Versioned().Suffix:
			h.arrived.Add(1)
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (h *slowStart) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A fresh middleware (OnError open, a 200 ms timeout: ample for a call to
// the fake on a loaded machine) on a server without the module whose
// engine probe and library load take three times longer, meeting 60
// concurrent first requests from a real HTTP client: every request waits
// for the start-up work and is decided in Redis, none by the failure
// policy: a fixed window of 10 admits exactly 10. With three policies (the
// enforcing ones decided in one call, the shadow one in a second), the
// second call has its time too.
func TestStartupHerdOnFake(t *testing.T) {
	for _, c := range []struct {
		name     string
		policies []Policy
	}{
		{"one policy", nil},
		{"three policies", []Policy{
			{Name: "per-route", Limit: client.GCRA(99, 100, time.Minute), Key: Route()},
			{Name: "shadow", Limit: client.FixedWindow(5, time.Minute), Key: Route(), Shadow: true},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fakeredis.New()
			t0 := time.Unix(1_700_000_020, 0)
			f.Clock = func() time.Time { return t0 }
			f.NoModule, f.Functions = true, true
			h := &slowStart{release: make(chan struct{})}
			defer func() {
				select {
				case <-h.release:
				default:
					close(h.release)
				}
			}()
			rdb := redis.NewClient(&redis.Options{Addr: f.Addr, ContextTimeoutEnabled: true})
			rdb.AddHook(h)
			rdb.AddHook(f)
			var failed, calls atomic.Int32
			lim, err := New(rdb, Options{OnError: FailOpen, Timeout: 200 * time.Millisecond, Event: func(e Event) {
				switch e.Kind {
				case FailedOpen:
					failed.Add(1)
				case RedisCall:
					calls.Add(1)
					if e.Err != nil {
						t.Logf("a call failed after %v: %v", e.Duration, e.Err)
					}
				}
			}}, append([]Policy{{Name: "per-ip", Limit: client.FixedWindow(10, time.Minute), Key: ClientIP(IPOptions{})}}, c.policies...)...)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
			defer srv.Close()
			codes := make(chan int, 60)
			var wg sync.WaitGroup
			for range 60 {
				wg.Go(func() {
					resp, err := http.Get(srv.URL + "/x")
					if err != nil {
						codes <- 0
						return
					}
					resp.Body.Close()
					codes <- resp.StatusCode
				})
			}
			for h.arrived.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(600 * time.Millisecond) // three request timeouts
			close(h.release)
			wg.Wait()
			close(codes)
			by := map[int]int{}
			for code := range codes {
				by[code]++
			}
			if by[200] != 10 || by[429] != 50 || failed.Load() != 0 {
				t.Fatalf("statuses %v, %d failed open; want 10 admitted, 50 refused, none failed open", by, failed.Load())
			}
			f.Lock()
			defer f.Unlock()
			if f.Probes != 1 || f.Loads != 1 {
				t.Fatalf("%d probes, %d library loads; want 1 and 1", f.Probes, f.Loads)
			}
		})
	}
}

// A fresh middleware facing a stopped server (the probe never answered):
// the first requests wait for the probe's own timeout (the client's 2 s,
// not their 50 ms) and are then decided by OnError, their calls failed
// with the probe's timeout; those failures open the breaker, and the next
// request is decided at once, without a call to Redis.
func TestStartupStoppedServerOnFake(t *testing.T) {
	f := fakeredis.New()
	h := &slowStart{release: make(chan struct{})}
	defer close(h.release)
	rdb := redis.NewClient(&redis.Options{Addr: f.Addr, ContextTimeoutEnabled: true})
	rdb.AddHook(h)
	rdb.AddHook(f)
	var mu sync.Mutex
	var events []Event
	lim, err := New(rdb, Options{OnError: FailOpen, Event: func(e Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}, Policy{Name: "per-ip", Limit: client.FixedWindow(10, time.Minute), Key: ClientIP(IPOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()
	get := func() int {
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if code := get(); code != 200 {
				t.Errorf("a first request: %d, want 200 (open)", code)
			}
		})
	}
	wg.Wait()
	count := func(kind EventKind) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e.Kind == kind {
				n++
			}
		}
		return n
	}
	mu.Lock()
	for _, e := range events {
		if e.Kind == RedisCall && (e.Outcome != "timeout" || !strings.Contains(e.Err.Error(), "start-up work")) {
			t.Errorf("a first request's call: %s %v, want the probe's own timeout", e.Outcome, e.Err)
		}
	}
	mu.Unlock()
	if calls, open := count(RedisCall), count(FailedOpen); calls != 8 || open != 8 {
		t.Fatalf("%d calls, %d failed open, want 8 and 8", calls, open)
	}
	if code := get(); code != 200 || count(RedisCall) != 8 || count(FailedOpen) != 9 {
		t.Fatalf("the next request: %d, %d calls, %d failed open; want it decided open by the breaker, with no call", code, count(RedisCall), count(FailedOpen))
	}
}
