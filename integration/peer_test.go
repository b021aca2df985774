package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rls beside envoyproxy/ratelimit ("the peer", the service it replaces), on
// one Redis server: the same requests to both, the same answers expected,
// for what the peer added last and rls claims to do as it does:
// value_to_metric (peer PR #996), share_threshold (#1016), the response's
// dynamic_metadata (RESPONSE_DYNAMIC_METADATA, #1027) and POST /json.

// peerVersion is the peer built, as bench/rls builds it: its main branch as
// the Go module proxy serves it (the project tags no releases as modules).
// Its source: github.com/envoyproxy/ratelimit at commit 3fb7025.
const peerVersion = "v1.4.1-0.20260122083618-3fb702589d36"

var peerBin struct {
	once sync.Once
	path string
	err  error
}

// peerBinary is build/peer/service_cmd, built once with go install from the
// module proxy when it is not there (bench/rls builds the same file).
func peerBinary(t *testing.T) string {
	t.Helper()
	peerBin.once.Do(func() {
		build, err := filepath.Abs("../build")
		if err != nil {
			peerBin.err = err
			return
		}
		peerBin.path = filepath.Join(build, "peer", "service_cmd")
		if _, err := os.Stat(peerBin.path); err == nil {
			return
		}
		// go install into a directory of its own, then move the binary
		// in: an interrupted build leaves no half-written service_cmd to
		// be taken for a built one next time.
		if err := os.MkdirAll(filepath.Dir(peerBin.path), 0o755); err != nil {
			peerBin.err = err
			return
		}
		tmp, err := os.MkdirTemp(filepath.Dir(peerBin.path), "install-")
		if err != nil {
			peerBin.err = err
			return
		}
		defer os.RemoveAll(tmp)
		t.Logf("building envoyproxy/ratelimit %s (go install, about a minute)", peerVersion)
		cmd := exec.Command("go", "install", "github.com/envoyproxy/ratelimit/src/service_cmd@"+peerVersion)
		cmd.Dir = tmp // outside every module: go install pkg@version builds the peer's own go.mod
		// GOFLAGS cleared: a -mod of the caller's would refuse a build
		// outside a module. GOWORK=off: no workspace applies.
		cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			peerBin.err = fmt.Errorf("go install github.com/envoyproxy/ratelimit/src/service_cmd@%s: %v\n%s", peerVersion, err, out)
			return
		}
		peerBin.err = os.Rename(filepath.Join(tmp, "service_cmd"), peerBin.path)
	})
	if peerBin.err != nil {
		t.Fatalf("cannot build the peer (envoyproxy/ratelimit) to compare rls with: %v", peerBin.err)
	}
	return peerBin.path
}

// peerProc is one running peer.
type peerProc struct {
	cmd    *exec.Cmd
	web    string // its HTTP server (PORT): /healthcheck, /json
	prom   string // its Prometheus sink (PROMETHEUS_ADDR): /metrics
	out    *syncBuffer
	exited chan struct{}
	err    error
	rl     pb.RateLimitServiceClient
}

// peerMapper is the peer's PROMETHEUS_MAPPER_YAML: each per-limit counter
// as ratelimit_service_rate_limit_<name>{domain, key} with the whole stat
// key, as rls labels its own. The peer's default mapper labels only the
// first two levels of a key (key1, key2) and drops the rest
// (src/stats/prom/default_mapper.yaml), which would hide the deeper levels
// value_to_metric and share_threshold write.
var peerMapper = `mappings:
` + peerMapping + `
`

var peerMapping = func() string {
	var b strings.Builder
	for _, name := range []string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"} {
		fmt.Fprintf(&b, `  - match: '^ratelimit\.service\.rate_limit\.(([^.]+)\..+)\.%s$'
    match_type: regex
    name: ratelimit_service_rate_limit_%s
    labels: {domain: "${2}", key: "${1}"}
`, name, name)
	}
	return b.String()
}()

