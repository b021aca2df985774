package rls

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer starts a redis-server of this machine on a free loopback
// port, with the module (../build/ratelimit.so, made by ./build.sh) when
// module is true, and stops it when the test ends. The test is skipped
// where there is no redis-server, or no module to load.
func redisServer(t testing.TB, module bool, more ...string) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server on this machine")
	}
	args := append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, more...)
	if module {
		so, _ := filepath.Abs("../build/ratelimit.so")
		if _, err := os.Stat(so); err != nil {
			t.Skip("no ../build/ratelimit.so: run ./build.sh")
		}
		args = append(args, "--loadmodule", so)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, append([]string{"--port", strconv.Itoa(port)}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rdb
}

// redisCluster starts a Redis Cluster of one node holding every slot, with
// the module, and returns a cluster client of it.
func redisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	node := redisServer(t, true, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx := context.Background()
	if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := node.ClusterInfo(ctx).Result()
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster is not ok in 10 s:\n%s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{node.Options().Addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// online is a service on rdb with cfg as the file d.yaml.
func online(t testing.TB, rdb redis.UniversalClient, cfg string, o Options) *Service {
	t.Helper()
	c, err := Parse(map[string][]byte{"d.yaml": []byte(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second // a machine shared with other tests
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := New(rdb, c, o)
	t.Cleanup(s.Close)
	return s
}
