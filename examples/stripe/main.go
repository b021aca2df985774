// Command stripe serves a small payments API behind the four limiters of
// Stripe's "Scaling your API with rate limiters", as one layered
// httplimit.Limiter deciding in Redis (the ratelimit module, or its Lua
// scripts on a server without it):
//
//  1. Request rate limiter, per user (API key, X-API-Key or Authorization:
//     Bearer): a token bucket of -burst requests refilled with -rate a
//     second. Over it, the user gets 429 with Retry-After and the RateLimit
//     fields (and the X-RateLimit trio most SDKs read).
//  2. Concurrent requests limiter, per user: at most -concurrency requests
//     of one user at once. One more gets 429: the user runs more than its
//     share, nothing is wrong with the service.
//  3. Fleet usage load shedder, one for every user: a token bucket of
//     -fleet-rate requests a second (holding 10 s of them) of which
//     -fleet-reserve is kept for critical requests: once only the reserve
//     remains, every other request is shed with 503 while critical ones
//     still pass. It is quiet: no client sees the fleet's figures.
//  4. Worker utilization load shedder, in this process: of -max-in-flight
//     requests at once, test mode is shed (503) from half on, GETs from
//     70 %, other POSTs from 90 %, critical requests never.
//
// Stripe's four priorities, from shed first to never shed:
//
//	Lowest    test mode: an X-Test-Mode: 1 header, or an sk_test_ API key
//	Low       GETs
//	Default   other POSTs (POST /v1/refunds)
//	Critical  critical methods: POST /v1/charges
//
// 429 means "you, slow down" (your own quota); 503 means "the service sheds
// load" (the fleet's or this process's), whoever you are. Every refusal
// carries Retry-After.
//
// The API (an API key is required: 401 without one):
//
//	GET  /v1/balance          answers at once
//	POST /v1/charges          critical; takes -work (50 ms) to answer
//	POST /v1/refunds          answers at once
//	GET  /v1/slow?ms=N        holds N ms (up to 10000): fills the concurrency
//	                          limiter; it sends its headers at once, so a
//	                          client knows it is in flight. POST /v1/slow holds
//	                          the same as a Default request.
//
// Run a Redis server with the module (from the repository's root), then the
// server (from examples/, a Go module of its own):
//
//	make run &
//	cd examples && go run ./stripe -listen 127.0.0.1:8081 -redis 127.0.0.1:6379
//
// and try it:
//
//	curl -i -H 'X-API-Key: sk_live_alice' http://127.0.0.1:8081/v1/balance
//	curl -i -X POST -H 'X-API-Key: sk_live_alice' http://127.0.0.1:8081/v1/charges
//
// The same binary drives the four scenarios against a running server and
// prints, per scenario, the responses' counts by status:
//
//	go run ./stripe -load http://127.0.0.1:8081
//
//	rate: user-a 200×20 429×20, user-b 200×5
//	concurrency: at-once 200×3 429×5, after 200×1
//	workers: holders 200×16, critical 200×3, default 200×3, low 503×3, lowest 503×4
//	fleet: others 200×160 503×27, critical 200×5
//
// The load's limits are its own flags' (-burst, -concurrency, -fleet-rate,
// -max-in-flight), the server's defaults unless given: pass both the same.
// The fleet scenario drains the fleet down to its reserve, which takes 10 s
// to refill: wait that long before the next run (a run that finds the fleet
// shedding waits for it).
//
// The server bounds every phase of a connection and stops gracefully on
// SIGTERM or SIGINT: it stops accepting, lets the requests in flight finish
// (up to 10 s), then exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
)

// config is what the server limits by; the load reads it too, to know what
// to expect.
type config struct {
	rate, burst   int64   // per user: a token bucket of burst, refilled rate a second
	concurrency   int64   // per user: requests at once
	fleetRate     int64   // every user: requests a second (the bucket holds fleetWindow of them)
	fleetReserve  float64 // the fleet's share kept for critical requests
	maxInFlight   int     // this process: requests at once before shedding
	work          time.Duration
	timeout       time.Duration
	headerTimeout time.Duration
	onError       string
}

// fleetWindow is how many seconds of -fleet-rate the fleet's bucket holds:
// the burst it absorbs, and how long it takes to refill.
const fleetWindow = 10

// maxHold is the longest /v1/slow holds; the concurrency limiter's leases
// outlive it, so a crashed process's slots lapse, a running request's not.
const (
	maxHold   = 10 * time.Second
	slotLease = 15 * time.Second
)

