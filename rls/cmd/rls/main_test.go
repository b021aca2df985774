package main

import (
	"net"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

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
