package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// examples/http as its users run it: built from its module, started with
// -metrics, asked as a real HTTP client would. Its metrics count what it
// decided; a client that sends its headers slowly is cut off; a hung Redis
// (SIGSTOP) costs a request the timeout and opens the breaker, which the
// metrics show; SIGTERM stops it gracefully.
func TestExampleHTTP(t *testing.T) {
	s := startFor(t, flavors[1], opts{module: true})
	bin := buildExample(t, "http")
	listenPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	listen, metrics := fmt.Sprintf("127.0.0.1:%d", listenPort), fmt.Sprintf("127.0.0.1:%d", metricsPort)
	ex := startExample(t, bin, "-listen", listen, "-redis", s.addr(), "-on-error", "open", "-metrics", metrics,
		"-header-timeout", "300ms")
	waitFor(t, 10*time.Second, "examples/http to serve", func() bool {
		resp, err := http.Get("http://" + listen + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})

	resp := get(t, "http://"+listen+"/")
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"per-ip";q=10;w=60` {
		t.Fatalf("a request: %d %v", resp.StatusCode, resp.Header)
	}
	scrape := func() string {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	text := scrape()
	for _, line := range []string{
		`ratelimit_decisions_total{decision="admitted",policy="per-ip"} 2`, // the wait's probe and the request
		`ratelimit_decisions_total{decision="refused",policy="per-ip"} 0`,
		`ratelimit_breaker_open 0`,
		fmt.Sprintf(`ratelimit_engine{engine="module",node="%s"} 1`, s.addr()),
		`ratelimit_redis_call_seconds_count{outcome="ok"} 2`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Fatalf("no %q in the metrics:\n%s", line, grepLines(text, "ratelimit_"))
		}
	}

	// A client that sends half its headers and waits is cut off.
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	_, err = bufio.NewReader(c).ReadByte()
	c.Close()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a slow-header client held its connection for %v", time.Since(start))
	}

	// Redis hangs: requests are served (FailOpen) within the timeout, and
	// the breaker opens.
	resume := s.hang(t)
	var slowest time.Duration
	for range 8 {
		start := time.Now()
		if resp := get(t, "http://"+listen+"/"); resp.StatusCode != 200 {
			t.Fatalf("Redis hung, on-error open: %d", resp.StatusCode)
		}
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("examples/http, Redis hung: slowest of 8 requests %v", slowest)
	if slowest > time.Second {
		t.Fatalf("Redis hung: a request took %v", slowest)
	}
	text = scrape()
	for _, line := range []string{`ratelimit_breaker_open 1`, `ratelimit_decisions_total{decision="failed_open",policy="per-ip"} 8`} {
		if !strings.Contains(text, line+"\n") {
			t.Fatalf("Redis hung: no %q in the metrics:\n%s", line, grepLines(text, "ratelimit_"))
		}
	}
	if !strings.Contains(text, `ratelimit_redis_call_seconds_count{outcome="timeout"} 5`) {
		t.Fatalf("Redis hung: want 5 timeouts (then the breaker):\n%s", grepLines(text, "ratelimit_redis"))
	}
	resume()
	ex.stop(t)
}

// example is an example's server, running.
type example struct {
	cmd    *exec.Cmd
	logs   *strings.Builder
	exited chan error
}

// buildExample builds the example ./name of examples/ (a module of its
// own) as its users would, and returns the binary.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	build := exec.Command("go", "build", "-o", bin, "./"+name)
	build.Dir = "../examples"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

// startExample starts bin with args; it is killed when the test ends, and
// what it printed is logged when the test failed.
func startExample(t *testing.T, bin string, args ...string) *example {
	t.Helper()
	ex := &example{cmd: exec.Command(bin, args...), logs: &strings.Builder{}, exited: make(chan error, 1)}
	ex.cmd.Stdout, ex.cmd.Stderr = ex.logs, ex.logs
	if err := ex.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ex.exited <- ex.cmd.Wait() }()
	t.Cleanup(func() {
		ex.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s printed:\n%s", filepath.Base(bin), ex.logs.String())
		}
	})
	return ex
}

// stop sends SIGTERM: the example must stop gracefully ("stopping"
// printed, exit 0) within 15 s.
func (ex *example) stop(t *testing.T) {
	t.Helper()
	if err := ex.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ex.exited:
		if err != nil || !strings.Contains(ex.logs.String(), "stopping") {
			t.Fatalf("SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("SIGTERM: still running after 15 s")
	}
}

// grepLines keeps the lines of text that start with prefix.
func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
