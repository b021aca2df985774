package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/lua"
	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// The images make images builds, started with the docker command line as
// their users start them. Ports are published on 127.0.0.1 only.

// docker runs the docker command line and returns its output, trimmed; a
// failure fails the test.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// imageRepo is where the project's images are named (the Makefile's
// IMAGE_REPO): imageRepo/ratelimit-NAME.
const imageRepo = "ghcr.io/seed-6b3823f5"

// image is the name of one of the project's images at this version.
func image(name string) string { return imageRef(name, ratelimit.Version) }

// imageRef is the name of one of the project's images with a tag.
func imageRef(name, tag string) string { return imageRepo + "/ratelimit-" + name + ":" + tag }

// runImage starts a container (docker run -d args...), removed when the
// test ends, with its log shown if the test failed.
func runImage(t *testing.T, args ...string) string {
	t.Helper()
	id := docker(t, append([]string{"run", "-d"}, args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", "--tail", "40", id).CombinedOutput()
			t.Logf("container %.12s log:\n%s", id, out)
		}
		exec.Command("docker", "rm", "-f", "-v", id).Run()
	})
	return id
}

// published is the 127.0.0.1 address a container's port is published on.
func published(t *testing.T, id, port string) string {
	t.Helper()
	for _, line := range strings.Split(docker(t, "port", id, port), "\n") {
		if strings.HasPrefix(line, "127.0.0.1:") {
			return line
		}
	}
	t.Fatalf("port %s of %.12s is not published on 127.0.0.1", port, id)
	return ""
}

// waitHealthy waits until Docker's health check calls the container
// healthy.
func waitHealthy(t *testing.T, id string) {
	t.Helper()
	waitFor(t, 60*time.Second, "the image's health check", func() bool {
		return docker(t, "inspect", "-f", "{{.State.Health.Status}}", id) == "healthy"
	})
}

// assertTags: the image is tagged with the version, latest and the
// version and this machine's architecture, all the same image, and runs
// as user.
func assertTags(t *testing.T, name, user string) {
	t.Helper()
	v := docker(t, "image", "inspect", "-f", "{{.Id}} {{.Config.User}}", image(name))
	for _, tag := range []string{"latest", ratelimit.Version + "-" + runtime.GOARCH} {
		if other := docker(t, "image", "inspect", "-f", "{{.Id}} {{.Config.User}}", imageRef(name, tag)); other != v {
			t.Fatalf("%s: %q, %s %q, want the same image", image(name), v, tag, other)
		}
	}
	if !strings.HasSuffix(v, " "+user) {
		t.Fatalf("%s: %q, want it running as %q", image(name), v, user)
	}
}

// redisAt connects to a published server and waits until it answers.
func redisAt(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	waitFor(t, 30*time.Second, "the server at "+addr, func() bool { return c.Ping(ctx).Err() == nil })
	return c
}

// emulates: this machine runs arch's programs through qemu registered in
// binfmt_misc (make emulation), as images/build.sh decides whether to
// build the server images for arch.
func emulates(arch string) bool {
	b, err := os.ReadFile("/proc/sys/fs/binfmt_misc/qemu-" + unameMachine[arch])
	return err == nil && strings.HasPrefix(string(b), "enabled\n")
}

// unameMachine is each architecture's name in uname -m (and qemu's).
var unameMachine = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}

// otherArch is the architecture of the two this machine is not.
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// serverArchs are the architectures make images built the server images
// for: this machine's, and the other where it runs its programs.
func serverArchs() []string {
	if emulates(otherArch()) {
		return []string{runtime.GOARCH, otherArch()}
	}
	return []string{runtime.GOARCH}
}