func main() {
	var c config
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	addr := flag.String("redis", "127.0.0.1:6379", "the Redis server (with the ratelimit module, or without: its Lua scripts then)")
	load := flag.String("load", "", "instead of serving, drive the four scenarios against the server at this URL (http://127.0.0.1:8081) and print what it answered")
	flag.StringVar(&c.onError, "on-error", "open", "while Redis cannot decide: open (serve), closed (503) or local (limit in this process)")
	flag.Int64Var(&c.rate, "rate", 10, "request rate limiter: requests per second per user")
	flag.Int64Var(&c.burst, "burst", 20, "request rate limiter: the most one user sends at once")
	flag.Int64Var(&c.concurrency, "concurrency", 3, "concurrent requests limiter: requests one user runs at once")
	flag.Int64Var(&c.fleetRate, "fleet-rate", 20, fmt.Sprintf("fleet usage load shedder: requests per second for every user together (the bucket holds %d s of them)", fleetWindow))
	flag.Float64Var(&c.fleetReserve, "fleet-reserve", 0.2, "fleet usage load shedder: the share of the fleet's bucket kept for critical requests")
	flag.IntVar(&c.maxInFlight, "max-in-flight", 20, "worker utilization load shedder: requests this process serves at once")
	flag.DurationVar(&c.work, "work", 50*time.Millisecond, "how long POST /v1/charges works")
	flag.DurationVar(&c.timeout, "timeout", 50*time.Millisecond, "the most one request waits for Redis, not counting the client's start-up work (a process's first requests wait up to 2 s for it)")
	flag.DurationVar(&c.headerTimeout, "header-timeout", 5*time.Second, "the most a client may take to send a request's headers")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var err error
	if *load != "" {
		err = runLoad(os.Stdout, *load, c)
	} else {
		err = serve(log, *listen, *addr, c)
	}
	if err != nil {
		log.Error("stripe example", "err", err)
		os.Exit(1)
	}
}

// limiter is the four limiters as one policy: three httplimit.Policies
// (decided in Redis) and the in-flight shedder (in this process).
func limiter(rdb redis.UniversalClient, log *slog.Logger, c config) (*httplimit.Limiter, error) {
	modes := map[string]httplimit.OnError{"open": httplimit.FailOpen, "closed": httplimit.FailClosed, "local": httplimit.FailLocal}
	mode, ok := modes[c.onError]
	if !ok {
		return nil, fmt.Errorf("-on-error %q: want open, closed or local", c.onError)
	}
	if c.rate <= 0 || c.burst <= 0 || c.concurrency <= 0 || c.fleetRate <= 0 || c.maxInFlight <= 0 {
		return nil, errors.New("-rate, -burst, -concurrency, -fleet-rate and -max-in-flight must be above 0")
	}
	if c.fleetReserve < 0 || c.fleetReserve >= 1 {
		return nil, fmt.Errorf("-fleet-reserve %v: want a share from 0 up to 1", c.fleetReserve)
	}
	user := httplimit.APIKey("X-API-Key")
	fleet := c.fleetRate * fleetWindow
	reserve := int64(float64(fleet) * c.fleetReserve)
	return httplimit.New(rdb, httplimit.Options{
		OnError: mode,
		Timeout: c.timeout,
		Logger:  log,
		Headers: httplimit.IETF | httplimit.XRateLimit,
		// 4. Worker utilization load shedder: Stripe's tiers, each shed
		// from its share of MaxInFlight on (these are the defaults, stated).
		Priority:    priority,
		MaxInFlight: c.maxInFlight,
		ShedAt:      map[httplimit.Priority]float64{httplimit.Lowest: 0.5, httplimit.Low: 0.7, httplimit.Default: 0.9}, // Critical: never
	},
		// 1. Request rate limiter: 429 over the user's rate.
		httplimit.Policy{
			Name:  "rate",
			Limit: client.TokenBucket(c.burst, c.rate, time.Second),
			Key:   user,
		},
		// 2. Concurrent requests limiter: keyed per user, so a refusal is
		// 429 (the user's share), not 503 (Global or Route: the service's).
		httplimit.Policy{
			Name:        "concurrency",
			Concurrency: client.Concurrency{Limit: c.concurrency, Lease: slotLease},
			Key:         user,
		},
		// 3. Fleet usage load shedder: one bucket for every user; below
		// the reserve only critical requests pass, the others are shed 503.
		// Quiet: the fleet's figures are nobody's business.
		httplimit.Policy{
			Name:  "fleet",
			Limit: client.TokenBucket(fleet, c.fleetRate, time.Second),
			Key:   httplimit.Global(),
			Quiet: true,
			Reserve: map[httplimit.Priority]int64{
				httplimit.Lowest: reserve, httplimit.Low: reserve, httplimit.Default: reserve, // Critical: none held back
			},
		},
	)
}

