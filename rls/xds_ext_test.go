package rls

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// These tests hold the keys a descriptor's metadata gives rls over xDS
// for holds (holder, algorithm: concurrency, limit, hold_ttl),
// value_to_metric and share_threshold to the files' keys of those names:
// the same config from a file and from xDS answers the same requests
// alike, on Redis keys and stat keys alike, and a bad value is refused
// in the same words, naming the descriptor, the key and what it takes.

// twin is two services, each on a fake Redis of its own at t0: one
// answering by a config file, the other by the xDS resources that say the
// same.
type twin struct {
	file, xds   *Service
	fileF, xdsF *fakeredis.Server
}

// newTwin is the twin of the file d.yaml holding cfg and of rcs, read as
// an xDS update is; the two configs must read alike (dump).
func newTwin(t *testing.T, cfg string, o Options, rcs ...*rlcfg.RateLimitConfig) twin {
	t.Helper()
	x, err := xdsConfig(response(t, "1", rcs...), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dump(x), dump(mustParse(t, map[string]string{"d.yaml": cfg})); got != want {
		t.Fatalf("from xDS:\n%s\nfrom the file:\n%s", got, want)
	}
	var w twin
	w.file, w.fileF = onFake(t, cfg, o)
	w.xdsF = fakeredis.New()
	w.xdsF.Clock = func() time.Time { return t0 }
	rdb := w.xdsF.Client()
	t.Cleanup(func() { rdb.Close() })
	w.xds = onClientConfig(t, rdb, x, o, w.xdsF.Now)
	return w
}

// ask asks both for ds and returns their answer (line), failing the test
// where they differ.
func (w twin) ask(t *testing.T, ds ...*rlv3.RateLimitDescriptor) string {
	t.Helper()
	a, b := line(ask(t, w.file, ds)), line(ask(t, w.xds, ds))
	if a != b {
		t.Fatalf("%v: from the file %s, from xDS %s", ds, a, b)
	}
	return a
}

// advance moves both clocks on by d.
func (w twin) advance(d time.Duration) {
	w.fileF.Advance(d)
	w.xdsF.Advance(d)
}

// hits is the total_hits of stat in both, failing the test where they
// differ.
func (w twin) hits(t *testing.T, stat string) float64 {
	t.Helper()
	a := testutil.ToFloat64(w.file.m.totalHits.WithLabelValues("d", stat))
	b := testutil.ToFloat64(w.xds.m.totalHits.WithLabelValues("d", stat))
	if a != b {
		t.Fatalf("total_hits of %s: %v from the file, %v from xDS", stat, a, b)
	}
	return a
}

// keys is the Redis keys of both, failing the test where they differ.
func (w twin) keys(t *testing.T) []string {
	t.Helper()
	a, b := w.fileF.Keys(), w.xdsF.Keys()
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Fatalf("keys from the file %v, from xDS %v", a, b)
	}
	return a
}