// startPeer starts the peer on redis with the config files given and more
// environment variables, and waits until its health check answers OK.
func startPeer(t *testing.T, redisAddr string, files map[string]string, env ...string) *peerProc {
	t.Helper()
	bin := peerBinary(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config") // RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		writeFile(t, filepath.Join(dir, name), text)
	}
	mapper := filepath.Join(root, "mapper.yaml")
	writeFile(t, mapper, peerMapper)
	var ports [4]int
	for i := range ports {
		var err error
		if ports[i], err = freePort(); err != nil {
			t.Fatal(err)
		}
	}
	gport, hport, dport, pport := ports[0], ports[1], ports[2], ports[3]
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), append([]string{
		"USE_STATSD=false", "USE_PROMETHEUS=true", fmt.Sprintf("PROMETHEUS_ADDR=127.0.0.1:%d", pport),
		"PROMETHEUS_MAPPER_YAML=" + mapper, "STATS_FLUSH_INTERVAL=200ms",
		"LOG_LEVEL=warn", "BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"GRPC_PORT=" + strconv.Itoa(gport), "PORT=" + strconv.Itoa(hport), "DEBUG_PORT=" + strconv.Itoa(dport),
	}, env...)...)
	p := &peerProc{
		cmd: cmd, web: fmt.Sprintf("http://127.0.0.1:%d", hport), prom: fmt.Sprintf("http://127.0.0.1:%d/metrics", pport),
		out: &syncBuffer{}, exited: make(chan struct{}),
	}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("cannot start the peer %s: %v", bin, err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("peer output:\n%s", tail(p.out.String(), 40))
		}
	})
	waitServing(t, "the peer", p.web+"/healthcheck", "", p.exited, &p.err, p.out)
	p.rl = dialRLS(t, fmt.Sprintf("127.0.0.1:%d", gport))
	return p
}

// pair is an rls and a peer on one Redis server with the same config.
type pair struct {
	rls  *rlsProc
	peer *peerProc
}

// ask sends req to rls, then to the peer, and fails unless they answer the
// same (see sameResponse); it returns rls's answer.
func (p pair) ask(t *testing.T, what string, req *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	mine := p.rls.askReq(t, req)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	theirs, err := p.peer.rl.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("%s: the peer: ShouldRateLimit(%v): %v", what, req, err)
	}
	sameResponse(t, what, req, mine, theirs)
	return mine
}

// sameResponse fails unless rls's response and the peer's are the same:
// the overall code and each status's code, limit_remaining and
// current_limit (brief), then the whole response as protojson, whitespace
// aside, but for what may legitimately differ (normalize).
func sameResponse(t *testing.T, what string, req *pb.RateLimitRequest, mine, theirs *pb.RateLimitResponse) {
	t.Helper()
	if a, b := brief(mine), brief(theirs); a != b {
		t.Fatalf("%s: %v\n  rls: %s\n peer: %s", what, protojson.Format(req), a, b)
	}
	a, b := protoJSON(t, mine), protoJSON(t, theirs)
	if err := normalize(a, b); err != nil {
		t.Fatalf("%s: %v\n  rls: %s\n peer: %s", what, err, canon(t, a), canon(t, b))
	}
	if ca, cb := canon(t, a), canon(t, b); ca != cb {
		t.Fatalf("%s: %v\n  rls: %s\n peer: %s", what, protojson.Format(req), ca, cb)
	}
}

// normalize removes from rls's response (mine) and the peer's (theirs),
// decoded from protojson, what legitimately differs between them, after
// checking it is only that:
//
//   - each status's durationUntilReset: the peer and rls read the clock at
//     different instants (a second apart at a second's turn); only its
//     presence is compared.
//   - dynamicMetadata.quotaModeEnabled: this peer version (PR #1045 on top
//     of #1027) always adds it, false unless a descriptor asked has
//     quota_mode; the peer dropped it again in PR #1112 (3728d99, "Send
//     user defined metadata to the client"), whose metadata rls follows
//     (docs/rls.md: {domain, descriptors, hitsAddend, metadata}). No
//     config here has quota_mode, so the peer's must be false (and there
//     must be no quotaModeViolations) and rls must have none.
func normalize(mine, theirs map[string]any) error {
	ms, _ := mine["statuses"].([]any)
	ts, _ := theirs["statuses"].([]any)
	for i := range min(len(ms), len(ts)) {
		a, _ := ms[i].(map[string]any)
		b, _ := ts[i].(map[string]any)
		_, ina := a["durationUntilReset"]
		_, inb := b["durationUntilReset"]
		if ina != inb {
			return fmt.Errorf("status %d: durationUntilReset in rls's %v, in the peer's %v", i, ina, inb)
		}
		delete(a, "durationUntilReset")
		delete(b, "durationUntilReset")
	}
	if md, ok := theirs["dynamicMetadata"].(map[string]any); ok {
		if v, ok := md["quotaModeEnabled"]; !ok || v != false {
			return fmt.Errorf("the peer's dynamicMetadata.quotaModeEnabled is %v (present %v), want false: no limit here has quota_mode", v, ok)
		}
		if _, ok := md["quotaModeViolations"]; ok {
			return fmt.Errorf("the peer's dynamicMetadata has quotaModeViolations: no limit here has quota_mode")
		}
		delete(md, "quotaModeEnabled")
	}
	if md, ok := mine["dynamicMetadata"].(map[string]any); ok {
		for _, k := range []string{"quotaModeEnabled", "quotaModeViolations"} {
			if _, ok := md[k]; ok {
				return fmt.Errorf("rls's dynamicMetadata has %s", k)
			}
		}
	}
	return nil
}