// docker run -p 6379:6379 ghcr.io/seed-6b3823f5/ratelimit-redis (and
// -valkey), on this machine's architecture and, where it runs them, the
// other's (docker run --platform): the server answers GCRA.THROTTLE,
// reports the version, runs as its own user and passes its health check.
func TestImageServers(t *testing.T) {
	for _, name := range []string{"redis", "valkey"} {
		for _, arch := range serverArchs() {
			t.Run(name+"-"+arch, func(t *testing.T) {
				t.Parallel()
				ref, run := image(name), []string{"-p", "127.0.0.1::6379"}
				if arch == runtime.GOARCH {
					assertTags(t, name, name)
				} else {
					ref, run = imageRef(name, ratelimit.Version+"-"+arch), append(run, "--platform", "linux/"+arch)
				}
				id := runImage(t, append(run, ref)...)
				if got := docker(t, "exec", id, "uname", "-m"); got != unameMachine[arch] {
					t.Errorf("the server's machine is %s, want %s's", got, arch)
				}
				c := redisAt(t, published(t, id, "6379/tcp"))
				assertReply(t, "GCRA.THROTTLE", mustCall(t, c, "GCRA.THROTTLE", "user123", 15, 30, 60), 0, 16, 15, -1, 2)
				assertVersion(t, &server{rdb: c})
				if got := docker(t, "exec", id, "id", "-un"); got != name {
					t.Errorf("the server runs as %q, want %q", got, name)
				}
				waitHealthy(t, id)
				// Options alone go to the server; its data stays in /data.
				id = runImage(t, append(run, ref, "--maxmemory", "12345678")...)
				c = redisAt(t, published(t, id, "6379/tcp"))
				if mem := c.ConfigGet(ctx, "maxmemory").Val()["maxmemory"]; mem != "12345678" {
					t.Errorf("maxmemory %q after docker run ... --maxmemory 12345678", mem)
				}
				if dir := c.ConfigGet(ctx, "dir").Val()["dir"]; dir != "/data" {
					t.Errorf("dir %q, want /data", dir)
				}
				assertReply(t, "GCRA.THROTTLE", mustCall(t, c, "GCRA.THROTTLE", "user123", 15, 30, 60), 0, 16, 15, -1, 2)
			})
		}
	}
}

// The other architecture's module image (arm64's on amd64) as an init
// container, and that architecture's Redis, run through qemu, loading the
// module it copied: the module make dist cross-compiles works where it
// is meant to run.
func TestImageModuleOtherArch(t *testing.T) {
	arch := otherArch()
	if !emulates(arch) {
		t.Skipf("this machine does not run linux/%s programs (make emulation registers qemu where the kernel allows)", arch)
	}
	vol := fmt.Sprintf("ratelimit-modules-%s-%d", arch, time.Now().UnixNano())
	docker(t, "volume", "create", vol)
	t.Cleanup(func() { exec.Command("docker", "volume", "rm", "-f", vol).Run() })
	platform := "linux/" + arch
	docker(t, "run", "--rm", "--platform", platform, "-v", vol+":/modules", imageRef("module", ratelimit.Version+"-"+arch))
	// The server image's own command line, without the module it holds.
	id := runImage(t, "--platform", platform, "-p", "127.0.0.1::6379", "-v", vol+":/modules:ro",
		imageRef("redis", ratelimit.Version+"-"+arch),
		"redis-server", "--loadmodule", "/modules/ratelimit.so", "--protected-mode", "no", "--save", "")
	c := redisAt(t, published(t, id, "6379/tcp"))
	assertReply(t, "GCRA.THROTTLE", mustCall(t, c, "GCRA.THROTTLE", "user123", 15, 30, 60), 0, 16, 15, -1, 2)
	assertVersion(t, &server{rdb: c})
	if got := docker(t, "exec", id, "uname", "-m"); got != unameMachine[arch] {
		t.Fatalf("the server's machine is %s, want %s's", got, arch)
	}
}

