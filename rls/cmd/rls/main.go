// Command rls is an Envoy rate limit service (envoy.service.ratelimit.v3)
// on the ratelimit module: envoyproxy/ratelimit's config files and
// responses, its environment variables as defaults, and every algorithm
// of the module; the descriptors of one request are decided all or nothing.
//
//	rls -config ./config -redis 127.0.0.1:6379 -grpc 127.0.0.1:8081 -http 127.0.0.1:8080
//
// A config that does not load at start is an error naming the file (exit
// status 1); a later one that does not load leaves the previous one
// running. SIGTERM or SIGINT stops it gracefully: the health check fails at
// once, requests in flight finish (for up to -drain), then it exits.
//
// `rls -version` prints the version. `rls -healthcheck` asks the
// /healthcheck of the rls the same flags and environment describe and
// exits 0 when it answers 200: a container's health check, for an image
// with no shell and no curl.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // calendar: time zones, in an image without /usr/share/zoneinfo

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lease"
	"github.com/seed-6b3823f5/ratelimit/rls"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rls:", err)
		os.Exit(1)
	}
}

// env is an environment variable's value, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// defaultConfigDir is the peer's: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
func defaultConfigDir() string {
	return filepath.Join(env("RUNTIME_ROOT", "/srv/runtime_data/current"), os.Getenv("RUNTIME_SUBDIRECTORY"), env("RUNTIME_APPDIRECTORY", "config"))
}

type flags struct {
	config, grpcAddr, httpAddr                       string
	redisAddr, redisType, redisAuth, redisCA, prefix string
	redisTLS, redisSkipVerify, shadow, headers       bool
	lease, failLocal                                 bool
	limitHeaders                                     bool
	poolSize, refusalCache, metricKeys               int
	breakerFailures                                  int
	breakerCooldown                                  time.Duration
	refusalCacheBytes                                int64
	connStreams, streams, handshakes                 int
	timeout, drain, handshakeTimeout                 time.Duration
	nearLimit                                        float64
	engine, logLevel                                 string
	version, healthcheck                             bool

	redisCert, redisKey string
	// The gRPC server's TLS.
	grpcTLS                                                bool
	grpcCert, grpcKey, grpcCA, grpcClientCA, grpcClientSAN string
	// Where the config comes from: files, or an xDS server.
	configType, xdsURL, xdsNode, xdsNodeMeta, xdsHeaders string
	xdsMeta, xdsHeaderMap                                map[string]string // the two above, read
	xdsTLS                                               bool
	xdsCert, xdsKey, xdsCA, xdsSAN                       string
	xdsBackoffInitial, xdsBackoffMax                     time.Duration
	xdsBackoffFactor                                     float64
	xdsBackoffJitter, forceStart                         bool
	xdsMaxMsg                                            int
	xdsMaxDescriptors                                    int
	// A Prometheus listener of the peer's.
	prometheus                 bool
	prometheusAddr, promPath   string
	debtCharges                string
	quotaMode, dynamicMetadata bool
	rlqs                       bool
	// OpenTelemetry tracing (tracing.go).
	tracing                                                         bool
	serviceName, serviceNamespace, serviceInstance, tracingProtocol string
	samplingRate                                                    float64
}

// defaultHandshakes is -grpc-handshakes's default: a connection held in
// handshake costs about 14 KiB (hostile testing: 19,500 of them, 267
// MiB), so 1,024 hold at most about 14 MiB, and a TLS handshake takes
// well under a millisecond of CPU, so a herd of real clients passes
// through them at the pace of the CPU.
const defaultHandshakes = 1024

// setting is one of rls's settings, declared once, as the peer's settings
// struct declares its own: the flag, the peer's environment variable that
// sets it as well ("": none), its default (a flag's text; the variable,
// when set, replaces it) and what it means. A variable that does not
// parse is an error naming it.
type setting struct {
	flag, env, def, usage string
	value                 any  // *string, *bool, *int, *int64, *float64 or *time.Duration
	lower                 bool // the value is taken in lower case
}