// critical are the critical methods: never shed, and the fleet's reserve
// is theirs.
var critical = map[string]bool{"POST /v1/charges": true}

// priority sorts a request into Stripe's four tiers.
func priority(r *http.Request) httplimit.Priority {
	switch {
	case testMode(r):
		return httplimit.Lowest
	case critical[r.Method+" "+r.URL.Path]:
		return httplimit.Critical
	case r.Method == http.MethodPost:
		return httplimit.Default
	}
	return httplimit.Low
}

// testMode reports a test mode request: X-Test-Mode: 1, or an sk_test_ key.
func testMode(r *http.Request) bool {
	return r.Header.Get("X-Test-Mode") == "1" || strings.HasPrefix(apiKey(r), "sk_test_")
}

// apiKey is the request's API key, as httplimit.APIKey("X-API-Key") reads
// it (but not hashed).
func apiKey(r *http.Request) string {
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && v != "" {
		return v
	}
	return r.Header.Get("X-API-Key")
}

// api is the payments API: four handlers, an API key required.
func api(work time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/balance", func(w http.ResponseWriter, r *http.Request) {
		reply(w, r, map[string]any{"object": "balance", "available": []map[string]any{{"amount": 12345, "currency": "usd"}}})
	})
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		if !sleep(r.Context(), work) {
			return
		}
		reply(w, r, map[string]any{"object": "charge", "id": "ch_" + strconv.FormatInt(time.Now().UnixNano(), 36), "status": "succeeded"})
	})
	mux.HandleFunc("POST /v1/refunds", func(w http.ResponseWriter, r *http.Request) {
		reply(w, r, map[string]any{"object": "refund", "id": "re_" + strconv.FormatInt(time.Now().UnixNano(), 36), "status": "succeeded"})
	})
	slow := func(w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
		if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > maxHold {
			http.Error(w, fmt.Sprintf("ms: want 0 to %d", maxHold.Milliseconds()), http.StatusBadRequest)
			return
		}
		// The headers go at once: the client knows the request is in
		// flight (it holds its slot) until the body ends.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		if sleep(r.Context(), time.Duration(ms)*time.Millisecond) {
			fmt.Fprintf(w, "{\"object\":\"slow\",\"held_ms\":%d,\"livemode\":%t}\n", ms, !testMode(r))
		}
	}
	mux.HandleFunc("GET /v1/slow", slow)
	mux.HandleFunc("POST /v1/slow", slow)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if apiKey(r) == "" {
			http.Error(w, "an API key is required: X-API-Key or Authorization: Bearer", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func reply(w http.ResponseWriter, r *http.Request, v map[string]any) {
	v["livemode"] = !testMode(r)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func serve(log *slog.Logger, listen, addr string, c config) error {
	// ContextTimeoutEnabled: go-redis ends each call at its context's
	// deadline, so a Redis that accepts and never answers costs a request
	// the limiter's timeout, not go-redis's ReadTimeout.
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := limiter(rdb, log, c)
	if err != nil {
		return err
	}
	s := &http.Server{
		Handler:           lim.Handler(api(c.work)),
		ReadHeaderTimeout: c.headerTimeout,
		ReadTimeout:       2 * c.headerTimeout,
		WriteTimeout:      2*c.headerTimeout + maxHold + 10*time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	stop, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Info("serving", "addr", "http://"+ln.Addr().String(), "redis", addr, "on_error", c.onError,
		"rate", c.rate, "burst", c.burst, "concurrency", c.concurrency, "fleet_rate", c.fleetRate,
		"fleet_reserve", c.fleetReserve, "max_in_flight", c.maxInFlight)
	errs := make(chan error, 1)
	go func() { errs <- s.Serve(ln) }()
	select {
	case err := <-errs:
		return err
	case <-stop.Done():
	}
	log.Info("stopping: finishing the requests in flight")
	ctx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	if err := s.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// The load: four scenarios, one line each.

// loader sends the load's requests, each user's key unique to the run.
type loader struct {
	base string
	run  string // this run's part of every API key
	hc   *http.Client
	c    config
}

// counts are responses by status.
type counts map[int]int

// String is "200×21 429×19", by status.
func (n counts) String() string {
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%d×%d", s, n[s]))
	}
	if parts == nil {
		return "none"
	}
	return strings.Join(parts, " ")
}

// request is one request of the load: method, path, API key, headers.
type request struct {
	method, path, key string
	header            []string // name, value, ...
}

// send sends req and returns the response with its body unread (the
// caller closes it).
func (l *loader) send(req request) (*http.Response, error) {
	r, err := http.NewRequest(req.method, l.base+req.path, nil)
	if err != nil {
		return nil, err
	}
	if req.key != "" {
		r.Header.Set("X-API-Key", req.key)
	}
	for i := 0; i+1 < len(req.header); i += 2 {
		r.Header.Set(req.header[i], req.header[i+1])
	}
	return l.hc.Do(r)
}

// status sends req and reads its whole response: its status.
func (l *loader) status(req request) (int, error) {
	resp, err := l.send(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// key is an API key for user in this run: sk_live_… (sk_test_… in test
// mode).
func (l *loader) key(mode, user string) string {
	return "sk_" + mode + "_" + user + "_" + l.run
}

func runLoad(out io.Writer, base string, c config) error {
	if c.burst <= 0 || c.concurrency <= 0 || c.fleetRate <= 0 || c.maxInFlight <= 0 {
		return errors.New("-burst, -concurrency, -fleet-rate and -max-in-flight must be above 0")
	}
	l := &loader{
		base: strings.TrimRight(base, "/"),
		run:  strconv.FormatInt(time.Now().UnixNano(), 36),
		hc:   &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		c:    c,
	}
	if err := l.waitFleet(out); err != nil {
		return err
	}
	for _, s := range []struct {
		name string
		run  func() (string, error)
	}{{"rate", l.rate}, {"concurrency", l.concurrency}, {"workers", l.workers}, {"fleet", l.fleet}} {
		line, err := s.run()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(out, "%s: %s\n", s.name, line)
	}
	return nil
}

// waitFleet waits, when an earlier run left the fleet draining (a request
// shed 503), for its bucket to refill.
func (l *loader) waitFleet(out io.Writer) error {
	for i := 0; ; i++ {
		status, err := l.status(request{"GET", "/v1/balance", l.key("live", "probe"+strconv.Itoa(i)), nil})
		if err != nil {
			return err
		}
		if status != http.StatusServiceUnavailable {
			return nil
		}
		if i == 3 {
			return errors.New("the server still sheds every request after waiting for the fleet to refill")
		}
		fmt.Fprintf(out, "(the fleet sheds load: waiting %d s for it to refill)\n", fleetWindow)
		time.Sleep(fleetWindow * time.Second)
	}
}

// rate: user A sends twice its burst one after the other (about the burst
// passes, the rest is refused 429), then user B a few (all pass: the limit
// is A's own).
func (l *loader) rate() (string, error) {
	a, b := counts{}, counts{}
	for range 2 * l.c.burst {
		s, err := l.status(request{"GET", "/v1/balance", l.key("live", "a"), nil})
		if err != nil {
			return "", err
		}
		a[s]++
	}
	for range 5 {
		s, err := l.status(request{"GET", "/v1/balance", l.key("live", "b"), nil})
		if err != nil {
			return "", err
		}
		b[s]++
	}
	return fmt.Sprintf("user-a %v, user-b %v", a, b), nil
}

// concurrency: user C starts its concurrency and 5 more slow requests at
// once; the first ones hold their slots (3 s), the others are refused 429.
// Once they end, C is served again.
func (l *loader) concurrency() (string, error) {
	key := l.key("live", "c")
	started, err := l.hold(int(l.c.concurrency)+5, func(int) request {
		return request{"GET", "/v1/slow?ms=3000", key, nil}
	})
	if err != nil {
		return "", err
	}
	atOnce := started.release()
	after := counts{}
	s, err := l.status(request{"GET", "/v1/balance", key, nil})
	if err != nil {
		return "", err
	}
	after[s]++
	return fmt.Sprintf("at-once %v, after %v", atOnce, after), nil
}

// workers: 80 % of -max-in-flight slow POSTs (Default) from as many users
// fill the server (5 s); while they hold, each tier sends a few requests
// one after the other: test mode and GETs are shed 503, other POSTs and
// critical ones served.
func (l *loader) workers() (string, error) {
	holders := l.c.maxInFlight * 4 / 5
	held, err := l.hold(holders, func(i int) request {
		return request{"POST", "/v1/slow?ms=5000", l.key("live", "holder"+strconv.Itoa(i)), nil}
	})
	if err != nil {
		return "", err
	}
	tiers := []struct {
		name string
		reqs []request
	}{
		{"critical", []request{
			{"POST", "/v1/charges", l.key("live", "w-critical1"), nil},
			{"POST", "/v1/charges", l.key("live", "w-critical2"), nil},
			{"POST", "/v1/charges", l.key("live", "w-critical3"), nil}}},
		{"default", []request{
			{"POST", "/v1/refunds", l.key("live", "w-default1"), nil},
			{"POST", "/v1/refunds", l.key("live", "w-default2"), nil},
			{"POST", "/v1/refunds", l.key("live", "w-default3"), nil}}},
		{"low", []request{
			{"GET", "/v1/balance", l.key("live", "w-low1"), nil},
			{"GET", "/v1/balance", l.key("live", "w-low2"), nil},
			{"GET", "/v1/balance", l.key("live", "w-low3"), nil}}},
		{"lowest", []request{ // test mode, even for a critical method
			{"POST", "/v1/charges", l.key("live", "w-lowest1"), []string{"X-Test-Mode", "1"}},
			{"POST", "/v1/charges", l.key("live", "w-lowest2"), []string{"X-Test-Mode", "1"}},
			{"GET", "/v1/balance", l.key("test", "w-lowest3"), nil},
			{"POST", "/v1/refunds", l.key("test", "w-lowest4"), nil}}},
	}
	parts := []string{""}
	for _, tier := range tiers {
		n := counts{}
		for _, req := range tier.reqs {
			s, err := l.status(req)
			if err != nil {
				held.release()
				return "", err
			}
			n[s]++
		}
		parts = append(parts, fmt.Sprintf("%s %v", tier.name, n))
	}
	parts[0] = fmt.Sprintf("holders %v", held.release())
	return strings.Join(parts, ", "), nil
}

// fleet: many users, each with a quota of its own, send GETs 8 at a time
// until the fleet has shed 20 of them (its bucket is down to the reserve);
// then critical charges pass.
func (l *loader) fleet() (string, error) {
	const want = 20
	others := counts{}
	var mu sync.Mutex
	var shed, sent atomic.Int64
	errs := make(chan error, 8)
	limit := l.c.fleetRate * fleetWindow * 20 // a fleet that never sheds: give up
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for shed.Load() < want && time.Now().Before(deadline) {
				i := sent.Add(1)
				if i > limit {
					return
				}
				s, err := l.status(request{"GET", "/v1/balance", l.key("live", "f"+strconv.FormatInt(i, 10)), nil})
				if err != nil {
					errs <- err
					return
				}
				if s == http.StatusServiceUnavailable {
					shed.Add(1)
				}
				mu.Lock()
				others[s]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return "", err
	default:
	}
	crit := counts{}
	for i := range 5 {
		s, err := l.status(request{"POST", "/v1/charges", l.key("live", "f-critical"+strconv.Itoa(i)), nil})
		if err != nil {
			return "", err
		}
		crit[s]++
	}
	return fmt.Sprintf("others %v, critical %v", others, crit), nil
}

// held are requests in flight: each has its headers, its body is unread.
type held struct {
	resps  []*http.Response
	status counts
}

// hold sends n requests at once and returns when each has its response's
// headers: the served ones are then in flight until release.
func (l *loader) hold(n int, req func(i int) request) (*held, error) {
	h := &held{resps: make([]*http.Response, n), status: counts{}}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { h.resps[i], errs[i] = l.send(req(i)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		h.release()
		return nil, err
	}
	for _, r := range h.resps {
		h.status[r.StatusCode]++
	}
	return h, nil
}

// release reads every held response to its end (the server ends each
// when its hold is over) and returns their statuses.
func (h *held) release() counts {
	var wg sync.WaitGroup
	for _, r := range h.resps {
		if r != nil {
			wg.Go(func() {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
			})
		}
	}
	wg.Wait()
	return h.status
}
