package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/credentials"

	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// envoyGatewayEnv is every variable Envoy Gateway sets on the rate limit
// container (internal/infrastructure/kubernetes/ratelimit/resource.go,
// expectedRateLimitContainerEnv), always or under a setting of its own:
// Redis, Redis TLS, Prometheus (the default), tracing.
var envoyGatewayEnv = []string{
	"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT", "LOG_LEVEL", "USE_STATSD",
	"CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID",
	"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_SERVER_TLS_CA_CERT",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
	"FORCE_START_WITHOUT_INITIAL_CONFIG",
	"REDIS_SOCKET_TYPE", "REDIS_URL", "REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_AUTH",
	"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_MAPPER_YAML",
	"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_SAMPLING_RATE", "OTEL_EXPORTER_OTLP_ENDPOINT",
}

// TestEnvoyGatewayEnvDocumented: each of Envoy Gateway's variables is read
// by a setting or named among the peer's variables (none ignored
// unsaid), and docs/rls.md's table of Envoy Gateway's environment has a
// row for it.
func TestEnvoyGatewayEnvDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/rls.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "\n## Envoy Gateway\n")
	table, _, _ = strings.Cut(table, "\n## ")
	read := map[string]bool{}
	for _, s := range settings(&flags{}) {
		read[s.env] = true
	}
	for _, p := range peerVars {
		if read[p.name] {
			t.Errorf("%s is both a setting's and a peer's variable", p.name)
		}
		read[p.name] = true
	}
	for _, v := range envoyGatewayEnv {
		if !read[v] {
			t.Errorf("%s, which Envoy Gateway sets, is read by no setting and is not among peerVars", v)
		}
		if !strings.Contains(table, "| `"+v+"` |") {
			t.Errorf("docs/rls.md's Envoy Gateway table has no row for %s", v)
		}
	}
}

// TestPeerValuesRefused: a value of the peer's that rls cannot honour
// stops it at start, naming the variable.
func TestPeerValuesRefused(t *testing.T) {
	for _, c := range [][2]string{
		{"USE_STATSD", "true"}, {"TRACING_EXPORTER_PROTOCOL", "zipkin"}, {"TRACING_SAMPLING_RATE", "1.5"}, {"RUNTIME_IGNOREDOTFILES", "false"}, {"RUNTIME_WATCH_ROOT", "yes please"},
		{"REDIS_SOCKET_TYPE", "udp"}, {"CONFIG_TYPE", "FILES"}, {"CONFIG_GRPC_XDS_NODE_METADATA", "zone:a"},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token"}, {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "0s"},
		{"XDS_MAX_DESCRIPTORS", "0"},
	} {
		t.Run(c[0], func(t *testing.T) {
			t.Setenv(c[0], c[1])
			_, err := parse(nil)
			if err == nil || !strings.Contains(err.Error(), c[0]) {
				t.Fatalf("%s=%s: %v, want an error naming it", c[0], c[1], err)
			}
		})
	}
	for _, c := range [][2]string{{"USE_STATSD", "false"}, {"TRACING_ENABLED", "true"}, {"TRACING_EXPORTER_PROTOCOL", "grpc"}, {"RUNTIME_IGNOREDOTFILES", "true"}, {"RUNTIME_WATCH_ROOT", "false"}, {"REDIS_SOCKET_TYPE", "tcp"}, {"CONFIG_TYPE", "grpc_xds_sotw"}} {
		t.Setenv(c[0], c[1])
	}
	if _, err := parse(nil); err != nil {
		t.Fatalf("Envoy Gateway's values: %v", err)
	}
}

// zeroLimit is a RateLimitConfig of domain d whose limit k admits nothing
// (refused without Redis) and, with bad, a unit that does not exist.
func zeroLimit(bad bool) *rlcfg.RateLimitConfig {
	unit := rlcfg.RateLimitUnit_MINUTE
	if bad {
		unit = rlcfg.RateLimitUnit_UNKNOWN
	}
	return &rlcfg.RateLimitConfig{Name: "default/eg/http", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Unit: unit, RequestsPerUnit: 0}},
	}}
}

