package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
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
	two, err := httplimit.New(rdb, httplimit.Options{Prefix: "b:http2:"},
		httplimit.Policy{Name: "burst", Limit: client.GCRA(int64(n), int64(n), time.Hour), Key: key},
		httplimit.Policy{Name: "hourly", Limit: client.SlidingWindow(int64(n)*2, time.Hour), Key: key})
	if err != nil {
		log.Fatal(err)
	}
	rows := []*httpRow{{name: "one policy (GCRA)"}, {name: "two policies, one RL.ALL call"},
		{name: "reference: no middleware, the handler sends one GET to Redis"}}
	get := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := rdb.Get(r.Context(), "b:http:get").Err(); err != nil && err != redis.Nil {
			http.Error(w, err.Error(), 500)
			return
		}
		io.WriteString(w, "ok")
	})
	wrap := []func(http.Handler) http.Handler{one.Handler, two.Handler, func(http.Handler) http.Handler { return get }}
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
	srv := httptest.NewServer(h)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var sent atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range 32 {
		wg.Go(func() {
			for sent.Add(1) <= int64(n) {
				req, _ := http.NewRequest("GET", srv.URL, nil)
				req.Header.Set("X-Client", fmt.Sprint("c", c))
				resp, err := hc.Do(req)
				if err != nil {
					log.Fatalf("bench: http: %v", err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					log.Fatalf("bench: http: status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}
