package rls

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
	"github.com/seed-6b3823f5/ratelimit/lease"
	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

const debtConfig = `
domain: d
descriptors:
  - key: budget
    rate_limit: {unit: minute, requests_per_unit: 1000, debt: true}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: rpm
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestDebt: the AI-gateway pattern on a virtual clock (a fixed window of
// 1000 tokens a minute, 40 s of it left at t0). A request checks the
// budget with hits_addend 0; the response charges the tokens it used.
// With debt: true the charge is counted past the limit, as the peer
// counts it, and the checks are refused until the window ends; without it
// the charge is refused and not counted, and the client is never stopped.
// A charge is counted even when another limit of the request refuses, and
// never answered from the refusal cache; a request refused by a charge
// counts nothing else.
func TestDebt(t *testing.T) {
	s, f := onFake(t, debtConfig, Options{RefusalCache: 10})
	tokens := func(key string, hits uint64) *rlv3.RateLimitDescriptor {
		d := descriptor(key, "u1")
		d.HitsAddend = wrapperspb.UInt64(hits)
		return d
	}
	for _, step := range []struct {
		advance time.Duration
		ds      []*rlv3.RateLimitDescriptor
		want    string
	}{
		{0, []*rlv3.RateLimitDescriptor{tokens("budget", 0)}, "OK OK/1000:1000:40s"},                 // the check
		{0, []*rlv3.RateLimitDescriptor{tokens("budget", 1500)}, "OVER_LIMIT OVER_LIMIT/1000:0:40s"}, // the charge, counted
		{0, []*rlv3.RateLimitDescriptor{tokens("budget", 0)}, "OVER_LIMIT OVER_LIMIT/1000:0:40s"},    // the next check: stopped
		{0, []*rlv3.RateLimitDescriptor{tokens("budget", 100)}, "OVER_LIMIT OVER_LIMIT/1000:0:40s"},  // counted again, not cached
		{0, []*rlv3.RateLimitDescriptor{tokens("plain", 1500)}, "OVER_LIMIT OVER_LIMIT/1000:0:40s"},
		{0, []*rlv3.RateLimitDescriptor{tokens("plain", 0)}, "OK OK/1000:1000:40s"}, // without debt: never stopped
		{40 * time.Second, []*rlv3.RateLimitDescriptor{tokens("budget", 0)}, "OK OK/1000:1000:60s"},
		{0, []*rlv3.RateLimitDescriptor{tokens("rpm", 1), tokens("budget", 10)}, "OK OK/1:0:60s OK/1000:990:60s"},
		{0, []*rlv3.RateLimitDescriptor{tokens("rpm", 1), tokens("budget", 10)}, "OVER_LIMIT OVER_LIMIT/1:0:60s OK/1000:980:60s"},
		// Refused by a budget in debt, a request counts nothing else.
		{60 * time.Second, []*rlv3.RateLimitDescriptor{tokens("budget", 1500)}, "OVER_LIMIT OVER_LIMIT/1000:0:60s"},
		{0, []*rlv3.RateLimitDescriptor{tokens("rpm", 1), tokens("budget", 0)}, "OVER_LIMIT OK/1:0 OVER_LIMIT/1000:0:60s"},
		{0, []*rlv3.RateLimitDescriptor{tokens("rpm", 1)}, "OK OK/1:0:60s"},
	} {
		f.Advance(step.advance)
		r := ask(t, s, step.ds)
		if got := line(r); got != step.want {
			t.Fatalf("at t0+%v: %v answered %s, want %s", f.Now().Sub(t0), step.ds, got, step.want)
		}
	}
	if n, err := f.Client().Get(context.Background(), "d_budget_u1_fw60").Int64(); err != nil || n != 1500 {
		t.Fatalf("the budget's count: %d %v, want 1500", n, err)
	}
	for _, bad := range []string{"debt: maybe", "debt: true, algorithm: sliding_log"} {
		cfg := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, " + bad + "}\n"
		if _, err := Parse(map[string][]byte{"d.yaml": []byte(cfg)}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestTokenBudget: 10 requests whose responses are 600 tokens each against
// a budget of 1,000 tokens a minute: the first two checks pass (0, then
// 600 spent), the second charge is counted past the limit (1,200), and
// the third check and every later one is refused, as the peer answers.
// The budget says so with debt: true in a file, or with DebtCharges (a
// config from Envoy Gateway, which cannot say it); without either, the
// second charge is refused and not counted, and the client never stops.
func TestTokenBudget(t *testing.T) {
	for _, c := range []struct {
		name string
		key  string
		o    Options
		want string
	}{
		{"debt: true", "budget", Options{}, "OOXXXXXXXX"},
		{"DebtCharges", "plain", Options{DebtCharges: true}, "OOXXXXXXXX"},
		{"DebtCharges on a sliding log", "log", Options{DebtCharges: true}, "OOOOOOOOOO"},
		{"neither", "plain", Options{}, "OOOOOOOOOO"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, f := onFake(t, debtConfig+"  - key: log\n    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: sliding_log}\n", c.o)
			got := rlstest.TokenBudget(10, 600, func(hits uint64) bool {
				d := descriptor(c.key, "u1")
				d.HitsAddend = wrapperspb.UInt64(hits)
				return ask(t, s, []*rlv3.RateLimitDescriptor{d}).OverallCode == pb.RateLimitResponse_OK
			})
			if got != c.want {
				t.Fatalf("checks %s, want %s", got, c.want)
			}
			if c.want == "OOXXXXXXXX" {
				if n, err := f.Client().Get(context.Background(), "d_"+c.key+"_u1_fw60").Int64(); err != nil || n != 1200 {
					t.Fatalf("the budget's count: %d %v, want 1200", n, err)
				}
			}
		})
	}
}

// TestDebtChargesRequestAddend: under DebtCharges a descriptor with no
// hits_addend of its own is charged by the request's hits_addend above 0
// as by its own: counted past its limit, never from the refusal cache.
// A descriptor's own 0 is a check whatever the request's, and a request
// with no hits_addend (1 each) is decided as always. Without DebtCharges
// the same charge is refused and not counted.
func TestDebtChargesRequestAddend(t *testing.T) {
	type want struct {
		answer string
		count  int64 // d_plain_u1_fw60 after it (0: no key)
	}
	// req asks with the request's hits_addend, and the descriptor's own
	// where own >= 0.
	req := func(t *testing.T, s *Service, reqHits uint32, own int64) *pb.RateLimitResponse {
		d := descriptor("plain", "u1")
		if own >= 0 {
			d.HitsAddend = wrapperspb.UInt64(uint64(own))
		}
		r, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{d}, HitsAddend: reqHits})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, c := range []struct {
		name  string
		o     Options
		steps []struct {
			reqHits uint32
			own     int64
			want    want
		}
	}{
		{"DebtCharges", Options{DebtCharges: true, RefusalCache: 10}, []struct {
			reqHits uint32
			own     int64
			want    want
		}{
			{600, -1, want{"OK OK/1000:400:40s", 600}},
			{600, -1, want{"OVER_LIMIT OVER_LIMIT/1000:0:40s", 1200}}, // the request's charge, counted past the limit
			{600, 0, want{"OVER_LIMIT OVER_LIMIT/1000:0:40s", 1200}},  // the descriptor's own 0: a check
			{0, -1, want{"OVER_LIMIT OVER_LIMIT/1000:0:40s", 1200}},   // no hits_addend: 1, refused, not counted
			{5, -1, want{"OVER_LIMIT OVER_LIMIT/1000:0:40s", 1205}},   // counted again, not from the cache
		}},
		{"without DebtCharges", Options{RefusalCache: 10}, []struct {
			reqHits uint32
			own     int64
			want    want
		}{
			{1500, -1, want{"OVER_LIMIT OVER_LIMIT/1000:0:40s", 0}}, // refused, not counted
			{600, -1, want{"OK OK/1000:400:40s", 600}},
			{600, -1, want{"OVER_LIMIT OVER_LIMIT/1000:0:40s", 600}},
			{0, -1, want{"OK OK/1000:399:40s", 601}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, f := onFake(t, debtConfig, c.o)
			for i, st := range c.steps {
				if got := line(req(t, s, st.reqHits, st.own)); got != st.want.answer {
					t.Fatalf("step %d (request's hits_addend %d, own %d): %s, want %s", i, st.reqHits, st.own, got, st.want.answer)
				}
				n, err := f.Client().Get(context.Background(), "d_plain_u1_fw60").Int64()
				if err == redis.Nil {
					n, err = 0, nil
				}
				if err != nil || n != st.want.count {
					t.Fatalf("step %d: the count is %d %v, want %d", i, n, err, st.want.count)
				}
			}
		})
	}
}

// TestTokenBudgetRequestAddend: TestTokenBudget's ten requests with each
// charge sent as the request's hits_addend (the descriptor with none of
// its own; the checks still the descriptor's 0): with DebtCharges the
// budget stops its client as with the descriptor's own; without, the
// client is never stopped.
func TestTokenBudgetRequestAddend(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"DebtCharges", Options{DebtCharges: true}, "OOXXXXXXXX"},
		{"neither", Options{}, "OOOOOOOOOO"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, f := onFake(t, debtConfig, c.o)
			got := rlstest.TokenBudget(10, 600, func(hits uint64) bool {
				d := descriptor("plain", "u1")
				r := &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{d}}
				if hits == 0 {
					d.HitsAddend = wrapperspb.UInt64(0) // the check
				} else {
					r.HitsAddend = uint32(hits) // the charge
				}
				resp, err := s.ShouldRateLimit(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				return resp.OverallCode == pb.RateLimitResponse_OK
			})
			if got != c.want {
				t.Fatalf("checks %s, want %s", got, c.want)
			}
			want := int64(1200)
			if c.want == "OOOOOOOOOO" {
				want = 600 // the first charge; each later one is more than the 400 left, refused
			}
			if n, err := f.Client().Get(context.Background(), "d_plain_u1_fw60").Int64(); err != nil || n != want {
				t.Fatalf("the budget's count: %d %v, want %d", n, err, want)
			}
		})
	}
}

const leaseConfig = `
domain: d
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, lease: true}
`

// leaseFake is a fake server on a clock moved by hand (now, from t0) that
// counts the commands it serves.
func leaseFake(t *testing.T) (rdb redis.UniversalClient, now *atomic.Int64, clock func() time.Time, calls *atomic.Int64) {
	f := fakeredis.New()
	now, calls = new(atomic.Int64), new(atomic.Int64)
	now.Store(t0.UnixNano())
	clock = func() time.Time { return time.Unix(0, now.Load()) }
	f.Clock = clock
	f.Before = func(redis.Cmder) error { calls.Add(1); return nil }
	c := f.Client()
	t.Cleanup(func() { c.Close() })
	return c, now, clock, calls
}

// TestLease: with Options.Lease, a descriptor whose limit says lease: true
// is decided from units granted ahead once hot: 300 requests at 1,000 a
// second (the clock moved by hand) on 100 a second are admitted within the
// limit's burst and rate and τ more, with a small fraction of the Redis
// calls. lease: true needs fixed_window, gcra or token_bucket and no debt.
func TestLease(t *testing.T) {
	rdb, now, clock, calls := leaseFake(t)
	reg := prometheus.NewRegistry()
	s := onClient(t, rdb, leaseConfig, Options{Lease: &lease.Options{Now: clock}, Registerer: reg}, clock)
	admitted := 0
	for range 300 {
		if r := ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("api", "all")}); r.OverallCode == pb.RateLimitResponse_OK {
			admitted++
		}
		now.Add(int64(time.Millisecond))
	}
	// 0.3 s: the burst of 100 and 30; leasing may add rate × τ (20).
	if admitted < 120 || admitted > 150 || calls.Load() > 40 {
		t.Fatalf("%d admitted of 300, %d Redis calls", admitted, calls.Load())
	}
	t.Logf("%d admitted of 300, %d Redis calls", admitted, calls.Load())
	st := s.gate.Stats().Lease
	want := fmt.Sprintf("# HELP ratelimit_lease_grants_total Grant calls the local tier sent (a Take with UpTo).\n# TYPE ratelimit_lease_grants_total counter\nratelimit_lease_grants_total %d\n", st.Grants)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_lease_grants_total"); err != nil || st.Grants == 0 {
		t.Errorf("lease metrics: %v; stats %+v", err, st)
	}
	for _, bad := range []string{"lease: true, algorithm: sliding_log", "lease: true, algorithm: sliding_window", "lease: true, algorithm: gcra, debt: true", "lease: 2"} {
		cfg := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, " + bad + "}\n"
		if _, err := Parse(map[string][]byte{"d.yaml": []byte(cfg)}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestLeaseTwoDescriptors: a request of two descriptors whose limits both
// lease (a route's 100 a second, a user's 1,000) is decided through the
// tier all or nothing, as one is: 300 requests at 1,000 a second admit
// within the tighter limit's burst and rate and τ more, with about the
// Redis calls one descriptor takes; each OK response states both limits.
// One descriptor that does not lease sends every request to Redis.
func TestLeaseTwoDescriptors(t *testing.T) {
	const cfg = leaseConfig + `  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: gcra, lease: true}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: gcra}
