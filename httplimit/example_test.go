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
// client address, 1000 an hour per API key, 5 failed logins per account a
// quarter of an hour (counted by the response: only a 401 counts), at most
// 4 exports at once. While Redis is unreachable, each process limits the
// reads on its own (FailLocal), and refuses logins and exports (503): the
// paths an attacker or a surge must not get through unlimited.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	ip := httplimit.ClientIP(httplimit.IPOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	lim, err := httplimit.New(rdb, httplimit.Options{OnError: httplimit.FailLocal},
		httplimit.Policy{Name: "per-ip", Limit: client.GCRA(59, 60, time.Minute), Key: ip},
		httplimit.Policy{Name: "per-key", Limit: client.SlidingWindow(1000, time.Hour), Key: httplimit.APIKey("X-API-Key")},
		httplimit.Policy{Name: "login-failures", Limit: client.SlidingWindow(5, 15*time.Minute), Key: httplimit.Account("user"),
			OnError: httplimit.FailClosed, Count: func(status int, _ *http.Request) int64 {
				if status == http.StatusUnauthorized {
					return 1
				}
				return 0
			}},
	)
	if err != nil {
		log.Fatal(err)
	}
	exports, err := httplimit.New(rdb, httplimit.Options{OnError: httplimit.FailClosed},
		httplimit.Policy{Name: "exports", Concurrency: client.Concurrency{Limit: 4, Lease: 2 * time.Minute}, Key: httplimit.Route()})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /export", exports.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	_ = http.Server{Addr: "127.0.0.1:8080", Handler: lim.Handler(mux)}
}
