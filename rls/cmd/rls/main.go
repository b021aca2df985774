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

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
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

// envInt is an environment variable's integer, or def when it is unset.
func envInt(name string, def int64) (int64, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", name, err)
	}
	return n, nil
}

func envBool(name string) bool {
	b, _ := strconv.ParseBool(os.Getenv(name))
	return b
}

// defaultConfigDir is the peer's: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
func defaultConfigDir() string {
	return filepath.Join(env("RUNTIME_ROOT", "/srv/runtime_data/current"), os.Getenv("RUNTIME_SUBDIRECTORY"), env("RUNTIME_APPDIRECTORY", "config"))
}

type flags struct {
	config, grpcAddr, httpAddr                       string
	redisAddr, redisType, redisAuth, redisCA, prefix string
	redisTLS, redisSkipVerify, shadow, headers       bool
	limitHeaders                                     bool
	poolSize, refusalCache, metricKeys               int
	refusalCacheBytes                                int64
	connStreams, streams                             int
	timeout, drain                                   time.Duration
	nearLimit                                        float64
	engine, logLevel                                 string
	version, healthcheck                             bool
}

func parse(args []string) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	fs.StringVar(&f.config, "config", defaultConfigDir(), "directory of *.yaml config files (default from RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY)")
	fs.StringVar(&f.grpcAddr, "grpc", net.JoinHostPort(env("GRPC_HOST", "127.0.0.1"), env("GRPC_PORT", "8081")), "gRPC listen address (GRPC_HOST, GRPC_PORT)")
	fs.StringVar(&f.httpAddr, "http", net.JoinHostPort(env("HOST", "127.0.0.1"), env("PORT", "8080")), "HTTP listen address for /healthcheck and /metrics (HOST, PORT)")
	fs.StringVar(&f.redisAddr, "redis", env("REDIS_URL", "127.0.0.1:6379"), "Redis: host:port, a unix socket path, a redis:// or rediss:// URL; for a cluster, seed nodes separated by commas; for sentinel, the master's name then the sentinels (REDIS_URL)")
	fs.StringVar(&f.redisType, "redis-type", strings.ToLower(env("REDIS_TYPE", "single")), "single, cluster or sentinel (REDIS_TYPE)")
	fs.StringVar(&f.redisAuth, "redis-auth", os.Getenv("REDIS_AUTH"), "password, or user:password (REDIS_AUTH)")
	fs.BoolVar(&f.redisTLS, "redis-tls", envBool("REDIS_TLS"), "connect to Redis over TLS (REDIS_TLS)")
	fs.StringVar(&f.redisCA, "redis-tls-ca", os.Getenv("REDIS_TLS_CACERT"), "PEM file of the CA that signed Redis's certificate (REDIS_TLS_CACERT)")
	fs.BoolVar(&f.redisSkipVerify, "redis-tls-skip-verify", envBool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"), "do not verify Redis's certificate (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION)")
	poolSize, _ := strconv.Atoi(env("REDIS_POOL_SIZE", "0"))
	fs.IntVar(&f.poolSize, "redis-pool-size", poolSize, "connections per Redis node (REDIS_POOL_SIZE; 0: go-redis's default, 10 per CPU)")
	fs.DurationVar(&f.timeout, "redis-timeout", 100*time.Millisecond, "bound on each Redis call; past it the request fails with UNAVAILABLE")
	fs.StringVar(&f.prefix, "prefix", os.Getenv("CACHE_KEY_PREFIX"), "prefix of every Redis key (CACHE_KEY_PREFIX)")
	ratio, err := strconv.ParseFloat(env("NEAR_LIMIT_RATIO", "0.8"), 64)
	if err != nil {
		return nil, fmt.Errorf("NEAR_LIMIT_RATIO: %v", err)
	}
	fs.Float64Var(&f.nearLimit, "near-limit-ratio", ratio, "share of a limit past which hits count as near it (NEAR_LIMIT_RATIO)")
	fs.BoolVar(&f.shadow, "shadow", envBool("SHADOW_MODE"), "answer OK whatever the limits decide; statuses and metrics still tell (SHADOW_MODE)")
	fs.IntVar(&f.refusalCache, "refusal-cache", 0, "refused keys remembered until their retry_after, answered without Redis (0: off)")
	ints := map[string]int64{}
	for _, e := range []struct {
		env string
		def int64
	}{{"REFUSAL_CACHE_BYTES", 16 << 20}, {"METRIC_KEYS", 1000}, {"GRPC_MAX_CONCURRENT_STREAMS", rls.DefaultStreamsPerConnection}, {"GRPC_MAX_STREAMS", rls.DefaultStreams}} {
		if ints[e.env], err = envInt(e.env, e.def); err != nil {
			return nil, err
		}
	}
	fs.Int64Var(&f.refusalCacheBytes, "refusal-cache-bytes", ints["REFUSAL_CACHE_BYTES"], "bound of the refusal cache in bytes, each entry counted as its key's length and 160 (REFUSAL_CACHE_BYTES)")
	fs.IntVar(&f.metricKeys, "metric-keys", int(ints["METRIC_KEYS"]), "stat keys made of requests' own values (detailed_metric, Envoy's limit override) with metric series of their own; the rest count under key=\"_overflow\" (METRIC_KEYS; 0: none)")
	fs.IntVar(&f.connStreams, "grpc-conn-streams", int(ints["GRPC_MAX_CONCURRENT_STREAMS"]), "concurrent gRPC streams per connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS; GRPC_MAX_CONCURRENT_STREAMS)")
	fs.IntVar(&f.streams, "grpc-streams", int(ints["GRPC_MAX_STREAMS"]), "concurrent gRPC streams over every connection; past it a stream is refused with RESOURCE_EXHAUSTED (GRPC_MAX_STREAMS)")
	fs.BoolVar(&f.headers, "ietf-headers", false, "add the IETF RateLimit and RateLimit-Policy fields to responses (response_headers_to_add)")
	fs.BoolVar(&f.limitHeaders, "limit-headers", envBool("LIMIT_RESPONSE_HEADERS_ENABLED"), "add the peer's RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset fields (LIMIT_RESPONSE_HEADERS_ENABLED; names from LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER)")
	fs.StringVar(&f.engine, "engine", "auto", "auto (the module where loaded, else the Lua library), module, functions or scripts")
	fs.DurationVar(&f.drain, "drain", 10*time.Second, "on SIGTERM, how long requests in flight may take to finish")
	fs.StringVar(&f.logLevel, "log-level", strings.ToLower(env("LOG_LEVEL", "info")), "debug, info, warn or error (LOG_LEVEL)")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	fs.BoolVar(&f.healthcheck, "healthcheck", false, "ask the /healthcheck of the rls listening at -http (on loopback when it listens on every address) and exit 0 if it answers 200, else 1")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
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
	}
	return f, nil
}

