// Package integration runs the module in real servers — Redis 7.0, Redis 8.0
// and Valkey 8.1, from the local images `make images` builds — and drives it
// from Go through go-redis, as users do.
//
// Every server runs in a container on the host's network, bound to
// 127.0.0.1 on a port of its own: nothing listens on any other address.
package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// flavor is one server the suite runs on.
type flavor struct {
	name  string // subtest name
	image string
	bin   string
	// cachedClock: the server has RedisModule_CachedMicroseconds, so one
	// MULTI/EXEC or script sees one instant.
	cachedClock bool
	// aclCategories: the server has RedisModule_AddACLCategory.
	aclCategories bool
}

var flavors = []flavor{
	{name: "redis-7.0", image: "local/redis:7.0", bin: "redis-server"},
	{name: "redis-8.0", image: "local/redis:8.0", bin: "redis-server", cachedClock: true, aclCategories: true},
	{name: "valkey-8.1", image: "local/valkey:8.1", bin: "valkey-server", cachedClock: true, aclCategories: true},
}

// server is one running redis-server (or valkey-server) container.
type server struct {
	flavor
	port int
	c    testcontainers.Container
	rdb  *redis.Client
}

// opts says how to start a server.
type opts struct {
	module     bool
	moduleFile string // the module to load, a host path (default: build/ratelimit.so)
	moduleArgs []string
	args       []string // more server arguments (later ones win)
	dataDir    string   // host directory mounted as the server's /data
	// clockDir, a host directory, holds the file "ns" whose signed number
	// of nanoseconds shifts the server's wall clock (see shiftClock), or
	// the file "at" that stops it at an instant (see stopClock).
	clockDir string
}

const (
	moduleInContainer     = "/opt/ratelimit/ratelimit.so"
	clockshiftInContainer = "/opt/ratelimit/clockshift.so"
)

var (
	modulePath     string
	clockshiftPath string
	shared         []*server // one server with the module per flavor, for the whole suite

	portsMu sync.Mutex
	ports   = map[int]bool{}
)

func TestMain(m *testing.M) {
	if os.Getenv("LEASED_CHILD") != "" { // TestLeasedKilled's process to kill: it needs no servers of its own
		os.Exit(m.Run())
	}
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true") // the reaper image cannot be pulled
	p, err := filepath.Abs("../build/ratelimit.so")
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: build/ratelimit.so is missing; run `make build` (make test does)")
		os.Exit(1)
	}
	modulePath = p
	if clockshiftPath, err = filepath.Abs("../build/clockshift.so"); err == nil {
		_, err = os.Stat(clockshiftPath)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: build/clockshift.so is missing; run `make build/clockshift.so` (make test does)")
		os.Exit(1)
	}

	ctx := context.Background()
	shared = make([]*server, len(flavors))
	errs := make([]error, len(flavors))
	var wg sync.WaitGroup
	for i, f := range flavors {
		wg.Go(func() { shared[i], errs[i] = start(ctx, f, opts{module: true}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "integration: cannot start the servers (did `make images` run?):", err)
		stopAll(ctx, shared)
		os.Exit(1)
	}
	code := m.Run()
	stopAll(ctx, shared)
	os.Exit(code)
}

func stopAll(ctx context.Context, servers []*server) {
	for _, s := range servers {
		if s != nil {
			s.stop(ctx)
		}
	}
}

// freePort returns a loopback port nothing listens on and that no other
// server of this run was given.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		// The cluster bus listens on port+10000: keep both in range, free
		// now, and given to no other server of this run (as its port or
		// its bus).
		if p+10000 > 65535 || ports[p] || ports[p+10000] {
			continue
		}
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000))
		if err != nil {
			continue
		}
		bus.Close()
		ports[p], ports[p+10000] = true, true
		return p, nil
	}
	return 0, errors.New("no free port")
}

