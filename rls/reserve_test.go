package rls

import (
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const reserveConfig = `
domain: d
descriptors:
  - key: user
    descriptors:
      - key: request_id
        holder: true
        rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: token_bucket, reserve: true, hold_ttl: 60s}
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestReserve: reserve: true through plain RLS, on the fake's virtual
// clock, a token budget of 1000 a minute (one back every 60 ms). The
// request phase holds its hits_addend as an estimate under the request's
// request_id (left out of the budget's key); the stream-done call
// (is_negative_hits) settles it at its hits_addend, the actual cost: more
// taken past the limit, less given back, once. A request another limit
// refuses holds nothing; a hold never settled lapses after hold_ttl with
// its estimate kept.
func TestReserve(t *testing.T) {
	s, f := onFake(t, reserveConfig, Options{})
	hold := func(id string, hits uint64) *rlv3.RateLimitDescriptor {
		d := descriptor("user", "alice", "request_id", id)
		d.HitsAddend = wrapperspb.UInt64(hits)
		return d
	}
	settle := func(id string, hits uint64) *rlv3.RateLimitDescriptor {
		d := hold(id, hits)
		d.IsNegativeHits = true
		return d
	}
	one := func(d *rlv3.RateLimitDescriptor) []*rlv3.RateLimitDescriptor { return []*rlv3.RateLimitDescriptor{d} }
	for i, step := range []struct {
		advance time.Duration
		ds      []*rlv3.RateLimitDescriptor
		want    string
	}{
		{0, one(hold("r1", 300)), "OK OK/1000:700:18s"},
		{0, one(settle("r1", 500)), "OK OK/1000:500:30s"}, // 200 more
		{0, one(settle("r1", 500)), "OK OK/1000:500:30s"}, // settled already: nothing
		{0, one(hold("r2", 400)), "OK OK/1000:100:54s"},
		{0, one(hold("r3", 200)), "OVER_LIMIT OVER_LIMIT/1000:0:6s"}, // 100 left: 100 more in 6 s
		{0, one(settle("r2", 100)), "OK OK/1000:400:36s"},            // 300 back
		{0, []*rlv3.RateLimitDescriptor{hold("r4", 100), descriptor("fw", "x")}, "OK OK/1000:300:42s OK/1:0:40s"},
		// Refused by the window: the hold is given back at once, so 300
		// are there for r6.
		{0, []*rlv3.RateLimitDescriptor{hold("r5", 100), descriptor("fw", "x")}, "OVER_LIMIT OK/1000:200:48s OVER_LIMIT/1:0:40s"},
		{0, one(hold("r6", 300)), "OK OK/1000:0:60s"},
		// Past the limit: taken, never refused, and the next holds wait.
		{0, one(settle("r6", 700)), "OK OK/1000:0:84s"},
		{0, one(hold("r7", 0)), "OVER_LIMIT OVER_LIMIT/1000:0:24s"},
		// r8 is never settled in time: 61 s on, its hold has lapsed and
		// its estimate stands (a settlement that found it would take 200
		// more).
		{30 * time.Second, one(hold("r8", 100)), "OK OK/1000:0:60s"},
		{61 * time.Second, one(settle("r8", 300)), "OK OK/1000:1000:0s"},
	} {
		f.Advance(step.advance)
		if got := line(ask(t, s, step.ds)); got != step.want {
			t.Fatalf("step %d at t0+%v: %s, want %s", i, f.Now().Sub(t0), got, step.want)
		}
	}
	// The budget's key leaves the request id out; the hold's names it, in
	// the budget's slot.
	ask(t, s, one(hold("r9", 1)))
	if keys := f.Keys(); !slices.Equal(keys, []string{"d_user_alice_tb60", "{d_user_alice_tb60}:hold:r9"}) {
		t.Errorf("keys %v: want the budget's and r9's hold", keys)
	}
}

// A reserve is refused where it cannot hold: without a holder above it,
// with debt, lease, sliding_log, no limit, or no hold_ttl.
func TestReserveConfigErrors(t *testing.T) {
	under := func(rl string) string {
		return "domain: d\ndescriptors:\n  - key: user\n    descriptors:\n      - key: id\n        holder: true\n        rate_limit: " + rl + "\n"
	}
	for _, c := range []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, reserve: true, hold_ttl: 30s}\n",
			"reserve: true for 'd.k' needs a descriptor marked holder: true"},
		{under("{unit: minute, requests_per_unit: 5, reserve: true}"), `reserve: true for 'd.user.id' needs hold_ttl`},
		{under("{unit: minute, requests_per_unit: 5, reserve: true, hold_ttl: 0s}"), `needs hold_ttl, how long a hold waits for its settlement`},
		{under("{unit: minute, requests_per_unit: 5, reserve: true, hold_ttl: 30s, debt: true}"), "takes no debt and no lease"},
		{under("{unit: minute, requests_per_unit: 5, algorithm: gcra, reserve: true, hold_ttl: 30s, lease: true}"), "takes no debt and no lease"},
		{under("{unit: minute, requests_per_unit: 5, algorithm: sliding_log, reserve: true, hold_ttl: 30s}"), "does not go with sliding_log"},
		{under("{unit: minute, requests_per_unit: 0, reserve: true, hold_ttl: 30s}"), "needs a limit: requests_per_unit of 1 or more"},
		{under("{unlimited: true, reserve: true, hold_ttl: 30s}"), "needs a limit"},
		{under("{algorithm: concurrency, limit: 3, hold_ttl: 30s, reserve: true}"), "takes only limit, hold_ttl and name"},
		{under("{unit: minute, requests_per_unit: 5}"), "its algorithm must be concurrency, or its rate_limit say reserve: true"},
		{under("{unit: minute, requests_per_unit: 5, hold_ttl: 30s}"), "limit and hold_ttl are algorithm: concurrency's (hold_ttl also reserve: true's)"},
	} {
		_, err := Parse(map[string][]byte{"a.yaml": []byte(c.yaml)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", c.yaml, err, c.want)
		}
	}
}

// TestXDSReserve: reserve: true and hold_ttl said over xDS, in the
// descriptor's metadata beside its rate_limit (holder on the descriptor),
// answer as the same reserve in a file, step for step.
func TestXDSReserve(t *testing.T) {
	rc := &rlcfg.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{
		{Key: "user", Descriptors: []*rlcfg.RateLimitDescriptor{{
			Key:       "request_id",
			RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_MINUTE, RequestsPerUnit: 1000},
			Metadata:  mustStruct(map[string]any{"holder": true, "algorithm": "token_bucket", "reserve": true, "hold_ttl": "60s"}),
		}}},
		{Key: "fw", RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_MINUTE, RequestsPerUnit: 1}},
	}}
	w := newTwin(t, reserveConfig, Options{}, rc)
	d := func(id string, hits uint64, settle bool) *rlv3.RateLimitDescriptor {
		d := descriptor("user", "alice", "request_id", id)
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(hits), settle
		return d
	}
	for i, c := range []struct {
		ds   []*rlv3.RateLimitDescriptor
		want string
	}{
		{[]*rlv3.RateLimitDescriptor{d("r1", 300, false)}, "OK OK/1000:700:18s"},
		{[]*rlv3.RateLimitDescriptor{d("r1", 500, true)}, "OK OK/1000:500:30s"},
		{[]*rlv3.RateLimitDescriptor{d("r2", 600, false)}, "OVER_LIMIT OVER_LIMIT/1000:0:6s"},
		{[]*rlv3.RateLimitDescriptor{d("r3", 100, false), descriptor("fw", "x")}, "OK OK/1000:400:36s OK/1:0:40s"},
	} {
		if got := w.ask(t, c.ds...); got != c.want {
			t.Fatalf("step %d: %s, want %s", i, got, c.want)
		}
	}
}
