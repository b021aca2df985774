package rls

import (
	"fmt"
	"runtime"
	"testing"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// bigUpdate is an update of 33,000 descriptors: 10 listeners (one resource
// and domain each) of 1,650 routes, each a descriptor for the route and,
// under it, one for its rule's match, holding the limit, named after them.
// It is about 3.9 MB on the wire, as the update hostile testing sent.
func bigUpdate(t testing.TB) *discoverypb.DiscoveryResponse {
	var rcs []*rlcfg.RateLimitConfig
	for l := range 10 {
		rc := &rlcfg.RateLimitConfig{Name: fmt.Sprintf("default/eg/http-%d", l), Domain: fmt.Sprintf("default/eg/http-%d", l)}
		for r := range 1650 {
			route := fmt.Sprintf("httproute/team-payments/checkout-api-%05d/rule/0/match/0/payments-eu-west.internal.example.com", r)
			rc.Descriptors = append(rc.Descriptors, &rlcfg.RateLimitDescriptor{Key: route, Value: route,
				Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "rule-0-match-0", Value: "rule-0-match-0",
					RateLimit: &rlcfg.RateLimitPolicy{Unit: rlcfg.RateLimitUnit_HOUR, RequestsPerUnit: uint32(100 + r)}}}})
		}
		rcs = append(rcs, rc)
	}
	return response(t, "1", rcs...)
}

// updateCost is the bytes allocated reading an update, and the bytes the
// config it makes holds (the heap it adds, measured after a collection).
func updateCost(t testing.TB, read func() (*Config, error)) (allocated, config uint64) {
	t.Helper()
	var before, after, held runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cfg, err := read()
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&held)
	runtime.KeepAlive(cfg)
	return after.TotalAlloc - before.TotalAlloc, held.HeapAlloc - before.HeapAlloc
}

// TestXDSUpdateMemory: reading an update of 33,000 descriptors allocates at
// most twice the memory of the config it makes (through YAML it took
// about 24 KiB a descriptor). Run with -v for the figures.
func TestXDSUpdateMemory(t *testing.T) {
	resp := bigUpdate(t)
	allocated, config := updateCost(t, func() (*Config, error) { return xdsConfig(resp, 0) })
	t.Logf("update of 33,000 descriptors, %d bytes on the wire: %d bytes allocated (%d a descriptor), config %d bytes (%d a descriptor): %.2fx",
		proto.Size(resp), allocated, allocated/33000, config, config/33000, float64(allocated)/float64(config))
	if allocated > 2*config {
		t.Fatalf("reading the update allocated %d bytes, more than twice the config's %d", allocated, config)
	}
}

// BenchmarkXDSUpdate: reading an update of 33,000 descriptors, directly
// and as rls did through YAML; config-B is the config's own bytes.
func BenchmarkXDSUpdate(b *testing.B) {
	resp := bigUpdate(b)
	for _, c := range []struct {
		name string
		read func() (*Config, error)
	}{
		{"direct", func() (*Config, error) { return xdsConfig(resp, 0) }},
		{"yaml", func() (*Config, error) { return viaYAML(resp) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			_, config := updateCost(b, c.read)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.read(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(config), "config-B")
		})
	}
}
