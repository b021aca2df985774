package rls

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// xdsLimit is a RateLimitConfig of domain d with one descriptor key k of n a
// minute; md, where given, is the descriptor's metadata.
func xdsLimit(name string, n uint32, md map[string]any) *rlcfg.RateLimitConfig {
	d := &rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_MINUTE, RequestsPerUnit: n}}
	if md != nil {
		s, err := structpb.NewStruct(md)
		if err != nil {
			panic(err)
		}
		d.Metadata = s
	}
	return &rlcfg.RateLimitConfig{Name: name, Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{d}}
}

// admits is how many of 10 requests for k=v the service admits.
func admits(t *testing.T, s *Service, v string) int {
	t.Helper()
	n := 0
	for range 10 {
		if ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("k", v)}).OverallCode.String() == "OK" {
			n++
		}
	}
	return n
}

// TestXDS: the config comes from go-control-plane's xDS server, as Envoy
// Gateway serves it: the first push is in force once acknowledged, an
// update replaces it, an update that does not load is refused with its
// reason (a NACK), counted, and leaves the config in force, and after the
// server goes away and another starts at its address the stream is opened
// again and the new server's config is taken. The descriptor's metadata
// gives rate_limit its algorithm.
func TestXDS(t *testing.T) {
	f := fakeredis.New()
	f.Clock = func() time.Time { return t0 }
	rdb := f.Client()
	defer rdb.Close()
	reg := prometheus.NewRegistry()
	s := New(rdb, nil, Options{Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
	s.now = f.Now
	defer s.Close()

	x := rlstest.StartXDS(t, "127.0.0.1:0", nil)
	conn, err := grpc.NewClient(x.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loaded := s.WatchXDS(ctx, XDS{Conn: conn, Node: &corev3.Node{Id: rlstest.Node}, Backoff: Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Factor: 2}})

	x.Push(t, "1", xdsLimit("first-listener", 2, map[string]any{"algorithm": "gcra"}))
	select {
	case <-loaded:
	case <-time.After(5 * time.Second):
		t.Fatal("the first config never came in force")
	}
	x.Answered(t, "1", false)
	if got := admits(t, s, "a"); got != 2 {
		t.Fatalf("version 1 (2 a minute) admitted %d of 10", got)
	}
	if key := s.Config().domains["d"]; key == nil {
		t.Fatalf("domains %v", s.Config().Domains())
	}

	x.Push(t, "2", xdsLimit("first-listener", 5, nil))
	x.Answered(t, "2", false)
	if got := admits(t, s, "b"); got != 5 {
		t.Fatalf("version 2 (5 a minute) admitted %d of 10", got)
	}

	for i, bad := range []struct {
		cfg  *rlcfg.RateLimitConfig
		want string
	}{
		{&rlcfg.RateLimitConfig{Name: "first-listener", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{RequestsPerUnit: 3}}}}, "first-listener: "},
		{xdsLimit("first-listener", 3, map[string]any{"algorithm": "leaky"}), "unknown algorithm 'leaky'"},
		{&rlcfg.RateLimitConfig{Name: "first-listener", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "k", QuotaMode: true}}}, "quota_mode and metadata on 'd.k'"},
	} {
		errorsBefore := testutil.ToFloat64(s.m.configLoads.WithLabelValues("error"))
		version := fmt.Sprint(3 + i)
		x.Push(t, version, bad.cfg)
		msg := x.Answered(t, version, true)
		if !strings.Contains(msg, bad.want) || strings.Contains(msg, ".yaml") {
			t.Errorf("NACK of %v: %q, want it to say %q", bad.cfg, msg, bad.want)
		}
		if i == 0 {
			// The server sends the refused version again at once, each time
			// it is refused: refused again about once a second, and counted
			// once.
			time.Sleep(1800 * time.Millisecond)
			if n := x.Answers(version, true); n < 2 || n > 3 {
				t.Errorf("version %s refused %d times in 1.8 s, want 2 or 3", version, n)
			}
		}
		if got := testutil.ToFloat64(s.m.configLoads.WithLabelValues("error")); got != errorsBefore+1 {
			t.Errorf("a refused update counted %v times", got-errorsBefore)
		}
		if got := admits(t, s, "c"+bad.want); got != 5 {
			t.Fatalf("after the refused update, the config in force admitted %d of 10, want 5", got)
		}
	}

	// The server goes; another starts at its address, with a config of its own.
	addr := x.Addr
	x.GRPC.Stop()
	y := rlstest.StartXDS(t, addr, nil)
	y.Push(t, "1", xdsLimit("first-listener", 7, nil))
	y.Answered(t, "1", false)
	if got := admits(t, s, "d"); got != 7 {
		t.Fatalf("after the server came back with version 1 (7 a minute), admitted %d of 10", got)
	}
}