// settings are every setting, pointing into f.
func settings(f *flags) []setting {
	return []setting{
		{"config", "", defaultConfigDir(), "directory of *.yaml config files (default from RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY)", &f.config, false},
		{"grpc", "", net.JoinHostPort(env("GRPC_HOST", "127.0.0.1"), env("GRPC_PORT", "8081")), "gRPC listen address (GRPC_HOST, GRPC_PORT)", &f.grpcAddr, false},
		{"http", "", net.JoinHostPort(env("HOST", "127.0.0.1"), env("PORT", "8080")), "HTTP listen address for /healthcheck and /metrics (HOST, PORT)", &f.httpAddr, false},
		{"redis", "REDIS_URL", "127.0.0.1:6379", "Redis: host:port, a unix socket path, a redis:// or rediss:// URL; for a cluster, seed nodes separated by commas; for sentinel, the master's name then the sentinels", &f.redisAddr, false},
		{"redis-type", "REDIS_TYPE", "single", "single, cluster or sentinel", &f.redisType, true},
		{"redis-auth", "REDIS_AUTH", "", "password, or user:password", &f.redisAuth, false},
		{"redis-tls", "REDIS_TLS", "false", "connect to Redis over TLS", &f.redisTLS, false},
		{"redis-tls-ca", "REDIS_TLS_CACERT", "", "PEM file of the CA that signed Redis's certificate", &f.redisCA, false},
		{"redis-tls-skip-verify", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", "do not verify Redis's certificate", &f.redisSkipVerify, false},
		{"redis-tls-cert", "REDIS_TLS_CLIENT_CERT", "", "PEM file of the client certificate rls shows Redis over TLS", &f.redisCert, false},
		{"redis-tls-key", "REDIS_TLS_CLIENT_KEY", "", "PEM file of that certificate's key", &f.redisKey, false},
		{"redis-pool-size", "REDIS_POOL_SIZE", "0", "connections per Redis node (0: go-redis's default, 10 per CPU)", &f.poolSize, false},
		{"redis-timeout", "", "100ms", "bound on each Redis call; past it the request fails with UNAVAILABLE", &f.timeout, false},
		{"breaker-failures", "", "0", "failures in a row that open a Redis server's circuit breaker: its keys' requests are then answered UNAVAILABLE at once, with no call, for -breaker-cooldown, then one probes it (0: off)", &f.breakerFailures, false},
		{"breaker-cooldown", "", "5s", "how long an open circuit breaker keeps requests from its Redis server", &f.breakerCooldown, false},
		{"fail-local", "", "false", "when Redis cannot decide (down, past -redis-timeout, its breaker open), decide here, each limit per key in this process, and charge Redis what was admitted once it answers, instead of answering UNAVAILABLE", &f.failLocal, false},
		{"prefix", "CACHE_KEY_PREFIX", "", "prefix of every Redis key", &f.prefix, false},
		{"near-limit-ratio", "NEAR_LIMIT_RATIO", "0.8", "share of a limit past which hits count as near it", &f.nearLimit, false},
		{"shadow", "SHADOW_MODE", "false", "answer OK whatever the limits decide; statuses and metrics still tell", &f.shadow, false},
		{"refusal-cache", "", "0", "refused keys remembered until their retry_after, answered without Redis (0: off)", &f.refusalCache, false},
		{"refusal-cache-bytes", "REFUSAL_CACHE_BYTES", strconv.Itoa(16 << 20), "bound of the refusal cache in bytes, each entry counted as its key's length and 160", &f.refusalCacheBytes, false},
		{"metric-keys", "METRIC_KEYS", "1000", "stat keys made of requests' own values (detailed_metric, Envoy's limit override) with metric series of their own; the rest count under key=\"_overflow\" (0: none)", &f.metricKeys, false},
		{"grpc-conn-streams", "GRPC_MAX_CONCURRENT_STREAMS", strconv.Itoa(rls.DefaultStreamsPerConnection), "concurrent gRPC streams per connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS)", &f.connStreams, false},
		{"grpc-streams", "GRPC_MAX_STREAMS", strconv.Itoa(rls.DefaultStreams), "concurrent gRPC streams over every connection; past it a stream is refused with RESOURCE_EXHAUSTED", &f.streams, false},
		{"grpc-handshake-timeout", "GRPC_HANDSHAKE_TIMEOUT", "10s", "how long a new gRPC connection has to finish its handshake (TLS, then HTTP/2's preface and settings); past it the connection is closed", &f.handshakeTimeout, false},
		{"grpc-handshakes", "GRPC_MAX_HANDSHAKES", strconv.Itoa(defaultHandshakes), "gRPC connections in handshake at once; past it new connections wait in the listen backlog until one finishes or is closed", &f.handshakes, false},
		{"ietf-headers", "", "false", "add the IETF RateLimit and RateLimit-Policy fields to responses (response_headers_to_add)", &f.headers, false},
		{"limit-headers", "LIMIT_RESPONSE_HEADERS_ENABLED", "false", "add the peer's RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset fields (names from LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER)", &f.limitHeaders, false},
		{"lease", "", "false", "decide the limits whose rate_limit says lease: true (the config refuses it on an algorithm that cannot lease) through a local tier: a descriptor hot on this rls spends units granted ahead, about one Redis call per 50 ms; limit_remaining is then what this rls holds", &f.lease, false},
		{"config-type", "CONFIG_TYPE", "FILE", "FILE (the -config directory) or GRPC_XDS_SOTW (RateLimitConfig resources from the xDS server at -xds)", &f.configType, false},
		{"xds", "CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", "the xDS server's host:port", &f.xdsURL, false},
		{"xds-node", "CONFIG_GRPC_XDS_NODE_ID", "default", "the node id rls gives the xDS server (Envoy Gateway's: envoy-ratelimit)", &f.xdsNode, false},
		{"xds-node-metadata", "CONFIG_GRPC_XDS_NODE_METADATA", "", "the node's metadata: key=value pairs separated by commas", &f.xdsNodeMeta, false},
		{"xds-headers", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", "gRPC metadata sent on each xDS stream: key:value pairs separated by commas", &f.xdsHeaders, false},
		{"xds-tls", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", "reach the xDS server over TLS", &f.xdsTLS, false},
		{"xds-tls-cert", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", "PEM file of the client certificate rls shows the xDS server (read again when it changes)", &f.xdsCert, false},
		{"xds-tls-key", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", "PEM file of that certificate's key", &f.xdsKey, false},
		{"xds-tls-ca", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", "PEM file of the CA that signed the xDS server's certificate (else the system's)", &f.xdsCA, false},
		{"xds-tls-san", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", "the name the xDS server's certificate must hold (else the host of -xds)", &f.xdsSAN, false},
		{"xds-backoff-initial", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", "the least wait before a new xDS stream after one fails", &f.xdsBackoffInitial, false},
		{"xds-backoff-max", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", "the most", &f.xdsBackoffMax, false},
		{"xds-backoff-factor", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", "each wait in a row is the last times this (the peer's default 0.5 keeps it at the least)", &f.xdsBackoffFactor, false},
		{"xds-backoff-jitter", "XDS_CLIENT_BACKOFF_JITTER", "true", "draw each wait between the least and its value", &f.xdsBackoffJitter, false},
		{"xds-max-msg-size", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "0", "the largest xDS response taken, in bytes (0: gRPC's 4 MiB)", &f.xdsMaxMsg, false},
		{"xds-max-descriptors", "XDS_MAX_DESCRIPTORS", "100000", "the most descriptors (nested ones counted) an xDS update may hold: a larger one is refused with a NACK naming this limit; -1: none", &f.xdsMaxDescriptors, false},
		{"force-start", "FORCE_START_WITHOUT_INITIAL_CONFIG", "false", "with GRPC_XDS_SOTW, serve at once, answering OK with no limit until the first config comes (else wait for it)", &f.forceStart, false},
		{"rlqs", "RLQS_ENABLED", "false", "serve Envoy's rate limit quota service (envoy.service.rate_limit_quota.v3, the rate_limit_quota filter) beside ShouldRateLimit, on the same config: each bucket's limit shared out over the Envoys as token buckets (docs/rls.md, RLQS)", &f.rlqs, false},
		{"quota-mode", "QUOTA_MODE", "false", "every descriptor with a limit is a quota, as quota_mode: true makes one: the request passes while one of its quotas admits it", &f.quotaMode, false},
		{"response-dynamic-metadata", "RESPONSE_DYNAMIC_METADATA", "false", "set each response's dynamic_metadata as the peer does: the domain, the descriptors, and the config's metadata of those that passed", &f.dynamicMetadata, false},
		{"tracing", "TRACING_ENABLED", "false", "export OpenTelemetry spans over OTLP (one per request, one per Redis call under it); the endpoint from OTEL_EXPORTER_OTLP_ENDPOINT and the SDK's other OTEL_EXPORTER_OTLP_* variables", &f.tracing, false},
		{"tracing-exporter-protocol", "TRACING_EXPORTER_PROTOCOL", "http", "http (OTLP over HTTP, protobuf) or grpc", &f.tracingProtocol, true},
		{"tracing-service-name", "TRACING_SERVICE_NAME", "RateLimit", "the spans' service.name", &f.serviceName, false},
		{"tracing-service-namespace", "TRACING_SERVICE_NAMESPACE", "", "the spans' service.namespace", &f.serviceNamespace, false},
		{"tracing-service-instance-id", "TRACING_SERVICE_INSTANCE_ID", "", "the spans' service.instance.id (default: a random UUID per start)", &f.serviceInstance, false},
		{"tracing-sampling-rate", "TRACING_SAMPLING_RATE", "1", "the share of traces started here that are sampled, 0 to 1; a request whose caller sent a trace context follows its sampling decision", &f.samplingRate, false},
		{"debt-charges", "DEBT_CHARGES", "auto", "true: a descriptor with a hits_addend of its own above 0, or with none of its own in a request whose hits_addend is above 0 (Envoy's cost, as Envoy Gateway's cost.response and AI Gateway's token budgets send after the response), is counted even past its limit, as under debt: true; auto: true with GRPC_XDS_SOTW, false with FILE", &f.debtCharges, true},
		{"grpc-tls", "GRPC_SERVER_USE_TLS", "false", "serve gRPC over TLS (certificate and key read again when their files change)", &f.grpcTLS, false},
		{"grpc-tls-cert", "GRPC_SERVER_TLS_CERT", "", "PEM file of the gRPC server's certificate", &f.grpcCert, false},
		{"grpc-tls-key", "GRPC_SERVER_TLS_KEY", "", "PEM file of its key", &f.grpcKey, false},
		{"grpc-tls-ca", "GRPC_SERVER_TLS_CA_CERT", "", "PEM file of the CA that signed the gRPC server's certificate (Envoy Gateway's): a certificate it did not sign is an error at start and refused when the files change; also the default of -grpc-tls-client-ca", &f.grpcCA, false},
		{"grpc-tls-client-ca", "GRPC_CLIENT_TLS_CACERT", "", "PEM file of the CA that signs clients' certificates: a client without one so signed is refused (default: -grpc-tls-ca)", &f.grpcClientCA, false},
		{"grpc-tls-client-san", "GRPC_CLIENT_TLS_SAN", "", "the DNS name (or IP address) a client's certificate must hold", &f.grpcClientSAN, false},
		{"prometheus", "USE_PROMETHEUS", "false", "serve /metrics at -prometheus-addr as well, as the peer's Prometheus sink", &f.prometheus, false},
		{"prometheus-addr", "PROMETHEUS_ADDR", ":9090", "the address of that listener", &f.prometheusAddr, false},
		{"prometheus-path", "PROMETHEUS_PATH", "/metrics", "its path", &f.promPath, false},
		{"engine", "", "auto", "auto (the module where loaded, else the Lua library), module, functions or scripts", &f.engine, false},
		{"drain", "", "10s", "on SIGTERM, how long requests in flight may take to finish", &f.drain, false},
		{"log-level", "LOG_LEVEL", "info", "debug, info, warn or error", &f.logLevel, true},
		{"version", "", "false", "print the version and exit", &f.version, false},
		{"healthcheck", "", "false", "ask the /healthcheck of the rls listening at -http (on loopback when it listens on every address) and exit 0 if it answers 200, else 1", &f.healthcheck, false},
	}
}

// peerVar is one of the peer's variables that Envoy Gateway sets and no
// setting reads, and the values rls refuses (check; nil: none).
// docs/rls.md's table of Envoy Gateway's environment says what the peer
// and rls do with each: none is ignored unsaid.
type peerVar struct {
	name  string
	check func(string) error
}

// refuseBool refuses the boolean value that rls cannot honour, saying why.
func refuseBool(refused bool, why string) func(string) error {
	return func(v string) error {
		if b, err := strconv.ParseBool(v); err != nil || b == refused {
			return errors.New(why)
		}
		return nil
	}
}

var peerVars = []peerVar{
	{"RUNTIME_ROOT", nil}, // the default of -config
	{"RUNTIME_SUBDIRECTORY", nil},
	{"RUNTIME_APPDIRECTORY", nil},
	{"RUNTIME_IGNOREDOTFILES", refuseBool(false, "rls never reads dot files (a ConfigMap's ..data): unset it or set true")},
	{"RUNTIME_WATCH_ROOT", isBool}, // either: the path to the directory is checked each second
	{"USE_STATSD", refuseBool(true, "rls sends no stats to statsd: set false, and scrape /metrics")},
	{"REDIS_SOCKET_TYPE", func(v string) error {
		if v != "tcp" && v != "unix" {
			return errors.New("tcp or unix")
		}
		return nil
	}},
	{"PROMETHEUS_MAPPER_YAML", nil},      // the series already have the names it gives
	{"OTEL_EXPORTER_OTLP_ENDPOINT", nil}, // read by the OTLP exporter itself (-tracing)
}

func isBool(v string) error {
	_, err := strconv.ParseBool(v)
	return err
}

// value is a setting as a flag.Value.
type value struct{ s *setting }

func (v value) String() string {
	if v.s == nil {
		return ""
	}
	switch p := v.s.value.(type) {
	case *string:
		return *p
	case *bool:
		return strconv.FormatBool(*p)
	case *int:
		return strconv.Itoa(*p)
	case *int64:
		return strconv.FormatInt(*p, 10)
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *time.Duration:
		return p.String()
	}
	return ""
}

func (v value) Set(text string) error {
	if v.s.lower {
		text = strings.ToLower(text)
	}
	var err error
	switch p := v.s.value.(type) {
	case *string:
		*p = text
	case *bool:
		*p, err = strconv.ParseBool(text)
	case *int:
		*p, err = strconv.Atoi(text)
	case *int64:
		*p, err = strconv.ParseInt(text, 10, 64)
	case *float64:
		*p, err = strconv.ParseFloat(text, 64)
	case *time.Duration:
		*p, err = time.ParseDuration(text)
	}
	return err
}

// IsBoolFlag lets a bool setting's flag stand alone (-shadow).
func (v value) IsBoolFlag() bool {
	_, ok := v.s.value.(*bool)
	return ok
}

func parse(args []string) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	for _, s := range settings(f) {
		v := value{&s}
		if err := v.Set(s.def); err != nil {
			return nil, fmt.Errorf("-%s's default %q: %v", s.flag, s.def, err)
		}
		if text, ok := os.LookupEnv(s.env); ok && s.env != "" {
			_, isBool := s.value.(*bool)
			if err := v.Set(text); err != nil && !isBool {
				return nil, fmt.Errorf("%s: %v", s.env, err)
			} else if err != nil { // as the peer reads its booleans: anything else is false
				*s.value.(*bool) = false
			}
		}
		usage := s.usage
		if s.env != "" {
			usage += " (" + s.env + ")"
		}
		fs.Var(v, s.flag, usage)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	clientCA := false // -grpc-tls-client-ca set, by its flag or its variable
	fs.Visit(func(fl *flag.Flag) { clientCA = clientCA || fl.Name == "grpc-tls-client-ca" })
	if _, ok := os.LookupEnv("GRPC_CLIENT_TLS_CACERT"); !ok && !clientCA {
		f.grpcClientCA = f.grpcCA
	}
	for _, p := range peerVars {
		if v, ok := os.LookupEnv(p.name); ok && p.check != nil {
			if err := p.check(v); err != nil {
				return nil, fmt.Errorf("%s=%s: %v", p.name, v, err)
			}
		}
	}
	f.configType = strings.ToUpper(f.configType)
	if f.configType != "FILE" && f.configType != "GRPC_XDS_SOTW" {
		return nil, fmt.Errorf("%s %q: FILE or GRPC_XDS_SOTW", named("config-type"), f.configType)
	}
	if f.debtCharges != "auto" && isBool(f.debtCharges) != nil {
		return nil, fmt.Errorf("%s %q: auto, true or false", named("debt-charges"), f.debtCharges)
	}
	if f.tracingProtocol != "http" && f.tracingProtocol != "grpc" {
		return nil, fmt.Errorf("%s %q: http or grpc", named("tracing-exporter-protocol"), f.tracingProtocol)
	}
	if f.samplingRate < 0 || f.samplingRate > 1 {
		return nil, fmt.Errorf("%s %v: from 0 to 1", named("tracing-sampling-rate"), f.samplingRate)
	}
	var err error
	if f.xdsMeta, err = pairs(f.xdsNodeMeta, "="); err != nil {
		return nil, fmt.Errorf("%s: %v", named("xds-node-metadata"), err)
	}
	if f.xdsHeaderMap, err = pairs(f.xdsHeaders, ":"); err != nil {
		return nil, fmt.Errorf("%s: %v", named("xds-headers"), err)
	}
	switch {
	case f.refusalCacheBytes < 1:
		return nil, fmt.Errorf("-refusal-cache-bytes %d: at least 1", f.refusalCacheBytes)
	case f.metricKeys < 0:
		return nil, fmt.Errorf("-metric-keys %d: 0 or more", f.metricKeys)
	case f.connStreams < 1 || f.connStreams > math.MaxUint32:
		return nil, fmt.Errorf("-grpc-conn-streams %d: 1 to %d", f.connStreams, uint32(math.MaxUint32))
	case f.streams < 1:
		return nil, fmt.Errorf("-grpc-streams %d: at least 1", f.streams)
	case f.handshakes < 1:
		return nil, fmt.Errorf("%s %d: at least 1", named("grpc-handshakes"), f.handshakes)
	case f.handshakeTimeout <= 0:
		return nil, fmt.Errorf("%s %v: above 0", named("grpc-handshake-timeout"), f.handshakeTimeout)
	case f.xdsBackoffInitial <= 0 || f.xdsBackoffMax < f.xdsBackoffInitial:
		return nil, fmt.Errorf("%s %v, %s %v: above 0, the most at least the least", named("xds-backoff-initial"), f.xdsBackoffInitial, named("xds-backoff-max"), f.xdsBackoffMax)
	case f.xdsBackoffFactor <= 0:
		return nil, fmt.Errorf("%s %v: above 0", named("xds-backoff-factor"), f.xdsBackoffFactor)
	case f.grpcClientSAN != "" && f.grpcClientCA == "":
		return nil, fmt.Errorf("%s %q needs %s: without a CA no client certificate is asked for, and none would be held to it", named("grpc-tls-client-san"), f.grpcClientSAN, named("grpc-tls-client-ca"))
	case f.xdsMaxMsg < 0:
		return nil, fmt.Errorf("%s %d: 0 or more", named("xds-max-msg-size"), f.xdsMaxMsg)
	case f.xdsMaxDescriptors < -1 || f.xdsMaxDescriptors == 0:
		return nil, fmt.Errorf("%s %d: 1 or more, or -1 for no limit", named("xds-max-descriptors"), f.xdsMaxDescriptors)
	}
	return f, nil
}

// named is a setting's flag and, where it has one, its variable:
// "-config-type (CONFIG_TYPE)".
func named(flag string) string {
	for _, s := range settings(&flags{}) {
		if s.flag == flag && s.env != "" {
			return "-" + flag + " (" + s.env + ")"
		}
	}
	return "-" + flag
}

// pairs reads "k1<sep>v1,k2<sep>v2" ("": none).
func pairs(text, sep string) (map[string]string, error) {
	m := map[string]string{}
	if text == "" {
		return m, nil
	}
	for _, kv := range strings.Split(text, ",") {
		k, v, ok := strings.Cut(kv, sep)
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key%svalue", kv, sep)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m, nil
}

var engines = map[string]client.Engine{"auto": client.Auto, "module": client.Module, "functions": client.Functions, "scripts": client.Scripts}

// redisClient builds the go-redis client the flags describe. Every call
// is bounded by its context (ContextTimeoutEnabled), so a hung Redis costs
// each request -redis-timeout. Its client certificate, where set, is read
// again when its files change (a changed pair is held as tlsFiles says),
// for the connections made after.
func redisClient(f *flags, log *slog.Logger, reloads *prometheus.CounterVec) (redis.UniversalClient, error) {
	var user, pass string
	if f.redisAuth != "" {
		user, pass, _ = strings.Cut(f.redisAuth, ":")
		if pass == "" {
			user, pass = "", f.redisAuth
		}
	}
	var tlsConf *tls.Config
	if f.redisTLS {
		tlsConf = &tls.Config{InsecureSkipVerify: f.redisSkipVerify}
		if f.redisCA != "" {
			pem, err := os.ReadFile(f.redisCA)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("-redis-tls-ca %s: no certificate found", f.redisCA)
			}
			tlsConf.RootCAs = pool
		}
		if f.redisCert != "" || f.redisKey != "" {
			t := &tlsFiles{what: named("redis-tls-cert") + ", " + named("redis-tls-key"), pair: "redis_client", cert: f.redisCert, key: f.redisKey,
				ca: f.redisCA, certName: named("redis-tls-cert"), caName: named("redis-tls-ca"), log: log, reloads: reloads}
			if err := t.start(); err != nil {
				return nil, err
			}
			tlsConf.GetClientCertificate = t.clientCertificate
		}
	}
	switch f.redisType {
	case "single":
		var o *redis.Options
		if strings.Contains(f.redisAddr, "://") {
			var err error
			if o, err = redis.ParseURL(f.redisAddr); err != nil {
				return nil, fmt.Errorf("-redis: %v", err)
			}
		} else {
			o = &redis.Options{Addr: f.redisAddr}
			if strings.HasPrefix(f.redisAddr, "/") {
				o.Network = "unix"
			}
		}
		if user != "" || pass != "" {
			o.Username, o.Password = user, pass
		}
		if tlsConf != nil {
			o.TLSConfig = tlsConf
		}
		o.PoolSize, o.ContextTimeoutEnabled = f.poolSize, true
		return redis.NewClient(o), nil
	case "cluster":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: strings.Split(f.redisAddr, ","), Username: user, Password: pass, TLSConfig: tlsConf,
			PoolSize: f.poolSize, ContextTimeoutEnabled: true,
		}), nil
	case "sentinel":
		parts := strings.Split(f.redisAddr, ",")
		if len(parts) < 2 {
			return nil, errors.New("-redis for sentinel is the master's name, then the sentinels: mymaster,host:26379")
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: parts[0], SentinelAddrs: parts[1:], Username: user, Password: pass, TLSConfig: tlsConf,
			PoolSize: f.poolSize, ContextTimeoutEnabled: true,
		}), nil
	}
	return nil, fmt.Errorf("-redis-type %q: single, cluster or sentinel", f.redisType)
}

func run(args []string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return serve(ctx, args, stdout)
}

// serve is rls until ctx ends.
func serve(ctx context.Context, args []string, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx) // ends the xDS watch, whatever the return
	defer cancel()
	f, err := parse(args)
	if err != nil {
		return err
	}
	if f.version {
		_, err := fmt.Fprintf(stdout, "rls %s (%s %s/%s)\n", ratelimit.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return err
	}
	if f.healthcheck {
		return healthcheck(f.httpAddr)
	}
	var level slog.Level
	switch strings.ToLower(f.logLevel) { // the peer's logrus names too
	case "trace":
		f.logLevel = "debug"
	case "warning":
		f.logLevel = "warn"
	case "fatal", "panic":
		f.logLevel = "error"
	}
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("-log-level %q: debug, info, warn or error", f.logLevel)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	engine, ok := engines[f.engine]
	if !ok {
		return fmt.Errorf("-engine %q: auto, module, functions or scripts", f.engine)
	}
	var cfg *rls.Config
	if f.configType == "FILE" {
		if cfg, err = rls.LoadDir(f.config); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tlsReloads := newTLSReloads(reg)
	var serverTLS *tlsFiles
	if f.grpcTLS {
		serverTLS = &tlsFiles{what: named("grpc-tls"), pair: "grpc_server", cert: f.grpcCert, key: f.grpcKey, ca: f.grpcClientCA, san: f.grpcClientSAN, server: true,
			certName: named("grpc-tls-cert"), caName: named("grpc-tls-client-ca"), issuer: f.grpcCA, issuerName: named("grpc-tls-ca"), log: log, reloads: tlsReloads}
		if err := serverTLS.start(); err != nil {
			return err
		}
	}
	rdb, err := redisClient(f, log, tlsReloads)
	if err != nil {
		return err
	}
	defer rdb.Close()

	o := rls.Options{
		Prefix: f.prefix, Timeout: f.timeout, NearLimitRatio: f.nearLimit, ShadowMode: f.shadow,
		RefusalCache: f.refusalCache, RefusalCacheBytes: f.refusalCacheBytes, MetricKeys: f.metricKeys,
		BreakerFailures: f.breakerFailures, BreakerCooldown: f.breakerCooldown, FailLocal: f.failLocal,
		Headers: f.headers, Engine: engine, Registerer: reg, Logger: log,
		QuotaMode: f.quotaMode, DynamicMetadata: f.dynamicMetadata,
	}
	if f.debtCharges == "auto" {
		o.DebtCharges = f.configType == "GRPC_XDS_SOTW"
	} else {
		o.DebtCharges, _ = strconv.ParseBool(f.debtCharges)
	}
	if f.lease {
		o.Lease = &lease.Options{}
	}
	if f.metricKeys == 0 {
		o.MetricKeys = -1 // none
	}
	if f.limitHeaders {
		o.LimitHeaders = rls.LimitHeaders{
			Limit:     env("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
			Remaining: env("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
			Reset:     env("LIMIT_RESET_HEADER", "RateLimit-Reset"),
		}
	}
	tr, err := newTracer(ctx, f)
	if err != nil {
		return err
	}
	if tr != nil {
		o.TracerProvider = tr.provider
		defer func() { // what is buffered goes out, within 5 s
			sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer scancel()
			if err := tr.provider.Shutdown(sctx); err != nil {
				log.Warn("rls: tracing: spans not exported at exit", "err", err)
			}
		}()
	}
	svc := rls.New(rdb, nil, o)
	defer svc.Close()
	if cfg != nil {
		svc.SetConfig(cfg)
		log.Info("rls: config loaded", "dir", f.config, "files", cfg.Files(), "domains", cfg.Domains())
		if err := svc.Watch(ctx, f.config); err != nil {
			return fmt.Errorf("watching %s: %w", f.config, err)
		}
	} else {
		conn, err := xdsConn(f, log, tlsReloads)
		if err != nil {
			return err
		}
		defer func() { cancel(); conn.Close() }() // the watch ends before its connection
		node := &corev3.Node{Id: f.xdsNode}
		if len(f.xdsMeta) > 0 {
			st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
			for k, v := range f.xdsMeta {
				st.Fields[k] = structpb.NewStringValue(v)
			}
			node.Metadata = st
		}
		x := rls.XDS{Conn: conn, Node: node, Headers: f.xdsHeaderMap, MaxDescriptors: f.xdsMaxDescriptors,
			Backoff: rls.Backoff{Initial: f.xdsBackoffInitial, Max: f.xdsBackoffMax, Factor: f.xdsBackoffFactor, Jitter: f.xdsBackoffJitter}}
		if f.xdsMaxMsg > 0 {
			x.CallOptions = []grpc.CallOption{grpc.MaxCallRecvMsgSize(f.xdsMaxMsg)}
		}
		if f.forceStart {
			empty, _ := rls.Parse(nil)
			svc.SetConfig(empty) // OK, no limit, until the first config
		}
		loaded := svc.WatchXDS(ctx, x)
		if !f.forceStart {
			log.Info("rls: waiting for the first config from xDS", "server", f.xdsURL, "node", f.xdsNode)
			select {
			case <-loaded:
			case <-ctx.Done():
				return nil
			}
		}
	}

	gl, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		gl.Close()
		return err
	}
	// Stream workers keep their grown stacks from one request to the next
	// (a goroutine per request grows a new one each time).
	// Streams are bounded per connection and in all (see rls.Streams).
	// A connection has -grpc-handshake-timeout to finish its handshake
	// (grpc.ConnectionTimeout bounds the TLS handshake, done by the
	// credentials on the raw connection, and HTTP/2's preface and first
	// SETTINGS), and at most -grpc-handshakes are in handshake at once.
	gl = newHandshakeListener(gl, f.handshakes, reg)
	opts := append(rls.NewStreams(f.streams).ServerOptions(uint32(f.connStreams)),
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))), grpc.ConnectionTimeout(f.handshakeTimeout))
	if serverTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(serverTLS.serverConfig())))
	}
	if tr != nil { // a server span per call, its parent the caller's trace context (W3C or b3)
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tr.provider),
			otelgrpc.WithPropagators(tr.propagators), otelgrpc.WithMeterProvider(noopmetric.NewMeterProvider()))))
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(gs, svc)
	var quotas *rls.Quotas
	if f.rlqs {
		quotas = rls.NewQuotas(svc, rdb, rls.QuotaOptions{Registerer: reg})
		rlqspb.RegisterRateLimitQuotaServiceServer(gs, quotas)
	}
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	hs.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING)
	h := &rls.Health{}
	mux := http.NewServeMux()
	mux.Handle("/", rls.HTTPHandler(h, reg))
	mux.Handle("POST /json", rls.JSONHandler(svc))
	web := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	errc := make(chan error, 3)
	go func() { errc <- gs.Serve(gl) }()
	go func() { errc <- web.Serve(hl) }()
	var promWeb *http.Server
	if f.prometheus {
		pl, err := net.Listen("tcp", f.prometheusAddr)
		if err != nil {
			gl.Close()
			hl.Close()
			return fmt.Errorf("%s: %v", named("prometheus-addr"), err)
		}
		mux := http.NewServeMux()
		mux.Handle(f.promPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		promWeb = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- promWeb.Serve(pl) }()
		log.Info("rls: serving metrics", "addr", pl.Addr().String(), "path", f.promPath)
	}
	log.Info("rls: serving", "grpc", gl.Addr().String(), "http", hl.Addr().String(), "tls", serverTLS != nil)

	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	log.Info("rls: stopping")
	h.Stop()
	hs.Shutdown()
	if quotas != nil { // RLQS streams never end by themselves: each bucket is pushed a TTL of 0 (Envoy's fallback), then they end
		quotas.Drain()
	}
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(f.drain):
		gs.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	web.Shutdown(sctx)
	if promWeb != nil {
		promWeb.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// healthcheck asks the /healthcheck of the rls listening at addr, on
// loopback when addr is every address (0.0.0.0, ::, or no host), with a
// bound of 2 s.
func healthcheck(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-http %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + net.JoinHostPort(host, port) + "/healthcheck")
	if err != nil {
		return fmt.Errorf("healthcheck: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s", resp.Status)
	}
	return nil
}

// xdsConn is the connection to the xDS server (it connects when first
// used, and again whenever it is lost).
func xdsConn(f *flags, log *slog.Logger, reloads *prometheus.CounterVec) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if f.xdsTLS {
		t := &tlsFiles{what: named("xds-tls"), pair: "xds_client", cert: f.xdsCert, key: f.xdsKey, ca: f.xdsCA, san: f.xdsSAN,
			certName: named("xds-tls-cert"), caName: named("xds-tls-ca"), log: log, reloads: reloads}
		if err := t.start(); err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(f.xdsURL)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %v", named("xds"), f.xdsURL, err)
		}
		creds = credentials.NewTLS(t.clientConfig(host))
	}
	conn, err := grpc.NewClient(f.xdsURL, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("%s %q: %v", named("xds"), f.xdsURL, err)
	}
	return conn, nil
}
