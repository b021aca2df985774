package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// deploy/'s files, read as Kubernetes and Helm read them (strictly: a
// misspelt field fails), and their containers started with docker as the
// kubelet would start them: the image, the environment, the user, the
// read-only root, the mounts; then probed as the kubelet probes them.

// strict decodes YAML into v, refusing fields v's type lacks.
func strict(t *testing.T, what string, y []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(y, v); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// rlsManifest is deploy/rls.yaml's objects.
type rlsManifest struct {
	config     corev1.ConfigMap
	deployment appsv1.Deployment
	service    corev1.Service
}

func readRLSManifest(t *testing.T) rlsManifest {
	t.Helper()
	b, err := os.ReadFile("../deploy/rls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m rlsManifest
	kinds := map[string]bool{}
	for i, doc := range strings.Split(string(b), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("deploy/rls.yaml document %d: %v", i+1, err)
		}
		what := "deploy/rls.yaml's " + meta.Kind
		switch meta.Kind {
		case "ConfigMap":
			strict(t, what, []byte(doc), &m.config)
		case "Deployment":
			strict(t, what, []byte(doc), &m.deployment)
		case "Service":
			strict(t, what, []byte(doc), &m.service)
		default:
			t.Fatalf("deploy/rls.yaml document %d is a %q", i+1, meta.Kind)
		}
		kinds[meta.Kind] = true
	}
	if len(kinds) != 3 {
		t.Fatalf("deploy/rls.yaml holds %v, want a ConfigMap, a Deployment and a Service", kinds)
	}
	return m
}

// deploy/rls.yaml holds together (selectors, named ports, the ConfigMap
// its volume names), and its container, started as the kubelet starts it
// beside ratelimit-valkey under the name REDIS_URL gives, passes its
// readiness probe (GET /healthcheck) and its liveness probe (gRPC health),
// and decides by the ConfigMap's config.
func TestDeployRLS(t *testing.T) {
	m := readRLSManifest(t)
	pod := m.deployment.Spec.Template
	for k, v := range m.deployment.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("the Deployment selects %s=%s, its pods are labelled %v", k, v, pod.Labels)
		}
	}
	for k, v := range m.service.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, the pods are labelled %v", k, v, pod.Labels)
		}
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if c.Image != image("rls") {
		t.Fatalf("image %s, want %s", c.Image, image("rls"))
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	port := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			if ports[p.StrVal] == 0 {
				t.Fatalf("port %q is not one the container names (%v)", p.StrVal, ports)
			}
			return ports[p.StrVal]
		}
		return p.IntVal
	}
	for _, p := range m.service.Spec.Ports {
		if got := port(p.TargetPort); got != p.Port {
			t.Errorf("the Service's %s port %d goes to the container's %d", p.Name, p.Port, got)
		}
	}

	// The container as the kubelet starts it.
	netName := fmt.Sprintf("ratelimit-deploy-%d", time.Now().UnixNano())
	docker(t, "network", "create", netName)
	t.Cleanup(func() { exec.Command("docker", "network", "rm", netName).Run() })
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	redisHost, _, _ := strings.Cut(env["REDIS_URL"], ":")
	runImage(t, "--network", netName, "--network-alias", redisHost, image("valkey"))

	args := []string{"--network", netName, "--cap-drop", "ALL"}
	sc, csc := pod.Spec.SecurityContext, c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || *sc.RunAsUser == 0 {
		t.Fatalf("the pod's securityContext %+v: a non-root user", sc)
	}
	args = append(args, "--user", fmt.Sprintf("%d:%d", *sc.RunAsUser, *sc.RunAsGroup))
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Fatalf("the container's securityContext %+v: a read-only root, no privilege escalation", csc)
	}
	args = append(args, "--read-only", "--security-opt", "no-new-privileges")
	for _, e := range c.Env {
		args = append(args, "-e", e.Name+"="+e.Value)
	}
	for _, vm := range c.VolumeMounts {
		var cm *corev1.ConfigMapVolumeSource
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name {
				cm = v.ConfigMap
			}
		}
		if cm == nil || cm.Name != m.config.Name || !vm.ReadOnly {
			t.Fatalf("volume mount %s: not the ConfigMap %s, read only", vm.Name, m.config.Name)
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range m.config.Data {
			writeFile(t, filepath.Join(dir, name), text)
		}
		args = append(args, "-v", dir+":"+vm.MountPath+":ro")
	}
	for _, p := range c.Ports {
		args = append(args, "-p", fmt.Sprintf("127.0.0.1::%d", p.ContainerPort))
	}
	id := runImage(t, append(args, c.Image)...)
	at := func(p intstr.IntOrString) string { return published(t, id, fmt.Sprintf("%d/tcp", port(p))) }

	ready := c.ReadinessProbe
	if ready == nil || ready.HTTPGet == nil {
		t.Fatal("no HTTP readiness probe")
	}
	url := "http://" + at(ready.HTTPGet.Port) + ready.HTTPGet.Path
	waitFor(t, 30*time.Second, "the readiness probe "+url, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400 // the kubelet's success
	})

	live := c.LivenessProbe
	if live == nil || live.GRPC == nil {
		t.Fatal("no gRPC liveness probe")
	}
	conn, err := grpc.NewClient(at(intstr.FromInt32(live.GRPC.Port)), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	service := ""
	if live.GRPC.Service != nil {
		service = *live.GRPC.Service
	}
	if r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("the liveness probe: %v %v", r, err)
	}

	rl := pb.NewRateLimitServiceClient(conn)
	r, err := rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "apis", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", "10.1.2.3")}})
	if err != nil || r.OverallCode != pb.RateLimitResponse_OK || len(r.Statuses) != 1 ||
		r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 60 || r.Statuses[0].CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE ||
		r.Statuses[0].LimitRemaining != 59 {
		t.Fatalf("a request by the ConfigMap's config: %v %v, want OK, 59 of 60 a minute left", r, err)
	}
}