// TestBackoff: the waits between streams, as the peer's settings give
// them.
func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		b    Backoff
		n    int
		want time.Duration
	}{
		{Backoff{}, 0, 10 * time.Second}, // the peer's defaults: factor 0.5 never rises above the least
		{Backoff{}, 5, 10 * time.Second},
		{Backoff{Initial: time.Second, Max: 10 * time.Second, Factor: 2}, 0, time.Second},
		{Backoff{Initial: time.Second, Max: 10 * time.Second, Factor: 2}, 3, 8 * time.Second},
		{Backoff{Initial: time.Second, Max: 10 * time.Second, Factor: 2}, 4, 10 * time.Second},
		{Backoff{Initial: time.Second, Max: 10 * time.Second, Factor: 2}, 1000, 10 * time.Second},
	} {
		if got := c.b.wait(c.n); got != c.want {
			t.Errorf("%+v, wait %d: %v, want %v", c.b, c.n, got, c.want)
		}
	}
	b := Backoff{Initial: time.Second, Max: 10 * time.Second, Factor: 2, Jitter: true}
	lo, hi := time.Hour, time.Duration(0)
	for range 1000 {
		d := b.wait(3)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < time.Second || hi > 8*time.Second || hi-lo < 5*time.Second {
		t.Errorf("with jitter, the fourth wait drawn from %v to %v, want spread over 1s to 8s", lo, hi)
	}
}

// TestResourceReadsAsFile: a resource reads as the file it stands for.
func TestResourceReadsAsFile(t *testing.T) {
	rc := &rlcfg.RateLimitConfig{Name: "n", Domain: "apis", Descriptors: []*rlcfg.RateLimitDescriptor{
		{Key: "route", Value: "r1", Descriptors: []*rlcfg.RateLimitDescriptor{
			{Key: "rule-0-match-0", ShadowMode: true, DetailedMetric: true, RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_SECOND, RequestsPerUnit: 5, Name: "p", Replaces: []*rlcfg.RateLimitReplace{{Name: "q"}}}},
		}},
		{Key: "free", RateLimit: &rlcfg.RateLimitPolicy{Unlimited: true}},
	}}
	md, _ := structpb.NewStruct(map[string]any{"algorithm": "token_bucket", "debt": true})
	rc.Descriptors[0].Descriptors[0].Metadata = md
	want := mustParse(t, map[string]string{"apis.yaml": `
domain: apis
descriptors:
  - key: route
    value: r1
    descriptors:
      - key: rule-0-match-0
        shadow_mode: true
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 5, name: p, replaces: [{name: q}], algorithm: token_bucket, debt: true}
  - key: free
    rate_limit: {unlimited: true}
`})
	cfg, err := xdsConfig(response(t, "1", rc), 0)
	if err != nil {
		t.Fatal(err)
	}
	if dump(cfg) != dump(want) {
		t.Fatalf("read as\n%s\nwant\n%s", dump(cfg), dump(want))
	}
	if !strings.Contains(dump(cfg), "token_bucket") {
		t.Fatalf("the metadata's algorithm was lost:\n%s", dump(cfg))
	}
}