// ghcr.io/seed-6b3823f5/ratelimit-module as a Kubernetes init container:
// it copies the module and the Lua files into a volume, and a stock Redis
// (local/redis:8.0, Debian's, as a user's pod runs one) loads the module
// from it; the Lua files are package lua's and the library loads.
func TestImageModule(t *testing.T) {
	assertTags(t, "module", "65532:65532")
	vol := "ratelimit-modules-" + strings.ToLower(strings.NewReplacer("/", "-").Replace(t.Name())) + fmt.Sprint(time.Now().UnixNano())
	docker(t, "volume", "create", vol)
	t.Cleanup(func() { exec.Command("docker", "volume", "rm", "-f", vol).Run() })
	docker(t, "run", "--rm", "-v", vol+":/modules", image("module"))

	id := runImage(t, "-p", "127.0.0.1::6379", "-v", vol+":/modules:ro", "local/redis:8.0",
		"redis-server", "--loadmodule", "/modules/ratelimit.so", "--protected-mode", "no", "--save", "")
	c := redisAt(t, published(t, id, "6379/tcp"))
	assertReply(t, "GCRA.THROTTLE", mustCall(t, c, "GCRA.THROTTLE", "user123", 15, 30, 60), 0, 16, 15, -1, 2)
	assertVersion(t, &server{rdb: c})

	lib, _ := lua.Library()
	want := map[string]string{"ratelimit.lua": sha256Hex([]byte(lib))}
	for _, name := range lua.Commands() {
		s := lua.Must(name)
		want["scripts/"+s.Function+".lua"] = sha256Hex([]byte(s.Source))
	}
	got := map[string]string{}
	for _, line := range strings.Split(docker(t, "exec", "-w", "/modules", id, "sh", "-c", "sha256sum ratelimit.lua scripts/*.lua"), "\n") {
		sum, name, _ := strings.Cut(line, "  ")
		got[name] = sum
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the copied Lua files:\n got %v\nwant %v", got, want)
	}
	if out := docker(t, "exec", "-w", "/modules", id, "sh", "-c", `redis-cli FUNCTION LOAD REPLACE "$(cat ratelimit.lua)" && redis-cli FCALL gcra_throttle 1 fcall:user 15 30 60`); out != "ratelimit\n0\n16\n15\n-1\n2" {
		t.Fatalf("the copied library through FCALL:\n%s", out)
	}
}

// ghcr.io/seed-6b3823f5/ratelimit-rls swapped in for envoyproxy/ratelimit's image on a Docker
// network beside ratelimit-redis: started as Envoy Gateway starts the
// peer's (/bin/ratelimit, its environment variables, the config under
// RUNTIME_ROOT), it listens on the container's own address, passes its
// health check, answers, and stops cleanly on docker stop.
func TestImageRLS(t *testing.T) {
	assertTags(t, "rls", "65532:65532")
	if out := docker(t, "run", "--rm", image("rls"), "-version"); !strings.HasPrefix(out, "rls "+ratelimit.Version+" ") {
		t.Fatalf("rls -version: %q", out)
	}
	netName := fmt.Sprintf("ratelimit-rls-%d", time.Now().UnixNano())
	docker(t, "network", "create", netName)
	t.Cleanup(func() { exec.Command("docker", "network", "rm", netName).Run() })
	runImage(t, "--network", netName, "--network-alias", "redis", image("redis"))

	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.Mkdir(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(cfg, "apis.yaml"), dropInConfig)
	id := runImage(t, "--network", netName, "-p", "127.0.0.1::8080", "-p", "127.0.0.1::8081",
		"-v", cfg+":/data/ratelimit/config:ro",
		"-e", "REDIS_SOCKET_TYPE=tcp", "-e", "REDIS_URL=redis:6379", "-e", "RUNTIME_ROOT=/data",
		"-e", "RUNTIME_SUBDIRECTORY=ratelimit", "-e", "RUNTIME_WATCH_ROOT=false", "-e", "USE_STATSD=false",
		"-e", "LOG_LEVEL=debug", "--entrypoint", "/bin/ratelimit", image("rls"))
	waitHealthy(t, id)
	expectDropIn(t, &rlsProc{rl: dialRLS(t, published(t, id, "8081/tcp"))}, "7.7.7.7")

	docker(t, "stop", "-t", "15", id)
	if code := docker(t, "inspect", "-f", "{{.State.ExitCode}}", id); code != "0" {
		t.Fatalf("exit code %s after docker stop", code)
	}
}