// protoJSON is a message in protojson, decoded.
func protoJSON(t *testing.T, m proto.Message) map[string]any {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return decodeJSON(t, b)
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not a JSON object: %v: %q", err, b)
	}
	return v
}

// canon is v as JSON, keys sorted, without whitespace: also that inside
// strings, for the peer writes a descriptor's limit in dynamic_metadata as
// the message's String(), the prototext whose spacing protobuf-go varies
// on purpose ("requests_per_unit:1  unit:DAY").
func canon(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, string(b))
}

var (
	seriesRE = regexp.MustCompile(`^(ratelimit_service_rate_limit_(?:total_hits|over_limit|near_limit|within_limit|shadow_mode))\{(.*)\} (\S+)$`)
	labelRE  = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)
)

// statCounts are the per-limit counters of domain a /metrics holds, as
// "name key" -> count, those above 0 only: rls exports all five of a key
// from its first hit, the peer (gostats) only counters that moved.
func statCounts(url, domain string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	counts := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		m := seriesRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", line, err)
		}
		if labels["domain"] == domain && v != 0 {
			counts[strings.TrimPrefix(m[1], "ratelimit_service_rate_limit_")+" "+labels["key"]] = v
		}
	}
	return counts, nil
}

func showCounts(c map[string]float64) string {
	var lines []string
	for k, v := range c {
		lines = append(lines, fmt.Sprintf("  %s = %g", k, v))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// sameStats fails unless the peer's per-limit counters of domain are
// rls's, and rls's total_hits hold each of want (want holds every hit
// sent). The peer's counters reach /metrics at its stats flushes
// (STATS_FLUSH_INTERVAL): they are read once their total_hits add up to
// the hits sent, then for up to 2 s more while they differ (the other
// counters of a flush land one after another).
func (p pair) sameStats(t *testing.T, domain string, want map[string]float64) {
	t.Helper()
	mine, err := statCounts(p.rls.web+"/metrics", domain)
	if err != nil {
		t.Fatal(err)
	}
	var sent float64
	for key, n := range want {
		sent += n
		if got := mine["total_hits "+key]; got != n {
			t.Errorf("rls: total_hits{domain=%q,key=%q} = %g, want %g", domain, key, got, n)
		}
	}
	hits := func(c map[string]float64) (n float64) {
		for k, v := range c {
			if strings.HasPrefix(k, "total_hits ") {
				n += v
			}
		}
		return n
	}
	var theirs map[string]float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		if theirs, err = statCounts(p.peer.prom, domain); err != nil {
			t.Fatal(err)
		}
		if hits(theirs) >= sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the peer's total_hits of %s add up to %g in 20 s, not the %g hits sent:\n%s", domain, hits(theirs), sent, showCounts(theirs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for settle := time.Now().Add(2 * time.Second); fmt.Sprint(theirs) != fmt.Sprint(mine) && time.Now().Before(settle); {
		time.Sleep(100 * time.Millisecond)
		if theirs, err = statCounts(p.peer.prom, domain); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(theirs) != fmt.Sprint(mine) {
		t.Errorf("domain %s: counters differ\nrls:\n%s\npeer:\n%s", domain, showCounts(mine), showCounts(theirs))
	}
	if t.Failed() {
		t.FailNow()
	}
}

// routeTree is the config of the peer's TestValueToMetric_UsesRuntimeValuesInStats,
// _WithEmptyValue and _FullKeyMatchesStatsKey (case 1), in
// test/config/config_test.go, per day (not per minute: a window turning
// between the two services' requests would part their counts).
const routeTree = `
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: day, requests_per_unit: 3}
`

// valueToMetricConfig gathers the peer's value_to_metric cases
// (test/config/config_test.go, TestValueToMetric_*) in one domain, each
// under a top key of its own, the limits per day and small enough to be
// reached. beside-v2m-empty and beside-v2m-names have routeTree alone, for
// the cases of empty values and of values the peer sanitizes, each in a
// domain and subtest of its own.
const valueToMetricConfig = `
domain: beside-v2m
descriptors:` + routeTree + `
  # TestValueToMetric_DefaultKeyIncludesValueAtThatLevel
  - key: k1
    value_to_metric: true
    descriptors:
      - key: k2
        rate_limit: {unit: day, requests_per_unit: 1}
  # TestValueToMetric_MidLevelOnly
  - key: m1
    descriptors:
      - key: m2
        value_to_metric: true
        descriptors:
          - key: m3
            rate_limit: {unit: day, requests_per_unit: 1}
  # TestValueToMetric_NoFlag_Unchanged
  - key: n1
    descriptors:
      - key: n2
        rate_limit: {unit: day, requests_per_unit: 1}
  # TestValueToMetric_DoesNotOverrideDetailedMetric
  - key: droute
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            detailed_metric: true
            rate_limit: {unit: day, requests_per_unit: 2}
  # TestValueToMetric_WithConfiguredValues
  - key: api
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: day, requests_per_unit: 60}
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: day, requests_per_unit: 30}
  # TestValueToMetric_WithWildcard
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: day, requests_per_unit: 100}
`

// shareThresholdConfig is the peer's test/config/share_threshold.yaml
// (TestShareThreshold in test/config/config_test.go) with
// test/integration/runtime/current/ratelimit/config/share_threshold.yaml's
// files_no_share (TestShareThreshold in test/integration), per day, and
// files/*'s limit 3 rather than 100 to be reached.
const shareThresholdConfig = `
domain: beside-share
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: nested
    value: parent
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: day, requests_per_unit: 200}
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: day, requests_per_unit: 300}
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: day, requests_per_unit: 60}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 80}
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit: {unit: day, requests_per_unit: 120}
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - key: action
            rate_limit: {unit: day, requests_per_unit: 150}
  - key: file
    value: test1
    rate_limit: {unit: day, requests_per_unit: 50}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: day, requests_per_unit: 10}
`

// metadataConfig has limits for the descriptors of the peer's
// TestRatelimitToMetadata (src/service/ratelimit_test.go) that are not
// quotas. No metadata: this peer version has no per-descriptor metadata
// (PR #1112 came later) and refuses a config with it.
const metadataConfig = `
domain: beside-meta
descriptors:
  - key: key1
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: regular_key
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: test_key
    rate_limit: {unit: day, requests_per_unit: 10}
`

const jsonConfig = `
domain: beside-json
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: path
    value: /login*
    rate_limit: {unit: hour, requests_per_unit: 5, name: login}
`

func req(domain string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// TestRLSBesidePeer: rls and envoyproxy/ratelimit at peerVersion, on the
// same server with the same config, answer the same requests alike —
// responses, stat keys and counts, dynamic_metadata, POST /json. Each
// counts under its own Redis keys (rls's -prefix of startRLS, the peer's
// CACHE_KEY_PREFIX), and each part has a domain of its own.
func TestRLSBesidePeer(t *testing.T) {
	peerBinary(t)  // a peer that cannot be built fails the test
	s := shared[0] // one server: the comparison needs no more
	t.Run(s.name, func(t *testing.T) {
		files := map[string]string{
			"v2m.yaml":       valueToMetricConfig,
			"v2m-empty.yaml": "domain: beside-v2m-empty\ndescriptors:" + routeTree,
			"v2m-names.yaml": "domain: beside-v2m-names\ndescriptors:" + routeTree,
			"share.yaml":     shareThresholdConfig,
			"meta.yaml":      metadataConfig,
			"json.yaml":      jsonConfig,
		}
		p := pair{
			rls:  startRLS(t, s.addr(), files, "-response-dynamic-metadata=true"),
			peer: startPeer(t, s.addr(), files, "RESPONSE_DYNAMIC_METADATA=true", "CACHE_KEY_PREFIX=peer:"),
		}
		t.Run("value_to_metric", func(t *testing.T) { besideValueToMetric(t, p) })
		t.Run("value_to_metric_empty_values", func(t *testing.T) { besideEmptyValues(t, p) })
		t.Run("stat_keys_sanitized", func(t *testing.T) { besideSanitized(t, p) })
		t.Run("share_threshold", func(t *testing.T) { besideShareThreshold(t, p) })
		t.Run("dynamic_metadata", func(t *testing.T) { besideMetadata(t, p) })
		t.Run("json", func(t *testing.T) { besideJSON(t, p) })
	})
}

// counter is a pair's ask in domain d that notes the stat key each request
// counts under: ask(what, statKey, n, descriptors…) sends the request n
// times. want is then every key's count.
func (p pair) counter(t *testing.T, d string) (ask func(what, statKey string, n int, ds ...*rlv3.RateLimitDescriptor) []*pb.RateLimitResponse, want map[string]float64) {
	want = map[string]float64{}
	ask = func(what, statKey string, n int, ds ...*rlv3.RateLimitDescriptor) []*pb.RateLimitResponse {
		t.Helper()
		var rs []*pb.RateLimitResponse
		for i := range n {
			rs = append(rs, p.ask(t, fmt.Sprintf("%s, request %d", what, i+1), req(d, ds...)))
		}
		want[statKey] += float64(n)
		return rs
	}
	return ask, want
}

func besideValueToMetric(t *testing.T, p pair) {
	const d = "beside-v2m"
	ask, want := p.counter(t, d)
	// TestValueToMetric_UsesRuntimeValuesInStats: the values of the levels
	// with value_to_metric in the key, past the limit too; another subject
	// counts apart but under the same stat key.
	rs := ask("runtime values", d+".route_draw.http_method_GET.subject_id", 4, desc("route", "draw", "http_method", "GET", "subject_id", "123"))
	expectBrief(t, "runtime values, 4th", rs[3], "OVER_LIMIT [OVER_LIMIT r=0 3/DAY]")
	ask("runtime values, another subject", d+".route_draw.http_method_GET.subject_id", 1, desc("route", "draw", "http_method", "GET", "subject_id", "456"))
	// TestValueToMetric_DefaultKeyIncludesValueAtThatLevel.
	rs = ask("default key", d+".k1_A.k2", 2, desc("k1", "A", "k2", "foo"))
	expectBrief(t, "default key, 2nd", rs[1], "OVER_LIMIT [OVER_LIMIT r=0 1/DAY]")
	// TestValueToMetric_MidLevelOnly, TestValueToMetric_NoFlag_Unchanged.
	ask("mid level only", d+".m1.m2_Y.m3", 1, desc("m1", "X", "m2", "Y", "m3", "Z"))
	ask("no flag", d+".n1.n2", 1, desc("n1", "X", "n2", "Y"))
	// TestValueToMetric_DoesNotOverrideDetailedMetric.
	ask("detailed_metric wins", d+".droute_draw.http_method_GET.subject_id_123", 1, desc("droute", "draw", "http_method", "GET", "subject_id", "123"))
	// TestValueToMetric_WithConfiguredValues: the configured value is the
	// request's.
	rs = ask("configured GET", d+".api_api.http_method_GET.subject_id", 1, desc("api", "api", "http_method", "GET", "subject_id", "user123"))
	expectBrief(t, "configured GET", rs[0], "OK [OK r=59 60/DAY]")
	rs = ask("configured POST", d+".api_api.http_method_POST.subject_id", 1, desc("api", "api", "http_method", "POST", "subject_id", "user456"))
	expectBrief(t, "configured POST", rs[0], "OK [OK r=29 30/DAY]")
	// TestValueToMetric_WithWildcard: a wildcard's level says the whole
	// value the request gave.
	ask("wildcard alice", d+".user_alice.action_readfile.resource", 1, desc("user", "alice", "action", "readfile", "resource", "documents"))
	ask("wildcard bob", d+".user_bob.action_readdata.resource", 1, desc("user", "bob", "action", "readdata", "resource", "database"))
	// Two descriptors in one request, each under its own key.
	ask("two descriptors", d+".user_carol.action_readme.resource", 1,
		desc("user", "carol", "action", "readme", "resource", "x"), desc("m1", "X", "m2", "W", "m3", "Z"))
	want[d+".m1.m2_W.m3"]++
	p.sameStats(t, d, want)
}

// besideEmptyValues: TestValueToMetric_WithEmptyValue — a level with
// value_to_metric whose value the request left empty adds its key alone
// to the stat key, no "_".
func besideEmptyValues(t *testing.T, p pair) {
	const d = "beside-v2m-empty"
	ask, want := p.counter(t, d)
	ask("empty route", d+".route.http_method_GET.subject_id", 1, desc("route", "", "http_method", "GET", "subject_id", "123"))
	ask("empty method", d+".route_draw.http_method.subject_id", 1, desc("route", "draw", "http_method", "", "subject_id", "123"))
	ask("both empty", d+".route.http_method.subject_id", 2, desc("route", "", "http_method", "", "subject_id", "123"))
	p.sameStats(t, d, want)
}

// besideSanitized: the peer sanitizes every stat name
// (utils.SanitizeStatName, src/utils/utilities.go, called by
// stats.ManagerImpl.NewStats): ':' and '|' become '_', and so do the dots
// of an IPv4 address — as a request's value in a value_to_metric key
// shows.
func besideSanitized(t *testing.T, p pair) {
	const d = "beside-v2m-names"
	ask, want := p.counter(t, d)
	ask("an address", d+".route_10_0_0_1.http_method_GET.subject_id", 1, desc("route", "10.0.0.1", "http_method", "GET", "subject_id", "1"))
	ask("':' and '|'", d+".route_a_b_c.http_method_GET.subject_id", 1, desc("route", "a:b|c", "http_method", "GET", "subject_id", "1"))
	p.sameStats(t, d, want)
}

func besideShareThreshold(t *testing.T, p pair) {
	const d = "beside-share"
	want := map[string]float64{}
	ask := func(what, statKey string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
		t.Helper()
		want[statKey]++
		return p.ask(t, what, req(d, ds...))
	}
	// Basic share_threshold (config_test.go) and test/integration's
	// TestShareThreshold: every value under files/* counts at one key, so
	// the 4th file is refused though each file was asked once.
	for i, f := range []string{"files/a.pdf", "files/b.csv", "files/c.txt"} {
		expectBrief(t, f, ask(f, d+".files_files/*", desc("files", f)), fmt.Sprintf("OK [OK r=%d 3/DAY]", 2-i))
	}
	expectBrief(t, "files/d.doc", ask("files/d.doc", d+".files_files/*", desc("files", "files/d.doc")), "OVER_LIMIT [OVER_LIMIT r=0 3/DAY]")
	// test/integration's files_no_share: a wildcard without share_threshold
	// counts each value apart.
	for _, f := range []string{"files_no_share/1", "files_no_share/2"} {
		expectBrief(t, f, ask(f, d+".files_no_share_files_no_share/*", desc("files_no_share", f)), "OK [OK r=9 10/DAY]")
	}
	// share_threshold with metrics: with value_to_metric, then with
	// detailed_metric below it; the pattern wins.
	expectBrief(t, "route api/v1", ask("route api/v1", d+".route_api/*.method", desc("route", "api/v1", "method", "GET")), "OK [OK r=59 60/DAY]")
	expectBrief(t, "route api/v2", ask("route api/v2", d+".route_api/*.method", desc("route", "api/v2", "method", "GET")), "OK [OK r=58 60/DAY]")
	ask("service svc/user", d+".service_svc/*.endpoint_get", desc("service", "svc/user", "endpoint", "get"))
	ask("service svc/order", d+".service_svc/*.endpoint_get", desc("service", "svc/order", "endpoint", "get"))
	// Nested wildcards.
	ask("nested", d+".nested_parent.files_nested/*", desc("nested", "parent", "files", "nested/file1.txt"))
	ask("nested again", d+".nested_parent.files_nested/*", desc("nested", "parent", "files", "nested/file2.txt"))
	ask("two wildcards", d+".files_top/*.files_nested/*", desc("files", "top/file1.txt", "files", "nested/file1.txt"))
	expectBrief(t, "two wildcards, others", ask("two wildcards, others", d+".files_top/*.files_nested/*", desc("files", "top/x", "files", "nested/y")), "OK [OK r=298 300/DAY]")
	ask("parent shares, child not", d+".path_path/*.file_file/*.type", desc("path", "path/foo", "file", "file/doc1", "type", "pdf"))
	expectBrief(t, "parent shares, child not, another file",
		ask("parent shares, child not, another file", d+".path_path/*.file_file/*.type", desc("path", "path/bar", "file", "file/doc2", "type", "pdf")),
		"OK [OK r=119 120/DAY]")
	ask("both share", d+".user_user/*.resource_res/*.action", desc("user", "user/alice", "resource", "res/file1", "action", "read"))
	expectBrief(t, "both share, others",
		ask("both share, others", d+".user_user/*.resource_res/*.action", desc("user", "user/bob", "resource", "res/file2", "action", "read")),
		"OK [OK r=148 150/DAY]")
	// Explicit value precedence over wildcard: test1 its own, test2,
	// test23, test123 one shared.
	expectBrief(t, "file test1", ask("file test1", d+".file_test1", desc("file", "test1")), "OK [OK r=49 50/DAY]")
	for i, v := range []string{"test2", "test23", "test123"} {
		expectBrief(t, "file "+v, ask("file "+v, d+".file_test*", desc("file", v)), fmt.Sprintf("OK [OK r=%d 100/DAY]", 99-i))
	}
	p.sameStats(t, d, want)
}

// besideMetadata: dynamic_metadata (RESPONSE_DYNAMIC_METADATA=true), from
// the cases of the peer's TestRatelimitToMetadata that have no quota
// (src/service/ratelimit_test.go), and the fields descriptorToStruct
// writes that those cases leave out (a descriptor's limit and
// hits_addend).
func besideMetadata(t *testing.T, p pair) {
	const d = "beside-meta"
	check := func(what string, r *pb.RateLimitRequest, wantMD string) {
		t.Helper()
		mine := p.ask(t, what, r) // the whole response, metadata with it
		if got := canon(t, protoJSON(t, mine.DynamicMetadata)); got != canon(t, decodeJSON(t, []byte(wantMD))) {
			t.Fatalf("%s: rls's dynamic_metadata:\n got %s\nwant %s", what, got, wantMD)
		}
	}
	// "Single descriptor with single entry, no quota violations", then
	// past its limit (an OVER_LIMIT changes nothing in it).
	one := req(d, desc("key1", "val1"))
	for i := range 3 {
		check(fmt.Sprintf("single descriptor, request %d", i+1), one, `{"descriptors":[{"entries":["key1=val1"]}],"domain":"beside-meta"}`)
	}
	// "Multiple descriptors with mixed quota violations", without quotas:
	// descriptors that match no limit are listed as well.
	check("multiple descriptors",
		req(d, desc("regular_key", "regular_val"), desc("quota_key", "quota_val"), desc("another_quota", "another_val")),
		`{"descriptors":[{"entries":["regular_key=regular_val"]},{"entries":["quota_key=quota_val"]},{"entries":["another_quota=another_val"]}],"domain":"beside-meta"}`)
	// "Request with hits addend".
	check("request hits_addend", &pb.RateLimitRequest{Domain: d, HitsAddend: 5, Descriptors: []*rlv3.RateLimitDescriptor{desc("test_key", "test_val")}},
		`{"descriptors":[{"entries":["test_key=test_val"]}],"domain":"beside-meta","hitsAddend":5}`)
	// A descriptor's own hits_addend and Envoy's limit, several entries.
	own := desc("test_key", "own", "sub", "x")
	own.HitsAddend = wrapperspb.UInt64(2)
	lim := desc("key1", "val2")
	lim.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_DAY}
	check("descriptor hits_addend and limit", req(d, own, lim),
		`{"descriptors":[{"entries":["test_key=own","sub=x"],"hitsAddend":2},{"entries":["key1=val2"],"limit":"requests_per_unit:7 unit:DAY"}],"domain":"beside-meta"}`)
	// A domain with no config.
	check("unknown domain", req("beside-meta-none", desc("a", "b")), `{"descriptors":[{"entries":["a=b"]}],"domain":"beside-meta-none"}`)
}

// post sends body to url's /json: the status, the Content-Type, the body.
func post(t *testing.T, url, body string) (int, string, []byte) {
	t.Helper()
	resp, err := http.Post(url+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// besideJSON: POST /json (the peer's NewJsonHandler, src/server/
// server_impl.go; cases from TestJsonHandler, test/server/
// server_impl_test.go, on a real service rather than a mock).
func besideJSON(t *testing.T, p pair) {
	ip := `{"domain":"beside-json","descriptors":[{"entries":[{"key":"remote_address","value":"10.1.1.1"}]}]}`
	for i, c := range []struct {
		what, body string
		code       int
	}{
		// "successful request, not rate limited", then "rate limited".
		{"first", ip, 200},
		{"second", ip, 200},
		{"over the limit", ip, 429},
		{"hits_addend, snake_case, two descriptors, one without a limit", `{"domain": "beside-json", "hits_addend": 2,
			"descriptors": [{"entries": [{"key": "path", "value": "/login/sso"}]}, {"entries": [{"key": "nothing", "value": "here"}]}]}`, 200},
		{"a descriptor's own limit", `{"domain":"beside-json","descriptors":[{"entries":[{"key":"remote_address","value":"10.2.2.2"}],
			"limit":{"requestsPerUnit":1,"unit":"MINUTE"},"hitsAddend":"2"}]}`, 429},
		{"unknown domain", `{"domain":"beside-json-none","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, 200},
		// "Missing request body", "Request body is not valid json", and
		// the service's errors (no domain, no descriptors), which the peer
		// answers 400 as well.
		{"no body", ``, 400},
		{"not JSON", `}`, 400},
		{"unknown field", `{"domain":"beside-json","nope":1}`, 400},
		{"no descriptors", `{"domain":"beside-json"}`, 400},
		{"no domain", `{"descriptors":[{"entries":[{"key":"remote_address","value":"10.1.1.1"}]}]}`, 400},
	} {
		what := fmt.Sprintf("/json %d (%s)", i+1, c.what)
		mc, mt, mb := post(t, p.rls.web, c.body)
		pc, pt, pbody := post(t, p.peer.web, c.body)
		if mc != pc || mc != c.code {
			t.Fatalf("%s: %s\n  rls: %d %s\n peer: %d %s\n want %d", what, c.body, mc, mb, pc, pbody, c.code)
		}
		if mt != pt {
			t.Fatalf("%s: Content-Type: rls %q, the peer %q", what, mt, pt)
		}
		if mc == 400 {
			// Both answer with http.Error's text/plain, but the words
			// differ: the peer writes only "Bad Request" (it logs the
			// reason), rls the reason ("not a RateLimitRequest in JSON:
			// …", "rate limit domain must not be empty"). Only the status
			// and the Content-Type are compared.
			if string(pbody) != "Bad Request\n" || len(mb) == 0 {
				t.Fatalf("%s: 400 bodies: rls %q, the peer %q", what, mb, pbody)
			}
			continue
		}
		if mt != "application/json" {
			t.Fatalf("%s: Content-Type %q", what, mt)
		}
		// The bodies are protojson of the responses: compared as the gRPC
		// responses are (normalize: durationUntilReset read at different
		// instants, this peer's quotaModeEnabled).
		a, b := decodeJSON(t, mb), decodeJSON(t, pbody)
		if err := normalize(a, b); err != nil {
			t.Fatalf("%s: %v\n  rls: %s\n peer: %s", what, err, mb, pbody)
		}
		if ca, cb := canon(t, a), canon(t, b); ca != cb {
			t.Fatalf("%s: %s\n  rls: %s\n peer: %s", what, c.body, ca, cb)
		}
		if _, ok := a["overallCode"]; !ok {
			t.Fatalf("%s: no overallCode in %s", what, mb)
		}
	}
}
