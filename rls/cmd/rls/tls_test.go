package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// zeroConfig is a config whose limit d/k admits nothing: a request for it
// is refused without Redis, so that these tests need no server.
const zeroConfig = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// startRLS runs rls in this process with env (and the config above in its
// directory, no Redis listening) until the test ends, and returns its gRPC
// address.
func startRLS(t *testing.T, env map[string]string, wait bool) string {
	t.Helper()
	grpcAddr, _ := startRLSArgs(t, env, wait)
	return grpcAddr
}

// startRLSArgs is startRLS with more flags, and returns the HTTP address
// (/metrics) as well.
func startRLSArgs(t *testing.T, env map[string]string, wait bool, extra ...string) (string, string) {
	t.Helper()
	env["LOG_LEVEL"] = "error"
	for k, v := range env {
		t.Setenv(k, v)
	}
	return serveIn(t, zeroConfig, wait, extra...)
}

// serveIn runs rls in this process with config in its directory (no
// Redis listening) and extra flags until the test ends, and returns its
// gRPC and HTTP addresses; with wait, once it listens.
func serveIn(t *testing.T, config string, wait bool, extra ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := append([]string{"-config", dir, "-grpc", grpcAddr, "-http", httpAddr, "-redis", fmt.Sprintf("127.0.0.1:%d", freePort(t))}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, args, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rls: %v", err)
		}
	})
	if wait {
		waitListening(t, grpcAddr)
	}
	return grpcAddr, httpAddr
}

// check asks rls, over creds, for d/k and returns the overall code, or the
// error; the connection's server certificate's serial is in *serial.
func check(addr string, creds credentials.TransportCredentials, key string, serial *int64) (string, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{
		Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}}},
	}, grpc.Peer(&p))
	if err != nil {
		return "", err
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && serial != nil && len(ti.State.PeerCertificates) > 0 {
		*serial = ti.State.PeerCertificates[0].SerialNumber.Int64()
	}
	return resp.OverallCode.String(), nil
}

// TestGRPCTLS: with Envoy Gateway's variables for the server's TLS (and
// no client CA) rls answers Envoy's rate limit client over TLS and refuses
// a plaintext one; a certificate written over the old one is served to
// the next connections, and one that does not load (a key of another
// certificate) leaves the last that did.
func TestGRPCTLS(t *testing.T) {
	p := rlstest.NewCA(t, "envoy-gateway")
	first := p.Issue(t, "tls", "localhost", "127.0.0.1")
	addr := startRLS(t, map[string]string{
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.Path("tls.crt"), "GRPC_SERVER_TLS_KEY": p.Path("tls.key"),
	}, true)
	creds := credentials.NewTLS(p.ClientTLS(t, "localhost", nil, ""))
	var serial int64
	if code, err := check(addr, creds, "k", &serial); err != nil || code != "OVER_LIMIT" || serial != first {
		t.Fatalf("over TLS: %s %v, certificate %d (want OVER_LIMIT from certificate %d)", code, err, serial, first)
	}
	if code, err := check(addr, creds, "other", nil); err != nil || code != "OK" {
		t.Fatalf("over TLS, no limit: %s %v", code, err)
	}
	if code, err := check(addr, insecure.NewCredentials(), "k", nil); err == nil {
		t.Fatalf("plaintext answered %s", code)
	}

	second := p.Issue(t, "tls", "localhost")
	deadline := time.Now().Add(5 * time.Second)
	for serial != second && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if _, err := check(addr, creds, "k", &serial); err != nil {
			t.Fatal(err)
		}
	}
	if serial != second {
		t.Fatalf("after the certificate was replaced, connections still get certificate %d (want %d)", serial, second)
	}

	// A half-done rotation: the certificate replaced and its key not yet.
	key, _ := os.ReadFile(p.Path("tls.key"))
	p.Issue(t, "tls", "localhost")
	if err := os.WriteFile(p.Path("tls.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if code, err := check(addr, creds, "k", &serial); err != nil || serial != second {
		t.Fatalf("with a certificate and a key that do not match: %s %v, certificate %d (want %d still)", code, err, serial, second)
	}
}

// TestGRPCMutualTLS: with Envoy Gateway's GRPC_SERVER_TLS_CA_CERT (or the
// peer's GRPC_CLIENT_TLS_CACERT) a client must show a certificate that CA
// signed: one without, or one another CA signed, is refused. With
// GRPC_CLIENT_TLS_SAN the certificate must also name it (as the peer
// holds it: a DNS name, which a wildcard of the certificate's matches).
func TestGRPCMutualTLS(t *testing.T) {
	p := rlstest.NewCA(t, "envoy-gateway")
	other := rlstest.NewCA(t, "other")
	p.Issue(t, "tls", "localhost")
	p.Issue(t, "envoy", "*.envoy-gateway-system") // Envoy Gateway's certificates name *.<namespace>
	p.Issue(t, "stranger", "stranger.example")
	other.Issue(t, "envoy", "*.envoy-gateway-system")
	for _, caVar := range []string{"GRPC_SERVER_TLS_CA_CERT", "GRPC_CLIENT_TLS_CACERT"} {
		t.Run(caVar, func(t *testing.T) {
			addr := startRLS(t, map[string]string{
				"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.Path("tls.crt"), "GRPC_SERVER_TLS_KEY": p.Path("tls.key"),
				caVar: p.Path("ca.crt"), "GRPC_CLIENT_TLS_SAN": "ratelimit.envoy-gateway-system",
			}, true)
			for _, c := range []struct {
				what   string
				issuer *rlstest.CA
				name   string
				ok     bool
			}{
				{"Envoy's certificate", p, "envoy", true},
				{"no certificate", nil, "", false},
				{"a certificate of another CA", other, "envoy", false},
				{"a certificate of the CA not naming the SAN", p, "stranger", false},
			} {
				code, err := check(addr, credentials.NewTLS(p.ClientTLS(t, "localhost", c.issuer, c.name)), "k", nil)
				if c.ok && (err != nil || code != "OVER_LIMIT") {
					t.Errorf("%s: %s %v, want OVER_LIMIT", c.what, code, err)
				}
				if !c.ok && err == nil {
					t.Errorf("%s: answered %s, want refused", c.what, code)
				}
			}
		})
	}
}

// TestTLSRefusedAtStart: TLS settings that cannot work stop rls at start,
// naming what is wrong.
func TestTLSRefusedAtStart(t *testing.T) {
	p := rlstest.NewCA(t, "envoy-gateway")
	p.Issue(t, "tls", "localhost")
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "(GRPC_SERVER_USE_TLS): a server needs a certificate and its key"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.Path("tls.crt"), "GRPC_SERVER_TLS_KEY": p.Path("tls.key"), "GRPC_CLIENT_TLS_SAN": "envoy"}, "GRPC_CLIENT_TLS_SAN) \"envoy\" needs"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.Path("tls.crt"), "GRPC_SERVER_TLS_KEY": p.Path("missing.key")}, "missing.key"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.Path("tls.crt"), "GRPC_SERVER_TLS_KEY": p.Path("tls.key"), "GRPC_CLIENT_TLS_CACERT": p.Path("tls.key")}, "no certificate in"},
	} {
		t.Run(c.want, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // it would serve if the settings passed
			defer cancel()
			err := serve(ctx, []string{"-config", t.TempDir(), "-log-level", "error", "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"}, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v: %v, want it to say %q", c.env, err, c.want)
			}
		})
	}
}