// response is an xDS response of version holding rcs.
func response(t testing.TB, version string, rcs ...*rlcfg.RateLimitConfig) *discoverypb.DiscoveryResponse {
	t.Helper()
	resp := &discoverypb.DiscoveryResponse{VersionInfo: version, TypeUrl: RateLimitConfigType}
	for _, rc := range rcs {
		a, err := anypb.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	return resp
}

// dump is a config's domains and rules, one line each.
func dump(c *Config) string {
	var b strings.Builder
	var walk func(path string, n *node)
	walk = func(path string, n *node) {
		if r := n.rule; r != nil {
			fmt.Fprintf(&b, "%s: %d/%v %s unlimited=%v shadow=%v detailed=%v debt=%v lease=%v name=%q replaces=%v stat=%s limit=%+v"+
				" conc=%+v holder=%d levels=%+v quota=%v metadata=%v reserve=%v/%v\n",
				path, r.perUnit, r.unit, r.algorithm, r.unlimited, r.shadow, r.detailed, r.debt, r.lease, r.name, r.replaces, r.statKey, r.limit,
				r.conc, r.holder, r.levels, r.quota, r.metadata.AsMap(), r.reserve, r.holdTTL)
		}
		for _, k := range slices.Sorted(maps.Keys(n.children)) {
			walk(path+"/"+k, n.children[k])
		}
	}
	for _, d := range c.Domains() {
		walk(d, c.domains[d])
	}
	return b.String()
}

// xdsFault is a resource and what its refusal says ("" when it loads).
type xdsFault struct {
	rc   *rlcfg.RateLimitConfig
	want string
}

// xdsFaults are resources with each fault a resource can have, a value of
// each kind in each key the metadata may give rls among them (and those
// of holds, value_to_metric and share_threshold: xdsExtensionFaults).
func xdsFaults() []xdsFault {
	one := func(d *rlcfg.RateLimitDescriptor) *rlcfg.RateLimitConfig {
		return &rlcfg.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{d}}
	}
	limit := func(md map[string]any) *rlcfg.RateLimitConfig { return xdsLimit("r", 3, md) }
	minute := func() *rlcfg.RateLimitPolicy {
		return &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_MINUTE, RequestsPerUnit: 3}
	}
	out := []xdsFault{
		{&rlcfg.RateLimitConfig{Name: "r"}, "r: config file cannot have empty domain"},
		{one(&rlcfg.RateLimitDescriptor{Value: "v"}), "r: descriptor has empty key"},
		{&rlcfg.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "k"}, {Key: "k"}}}, "duplicate descriptor composite key 'd.k'"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", QuotaMode: true}), "quota_mode and metadata on 'd.k', which has no rate_limit"},
		{limit(map[string]any{"x": 1, "algorithm": "gcra"}), ""}, // x is the descriptor's metadata, algorithm rls's
		{one(&rlcfg.RateLimitDescriptor{Key: "k", QuotaMode: true, Metadata: mustStruct(map[string]any{"y": true})}), "quota_mode and metadata on 'd.k'"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", Metadata: mustStruct(map[string]any{"debt": true, "algorithm": "gcra"})}), `descriptor "k": metadata algorithm, debt without a rate_limit`},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{RequestsPerUnit: 1}}), "invalid rate limit unit 'unknown' for 'd.k'"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Unit: 42, RequestsPerUnit: 1}}), "invalid rate limit unit '42' for 'd.k'"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Unit: 42, Unlimited: true}}), ""},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_HOUR, Unlimited: true}}), "should not specify rate limit unit when unlimited ('d.k')"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_HOUR, Name: "n", Replaces: []*rlcfg.RateLimitReplace{{Name: "m"}, {}}}}), "should not have an empty replaces entry ('d.k')"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_HOUR, Name: "n", Replaces: []*rlcfg.RateLimitReplace{{Name: "n"}}}}), "replaces should not contain name of same descriptor ('d.k')"},
		{limit(map[string]any{"algorithm": "sliding_log", "debt": true}), "debt: true does not go with sliding_log for 'd.k'"},
		{xdsLimit("r", 100001, map[string]any{"algorithm": "sliding_log"}), "requests_per_unit 100001 for 'd.k' is past the sliding log's 100000"},
		{limit(map[string]any{"algorithm": "sliding_window", "lease": true}), "lease: true for 'd.k' needs algorithm fixed_window, gcra or token_bucket"},
		{limit(map[string]any{"lease": true, "debt": true}), "lease: true for 'd.k'"},
		{limit(map[string]any{"lease": "on"}), ""},
		{limit(map[string]any{"debt": "No"}), ""},
		{limit(map[string]any{"algorithm": nil, "debt": nil, "lease": nil}), ""},
		{limit(map[string]any{"algorithm": true}), "unknown algorithm 'true' for 'd.k'"},
		{limit(map[string]any{"algorithm": 1e21}), "unknown algorithm '1e+21' for 'd.k'"},
		{limit(map[string]any{"algorithm": -0.5}), "unknown algorithm '-0.5' for 'd.k'"},
		{limit(map[string]any{"algorithm": []any{"gcra"}}), "config error, 'algorithm' of 'd.k' must be a single value"},
		{limit(map[string]any{"algorithm": map[string]any{}}), "config error, 'algorithm' of 'd.k' must be a single value"},
		{limit(map[string]any{"algorithm": []any{}, "debt": "maybe"}), "'algorithm' of 'd.k' must be a single value"},
		{limit(map[string]any{"debt": "maybe", "lease": 1}), `config error, 'debt' of 'd.k': cannot read "maybe" as true or false`},
		{limit(map[string]any{"debt": "true"}), `config error, 'debt' of 'd.k': cannot read "true" as true or false`},
		{limit(map[string]any{"lease": 1}), `config error, 'lease' of 'd.k': cannot read "1" as true or false`},
		{limit(map[string]any{"lease": map[string]any{"a": 1}}), "config error, 'lease' of 'd.k' must be a single value"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k\nx", Value: "a\r\nb\u2028", RateLimit: minute()}), ""},
		{&rlcfg.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{
			{Key: "k", RateLimit: minute(), Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "j", RateLimit: &rlcfg.RateLimitPolicy{}}}},
			{Key: "k"},
		}}, "invalid rate limit unit 'unknown' for 'd.k.j'"},
	}
	for _, v := range []any{nil, true, false, 0, 2.5, math.NaN(), math.Inf(1), math.Inf(-1), "", "gcra", "yes", "Off", "y", "~", "null", []any{}, map[string]any{}} {
		for _, k := range extensionKeys {
			out = append(out, xdsFault{limit(map[string]any{k: v}), "?"})
		}
	}
	return append(out, xdsExtensionFaults()...)
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// TestXDSFaults: each fault of a resource is named in the words a file's
// is, and as rls named it when it read resources through YAML.
func TestXDSFaults(t *testing.T) {
	for _, c := range xdsFaults() {
		resp := response(t, "1", c.rc)
		_, err := xdsConfig(resp, 0)
		_, old := viaYAML(resp)
		if (err == nil) != (old == nil) || err != nil && err.Error() != old.Error() {
			t.Errorf("%v: read directly: %v; through YAML: %v", c.rc, err, old)
		}
		switch {
		case c.want == "?": // a value of some kind: as through YAML, whatever that says
		case c.want == "" && err != nil:
			t.Errorf("%v: %v, want it to load", c.rc, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want it to say %q", c.rc, err, c.want)
		}
	}
}

// FuzzXDSConfig: any resource, however malformed, reads as a config or is
// refused with an error, never a panic, as it read through the YAML file
// it stands for (the same config, or the same error); one that reads has,
// at each of its descriptors' paths, the limit the resource gives it.
func FuzzXDSConfig(f *testing.F) {
	seeds := []*rlcfg.RateLimitConfig{
		xdsLimit("a", 5, nil),
		xdsLimit("b", 0, map[string]any{"algorithm": "token_bucket", "debt": true}),
		{Name: "c", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "k", Value: "v*", Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "x", RateLimit: &rlcfg.RateLimitPolicy{Unlimited: true}}}}}},
	}
	for _, c := range xdsFaults() {
		seeds = append(seeds, c.rc)
	}
	for _, rc := range seeds {
		f.Add(mustMarshal(f, rc))
	}
	// Merged and repeated fields, a field of an unknown number, one of a
	// known number and another wire type, as the generated code may meet
	// them from another writer.
	f.Add(slices.Concat(mustMarshal(f, xdsLimit("a", 5, nil)), mustMarshal(f, &rlcfg.RateLimitConfig{Name: "b",
		Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "j", RateLimit: &rlcfg.RateLimitPolicy{Name: "n"}}}}),
		protowire.AppendTag(nil, 9, protowire.VarintType), []byte{1}, protowire.AppendTag(nil, 2, protowire.VarintType), []byte{7}))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The bytes as a resource's, read by both as they are.
		resp := &discoverypb.DiscoveryResponse{VersionInfo: "1", TypeUrl: RateLimitConfigType,
			Resources: []*anypb.Any{{TypeUrl: RateLimitConfigType, Value: b}}}
		rc := &rlcfg.RateLimitConfig{}
		if proto.Unmarshal(b, rc) != nil {
			rc = nil
		}
		cfg, err := xdsConfig(resp, -1)
		// As the resource read through the YAML it stands for, as rls read
		// it before: the same config, or the same fault in the same words.
		// (Unless yaml.v3 cannot write one of its texts so as to read it
		// back: a domain of a newline read back as none, a key of a
		// newline and digits as a file that does not parse.)
		old, oldErr := viaYAML(resp)
		faithful := rc == nil || yamlKeepsTexts(rc) && (oldErr == nil || !strings.Contains(oldErr.Error(), "error loading config file"))
		if faithful && ((err == nil) != (oldErr == nil) || err != nil && err.Error() != oldErr.Error()) {
			t.Fatalf("read directly: %v; through YAML: %v\n%v", err, oldErr, rc)
		}
		if err != nil {
			return
		}
		if faithful && dump(cfg) != dump(old) {
			t.Fatalf("read directly:\n%s\nthrough YAML:\n%s", dump(cfg), dump(old))
		}
		var walk func(n *node, ds []*rlcfg.RateLimitDescriptor, path string)
		walk = func(n *node, ds []*rlcfg.RateLimitDescriptor, path string) {
			for _, d := range ds {
				k := d.GetKey()
				if d.GetValue() != "" {
					k += "_" + d.GetValue()
				}
				child := n.children[k]
				if child == nil && !strings.Contains(d.GetValue(), "*") {
					t.Fatalf("%s/%s: not in the config\n%v", path, k, rc)
				}
				if child == nil {
					continue // a wildcard's, matched by value
				}
				if p := d.GetRateLimit(); p != nil {
					r := child.rule
					// A concurrency limit's is in the metadata (limit), its
					// requests_per_unit none.
					perUnit := int64(p.GetRequestsPerUnit())
					if r != nil && r.algorithm == Concurrency && perUnit == 0 {
						perUnit = r.conc.Limit
					}
					if r == nil || r.unlimited != p.GetUnlimited() || (!p.GetUnlimited() && r.perUnit != perUnit) {
						t.Fatalf("%s/%s: rule %+v for %v\n%v", path, k, r, p, rc)
					}
				}
				walk(child, d.GetDescriptors(), path+"/"+k)
			}
		}
		walk(cfg.domains[rc.GetDomain()], rc.GetDescriptors(), rc.GetDomain())
	})
}
