// Package rlstest holds what tests of rls and of its deployments need:
// go-control-plane's xDS server as Envoy Gateway runs it for its rate limit
// service (a snapshot cache, state of the world, RateLimitConfig
// resources for one node), and a CA as the gateway makes one.
package rlstest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Node is the node the server serves: Envoy Gateway's rate limit service.
const Node = "envoy-ratelimit"

// XDS is the xDS server on a loopback port, recording the requests it
// gets and the version of each response it sends.
type XDS struct {
	Addr  string
	Cache cachev3.SnapshotCache
	GRPC  *grpc.Server

	mu     sync.Mutex
	reqs   []*discoverygrpc.DiscoveryRequest
	nonces map[string]string // each response's nonce: its version
}

// StartXDS serves at addr ("127.0.0.1:0": any port), over TLS where tc is
// not nil, until the test ends.
func StartXDS(t testing.TB, addr string, tc *tls.Config) *XDS {
	t.Helper()
	x := &XDS{Cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), nonces: map[string]string{}}
	srv := serverv3.NewServer(context.Background(), x.Cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoverygrpc.DiscoveryRequest) error {
			x.mu.Lock()
			x.reqs = append(x.reqs, r)
			x.mu.Unlock()
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoverygrpc.DiscoveryRequest, r *discoverygrpc.DiscoveryResponse) {
			x.mu.Lock()
			x.nonces[r.GetNonce()] = r.GetVersionInfo()
			x.mu.Unlock()
		},
	})
	var l net.Listener
	var err error
	for range 50 { // the address of a server just stopped may take a moment to free
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	x.Addr = l.Addr().String()
	var opts []grpc.ServerOption
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	x.GRPC = grpc.NewServer(opts...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(x.GRPC, srv)
	go x.GRPC.Serve(l)
	t.Cleanup(x.GRPC.Stop)
	return x
}

// Push makes version, with cfgs, the state of the world.
func (x *XDS) Push(t testing.TB, version string, cfgs ...*rlcfg.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Cache.SetSnapshot(context.Background(), Node, snap); err != nil {
		t.Fatal(err)
	}
}

// Answered waits (up to 5 s) for the request that answers a response of
// version: its ACK (nack false: no error, and version then in force) or
// its NACK (nack true), and returns the NACK's message.
func (x *XDS) Answered(t testing.TB, version string, nack bool) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		answers, stray := x.answers(version, nack)
		if stray != nil {
			t.Fatalf("request from node %q for %s", stray.GetNode().GetId(), stray.GetTypeUrl())
		}
		if len(answers) > 0 {
			r := answers[0]
			if !nack && r.GetVersionInfo() != version {
				t.Fatalf("the ACK of version %s says %s is in force", version, r.GetVersionInfo())
			}
			return r.GetErrorDetail().GetMessage()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s for version %s", map[bool]string{true: "NACK", false: "ACK"}[nack], version)
	return ""
}

// Answers is how many requests have answered responses of version so far:
// its NACKs (nack true) or its ACKs.
func (x *XDS) Answers(version string, nack bool) int {
	answers, _ := x.answers(version, nack)
	return len(answers)
}

// answers are the requests so far that answered responses of version
// (its NACKs, or its ACKs), in order, and the first request, if any, from
// another node or for another type.
func (x *XDS) answers(version string, nack bool) (answers []*discoverygrpc.DiscoveryRequest, stray *discoverygrpc.DiscoveryRequest) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, r := range x.reqs {
		if stray == nil && (r.GetNode().GetId() != Node || r.GetTypeUrl() != resourcev3.RateLimitConfigType) {
			stray = r
		}
		if x.nonces[r.GetResponseNonce()] == version && (r.GetErrorDetail() != nil) == nack {
			answers = append(answers, r)
		}
	}
	return answers, stray
}
