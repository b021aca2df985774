package rls

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestDebtChargePast2262 (issue 44): under DebtCharges, a charge whose debt
// would pass the largest instant the state holds (2^63 - 1 ns, in 2262) is
// counted up to it, answered OVER_LIMIT, and every later request is
// refused; it was INTERNAL and counted nothing, so the client was never
// stopped (50,000,000 tokens served against 100 a day). A budget of 100
// tokens a day, GCRA or token bucket (one back every 864 s), on the fake
// at t0 = 1,700,000,000 s, 7,523,372,036.854775807 s before 2^63 - 1 ns:
// one token passes again 86,400 - 864 s before then.
func TestDebtChargePast2262(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: gcra
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: gcra}
  - key: tb
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: token_bucket}
`
	for _, c := range []struct{ key, stored string }{{"gcra", "d_gcra_u1_gcra86400"}, {"tb", "d_tb_u1_tb86400"}} {
		t.Run(c.key, func(t *testing.T) {
			s, f := onFake(t, cfg, Options{DebtCharges: true})
			tokens := func(hits uint64) []*rlv3.RateLimitDescriptor {
				d := descriptor(c.key, "u1")
				if hits > 0 {
					d.HitsAddend = wrapperspb.UInt64(hits)
				}
				return []*rlv3.RateLimitDescriptor{d}
			}
			for _, step := range []struct {
				advance time.Duration
				ds      []*rlv3.RateLimitDescriptor
				want    string
			}{
				{0, tokens(0), "OK OK/100:99:864s"},                                    // a request: one token
				{0, tokens(50_000_000), "OVER_LIMIT OVER_LIMIT/100:0:7523286501s"},     // the charge: counted, up to 2262
				{0, tokens(0), "OVER_LIMIT OVER_LIMIT/100:0:7523286501s"},              // the next request: stopped
				{0, tokens(1), "OVER_LIMIT OVER_LIMIT/100:0:7523286501s"},              // and the next
				{0, tokens(50_000_000), "OVER_LIMIT OVER_LIMIT/100:0:7523286501s"},     // another charge: still 2262
				{24 * time.Hour, tokens(0), "OVER_LIMIT OVER_LIMIT/100:0:7523200101s"}, // a day on: still stopped
			} {
				f.Advance(step.advance)
				if got := line(ask(t, s, step.ds)); got != step.want {
					t.Fatalf("at t0+%v: %d tokens answered %s, want %s", f.Now().Sub(t0), step.ds[0].GetHitsAddend().GetValue(), got, step.want)
				}
			}
			if v, err := f.Client().Get(context.Background(), c.stored).Result(); err != nil || v != "9223372036854775807:debt" {
				t.Fatalf("the budget's state: %q %v, want the largest instant, owed", v, err)
			}
		})
	}
}