`
	rdb, now, clock, calls := leaseFake(t)
	s := onClient(t, rdb, cfg, Options{Lease: &lease.Options{Now: clock}}, clock)
	admitted := 0
	for i := range 300 {
		r := ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("api", "all"), descriptor("user", "u1")})
		if r.OverallCode == pb.RateLimitResponse_OK {
			admitted++
			if len(r.Statuses) != 2 || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 100 || r.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 1000 {
				t.Fatalf("request %d: statuses %v", i, r.Statuses)
			}
		}
		now.Add(int64(time.Millisecond))
	}
	if st := s.gate.Stats().Lease; admitted < 120 || admitted > 150 || calls.Load() > 60 || st.Local == 0 {
		t.Fatalf("%d admitted of 300, %d Redis calls; stats %+v", admitted, calls.Load(), st)
	}
	t.Logf("%d admitted of 300, %d Redis calls", admitted, calls.Load())
	c0 := calls.Load()
	for range 50 {
		ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("user", "u1"), descriptor("plain", "p")})
		now.Add(int64(time.Millisecond))
	}
	if c := calls.Load() - c0; c < 50 {
		t.Fatalf("with a descriptor that does not lease: %d Redis calls for 50 requests", c)
	}
}

// TestLeaseFixedWindow: lease: true on the default algorithm, fixed_window
// (the peer's): 2,000 requests at 1,000 a second on 100 a second are
// admitted at most 100 in each second — the units a process holds are
// spent before their window ends — and at least 90, with a small fraction
// of the Redis calls.
func TestLeaseFixedWindow(t *testing.T) {
	rdb, now, clock, calls := leaseFake(t)
	const cfg = "domain: d\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 100, lease: true}\n"
	s := onClient(t, rdb, cfg, Options{Lease: &lease.Options{Now: clock}}, clock)
	perSecond := map[int64]int{}
	for range 2000 {
		if r := ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("api", "all")}); r.OverallCode == pb.RateLimitResponse_OK {
			perSecond[now.Load()/int64(time.Second)]++
		}
		now.Add(int64(time.Millisecond))
	}
	for sec, n := range perSecond {
		if n > 100 || n < 90 {
			t.Fatalf("second %d admitted %d of 100; all: %v", sec, n, perSecond)
		}
	}
	if st := s.gate.Stats().Lease; calls.Load() > 200 || st.Local == 0 {
		t.Fatalf("%d Redis calls for 2000 requests; stats %+v", calls.Load(), st)
	}
	t.Logf("admitted per second %v, %d Redis calls", perSecond, calls.Load())
}
