package rls

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

const holdConfig = `
domain: d
descriptors:
  - key: user
    descriptors:
      - key: request_id
        holder: true
        rate_limit: {algorithm: concurrency, limit: 2, hold_ttl: 30s}
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestHolds: algorithm: concurrency through plain RLS, on the fake's
// virtual clock. The request phase takes a slot named by the request's
// request_id (left out of the key, so every request of a user counts at
// one key); the stream-done call (is_negative_hits) gives it back; a
// request id asked again renews its slot and takes no second; a request
// another limit refuses holds nothing; a hold never released (an Envoy
// killed mid-request) lapses after hold_ttl, never stays for ever.
func TestHolds(t *testing.T) {
	s, f := onFake(t, holdConfig, Options{})
	hold := func(user, id string) *rlv3.RateLimitDescriptor { return descriptor("user", user, "request_id", id) }
	done := func(user, id string) *rlv3.RateLimitDescriptor {
		d := hold(user, id)
		d.IsNegativeHits = true
		return d
	}
	for i, step := range []struct {
		advance time.Duration
		ds      []*rlv3.RateLimitDescriptor
		want    string
	}{
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r1")}, "OK OK/2:1:30s"},
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r2")}, "OK OK/2:0:30s"},
		{time.Second, []*rlv3.RateLimitDescriptor{hold("alice", "r3")}, "OVER_LIMIT OVER_LIMIT/2:0:29s"}, // until r1's hold lapses
		{0, []*rlv3.RateLimitDescriptor{hold("bob", "r3")}, "OK OK/2:1:30s"},                             // another user's key
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r1")}, "OK OK/2:0:30s"},                           // a retry renews r1
		{0, []*rlv3.RateLimitDescriptor{done("alice", "r1")}, "OK OK/2:0"},                               // the stream ended
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r3")}, "OK OK/2:0:30s"},
		{0, []*rlv3.RateLimitDescriptor{done("alice", "r9")}, "OK OK/2:0"}, // a release of nothing held
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r4")}, "OVER_LIMIT OVER_LIMIT/2:0:29s"},
		// A request another descriptor refuses holds nothing: its slot is
		// given back at once.
		{0, []*rlv3.RateLimitDescriptor{done("alice", "r3")}, "OK OK/2:0"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("fw", "x")}, "OK OK/1:0:39s"},
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r5"), descriptor("fw", "x")}, "OVER_LIMIT OK/2:0:30s OVER_LIMIT/1:0:39s"},
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r6")}, "OK OK/2:0:30s"},
		// A hold refused leaves the rest of the request unasked.
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r7"), descriptor("fw", "y")}, "OVER_LIMIT OVER_LIMIT/2:0:29s OK/1:0"},
		{0, []*rlv3.RateLimitDescriptor{descriptor("fw", "y")}, "OK OK/1:0:39s"},
		// Nobody releases r2 (taken at t0) and r6 (at t0 + 1 s): an Envoy
		// gone. 30 s after each was taken its slot is free again.
		{29 * time.Second, []*rlv3.RateLimitDescriptor{hold("alice", "r7")}, "OK OK/2:0:30s"},
		{0, []*rlv3.RateLimitDescriptor{hold("alice", "r8")}, "OVER_LIMIT OVER_LIMIT/2:0:1s"},
		{time.Second, []*rlv3.RateLimitDescriptor{hold("alice", "r8")}, "OK OK/2:0:30s"},
	} {
		f.Advance(step.advance)
		if got := line(ask(t, s, step.ds)); got != step.want {
			t.Fatalf("step %d at t0+%v: %s, want %s", i, f.Now().Sub(t0), got, step.want)
		}
	}
	if got := testutil.ToFloat64(s.m.negativeHits.WithLabelValues("d", "d.user.request_id")); got != 3 {
		t.Errorf("total_negative_hits %v, want 3 (the releases)", got)
	}
	// The key leaves the request id out: one key per user.
	keys := f.Keys()
	for _, k := range keys {
		if strings.Contains(k, "r1") || strings.Contains(k, "r7") {
			t.Errorf("a key names a request id: %s", k)
		}
	}
	if !slices.Contains(keys, "d_user_alice_conc30") {
		t.Errorf("no key d_user_alice_conc30 among %v", keys)
	}
}

// TestHoldID: a holder's value longer than the module's 128 bytes is
// named by its hash, the same for the call that takes it and the one that
// gives it back.
func TestHoldID(t *testing.T) {
	long := strings.Repeat("x", 200)
	if a, b := holdID(long), holdID(long); a != b || len(a) > spec.MaxID || a == holdID(long+"y") {
		t.Fatalf("holdID: %q, %q", a, b)
	}
	if holdID("r1") != "r1" || holdID("") != "-" {
		t.Fatal("a short value is its own id")
	}
}

func TestHoldConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"no holder", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: concurrency, limit: 2, hold_ttl: 30}",
			"a.yaml:4: algorithm: concurrency for 'd.k' needs a descriptor marked holder: true"},
		{"holder over a window", "domain: d\ndescriptors:\n  - key: k\n    holder: true\n    rate_limit: {unit: second, requests_per_unit: 1}",
			"a.yaml:5: 'd.k' is under holder: true, which names holds: its algorithm must be concurrency"},
		{"holder alone", "domain: d\ndescriptors:\n  - key: k\n    holder: true",
			"a.yaml:3: holder: true on 'd.k', which has no rate_limit of algorithm: concurrency or reserve: true below it"},
		{"holder with a value", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    holder: true",
			"a.yaml:3: holder: true on 'd.k_v' with a value"},
		{"two holders", "domain: d\ndescriptors:\n  - key: k\n    holder: true\n    descriptors:\n      - key: j\n        holder: true",
			"a.yaml:6: holder: true on 'd.k.j' under another holder"},
		{"no limit", "domain: d\ndescriptors:\n  - key: k\n    holder: true\n    rate_limit: {algorithm: concurrency, hold_ttl: 30}",
			"needs limit, the holders at once, from 1 to 100000"},
		{"no hold_ttl", "domain: d\ndescriptors:\n  - key: k\n    holder: true\n    rate_limit: {algorithm: concurrency, limit: 3}",
			"needs hold_ttl, how long a hold lasts unless released"},
		{"hold_ttl in ms", "domain: d\ndescriptors:\n  - key: k\n    holder: true\n    rate_limit: {algorithm: concurrency, limit: 3, hold_ttl: 1500ms}",
			"a.yaml:5: algorithm: concurrency for 'd.k' needs hold_ttl"},
		{"unit", "domain: d\ndescriptors:\n  - key: k\n    holder: true\n    rate_limit: {algorithm: concurrency, limit: 3, hold_ttl: 30, unit: second}",
			"takes limit (holders at once) and hold_ttl, not requests_per_unit and unit"},
		{"limit on a window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, limit: 3}",
			"limit and hold_ttl are algorithm: concurrency's"},
	} {
		_, err := Parse(map[string][]byte{"a.yaml": []byte(tc.yaml)})
		var ce *ConfigError
		if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, ok := range []string{"30", "30s", "2m", "1h"} {
		if _, good := holdTTL(ok); !good {
			t.Errorf("hold_ttl %q refused", ok)
		}
	}
}
