// Command http serves any path with a 200 under one policy, "per-ip": 10
// requests per 60 s per client address, decided by the ratelimit module
// (or its Lua scripts on a server without it).
//
//	go run ./http -listen 127.0.0.1:8080 -redis 127.0.0.1:6379 [-on-error open|closed|local] [-metrics 127.0.0.1:9090]
//
// (from examples/, a Go module of its own), then
//
//	curl -i http://127.0.0.1:8080/
//	curl -s http://127.0.0.1:9090/metrics | grep ^ratelimit_
//
// No proxy is trusted: X-Forwarded-For is ignored, the connection's peer is
// the client. The server bounds every phase of a connection (a client that
// sends its headers slowly is cut off after -header-timeout) and stops
// gracefully on SIGTERM or SIGINT: it stops accepting, lets the requests
// in flight finish (up to 10 s), then exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
	"github.com/seed-6b3823f5/ratelimit/prom"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	addr := flag.String("redis", "127.0.0.1:6379", "the Redis server (with the ratelimit module, or without: its Lua scripts then)")
	onError := flag.String("on-error", "open", "while Redis cannot decide: open (serve), closed (503) or local (limit in this process)")
	metrics := flag.String("metrics", "", "serve Prometheus metrics on this address (GET /metrics); none when empty")
	timeout := flag.Duration("timeout", 50*time.Millisecond, "the most one request waits for Redis, not counting the client's start-up work (a process's first requests wait up to 2 s for it)")
	headerTimeout := flag.Duration("header-timeout", 5*time.Second, "the most a client may take to send a request's headers")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *listen, *addr, *onError, *metrics, *timeout, *headerTimeout); err != nil {
		log.Error("http example", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, listen, addr, onError, metrics string, timeout, headerTimeout time.Duration) error {
	modes := map[string]httplimit.OnError{"open": httplimit.FailOpen, "closed": httplimit.FailClosed, "local": httplimit.FailLocal}
	mode, ok := modes[onError]
	if !ok {
		return fmt.Errorf("-on-error %q: want open, closed or local", onError)
	}
	// ContextTimeoutEnabled: go-redis ends each call at its context's
	// deadline, so a Redis that accepts and never answers costs a request
	// the limiter's timeout, not go-redis's ReadTimeout.
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := prom.New(reg)
	if err != nil {
		return err
	}
	lim, err := httplimit.New(rdb, httplimit.Options{OnError: mode, Timeout: timeout, Logger: log, Event: m.Event},
		httplimit.Policy{
			Name:  "per-ip",
			Limit: client.FixedWindow(10, time.Minute),
			Key:   httplimit.ClientIP(httplimit.IPOptions{}),
		})
	if err != nil {
		return err
	}
	m.Watch(lim)

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	servers := []*http.Server{newServer(listen, lim.Handler(hello), headerTimeout)}
	if metrics != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		servers = append(servers, newServer(metrics, mux, headerTimeout))
	}

	stop, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	errs := make(chan error, len(servers))
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			return err
		}
		log.Info("serving", "addr", "http://"+ln.Addr().String(), "redis", addr, "on_error", onError)
		go func() { errs <- s.Serve(ln) }()
	}
	select {
	case err := <-errs:
		return err
	case <-stop.Done():
	}
	log.Info("stopping: finishing the requests in flight")
	ctx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	for _, s := range servers {
		if err := s.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return nil
}

// newServer bounds every phase of a connection: a client that sends its
// headers or body slowly, or reads the response slowly, or keeps an idle
// connection, gives it up.
func newServer(addr string, h http.Handler, headerTimeout time.Duration) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       2 * headerTimeout,
		WriteTimeout:      2*headerTimeout + 10*time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}
