package rls

import (
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

const quotaConfig = `
domain: d
descriptors:
  - key: tier
    value: free
    quota_mode: true
    metadata: {quota: {name: free, tokens: 100}}
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tier
    value: paid
    quota_mode: true
    metadata: {quota: {name: paid}, owner: billing}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: gq
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra}
  - key: user
    metadata: {kind: user}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: none
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// TestQuotaMode: quota_mode descriptors are the request's quotas, as the
// peer's: the request passes while one of them admits it (each decided
// on its own, a refused one not counted, its status OVER_LIMIT), and is
// refused when all refuse, its other limits then not asked. A request
// refused by another limit keeps nothing its quotas took (where they can
// give back).
func TestQuotaMode(t *testing.T) {
	s, _ := onFake(t, quotaConfig, Options{})
	free, paid := descriptor("tier", "free"), descriptor("tier", "paid")
	user := descriptor("user", "u")
	for i, step := range []struct {
		ds   []*rlv3.RateLimitDescriptor
		want string
	}{
		{[]*rlv3.RateLimitDescriptor{free, paid}, "OK OK/2:1:40s OK/1:0:40s"},
		{[]*rlv3.RateLimitDescriptor{free, paid}, "OK OK/2:0:40s OVER_LIMIT/1:0:40s"}, // one quota is enough
		{[]*rlv3.RateLimitDescriptor{free, paid, user}, "OVER_LIMIT OVER_LIMIT/2:0:40s OVER_LIMIT/1:0:40s OK/10:0"},
		{[]*rlv3.RateLimitDescriptor{user}, "OK OK/10:9:40s"}, // not counted above
		// A GCRA quota admits, another limit refuses: the quota's unit
		// is given back.
		{[]*rlv3.RateLimitDescriptor{descriptor("gq", "a"), descriptor("none", "a")}, "OVER_LIMIT OK/1:1:0s OVER_LIMIT/0:0:40s"}, // given back,
		{[]*rlv3.RateLimitDescriptor{descriptor("gq", "a")}, "OK OK/1:0:60s"},
		{[]*rlv3.RateLimitDescriptor{descriptor("gq", "a")}, "OVER_LIMIT OVER_LIMIT/1:0:60s"},
	} {
		if got := line(ask(t, s, step.ds)); got != step.want {
			t.Errorf("step %d: %s, want %s", i, got, step.want)
		}
	}
	// QUOTA_MODE: every descriptor is a quota.
	g, _ := onFake(t, stepsConfig, Options{QuotaMode: true})
	ds := []*rlv3.RateLimitDescriptor{descriptor("fw", "q"), descriptor("gcra", "q")}
	for i, want := range []string{"OK OK/2:1:40s OK/2:1:30s", "OK OK/2:0:40s OK/2:0:60s", "OVER_LIMIT OVER_LIMIT/2:0:40s OVER_LIMIT/2:0:30s"} {
		if got := line(ask(t, g, ds)); got != want {
			t.Errorf("QuotaMode, request %d: %s, want %s", i, got, want)
		}
	}
}

// TestDynamicMetadata: with DynamicMetadata the response carries the
// peer's dynamic_metadata: the domain, each descriptor's entries and
// hits_addend, and the config's metadata of the descriptors that passed,
// merged with the first value of a key kept.
func TestDynamicMetadata(t *testing.T) {
	s, _ := onFake(t, quotaConfig, Options{DynamicMetadata: true})
	free, paid := descriptor("tier", "free"), descriptor("tier", "paid")
	want := func(resp string, md string) {
		t.Helper()
		var st structpb.Struct
		if err := protojson.Unmarshal([]byte(md), &st); err != nil {
			t.Fatal(err)
		}
		r := ask(t, s, []*rlv3.RateLimitDescriptor{free, paid, descriptor("user", "u")})
		if got := line(r); got != resp {
			t.Fatalf("%s, want %s", got, resp)
		}
		got, _ := protojson.Marshal(r.DynamicMetadata)
		exp, _ := protojson.Marshal(&st)
		if !equalJSON(got, exp) {
			t.Errorf("dynamic_metadata\n %s\nwant\n %s", got, exp)
		}
	}
	entries := `"descriptors": [{"entries": ["tier=free"]}, {"entries": ["tier=paid"]}, {"entries": ["user=u"]}]`
	want("OK OK/2:1:40s OK/1:0:40s OK/10:9:40s",
		`{"domain": "d", `+entries+`, "metadata": {"quota": {"name": "free", "tokens": 100}, "owner": "billing", "kind": "user"}}`)
	want("OK OK/2:0:40s OVER_LIMIT/1:0:40s OK/10:8:40s",
		`{"domain": "d", `+entries+`, "metadata": {"quota": {"name": "free", "tokens": 100}, "kind": "user"}}`)
	if r := ask(t, onFakeService(t), []*rlv3.RateLimitDescriptor{free}); r.DynamicMetadata != nil {
		t.Errorf("dynamic_metadata without the option: %v", r.DynamicMetadata)
	}
}

func onFakeService(t *testing.T) *Service {
	s, _ := onFake(t, quotaConfig, Options{})
	return s
}

// equalJSON compares two protojson outputs whatever their spacing.
func equalJSON(a, b []byte) bool {
	var x, y structpb.Struct
	return protojson.Unmarshal(a, &x) == nil && protojson.Unmarshal(b, &y) == nil && protojson.Format(&x) == protojson.Format(&y)
}

// TestXDSQuotaMetadata: over xDS, as the peer reads it, a descriptor's
// quota_mode is its own and its metadata is the descriptor's, but for
// the keys rls reads as its own (extensionKeys).
func TestXDSQuotaMetadata(t *testing.T) {
	rc := xdsLimit("r", 3, map[string]any{"algorithm": "gcra", "quota": map[string]any{"name": "free"}})
	rc.Descriptors[0].QuotaMode = true
	cfg, err := assemble([]string{"r"}, func(name string) *fileForm { return resourceForm(name, rc) })
	if err != nil {
		t.Fatal(err)
	}
	r, _ := cfg.lookup("d", descriptor("k", "v"))
	if r == nil || !r.quota || r.algorithm != GCRA || len(r.metadata.GetFields()) != 1 ||
		r.metadata.GetFields()["quota"].GetStructValue().GetFields()["name"].GetStringValue() != "free" {
		t.Fatalf("rule %+v", r)
	}
}
