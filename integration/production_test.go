package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
)

// signal sends sig to the server's process: STOP makes a server that
// accepts connections (the kernel does) and never answers, as a hung
// process, a full disk or a long pause look to a client; CONT resumes it.
func (s *server) signal(t *testing.T, sig string) {
	t.Helper()
	if out, err := exec.Command("docker", "kill", "--signal", sig, s.c.GetContainerID()).CombinedOutput(); err != nil {
		t.Fatalf("docker kill --signal %s: %v: %s", sig, err, out)
	}
}

// hang stops s's process until the test ends (or resume is called).
func (s *server) hang(t *testing.T) (resume func()) {
	t.Helper()
	s.signal(t, "STOP")
	var once sync.Once
	resume = func() { once.Do(func() { s.signal(t, "CONT") }) }
	t.Cleanup(resume)
	return resume
}

// events collects a limiter's events.
type events struct {
	mu   sync.Mutex
	list []httplimit.Event
}

func (e *events) add(ev httplimit.Event) {
	e.mu.Lock()
	e.list = append(e.list, ev)
	e.mu.Unlock()
}

func (e *events) count(kind httplimit.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.list {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// A server that accepts and never answers (SIGSTOP): in every failure mode
// a request costs the limiter's timeout, not go-redis's ReadTimeout (3 s),
// the concurrency slot's release after the handler included; with a
// go-redis client built with ContextTimeoutEnabled and with one built
// without it. Once the process resumes, Redis decides again.
func TestHTTPRedisHung(t *testing.T) {
	s := startFor(t, flavors[1], opts{module: true})
	for _, withCtx := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", withCtx), func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2, ContextTimeoutEnabled: withCtx})
			defer rdb.Close()
			type mode struct {
				name string
				srv  *httptest.Server
				ev   *events
			}
			var modes []*mode
			holding, finish := make(chan struct{}), make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					close(holding)
					<-finish
				}
			})
			for _, m := range []httplimit.OnError{httplimit.FailOpen, httplimit.FailClosed, httplimit.FailLocal} {
				md := &mode{name: m.String(), ev: &events{}}
				lim, err := httplimit.New(rdb, httplimit.Options{
					Prefix: key(t, md.name), OnError: m, Timeout: 50 * time.Millisecond, BreakerCooldown: time.Hour, Event: md.ev.add,
				},
					httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(3, time.Hour), Key: httplimit.ClientIP(httplimit.IPOptions{})},
					httplimit.Policy{Name: "running", Concurrency: client.Concurrency{Limit: 100, Lease: time.Minute}, Key: httplimit.Global()})
				if err != nil {
					t.Fatal(err)
				}
				md.srv = httptest.NewServer(lim.Handler(h))
				defer md.srv.Close()
				if resp := get(t, md.srv.URL); resp.StatusCode != 200 || resp.Header.Get("RateLimit") == "" {
					t.Fatalf("%s, Redis up: %d %v", md.name, resp.StatusCode, resp.Header)
				}
				modes = append(modes, md)
			}

			// A request holds its slot while Redis is up; Redis hangs before
			// the handler ends: the release after it costs the timeout.
			held := make(chan time.Time)
			go func() {
				get(t, modes[0].srv.URL+"/hold")
				held <- time.Now()
			}()
			<-holding
			resume := s.hang(t)
			finished := time.Now()
			close(finish)
			if took := (<-held).Sub(finished); took > time.Second {
				t.Fatalf("the release after the handler took %v with Redis hung", took)
			} else {
				t.Logf("the release after the handler, Redis hung: the response came %v after the handler ended", took)
			}
			want := map[string]string{
				"open":   "200 200 200 200 200 200 200 200 ",
				"closed": "503 503 503 503 503 503 503 503 ",
				"local":  "200 200 200 429 429 429 429 429 ", // this process's own count of 3
			}
			for _, md := range modes {
				codes, slowest := timedStatuses(t, md.srv.URL, 8, func(*http.Response) {})
				// Concurrent requests, as a real outage meets them.
				var wg sync.WaitGroup
				var slowestMu sync.Mutex
				for range 30 {
					wg.Go(func() {
						start := time.Now()
						get(t, md.srv.URL)
						slowestMu.Lock()
						slowest = max(slowest, time.Since(start))
						slowestMu.Unlock()
					})
				}
				wg.Wait()
				t.Logf("Redis hung, %s: %s(slowest of 38: %v)", md.name, codes, slowest)
				if codes != want[md.name] || slowest > time.Second {
					t.Fatalf("Redis hung, %s: %s(slowest %v), want %s, each within the timeout", md.name, codes, slowest, want[md.name])
				}
				if md.ev.count(httplimit.BreakerOpen) == 0 || md.ev.count(httplimit.ConfigError) != 0 {
					t.Fatalf("%s: the hang did not open the breaker as failures", md.name)
				}
			}
			resume()
			if err := s.rdb.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Clients that hang up mid-request while Redis is slow are not Redis
