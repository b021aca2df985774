package main

import (
	"net"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/rls"
)

func TestVersion(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"-version"}, &out); err != nil {
		t.Fatal(err)
	}
	want := "rls " + ratelimit.Version + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if out.String() != want {
		t.Fatalf("rls -version printed %q, want %q", out.String(), want)
	}
}

// -healthcheck exits 0 only while the service's /healthcheck answers 200,
// asked on loopback when the service listens on every address.
func TestHealthcheck(t *testing.T) {
	h := &rls.Health{}
	srv := httptest.NewServer(rls.HTTPHandler(h, prometheus.NewRegistry()))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, addr := range []string{"127.0.0.1:" + port, "0.0.0.0:" + port, ":" + port, "[::]:" + port} {
		if err := run([]string{"-healthcheck", "-http", addr}, nil); err != nil {
			t.Errorf("-healthcheck -http %s while serving: %v", addr, err)
		}
	}
	h.Stop()
	if err := run([]string{"-healthcheck", "-http", "127.0.0.1:" + port}, nil); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("-healthcheck while stopping: %v, want a 500", err)
	}
	srv.Close()
	if err := run([]string{"-healthcheck", "-http", "127.0.0.1:" + port}, nil); err == nil {
		t.Error("-healthcheck with nothing listening: no error")
	}
	if err := run([]string{"-healthcheck", "-http", "nonsense"}, nil); err == nil || !strings.Contains(err.Error(), "-http") {
		t.Errorf("-healthcheck -http nonsense: %v", err)
	}
}

// TestBoundFlags: each bound's flag, its environment variable, its default
// and its range.
func TestBoundFlags(t *testing.T) {
	f, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.refusalCacheBytes != 16<<20 || f.metricKeys != 1000 || f.connStreams != rls.DefaultStreamsPerConnection || f.streams != rls.DefaultStreams {
		t.Fatalf("defaults: %d bytes, %d keys, %d and %d streams", f.refusalCacheBytes, f.metricKeys, f.connStreams, f.streams)
	}
	t.Setenv("REFUSAL_CACHE_BYTES", "1000")
	t.Setenv("METRIC_KEYS", "7")
	t.Setenv("GRPC_MAX_CONCURRENT_STREAMS", "8")
	t.Setenv("GRPC_MAX_STREAMS", "9")
	if f, err = parse(nil); err != nil {
		t.Fatal(err)
	}
	if f.refusalCacheBytes != 1000 || f.metricKeys != 7 || f.connStreams != 8 || f.streams != 9 {
		t.Fatalf("from the environment: %d bytes, %d keys, %d and %d streams", f.refusalCacheBytes, f.metricKeys, f.connStreams, f.streams)
	}
	if f, err = parse([]string{"-refusal-cache-bytes", "2000", "-metric-keys", "0", "-grpc-conn-streams", "3", "-grpc-streams", "4"}); err != nil {
		t.Fatal(err)
	}
	if f.refusalCacheBytes != 2000 || f.metricKeys != 0 || f.connStreams != 3 || f.streams != 4 {
		t.Fatalf("flags over the environment: %d bytes, %d keys, %d and %d streams", f.refusalCacheBytes, f.metricKeys, f.connStreams, f.streams)
	}
	for _, bad := range [][]string{
		{"-refusal-cache-bytes", "0"}, {"-metric-keys", "-1"}, {"-grpc-conn-streams", "0"}, {"-grpc-conn-streams", "4294967296"}, {"-grpc-streams", "0"},
	} {
		if _, err := parse(bad); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v", bad, err)
		}
	}
	t.Setenv("GRPC_MAX_STREAMS", "many")
	if _, err := parse(nil); err == nil || !strings.Contains(err.Error(), "GRPC_MAX_STREAMS") {
		t.Errorf("GRPC_MAX_STREAMS=many: %v", err)
	}
}

// TestSettingsDocumented: docs/rls.md's table of settings names every
// flag and the environment variable that sets it.
func TestSettingsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/rls.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings(&flags{}) {
		row := ""
		for _, line := range strings.Split(string(doc), "\n") {
			cols := strings.Split(line, " | ")
			if strings.HasPrefix(line, "| `-") && (strings.Contains(cols[0], "`-"+s.flag+"`") || strings.Contains(cols[0], "`-"+s.flag+" ")) {
				row = line
			}
		}
		switch {
		case row == "":
			t.Errorf("docs/rls.md has no row for -%s", s.flag)
		case s.env != "" && !strings.Contains(row, "`"+s.env+"`"):
			t.Errorf("docs/rls.md's row for -%s does not name %s: %s", s.flag, s.env, row)
		}
	}
}

// TestSettingsFromEnvironment: a setting's variable replaces its default,
// a flag replaces both, and a variable that does not parse is refused by
// name.
func TestSettingsFromEnvironment(t *testing.T) {
	t.Setenv("REDIS_TYPE", "Cluster")
	t.Setenv("NEAR_LIMIT_RATIO", "0.5")
	t.Setenv("METRIC_KEYS", "7")
	f, err := parse([]string{"-metric-keys", "9"})
	if err != nil || f.redisType != "cluster" || f.nearLimit != 0.5 || f.metricKeys != 9 || f.timeout != 100*time.Millisecond {
		t.Fatalf("%+v %v", f, err)
	}
	t.Setenv("REDIS_POOL_SIZE", "ten")
	if _, err := parse(nil); err == nil || !strings.Contains(err.Error(), "REDIS_POOL_SIZE") {
		t.Fatalf("REDIS_POOL_SIZE=ten: %v", err)
	}
}
