package httplimit_test

import (
	"log"
	"net/http"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
)

// An API behind a load balancer at 10.0.0.0/8: 60 requests a minute per
// client address, 1000 an hour per API key, at most 4 exports at once;
// while Redis is unreachable, each process limits on its own.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	ip := httplimit.ClientIP(httplimit.IPOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	lim, err := httplimit.New(rdb, httplimit.Options{OnError: httplimit.FailLocal},
		httplimit.Policy{Name: "per-ip", Limit: client.GCRA(59, 60, time.Minute), Key: ip},
		httplimit.Policy{Name: "per-key", Limit: client.SlidingWindow(1000, time.Hour), Key: httplimit.APIKey("X-API-Key")},
	)
	if err != nil {
		log.Fatal(err)
	}
	exports, err := httplimit.New(rdb, httplimit.Options{OnError: httplimit.FailOpen},
		httplimit.Policy{Name: "exports", Concurrency: client.Concurrency{Limit: 4, Lease: 2 * time.Minute}, Key: httplimit.Route()})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /export", exports.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	_ = http.Server{Addr: "127.0.0.1:8080", Handler: lim.Handler(mux)}
}
