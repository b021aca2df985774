package rls_test

import (
	"fmt"
	"log"
	"net"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/seed-6b3823f5/ratelimit/rls"
)

// A service on a local Redis, answering gRPC on 127.0.0.1:8081 by the
// config files in ./config (cmd/rls is this with flags, metrics, a health
// check and a graceful stop).
func Example() {
	cfg, err := rls.LoadDir("config")
	if err != nil {
		log.Fatal(err) // names the file, the line and the key at fault
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	svc := rls.New(rdb, cfg, rls.Options{RefusalCache: 10000})

	l, err := net.Listen("tcp", "127.0.0.1:8081")
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, svc)
	log.Fatal(gs.Serve(l))
}

// Parse reads config files given by name; errors name the file and the
// line.
func ExampleParse() {
	_, err := rls.Parse(map[string][]byte{"apis.yaml": []byte(`
domain: apis
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky}
`)})
	fmt.Println(err)
	// Output:
	// apis.yaml:5: unknown algorithm 'leaky' for 'apis.remote_address' (fixed_window, sliding_window, sliding_log, gcra, token_bucket or concurrency)
}
