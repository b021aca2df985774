package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// TestStartupHerd is issue 44's herd of first requests: a fresh process
// (a new go-redis client and a new httplimit middleware: OnError open, a
// 50 ms timeout, a fixed window of 10 a minute per client address, as
// examples/http runs) behind a real HTTP server meets 60 concurrent first
// requests from a real HTTP client. The requests that come while the
// client probes the server's engine and loads this version's library
// wait for that work, not for their timeout: every one is decided in
// Redis, exactly 10 admitted and 50 refused, none failed open; on a
// server with the module and on one without (the Lua library, flushed
// before each run so that every run loads it), three fresh processes on
// each, one flavor after the other.
//
// What is asserted is start-up work, not speed: a call that fails only
// once it has had half its timeout after the start-up work ended (a
// machine too busy to answer a call in 50 ms) makes its run say nothing,
// and the run is made again with a fresh process, up to four times. Any
// call that fails sooner (before the work ended, as the calls that failed
// before the fix did when the work outlasted their timeout, or as it ends,
// its time spent waiting) fails the test.
func TestStartupHerd(t *testing.T) {
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			plain := startFor(t, f, opts{})
			for _, s := range []struct {
				engine string
				srv    *server
			}{{"module", sharedOf(f)}, {"lua", plain}} {
				t.Run(s.engine, func(t *testing.T) {
					for run := range 3 {
						for attempt := 1; ; attempt++ {
							if s.engine == "lua" {
								if err := s.srv.rdb.FunctionFlush(ctx).Err(); err != nil {
									t.Fatal(err)
								}
							}
							late := herdRun(t, s.srv, fmt.Sprintf("%s run %d", s.engine, run+1), s.engine == "lua")
							if late == 0 {
								break
							}
							if attempt == 5 {
								t.Fatalf("%s run %d: calls too slow after the start-up work in %d fresh processes of %d: the machine cannot answer in 50 ms", s.engine, run+1, attempt, attempt)
							}
							t.Logf("%s run %d: %d calls failed after the start-up work, having had half their timeout since: made again", s.engine, run+1, late)
						}
					}
				})
			}
		})
	}
}

// startupEnd records when the client's start-up work on a server last
// answered: the probe, the library's check and load, SCRIPT LOAD, and the
// PINGs that open the waiting calls' connections. A go-redis hook.
type startupEnd struct{ at atomic.Int64 }

func (h *startupEnd) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *startupEnd) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		name, _ := args[0].(string)
		switch strings.ToLower(name) {
		case "command", "function", "script", "ping":
		case "fcall_ro":
			if len(args) < 2 || args[1] != lua.VersionFunction+lua.Versioned().Suffix {
				return err
			}
		default:
			return err
		}
		now := time.Now().UnixNano()
		for {
			if last := h.at.Load(); last >= now || h.at.CompareAndSwap(last, now) {
				return err
			}
		}
	}
}

func (h *startupEnd) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// herdRun is one fresh process meeting the herd (see TestStartupHerd);
// onLua: the server runs the library, which the run must have loaded. It
// returns how many calls failed late (see TestStartupHerd) when no other
// did: the run is then to be made again.
func herdRun(t *testing.T, s *server, what string, onLua bool) (late int) {
	t.Helper()
	const timeout = 50 * time.Millisecond
	// A fixed window of a minute: the herd starts with 5 s of its minute
	// left at least, so that it stays in one window.
	if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 5*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	var started startupEnd
	rdb.AddHook(&started)
	var mu sync.Mutex
	var failedOpen int
	var failed []time.Time // when each failed call ended
	lim, err := httplimit.New(rdb, httplimit.Options{
		Prefix:  fmt.Sprintf("rl:startup:%d:", time.Now().UnixNano()),
		OnError: httplimit.FailOpen,
		Timeout: timeout,
		Event: func(e httplimit.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e.Kind == httplimit.FailedOpen:
				failedOpen++
			case e.Kind == httplimit.RedisCall && e.Err != nil:
				failed = append(failed, time.Now())
				if len(failed) <= 3 {
					t.Logf("%s: a Redis call failed after %v: %v", what, e.Duration, e.Err)
				}
			}
		},
	}, httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(10, time.Minute), Key: httplimit.ClientIP(httplimit.IPOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(hello))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 60}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	const n = 60
	codes := make([]int, n)
	took := make([]time.Duration, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-gate
			start := time.Now()
			resp, err := hc.Get(srv.URL + "/")
			took[i] = time.Since(start)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	close(gate)
	wg.Wait()
	by := map[int]int{}
	for _, c := range codes {
		by[c]++
	}
	slices.Sort(took)
	t.Logf("%s: statuses %v; requests took %v (median) to %v (slowest)", what, by, took[n/2].Round(time.Millisecond), took[n-1].Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	if len(failed) > 0 {
		done := time.Unix(0, started.at.Load())
		for _, end := range failed {
			if end.Sub(done) < timeout/2 {
				t.Fatalf("%s: a call failed %v from the end of the start-up work (before it, if negative), not half its timeout after: %d of %d calls failed, statuses %v",
					what, end.Sub(done).Round(time.Millisecond), len(failed), n, by)
			}
		}
		return len(failed) // each failed late: a machine too busy, not start-up work
	}
	if by[200] != 10 || by[429] != 50 || failedOpen != 0 {
		t.Fatalf("%s: statuses %v, %d decisions failed open; want exactly 10 admitted and 50 refused, all decided in Redis",
			what, by, failedOpen)
	}
	if onLua {
		libs, err := s.rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: lua.Versioned().Name}).Result()
		if err != nil || len(libs) != 1 {
			t.Fatalf("%s: the library after the run: %v %v, want this version's edition loaded", what, libs, err)
		}
	}
	return 0
}