// chartValues is the part of a chart's values these tests read: the init
// container, the volumes, the server's mounts, and how the module is
// loaded (valkey's valkeyConfig, Bitnami redis's extraFlags).
type chartValues struct {
	InitContainers []corev1.Container
	Volumes        []corev1.Volume
	Mounts         []corev1.VolumeMount
	Config         string
	Flags          []string
}

// readValues reads a values file: keys at the top (prefix "") or under
// master/replica.
func readValues(t *testing.T, file string, keys map[string]string) chartValues {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", file))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var v chartValues
	get := func(key string, into any) {
		val := any(raw)
		for _, k := range strings.Split(key, ".") {
			val = val.(map[string]any)[k]
		}
		if val == nil {
			t.Fatalf("%s has no %s", file, key)
		}
		y, _ := yaml.Marshal(val)
		strict(t, file+"'s "+key, y, into)
	}
	get(keys["init"], &v.InitContainers)
	get(keys["volumes"], &v.Volumes)
	get(keys["mounts"], &v.Mounts)
	if k := keys["config"]; k != "" {
		get(k, &v.Config)
	}
	if k := keys["flags"]; k != "" {
		get(k, &v.Flags)
	}
	return v
}

// startFromValues runs the values' init container into a volume, then a
// stand-in for the chart's server (Debian's, local/NAME) with the values'
// mounts and the command line the chart would give it (cmd; config, when
// not empty, after what the chart writes itself, in /conf/server.conf);
// the module answers.
func startFromValues(t *testing.T, v chartValues, serverImage string, cmd ...string) {
	t.Helper()
	if len(v.InitContainers) != 1 || v.InitContainers[0].Image != image("module") {
		t.Fatalf("init containers %+v, want one of %s", v.InitContainers, image("module"))
	}
	init := v.InitContainers[0]
	if len(v.Volumes) != 1 || v.Volumes[0].EmptyDir == nil {
		t.Fatalf("volumes %+v, want one emptyDir", v.Volumes)
	}
	vol := fmt.Sprintf("ratelimit-values-%d", time.Now().UnixNano())
	docker(t, "volume", "create", vol)
	t.Cleanup(func() { exec.Command("docker", "volume", "rm", "-f", vol).Run() })
	mount := func(ms []corev1.VolumeMount) []string {
		var a []string
		for _, m := range ms {
			if m.Name != v.Volumes[0].Name {
				t.Fatalf("mount %s: the values declare volume %s", m.Name, v.Volumes[0].Name)
			}
			opt := ""
			if m.ReadOnly {
				opt = ":ro"
			}
			a = append(a, "-v", vol+":"+m.MountPath+opt)
		}
		return a
	}
	initArgs := append([]string{"run", "--rm", "--read-only", "--cap-drop", "ALL"}, mount(init.VolumeMounts)...)
	docker(t, append(initArgs, init.Image)...)

	run := append([]string{"-p", "127.0.0.1::6379"}, mount(v.Mounts)...)
	if v.Config != "" {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "server.conf"), "port 6379\nbind * -::*\nprotected-mode no\nsave \"\"\n"+v.Config)
		run = append(run, "-v", dir+":/conf:ro")
	}
	id := runImage(t, append(append(run, serverImage), cmd...)...)
	c := redisAt(t, published(t, id, "6379/tcp"))
	assertReply(t, "GCRA.THROTTLE", mustCall(t, c, "GCRA.THROTTLE", "user123", 15, 30, 60), 0, 16, 15, -1, 2)
	assertVersion(t, &server{rdb: c})
}

// deploy/valkey-values.yaml with the Valkey chart: the init container
// copies the module where Valkey's mount finds it, and the config line the
// chart appends to valkey.conf loads it.
func TestDeployValkeyValues(t *testing.T) {
	v := readValues(t, "valkey-values.yaml", map[string]string{
		"init": "extraInitContainers", "volumes": "extraVolumes", "mounts": "extraVolumeMounts", "config": "valkeyConfig",
	})
	startFromValues(t, v, "local/valkey:8.1", "valkey-server", "/conf/server.conf")
}

// deploy/redis-values.yaml with Bitnami's chart: the same on the primary
// and the replicas, the module loaded by the flag the chart appends to
// redis-server's command line (one argument, as the chart quotes it).
func TestDeployRedisValues(t *testing.T) {
	keys := func(role string) map[string]string {
		return map[string]string{"init": role + ".initContainers", "volumes": role + ".extraVolumes", "mounts": role + ".extraVolumeMounts", "flags": role + ".extraFlags"}
	}
	primary := readValues(t, "redis-values.yaml", keys("master"))
	if replica := readValues(t, "redis-values.yaml", keys("replica")); fmt.Sprint(replica) != fmt.Sprint(primary) {
		t.Fatalf("the replicas' values differ from the primary's:\n%+v\n%+v", replica, primary)
	}
	startFromValues(t, primary, "local/redis:8.0",
		append([]string{"redis-server", "--port", "6379", "--protected-mode", "no", "--save", ""}, primary.Flags...)...)
}
