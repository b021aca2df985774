// Command http serves any path with a 200 under one policy, "per-ip": 10
// requests per 60 s per client address, decided by the ratelimit module.
//
//	go run ./examples/http -listen 127.0.0.1:8080 -redis 127.0.0.1:6379 [-on-error open|closed|local]
//
// then
//
//	curl -i http://127.0.0.1:8080/
//
// No proxy is trusted: X-Forwarded-For is ignored, the connection's peer is
// the client.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	addr := flag.String("redis", "127.0.0.1:6379", "the Redis server with the ratelimit module")
	onError := flag.String("on-error", "open", "while Redis is unreachable: open (serve), closed (503) or local (limit in this process)")
	flag.Parse()

	modes := map[string]httplimit.OnError{"open": httplimit.FailOpen, "closed": httplimit.FailClosed, "local": httplimit.FailLocal}
	mode, ok := modes[*onError]
	if !ok {
		log.Fatalf("-on-error %q: want open, closed or local", *onError)
	}
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	lim, err := httplimit.New(rdb, httplimit.Options{
		OnError: mode,
		Event: func(e httplimit.Event) {
			if e.Kind != httplimit.Failure { // failures come in bursts: log the breaker's changes
				log.Printf("ratelimit: %s %s %v", e.Kind, e.Policy, e.Err)
			}
		},
	}, httplimit.Policy{
		Name:  "per-ip",
		Limit: client.FixedWindow(10, time.Minute),
		Key:   httplimit.ClientIP(httplimit.IPOptions{}),
	})
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	log.Printf("serving on http://%s, limits in %s, on error %s", *listen, *addr, *onError)
	log.Fatal(http.ListenAndServe(*listen, lim.Handler(hello)))
}