// TestImageRLSEnvoyGateway: the image started as Envoy Gateway starts the
// peer's: /bin/ratelimit with the gateway's environment (config over xDS
// from the gateway's xDS server, mutual TLS to it and from Envoy, the
// certificates mounted at /certs, Prometheus on, FORCE_START), beside
// ratelimit-redis on a Docker network. The xDS server is go-control-plane's
// in this test, on the network's gateway address. Before the first config
// rls answers OK; then Envoy AI Gateway's token budget (a plain limit
// from xDS, its charges in debt) stops the client at the third check; a
// client without a certificate is refused.
func TestImageRLSEnvoyGateway(t *testing.T) {
	netName := fmt.Sprintf("ratelimit-eg-%d", time.Now().UnixNano())
	docker(t, "network", "create", netName)
	t.Cleanup(func() { exec.Command("docker", "network", "rm", netName).Run() })
	gateway := docker(t, "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}", netName)
	runImage(t, "--network", netName, "--network-alias", "redis", image("redis"))

	ca := rlstest.NewCA(t, "envoy-gateway")
	if err := os.Chmod(ca.Dir, 0o755); err != nil { // read by the image's user
		t.Fatal(err)
	}
	ca.Issue(t, "tls", "*.envoy-gateway-system", "localhost") // the rate limit service's (Secret envoy-rate-limit)
	ca.Issue(t, "envoy", "*.envoy-gateway-system")            // Envoy's
	ca.Issue(t, "eg", "envoy-gateway")                        // the xDS server's
	xds := rlstest.StartXDS(t, net.JoinHostPort(gateway, "0"), ca.ServerTLS(t, "eg"))

	env := []string{
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info", "USE_STATSD=false", "CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL=" + xds.Addr, "CONFIG_GRPC_XDS_NODE_ID=" + rlstest.Node,
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN=envoy-gateway", // the gateway's URL is envoy-gateway:18001; here an address
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/certs/tls.crt", "GRPC_SERVER_TLS_KEY=/certs/tls.key",
		"GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis:6379",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=:19001", "PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
	}
	args := []string{"--network", netName, "-p", "127.0.0.1::8081", "-p", "127.0.0.1::19001", "-v", ca.Dir + ":/certs:ro"}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	id := runImage(t, append(args, "--entrypoint", "/bin/ratelimit", image("rls"))...)
	waitHealthy(t, id)

	addr := published(t, id, "8081/tcp")
	dial := func(tc *tls.Config) pb.RateLimitServiceClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewRateLimitServiceClient(conn)
	}
	envoy := dial(ca.ClientTLS(t, "localhost", ca, "envoy"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := envoy.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "ai", Descriptors: []*rlv3.RateLimitDescriptor{desc("plain_user", "first")}})
	if err != nil || r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("before any config: %v %v, want OK", r, err)
	}
	if _, err := dial(ca.ClientTLS(t, "localhost", nil, "")).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "ai", Descriptors: []*rlv3.RateLimitDescriptor{desc("plain_user", "x")}}); err == nil {
		t.Fatal("a client without a certificate was answered")
	}

	xds.Push(t, "1", &rlcfg.RateLimitConfig{Name: "ai", Domain: "ai", Descriptors: []*rlcfg.RateLimitDescriptor{
		{Key: "plain_user", RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_MINUTE, RequestsPerUnit: 1000}},
	}})
	xds.Answered(t, "1", false)
	if got := tokenBudget(t, envoy, "plain_user", key(t, "u")); got != "OOXXXXXXXX" {
		t.Fatalf("the token budget's checks: %s, want OOXXXXXXXX", got)
	}
	resp, err := http.Get("http://" + published(t, id, "19001/tcp") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `ratelimit_service_config_load{result="success"} 1`) {
		t.Errorf("PROMETHEUS_ADDR's /metrics does not count the config from xDS:\n%.2000s", body)
	}

	docker(t, "stop", "-t", "15", id)
	if code := docker(t, "inspect", "-f", "{{.State.ExitCode}}", id); code != "0" {
		t.Fatalf("exit code %s after docker stop", code)
	}
}