// holdsFile has a hold named by its own descriptor (request_id under
// user), one named by a descriptor above it (request_id over model, which
// has no rate_limit of its own), and a fixed window.
const holdsFile = `
domain: d
descriptors:
  - key: user
    descriptors:
      - key: request_id
        holder: true
        metadata: {pool: chat}
        rate_limit: {algorithm: concurrency, limit: 2, hold_ttl: 30s, name: chat}
  - key: request_id
    holder: true
    descriptors:
      - key: model
        rate_limit: {algorithm: concurrency, limit: 1, hold_ttl: 120}
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// holdsResource is holdsFile as an xDS resource: the concurrency limits'
// keys and holder in the descriptors' metadata, beside an empty
// rate_limit (or none, for the holder above its hold).
func holdsResource(name string) *rlcfg.RateLimitConfig {
	return &rlcfg.RateLimitConfig{Name: name, Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{
		{Key: "user", Descriptors: []*rlcfg.RateLimitDescriptor{{
			Key:       "request_id",
			RateLimit: &rlcfg.RateLimitPolicy{Name: "chat"},
			Metadata:  mustStruct(map[string]any{"holder": true, "algorithm": "concurrency", "limit": 2, "hold_ttl": "30s", "pool": "chat"}),
		}}},
		{Key: "request_id", Metadata: mustStruct(map[string]any{"holder": true}), Descriptors: []*rlcfg.RateLimitDescriptor{{
			Key:       "model",
			RateLimit: &rlcfg.RateLimitPolicy{},
			Metadata:  mustStruct(map[string]any{"algorithm": "concurrency", "limit": 1, "hold_ttl": 120}),
		}}},
		{Key: "fw", RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_MINUTE, RequestsPerUnit: 1}},
	}}
}

// TestXDSHolds: holds said over xDS (holder, and algorithm: concurrency,
// limit and hold_ttl in the metadata) answer as the same holds in a file:
// a slot taken per request, named by the holder's value and left out of
// the key, given back by the stream-done call (is_negative_hits), renewed
// by a retry, lapsing after hold_ttl, given back when another limit
// refuses; a holder above its hold counts every request of a model at
// one key. rls's keys are not sent back as the descriptor's metadata.
func TestXDSHolds(t *testing.T) {
	w := newTwin(t, holdsFile, Options{}, holdsResource("holds"))
	hold := func(user, id string) *rlv3.RateLimitDescriptor { return descriptor("user", user, "request_id", id) }
	done := func(user, id string) *rlv3.RateLimitDescriptor {
		d := hold(user, id)
		d.IsNegativeHits = true
		return d
	}
	model := func(id, m string) *rlv3.RateLimitDescriptor { return descriptor("request_id", id, "model", m) }
	for i, step := range []struct {
		advance time.Duration
		ds      []*rlv3.RateLimitDescriptor
		want    string
	}{
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r1")}, "OK OK/2:1:30s"},
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r2")}, "OK OK/2:0:30s"},
		{time.Second, []*rlv3.RateLimitDescriptor{hold("alice", "r3")}, "OVER_LIMIT OVER_LIMIT/2:0:29s"},
		{0, []*rlv3.RateLimitDescriptor{hold("bob", "r3")}, "OK OK/2:1:30s"},   // another user's key
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r1")}, "OK OK/2:0:30s"}, // a retry renews r1
		{0, []*rlv3.RateLimitDescriptor{done("alice", "r1")}, "OK OK/2:0"},
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r3")}, "OK OK/2:0:30s"},
		{0, []*rlv3.RateLimitDescriptor{done("alice", "r3")}, "OK OK/2:0"},
		// Another limit refuses: the slot is given back.
		{0, []*rlv3.RateLimitDescriptor{descriptor("fw", "x")}, "OK OK/1:0:39s"},
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r5"), descriptor("fw", "x")}, "OVER_LIMIT OK/2:0:30s OVER_LIMIT/1:0:39s"},
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r6")}, "OK OK/2:0:30s"},
		// The holder above its hold: one slot per model.
		{0, []*rlv3.RateLimitDescriptor{model("q1", "m")}, "OK OK/1:0:120s"},
		{0, []*rlv3.RateLimitDescriptor{model("q2", "m")}, "OVER_LIMIT OVER_LIMIT/1:0:120s"},
		{0, []*rlv3.RateLimitDescriptor{model("q2", "n")}, "OK OK/1:0:120s"},
		// r2 (taken at t0) lapses 30 s on, r6 (at t0+1 s) a second later.
		{29 * time.Second, []*rlv3.RateLimitDescriptor{hold("alice", "r7")}, "OK OK/2:0:30s"},
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r8")}, "OVER_LIMIT OVER_LIMIT/2:0:1s"},
		{time.Second, []*rlv3.RateLimitDescriptor{hold("alice", "r8")}, "OK OK/2:0:30s"},
	} {
		w.advance(step.advance)
		if got := w.ask(t, step.ds...); got != step.want {
			t.Fatalf("step %d: %s, want %s", i, got, step.want)
		}
	}
	keys := w.keys(t)
	for _, want := range []string{"d_user_alice_conc30", "d_model_m_conc120", "d_model_n_conc120"} {
		if !slices.Contains(keys, want) {
			t.Errorf("no key %s among %v", want, keys)
		}
	}
	for _, k := range keys {
		if strings.Contains(k, "request_id") || strings.Contains(k, "_r1") || strings.Contains(k, "q1") {
			t.Errorf("a key names a hold: %s", k)
		}
	}
	// The holder's metadata, but for rls's keys, is the descriptor's own.
	r, _ := w.xds.Config().lookup("d", hold("alice", "r1"))
	if md := r.metadata.AsMap(); len(md) != 1 || md["pool"] != "chat" {
		t.Errorf("the hold's metadata from xDS: %v, want map[pool:chat]", md)
	}
}

// shareResource is shareConfig (share_test.go) as an xDS resource:
// share_threshold and value_to_metric in the descriptors' metadata, the
// latter on a descriptor without a rate_limit (a level of a path).
func shareResource() *rlcfg.RateLimitConfig {
	minute := func() *rlcfg.RateLimitPolicy {
		return &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_MINUTE, RequestsPerUnit: 3}
	}
	return &rlcfg.RateLimitConfig{Name: "share", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{
		{Key: "path", Value: "/files/*", RateLimit: minute(), Metadata: mustStruct(map[string]any{"share_threshold": true})},
		{Key: "path", Value: "/api/*", RateLimit: minute()},
		{Key: "user", RateLimit: minute(), Metadata: mustStruct(map[string]any{"value_to_metric": "yes"})},
		{Key: "org", Value: "/t*", Metadata: mustStruct(map[string]any{"value_to_metric": true}), Descriptors: []*rlcfg.RateLimitDescriptor{
			{Key: "plan", RateLimit: minute()},
		}},
	}}
}

// TestXDSShareAndValueToMetric: share_threshold and value_to_metric said
// over xDS count and report as in a file: the values a share_threshold
// wildcard matches at one Redis key and one stat key, the others each at
// a key of their own; value_to_metric's request values in the stat keys,
// at every level that says it.
func TestXDSShareAndValueToMetric(t *testing.T) {
	w := newTwin(t, shareConfig, Options{}, shareResource())
	for i, step := range []struct {
		d    *rlv3.RateLimitDescriptor
		want string
	}{
		{descriptor("path", "/files/a"), "OK OK/3:2:40s"},
		{descriptor("path", "/files/b"), "OK OK/3:1:40s"}, // the same counter
		{descriptor("path", "/files/c/d"), "OK OK/3:0:40s"},
		{descriptor("path", "/files/e"), "OVER_LIMIT OVER_LIMIT/3:0:40s"},
		{descriptor("path", "/api/a"), "OK OK/3:2:40s"},
		{descriptor("path", "/api/b"), "OK OK/3:2:40s"}, // a counter of its own
		{descriptor("user", "alice"), "OK OK/3:2:40s"},
		{descriptor("org", "/team-a", "plan", "gold"), "OK OK/3:2:40s"},
	} {
		if got := w.ask(t, step.d); got != step.want {
			t.Errorf("step %d (%v): %s, want %s", i, step.d, got, step.want)
		}
	}
	keys := w.keys(t)
	for _, want := range []string{"d_path_/files/*_fw60", "d_path_/api/a_fw60", "d_path_/api/b_fw60", "d_user_alice_fw60", "d_org_/team-a_plan_gold_fw60"} {
		if !slices.Contains(keys, want) {
			t.Errorf("no key %s in %v", want, keys)
		}
	}
	for stat, want := range map[string]float64{
		"d.path_/files/*": 4, "d.path_/api/*": 2,
		"d.user_alice": 1, "d.user": 0,
		"d.org_/team-a.plan": 1, "d.org_/t*.plan": 0,
	} {
		if got := w.hits(t, stat); got != want {
			t.Errorf("total_hits of %s: %v, want %v", stat, got, want)
		}
	}
}

// xdsExtensionFaults are resources saying holds, value_to_metric and
// share_threshold in their descriptors' metadata, well and badly, and
// what each refusal says ("" when it loads; "?" as the same config in a
// file, whatever that says): TestXDSFaults holds each to the file it
// stands for.
func xdsExtensionFaults() []xdsFault {
	one := func(ds ...*rlcfg.RateLimitDescriptor) *rlcfg.RateLimitConfig {
		return &rlcfg.RateLimitConfig{Name: "r", Domain: "d", Descriptors: ds}
	}
	// conc is a holder's metadata, its hold's keys as given, a key given
	// leftOut{} left out (nil is null).
	type leftOut struct{}
	conc := func(kv map[string]any) *structpb.Struct {
		md := map[string]any{"holder": true, "algorithm": "concurrency", "limit": 2, "hold_ttl": "30s"}
		maps.Copy(md, kv)
		maps.DeleteFunc(md, func(_ string, v any) bool { return v == leftOut{} })
		return mustStruct(md)
	}
	// hold is a resource of one holder k, its metadata conc's of kv.
	hold := func(kv map[string]any) *rlcfg.RateLimitConfig {
		return one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{}, Metadata: conc(kv)})
	}
	window := func(kv map[string]any) *rlcfg.RateLimitConfig { return xdsLimit("r", 3, kv) }
	minute := func() *rlcfg.RateLimitPolicy {
		return &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_MINUTE, RequestsPerUnit: 3}
	}
	out := []xdsFault{
		// Holds.
		{hold(nil), ""},
		{hold(map[string]any{"hold_ttl": 30, "limit": 100000}), ""},
		{hold(map[string]any{"holder": "yes", "hold_ttl": "2m"}), ""},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Name: "n"}, Metadata: conc(nil)}), ""},
		{one(&rlcfg.RateLimitDescriptor{Key: "id", Metadata: mustStruct(map[string]any{"holder": true}), Descriptors: []*rlcfg.RateLimitDescriptor{
			{Key: "model", RateLimit: &rlcfg.RateLimitPolicy{}, Metadata: conc(map[string]any{"holder": leftOut{}})},
		}}), ""},
		{hold(map[string]any{"holder": "maybe"}), `r: config error, 'holder' of 'd.k': cannot read "maybe" as true or false`},
		{hold(map[string]any{"holder": "maybe", "limit": []any{}}), `'holder' of 'd.k': cannot read "maybe"`}, // the descriptor's keys first, as a file's
		{hold(map[string]any{"holder": 1}), `r: config error, 'holder' of 'd.k': cannot read "1" as true or false`},
		{hold(map[string]any{"limit": leftOut{}}), "r: algorithm: concurrency for 'd.k' needs limit, the holders at once, from 1 to 100000"},
		{hold(map[string]any{"limit": 0}), "needs limit, the holders at once, from 1 to 100000"},
		{hold(map[string]any{"limit": 100001}), "needs limit, the holders at once, from 1 to 100000"},
		{hold(map[string]any{"limit": "10"}), `r: config error, 'limit' of 'd.k': cannot read "10" as a whole number from 0 to 4294967295`},
		{hold(map[string]any{"limit": -1}), `r: config error, 'limit' of 'd.k': cannot read "-1" as a whole number from 0 to 4294967295`},
		{hold(map[string]any{"limit": 1e10}), `r: config error, 'limit' of 'd.k': cannot read "1e+10" as a whole number from 0 to 4294967295`},
		{hold(map[string]any{"limit": math.Inf(1)}), `r: config error, 'limit' of 'd.k': cannot read "Infinity" as a whole number`},
		{hold(map[string]any{"limit": true}), `r: config error, 'limit' of 'd.k': cannot read "true" as a whole number`},
		{hold(map[string]any{"limit": []any{2}}), "r: config error, 'limit' of 'd.k' must be a single value"},
		{hold(map[string]any{"hold_ttl": leftOut{}}), `r: algorithm: concurrency for 'd.k' needs hold_ttl, how long a hold lasts unless released: whole seconds from 1 s to 31536000 s ("30s", "2m" or 30), not ""`},
		{hold(map[string]any{"hold_ttl": "1500ms"}), `needs hold_ttl, how long a hold lasts unless released: whole seconds from 1 s to 31536000 s ("30s", "2m" or 30), not "1500ms"`},
		{hold(map[string]any{"hold_ttl": 0.5}), `not "0.5"`},
		{hold(map[string]any{"hold_ttl": map[string]any{"s": 30}}), "r: config error, 'hold_ttl' of 'd.k' must be a single value"},
		{hold(map[string]any{"algorithm": "Concurrency"}), "unknown algorithm 'Concurrency' for 'd.k' (fixed_window, sliding_window, sliding_log, gcra, token_bucket or concurrency)"},
		{hold(map[string]any{"holder": leftOut{}}), "r: algorithm: concurrency for 'd.k' needs a descriptor marked holder: true, itself or above it"},
		{hold(map[string]any{"holder": false}), "needs a descriptor marked holder: true"},
		{hold(map[string]any{"holder": nil}), "needs a descriptor marked holder: true"},
		{hold(map[string]any{"limit": nil}), "needs limit, the holders at once"},
		{hold(map[string]any{"hold_ttl": nil}), `needs hold_ttl, how long a hold lasts unless released`},
		{hold(map[string]any{"debt": true}), "r: algorithm: concurrency for 'd.k' takes only limit, hold_ttl and name"},
		{hold(map[string]any{"lease": true}), "takes only limit, hold_ttl and name"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_SECOND}, Metadata: conc(nil)}),
			"r: algorithm: concurrency for 'd.k' takes limit (holders at once) and hold_ttl, not requests_per_unit and unit"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{RequestsPerUnit: 2}, Metadata: conc(nil)}), "not requests_per_unit and unit"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Unlimited: true}, Metadata: conc(nil)}), "takes only limit, hold_ttl and name"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: &rlcfg.RateLimitPolicy{Name: "n", Replaces: []*rlcfg.RateLimitReplace{{Name: "m"}}}, Metadata: conc(nil)}), "takes only limit, hold_ttl and name"},
		{window(map[string]any{"limit": 3}), "r: limit and hold_ttl are algorithm: concurrency's (hold_ttl also reserve: true's); 'd.k' counts requests_per_unit per unit"},
		{window(map[string]any{"hold_ttl": "30s"}), "limit and hold_ttl are algorithm: concurrency's"},
		{window(map[string]any{"holder": true}), "r: 'd.k' is under holder: true, which names holds: its algorithm must be concurrency"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", Metadata: mustStruct(map[string]any{"holder": true})}), "r: holder: true on 'd.k', which has no rate_limit of algorithm: concurrency or reserve: true below it"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: &rlcfg.RateLimitPolicy{}, Metadata: conc(nil)}), "r: holder: true on 'd.k_v' with a value"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", Metadata: mustStruct(map[string]any{"holder": true}), Descriptors: []*rlcfg.RateLimitDescriptor{
			{Key: "j", RateLimit: &rlcfg.RateLimitPolicy{}, Metadata: conc(nil)},
		}}), "r: holder: true on 'd.k.j' under another holder"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", Metadata: mustStruct(map[string]any{"holder": true, "limit": 2, "hold_ttl": "30s"})}),
			`r: descriptor "k": metadata hold_ttl, limit without a rate_limit`},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", Metadata: mustStruct(map[string]any{"holder": true}), Descriptors: []*rlcfg.RateLimitDescriptor{
			{Key: "j", Metadata: mustStruct(map[string]any{"algorithm": "concurrency"})},
		}}), `r: descriptor "j": metadata algorithm without a rate_limit`},
		// share_threshold and value_to_metric.
		{one(&rlcfg.RateLimitDescriptor{Key: "path", Value: "/files/*", RateLimit: minute(), Metadata: mustStruct(map[string]any{"share_threshold": true, "value_to_metric": true})}), ""},
		{one(&rlcfg.RateLimitDescriptor{Key: "path", Value: "/*", Metadata: mustStruct(map[string]any{"share_threshold": "on"}), Descriptors: []*rlcfg.RateLimitDescriptor{
			{Key: "m", RateLimit: minute()},
		}}), ""},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: minute(), Metadata: mustStruct(map[string]any{"share_threshold": true})}),
			"r: share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", RateLimit: minute(), Metadata: mustStruct(map[string]any{"share_threshold": true})}), "but found key 'k'"},
		{one(&rlcfg.RateLimitDescriptor{Key: "k", Value: "v*", RateLimit: minute(), Metadata: mustStruct(map[string]any{"share_threshold": 1})}),
			`r: config error, 'share_threshold' of 'd.k_v*': cannot read "1" as true or false`},
		{one(&rlcfg.RateLimitDescriptor{Key: "org", Value: "/t*", Metadata: mustStruct(map[string]any{"value_to_metric": true}), Descriptors: []*rlcfg.RateLimitDescriptor{
			{Key: "plan", RateLimit: minute(), Metadata: mustStruct(map[string]any{"value_to_metric": "sometimes"})},
		}}), `r: config error, 'value_to_metric' of 'd.org_/t*.plan': cannot read "sometimes" as true or false`},
		{window(map[string]any{"value_to_metric": []any{true}}), "r: config error, 'value_to_metric' of 'd.k' must be a single value"},
		{window(map[string]any{"value_to_metric": "true"}), `r: config error, 'value_to_metric' of 'd.k': cannot read "true" as true or false`},
		// rls's keys are not the descriptor's metadata: no quota_mode
		// and metadata without a rate_limit.
		{one(&rlcfg.RateLimitDescriptor{Key: "k", Value: "v*", Metadata: mustStruct(map[string]any{"value_to_metric": true, "share_threshold": true})}), ""},
	}
	// Each kind of value in a hold's limit and hold_ttl.
	for _, v := range []any{nil, true, 0, 1, 2.5, -0.5, 100000, 100001, 4294967295, 1e21, math.NaN(), math.Inf(-1), "", "30", "30s", "2m", "1h", "~", []any{}, map[string]any{}} {
		for _, k := range []string{"limit", "hold_ttl"} {
			out = append(out, xdsFault{hold(map[string]any{k: v}), "?"})
		}
	}
	return out
}

// TestXDSExtensionsRefused: over go-control-plane's xDS server, holds in
// force; an update giving a hold or value_to_metric a bad value is
// refused (a NACK) saying which descriptor, which key and what it takes,
// and the holds in force still answer. (Each refusal takes up to a
// second, the server sending the refused version again: the faults of
// each kind are xdsExtensionFaults, read as an update is.)
func TestXDSExtensionsRefused(t *testing.T) {
	x := rlstest.StartXDS(t, "127.0.0.1:0", nil)
	s, conn := xdsService(t, nil, x.Addr)
	loaded := watchXDS(t, s, XDS{Conn: conn, Node: &corev3.Node{Id: rlstest.Node}, Backoff: Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Factor: 2}})
	x.Push(t, "1", holdsResource("holds"))
	select {
	case <-loaded:
	case <-time.After(5 * time.Second):
		t.Fatal("the first config never came in force")
	}
	x.Answered(t, "1", false)
	// holds is the holds in force: a user's request takes one of its 2
	// slots; its stream's end gives it back, so that the next takes one
	// of 2 again.
	user := 0
	holds := func(when string) {
		t.Helper()
		user++
		for _, id := range []string{"r1", "r2"} {
			d := descriptor("user", fmt.Sprint("u", user), "request_id", id)
			if got := line(ask(t, s, []*rlv3.RateLimitDescriptor{d})); got != "OK OK/2:1:30s" {
				t.Fatalf("%s: the hold %s: %s, want OK OK/2:1:30s", when, id, got)
			}
			d.IsNegativeHits = true
			if got := line(ask(t, s, []*rlv3.RateLimitDescriptor{d})); !strings.HasPrefix(got, "OK OK/2:") {
				t.Fatalf("%s: its release: %s, want OK", when, got)
			}
		}
	}
	holds("version 1")
	for i, c := range []struct {
		at    int // holdsResource's descriptor: 0 user.request_id, 1 request_id, 2 fw
		key   string
		value any
		want  string
	}{
		{0, "limit", "two", `holds: config error, 'limit' of 'd.user.request_id': cannot read "two" as a whole number from 0 to 4294967295`},
		{0, "hold_ttl", "250ms", `holds: algorithm: concurrency for 'd.user.request_id' needs hold_ttl, how long a hold lasts unless released: whole seconds from 1 s to 31536000 s ("30s", "2m" or 30), not "250ms"`},
		{1, "limit", 2, `holds: descriptor "request_id": metadata limit without a rate_limit`},
		{2, "value_to_metric", 2, `holds: config error, 'value_to_metric' of 'd.fw': cannot read "2" as true or false`},
	} {
		rc := holdsResource("holds")
		d := rc.Descriptors[c.at]
		if c.at == 0 {
			d = d.Descriptors[0]
		}
		md := d.GetMetadata().AsMap()
		md[c.key] = c.value
		d.Metadata = mustStruct(md)
		version := fmt.Sprint(2 + i)
		x.Push(t, version, rc)
		if msg := x.Answered(t, version, true); msg != c.want {
			t.Errorf("version %s refused with %q, want %q", version, msg, c.want)
		}
		holds("after version " + version)
	}
	if r, _ := s.Config().lookup("d", descriptor("user", "u", "request_id", "r")); r == nil || r.conc.Limit != 2 || r.conc.Lease != 30*time.Second {
		t.Fatalf("the hold in force: %+v", r)
	}
}
