package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
	"github.com/seed-6b3823f5/ratelimit/prom"
)

// httpRow is the middleware's cost: requests per second through a bare
// handler and through the middleware, one round each.
type httpRow struct {
	name       string
	bare, with []float64
}

// measureHTTP serves a tiny handler bare and behind httplimit (one policy,
// and two decided in one RL.ALL call) on loopback, and drives each with 32
// keep-alive clients, n requests per run, alternating, rounds times.
func measureHTTP(ctx context.Context, s *server, rounds, n int) []*httpRow {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), PoolSize: 64})
	defer rdb.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	// Each client gets a key of its own (X-Client), with room for every request.
	key := httplimit.Header("X-Client")
	one, err := httplimit.New(rdb, httplimit.Options{Prefix: "b:http1:"},
		httplimit.Policy{Name: "per-client", Limit: client.GCRA(int64(n), int64(n), time.Hour), Key: key})
	if err != nil {
		log.Fatal(err)
	}
	metrics, err := prom.New(prometheus.NewRegistry())
	if err != nil {
		log.Fatal(err)
	}
	withMetrics, err := httplimit.New(rdb, httplimit.Options{Prefix: "b:http3:", Event: metrics.Event},
		httplimit.Policy{Name: "per-client", Limit: client.GCRA(int64(n), int64(n), time.Hour), Key: key})
	if err != nil {
		log.Fatal(err)
	}
	metrics.Watch(withMetrics)
	two, err := httplimit.New(rdb, httplimit.Options{Prefix: "b:http2:"},
		httplimit.Policy{Name: "burst", Limit: client.GCRA(int64(n), int64(n), time.Hour), Key: key},
		httplimit.Policy{Name: "hourly", Limit: client.SlidingWindow(int64(n)*2, time.Hour), Key: key})
	if err != nil {
		log.Fatal(err)
	}
	rows := []*httpRow{{name: "one policy (GCRA)"}, {name: "one policy (GCRA), Prometheus metrics on (package prom)"},
		{name: "two policies, one RL.ALL call"},
		{name: "reference: no middleware, the handler sends one GET to Redis"}}
	get := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := rdb.Get(r.Context(), "b:http:get").Err(); err != nil && err != redis.Nil {
			http.Error(w, err.Error(), 500)
			return
		}
		io.WriteString(w, "ok")
	})
	wrap := []func(http.Handler) http.Handler{one.Handler, withMetrics.Handler, two.Handler, func(http.Handler) http.Handler { return get }}
	for r := range rounds {
		for i, row := range rows {
			s.rdb.FlushAll(ctx)
			for _, with := range []bool{r%2 == 0, r%2 == 1} {
				h := http.Handler(ok)
				if with {
					h = wrap[i](ok)
				}
				rps := drive(h, n)
				if with {
					row.with = append(row.with, rps)
				} else {
					row.bare = append(row.bare, rps)
				}
			}
			log.Printf("http round %d %s: bare %.0f req/s, with the middleware %.0f req/s", r+1, row.name,
				row.bare[len(row.bare)-1], row.with[len(row.with)-1])
		}
	}
	return rows
}

// drive serves h on loopback and sends n requests from 32 keep-alive
// clients; it returns requests per second. Every response must be a 200.
func drive(h http.Handler, n int) float64 {
	var sent atomic.Int64
	start := time.Now()
	load(h, func() bool { return sent.Add(1) <= int64(n) }, func(status int, _ time.Duration) {
		if status != 200 {
			log.Fatalf("bench: http: status %d", status)
		}
	})
	return float64(n) / time.Since(start).Seconds()
}

// load serves h on loopback and sends requests from 32 keep-alive clients,
// each of its own X-Client, while more says so; done sees each response's
// status and time.
func load(h http.Handler, more func() bool, done func(status int, took time.Duration)) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Go(func() {
			for more() {
				req, _ := http.NewRequest("GET", srv.URL, nil)
				req.Header.Set("X-Client", fmt.Sprint("c", c))
				start := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					log.Fatalf("bench: http: %v", err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done(resp.StatusCode, time.Since(start))
			}
		})
	}
	wg.Wait()
}

// hungRow is what requests cost while Redis hangs.
type hungRow struct {
	name                 string
	n                    int
	median, p99, slowest time.Duration
}

// measureHung stops s's process (SIGSTOP: connections are accepted and
// never answered) and drives 32 keep-alive clients for 3 s through the
// middleware, over a go-redis client built with ContextTimeoutEnabled and
// over one built without it, and through the reference: a handler that
// sends one GET with a 50 ms context over a go-redis client with its
// defaults. Each row starts from a fresh connection pool.
func measureHung(ctx context.Context, s *server) []*hungRow {
	addr := fmt.Sprintf("127.0.0.1:%d", s.port)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	var rows []*hungRow
	for _, c := range []struct {
		name   string
		ctxTTL bool
		bare   bool
	}{
		{"the middleware, go-redis client with ContextTimeoutEnabled", true, false},
		{"the middleware, go-redis client without it (the limiter bounds the call)", false, false},
		{"reference: a GET with a 50 ms context, go-redis's defaults", false, true},
	} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: c.ctxTTL, PoolSize: 64})
		rdb.Ping(ctx) // a connection in the pool, as a running service has
		h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cctx, cancel := context.WithTimeout(r.Context(), 50*time.Millisecond)
			defer cancel()
			rdb.Get(cctx, "b:hung")
			io.WriteString(w, "ok")
		}))
		if !c.bare {
			lim, err := httplimit.New(rdb, httplimit.Options{Prefix: "b:hung:", OnError: httplimit.FailOpen},
				httplimit.Policy{Name: "per-client", Limit: client.PerSecond(1000000), Key: httplimit.Header("X-Client")})
			if err != nil {
				log.Fatal(err)
			}
			h = lim.Handler(ok)
		}
		s.signal(syscall.SIGSTOP)
		row := &hungRow{name: c.name}
		lat := driveFor(h, 3*time.Second)
		s.signal(syscall.SIGCONT)
		rdb.Close()
		slices.Sort(lat)
		row.n = len(lat)
		if len(lat) > 0 {
			row.median, row.p99, row.slowest = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
		}
		log.Printf("hung Redis, %s: %d requests, median %v, p99 %v, slowest %v", c.name, row.n, row.median, row.p99, row.slowest)
		rows = append(rows, row)
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			log.Fatalf("bench: the server did not resume: %v", err)
		}
	}
	return rows
}

// driveFor sends requests to h from 32 keep-alive clients until d has
// passed; it returns every request's time.
func driveFor(h http.Handler, d time.Duration) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	end := time.Now().Add(d)
	load(h, func() bool { return time.Now().Before(end) }, func(_ int, took time.Duration) {
		mu.Lock()
		lat = append(lat, took)
		mu.Unlock()
	})
	return lat
}