var engines = map[string]client.Engine{"auto": client.Auto, "module": client.Module, "functions": client.Functions, "scripts": client.Scripts}

// redisClient builds the go-redis client the flags describe. Every call
// is bounded by its context (ContextTimeoutEnabled), so a hung Redis costs
// each request -redis-timeout.
func redisClient(f *flags) (redis.UniversalClient, error) {
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
	cfg, err := rls.LoadDir(f.config)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	rdb, err := redisClient(f)
	if err != nil {
		return err
	}
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o := rls.Options{
		Prefix: f.prefix, Timeout: f.timeout, NearLimitRatio: f.nearLimit, ShadowMode: f.shadow,
		RefusalCache: f.refusalCache, RefusalCacheBytes: f.refusalCacheBytes, MetricKeys: f.metricKeys,
		Headers: f.headers, Engine: engine, Registerer: reg, Logger: log,
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
	svc := rls.New(rdb, nil, o)
	svc.SetConfig(cfg)
	log.Info("rls: config loaded", "dir", f.config, "files", cfg.Files(), "domains", cfg.Domains())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := svc.Watch(ctx, f.config); err != nil {
		return fmt.Errorf("watching %s: %w", f.config, err)
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
	gs := grpc.NewServer(append(rls.NewStreams(f.streams).ServerOptions(uint32(f.connStreams)),
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))))...)
	pb.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	hs.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING)
	h := &rls.Health{}
	web := &http.Server{Handler: rls.HTTPHandler(h, reg), ReadHeaderTimeout: 5 * time.Second}

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gl) }()
	go func() { errc <- web.Serve(hl) }()
	log.Info("rls: serving", "grpc", gl.Addr().String(), "http", hl.Addr().String())

	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	log.Info("rls: stopping")
	h.Stop()
	hs.Shutdown()
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(f.drain):
		gs.Stop()
	}
	svc.Close()
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	web.Shutdown(sctx)
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