// TestEnvoyGatewayStart: rls started with Envoy Gateway's environment
// (its certificates, its xDS server's mTLS, Prometheus on) serves Envoy
// over mTLS and takes its config from the xDS server. With
// FORCE_START_WITHOUT_INITIAL_CONFIG it answers OK, no limit, until the
// first config comes; a bad update is refused and the config stays, as
// is one of more descriptors than XDS_MAX_DESCRIPTORS.
// Without it, rls listens only once the first config is in force.
func TestEnvoyGatewayStart(t *testing.T) {
	p := rlstest.NewCA(t, "envoy-gateway")
	p.Issue(t, "tls", "*.envoy-gateway-system", "localhost") // the rate limit service's, shown to Envoy and to the xDS server
	p.Issue(t, "envoy", "*.envoy-gateway-system")
	env := func(x *rlstest.XDS, force string, promAddr string) map[string]string {
		return map[string]string{
			"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
			"LOG_LEVEL": "info", "USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW",
			"CONFIG_GRPC_XDS_SERVER_URL": x.Addr, "CONFIG_GRPC_XDS_NODE_ID": rlstest.Node,
			"CONFIG_GRPC_XDS_SERVER_TLS_SAN": "envoy-gateway", // Envoy Gateway's URL is envoy-gateway:18001, named by its certificate; here an address
			"GRPC_SERVER_USE_TLS":            "true", "GRPC_SERVER_TLS_CERT": p.Path("tls.crt"), "GRPC_SERVER_TLS_KEY": p.Path("tls.key"),
			"GRPC_SERVER_TLS_CA_CERT": p.Path("ca.crt"), "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": p.Path("tls.crt"), "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": p.Path("tls.key"),
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": p.Path("ca.crt"), "FORCE_START_WITHOUT_INITIAL_CONFIG": force,
			"REDIS_SOCKET_TYPE": "tcp", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": promAddr,
			"PROMETHEUS_MAPPER_YAML":              "/etc/statsd-exporter/conf.yaml",
			"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "100ms",
			"XDS_MAX_DESCRIPTORS":                 "2", // rls's own: an update of 3 is refused
		}
	}
	xdsTLS := func(t *testing.T, p *rlstest.CA) *tls.Config {
		p.Issue(t, "eg", "envoy-gateway", "envoy-gateway.envoy-gateway-system")
		return p.ServerTLS(t, "eg")
	}
	envoy := credentials.NewTLS(p.ClientTLS(t, "localhost", p, "envoy"))

	t.Run("FORCE_START_WITHOUT_INITIAL_CONFIG=true", func(t *testing.T) {
		x := rlstest.StartXDS(t, "127.0.0.1:0", xdsTLS(t, p))
		prom := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		addr := startRLS(t, env(x, "true", prom), true)
		if code, err := check(addr, envoy, "k", nil); err != nil || code != "OK" {
			t.Fatalf("before any config: %s %v, want OK (no limit)", code, err)
		}
		x.Push(t, "1", zeroLimit(false))
		x.Answered(t, "1", false)
		if code, err := check(addr, envoy, "k", nil); err != nil || code != "OVER_LIMIT" {
			t.Fatalf("with the config from xDS: %s %v, want OVER_LIMIT", code, err)
		}
		x.Push(t, "2", zeroLimit(true))
		if msg := x.Answered(t, "2", true); !strings.Contains(msg, "default/eg/http: invalid rate limit unit 'unknown'") {
			t.Errorf("the NACK says %q", msg)
		}
		if code, err := check(addr, envoy, "k", nil); err != nil || code != "OVER_LIMIT" {
			t.Fatalf("after a refused update: %s %v, want OVER_LIMIT still", code, err)
		}
		big := zeroLimit(false)
		big.Descriptors = append(big.Descriptors, &rlcfg.RateLimitDescriptor{Key: "a"}, &rlcfg.RateLimitDescriptor{Key: "b"})
		x.Push(t, "3", big)
		if msg := x.Answered(t, "3", true); !strings.Contains(msg, "more than 2 descriptors") {
			t.Errorf("an update of 3 descriptors past XDS_MAX_DESCRIPTORS=2: the NACK says %q", msg)
		}
		resp, err := http.Get("http://" + prom + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{`ratelimit_service_config_load{result="error"} `, `ratelimit_service_config_load{result="success"} 1`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("PROMETHEUS_ADDR's /metrics has no %s", want)
			}
		}
	})

	t.Run("FORCE_START_WITHOUT_INITIAL_CONFIG=false", func(t *testing.T) {
		x := rlstest.StartXDS(t, "127.0.0.1:0", xdsTLS(t, p))
		addr := startRLS(t, env(x, "false", fmt.Sprintf("127.0.0.1:%d", freePort(t))), false)
		time.Sleep(300 * time.Millisecond)
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Fatal("rls listens before its first config")
		}
		x.Push(t, "1", zeroLimit(false))
		waitListening(t, addr)
		if code, err := check(addr, envoy, "k", nil); err != nil || code != "OVER_LIMIT" {
			t.Fatalf("with the first config: %s %v, want OVER_LIMIT", code, err)
		}
	})
}