// failures: the breaker stays closed, and with FailOpen a normal client
// from another address is still limited (before, five hang-ups opened the
// breaker and everything was admitted).
func TestHTTPHangUpFlood(t *testing.T) {
	s := startFor(t, flavors[1], opts{module: true})
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2, ContextTimeoutEnabled: true})
	defer rdb.Close()
	var ev events
	lim, err := httplimit.New(rdb, httplimit.Options{
		Prefix: key(t, ""), OnError: httplimit.FailOpen, Timeout: 300 * time.Millisecond, BreakerFailures: 5, Event: ev.add,
	}, httplimit.Policy{Name: "per-ip", Limit: client.FixedWindow(10, time.Minute), Key: httplimit.ClientIP(httplimit.IPOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(hello))
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	// Redis stalls every write for 800 ms; 20 clients from 127.0.0.2 send
	// a request each and hang up 30 ms later, while their calls wait.
	if err := s.rdb.Do(ctx, "CLIENT", "PAUSE", 800, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			time.Sleep(30 * time.Millisecond)
			c.Close()
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // the pause ends; the hung-up requests' calls end
	if lim.BreakerOpen() || ev.count(httplimit.Failure) != 0 || ev.count(httplimit.BreakerOpen) != 0 {
		t.Fatalf("20 hang-ups: breaker open %v, %d failures", lim.BreakerOpen(), ev.count(httplimit.Failure))
	}
	if codes := statuses(t, srv.URL, 12); codes != "200 200 200 200 200 200 200 200 200 200 429 429 " {
		t.Fatalf("a normal client after a hang-up flood: %s (want 10 per minute)", codes)
	}
}

// 60 concurrent first requests, released together against a fresh
// limiter, with a limit of 10 and FailOpen: at most 10 pass, on a server
// with the module, on one without it (the FUNCTION library), and for a
// user refused FUNCTION (the scripts), and the server is asked once
// whether it has the module and loads the library, or the script, once.
func TestHTTPFirstRequestHerd(t *testing.T) {
	bare := startFor(t, flavors[1], opts{})
	if err := bare.rdb.Do(ctx, "ACL", "SETUSER", "nofunc", "on", ">pw", "~*", "+@all", "-function", "-fcall", "-fcall_ro").Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                  string
		s                     *server
		user                  string
		functions, scriptLoad int64
	}{
		{"module", shared[1], "", 0, 0},
		{"functions", bare, "", 1, 0},
		{"scripts", bare, "nofunc", 0, 1},
	} {
		s := c.s
		t.Run(c.name, func(t *testing.T) {
			before := commandCalls(t, s.rdb)
			rdb := redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2, ContextTimeoutEnabled: true, PoolSize: 64})
			if c.user != "" {
				rdb = redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2, ContextTimeoutEnabled: true, PoolSize: 64,
					Username: c.user, Password: "pw"})
			}
			defer rdb.Close()
			lim, err := httplimit.New(rdb, httplimit.Options{Prefix: key(t, ""), OnError: httplimit.FailOpen, Timeout: 250 * time.Millisecond},
				httplimit.Policy{Name: "api", Limit: client.FixedWindow(10, time.Hour), Key: httplimit.Global()})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(lim.Handler(hello))
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr}
			start := make(chan struct{})
			var ok, refused atomic.Int64
			var wg sync.WaitGroup
			for range 60 {
				wg.Go(func() {
					<-start
					resp, err := hc.Get(srv.URL)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					switch resp.StatusCode {
					case 200:
						ok.Add(1)
					case 429:
						refused.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			after := commandCalls(t, s.rdb)
			probes, loads := after["command|info"]-before["command|info"], after["script|load"]-before["script|load"]
			libs := after["function|load"] - before["function|load"]
			t.Logf("60 first requests: %d admitted, %d refused; %d COMMAND INFO, %d FUNCTION LOAD, %d SCRIPT LOAD", ok.Load(), refused.Load(), probes, libs, loads)
			if ok.Load() != 10 || refused.Load() != 50 || probes != 1 {
				t.Fatalf("60 first requests against 10: %d admitted, %d refused, %d probes", ok.Load(), refused.Load(), probes)
			}
			if libs != c.functions || loads != c.scriptLoad {
				t.Fatalf("%d FUNCTION LOADs and %d SCRIPT LOADs, want %d and %d", libs, loads, c.functions, c.scriptLoad)
			}
		})
	}
}