// start runs a server of flavor f and waits until it accepts commands.
func start(ctx context.Context, f flavor, o opts) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := []string{f.bin,
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", "/tmp", "--enable-module-command", "yes",
	}
	if o.dataDir != "" {
		cmd = append(cmd, "--dir", "/data")
	}
	if o.module {
		cmd = append(cmd, "--loadmodule", moduleInContainer)
		cmd = append(cmd, o.moduleArgs...)
	}
	cmd = append(cmd, o.args...)
	moduleFile := modulePath
	if o.moduleFile != "" {
		moduleFile = o.moduleFile
	}
	custom := []testcontainers.ContainerCustomizer{
		testcontainers.WithCmd(cmd...),
		testcontainers.WithFiles(testcontainers.ContainerFile{
			HostFilePath: moduleFile, ContainerFilePath: moduleInContainer, FileMode: 0o755,
		}),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			if o.dataDir != "" {
				hc.Binds = append(hc.Binds, o.dataDir+":/data")
			}
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections").WithStartupTimeout(60 * time.Second)),
	}
	if o.clockDir != "" {
		custom = append(custom,
			testcontainers.WithFiles(testcontainers.ContainerFile{
				HostFilePath: clockshiftPath, ContainerFilePath: clockshiftInContainer, FileMode: 0o755,
			}),
			testcontainers.WithEnv(map[string]string{
				"LD_PRELOAD": clockshiftInContainer, "CLOCKSHIFT_FILE": "/clock/ns", "CLOCKSHIFT_AT_FILE": "/clock/at",
			}),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.Binds = append(hc.Binds, o.clockDir+":/clock")
			}),
		)
	}
	c, err := testcontainers.Run(ctx, f.image, custom...)
	if err != nil {
		if c != nil {
			_ = c.Terminate(ctx)
		}
		return nil, fmt.Errorf("%s: %w", f.name, err)
	}
	s := &server{flavor: f, port: port, c: c}
	s.rdb = redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2, PoolSize: 80})
	if err := s.waitReady(ctx); err != nil {
		s.stop(ctx)
		return nil, err
	}
	return s, nil
}

func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// waitReady polls until the server answers and has loaded its data.
func (s *server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, err := s.rdb.Info(ctx, "persistence").Result()
		if err == nil && strings.Contains(info, "loading:0") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s on %s not ready: %v", s.name, s.addr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) stop(ctx context.Context) {
	if s.rdb != nil {
		s.rdb.Close()
	}
	if s.c != nil {
		_ = s.c.Terminate(ctx)
	}
}

// restart stops the container and starts it again, with the same command
// and data, and waits until the data is loaded.
func (s *server) restart(ctx context.Context) error {
	timeout := 30 * time.Second
	if err := s.c.Stop(ctx, &timeout); err != nil {
		return err
	}
	if err := s.c.Start(ctx); err != nil {
		return err
	}
	return s.waitReady(ctx)
}

// logs returns what the server printed.
func (s *server) logs(ctx context.Context) string {
	r, err := s.c.Logs(ctx)
	if err != nil {
		return err.Error()
	}
	defer r.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// startFor starts a server of f for one test and stops it when the test ends.
func startFor(t *testing.T, f flavor, o opts) *server {
	t.Helper()
	ctx := context.Background()
	s, err := start(ctx, f, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", s.name, tail(s.logs(ctx), 30))
		}
		s.stop(ctx)
	})
	return s
}

// startReplica starts a replica of primary and waits for the link.
func startReplica(t *testing.T, primary *server, module bool) *server {
	t.Helper()
	r := startFor(t, primary.flavor, opts{module: module, args: []string{"--replicaof", "127.0.0.1", fmt.Sprint(primary.port)}})
	waitFor(t, 30*time.Second, "replication link up", func() bool {
		info, err := r.rdb.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	return r
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// each runs fn as a parallel subtest on every flavor's shared server.
func each(t *testing.T, fn func(t *testing.T, s *server)) {
	t.Helper()
	for _, s := range shared {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			fn(t, s)
		})
	}
}

// eachFlavor runs fn as a parallel subtest per flavor, for tests that start
// servers of their own.
func eachFlavor(t *testing.T, fn func(t *testing.T, f flavor)) {
	t.Helper()
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			fn(t, f)
		})
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var keySeq struct {
	sync.Mutex
	n int
}

// key returns a key no other test uses, hash-tagged so that every key of
// one test lands in one cluster slot.
func key(t *testing.T, name string) string {
	keySeq.Lock()
	keySeq.n++
	n := keySeq.n
	keySeq.Unlock()
	return fmt.Sprintf("rl:{%s-%d}:%s", strings.ReplaceAll(t.Name(), "/", "."), n, name)
}