// TestStartupStopped: a fresh process whose server is stopped (SIGSTOP: it
// accepts connections and never answers) before its first request. The
// first requests (20 at once; OnError open, a 50 ms timeout) wait for the
// engine probe's own timeout, the client's 2 s, and are then served open,
// their calls failed with the probe's timeout; that opens the breaker, and
// the next requests are served open without a call. Once the breaker's
// cooldown (5 s) has passed, the request it lets through fails within its
// own timeout, not the probe's: the probe failed already, so it is an
// outage, decided fast.
func TestStartupStopped(t *testing.T) {
	s := startFor(t, flavors[1], opts{})
	s.hang(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	var ev events
	lim, err := httplimit.New(rdb, httplimit.Options{OnError: httplimit.FailOpen, Timeout: 50 * time.Millisecond, Event: ev.add},
		httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(10, time.Minute), Key: httplimit.ClientIP(httplimit.IPOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(hello))
	defer srv.Close()
	timed := func() (int, time.Duration) {
		start := time.Now()
		resp := get(t, srv.URL+"/")
		return resp.StatusCode, time.Since(start)
	}
	calls := func() (list []httplimit.Event) {
		ev.mu.Lock()
		defer ev.mu.Unlock()
		for _, e := range ev.list {
			if e.Kind == httplimit.RedisCall {
				list = append(list, e)
			}
		}
		return list
	}

	took := make([]time.Duration, 20)
	var wg sync.WaitGroup
	for i := range took {
		wg.Go(func() {
			var code int
			if code, took[i] = timed(); code != 200 {
				t.Errorf("a first request: %d, want 200 (open)", code)
			}
		})
	}
	wg.Wait()
	slices.Sort(took)
	first := calls()
	t.Logf("20 first requests, the server stopped: served open after %v to %v", took[0].Round(time.Millisecond), took[19].Round(time.Millisecond))
	if len(first) != 20 {
		t.Fatalf("%d Redis calls for 20 first requests", len(first))
	}
	for _, e := range first {
		if e.Outcome != "timeout" || !strings.Contains(e.Err.Error(), "start-up work") {
			t.Fatalf("a first request's call: %s %v, want the probe's own timeout", e.Outcome, e.Err)
		}
	}

	var later time.Duration
	for range 10 {
		code, d := timed()
		later = max(later, d)
		if code != 200 {
			t.Fatalf("a request with the breaker open: %d", code)
		}
	}
	if n := len(calls()); n != 20 || !lim.BreakerOpen() {
		t.Fatalf("10 requests after the first: %d calls in all, breaker open %v; want no call, the breaker open", n, lim.BreakerOpen())
	}
	t.Logf("10 requests after, the breaker open: the slowest took %v", later.Round(time.Millisecond))

	time.Sleep(5*time.Second + 100*time.Millisecond) // the breaker's cooldown
	code, d := timed()
	all := calls()
	if code != 200 || len(all) != 21 {
		t.Fatalf("the request after the cooldown: %d, %d calls in all; want 200 and its one call", code, len(all))
	}
	if e := all[20]; e.Outcome != "timeout" || strings.Contains(e.Err.Error(), "start-up work") {
		t.Fatalf("the call after the cooldown: %s %v, want its own timeout", e.Outcome, e.Err)
	}
	t.Logf("the request after the cooldown (its call: %v) took %v", all[20].Err, d.Round(time.Millisecond))
}