// commandCalls reads INFO commandstats: calls per command ("command|info").
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.Split(rest, ",")[0], 10, 64)
		m[name] = n
	}
	return m
}

// A policy whose limit the module refuses (a sliding log above 100000) is
// a configuration bug: an error in the log, ConfigError events, each
// request decided by OnError, and the breaker untouched.
func TestHTTPConfigError(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		var ev events
		var logs bytes.Buffer
		var mu sync.Mutex
		lim, err := httplimit.New(s.rdb, httplimit.Options{
			Prefix: key(t, ""), OnError: httplimit.FailClosed, BreakerFailures: 2, Event: ev.add,
			Logger: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return logs.Write(p)
			}), nil)),
		}, httplimit.Policy{Name: "huge", Limit: client.SlidingLog(200000, time.Minute), Key: httplimit.Global()})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(lim.Handler(hello))
		defer srv.Close()
		if codes := statuses(t, srv.URL, 6); codes != "503 503 503 503 503 503 " {
			t.Fatalf("FailClosed on a configuration error: %s", codes)
		}
		mu.Lock()
		defer mu.Unlock()
		if lim.BreakerOpen() || ev.count(httplimit.Failure) != 0 || ev.count(httplimit.ConfigError) != 6 ||
			!strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "limit must be") {
			t.Fatalf("breaker open %v, %d failures, %d config errors, log %q", lim.BreakerOpen(),
				ev.count(httplimit.Failure), ev.count(httplimit.ConfigError), logs.String())
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// One cap shared by every route (Global): a request shed by it gets the
// configured Retry-After, not the lease, and gives back the rate units it
// took.
func TestHTTPSharedConcurrencyCap(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		prefix := key(t, "")
		burst := client.GCRA(9, 10, time.Hour)
		lim, err := httplimit.New(s.rdb, httplimit.Options{Prefix: prefix},
			httplimit.Policy{Name: "burst", Limit: burst, Key: httplimit.ClientIP(httplimit.IPOptions{})},
			httplimit.Policy{Name: "running", Concurrency: client.Concurrency{Limit: 1, Lease: 5 * time.Minute},
				Key: httplimit.Global(), ShedRetryAfter: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		running, finish := make(chan struct{}), make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				close(running)
				<-finish
			}
		})
		srv := httptest.NewServer(lim.Handler(h))
		defer srv.Close()
		done := make(chan int)
		go func() { done <- get(t, srv.URL+"/slow").StatusCode }()
		<-running
		left := func() int64 {
			return mustCall(t, s.rdb, "GCRA.PEEK", prefix+"{127.0.0.1}:burst", 9, 10, 3600, 0)[2]
		}
		before := left()
		for _, path := range []string{"/a", "/b/c"} { // another route: the same cap
			resp := get(t, srv.URL+path)
			ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			if resp.StatusCode != 503 || ra < 2 || ra > 3 {
				t.Fatalf("%s while one runs: %d, Retry-After %q (want 2 s and its spread, not the 5 min lease)",
					path, resp.StatusCode, resp.Header.Get("Retry-After"))
			}
		}
		if got := left(); got != before {
			t.Fatalf("shed requests kept their burst units: %d left before, %d after", before, got)
		}
		close(finish)
		if code := <-done; code != 200 {
			t.Fatalf("the running one: %d", code)
		}
		if resp := get(t, srv.URL+"/a"); resp.StatusCode != 200 {
			t.Fatalf("after the release: %d", resp.StatusCode)
		}
	})
}
