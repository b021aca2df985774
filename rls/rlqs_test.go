package rls

import (
	"context"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/seed-6b3823f5/ratelimit/gcra"
)

func TestMaxMin(t *testing.T) {
	for _, c := range []struct {
		wants    []float64
		capacity float64
		want     []float64
	}{
		{[]float64{10, 10, 10, 10}, 40, []float64{10, 10, 10, 10}},
		{[]float64{50, 50, 50, 50}, 40, []float64{10, 10, 10, 10}},
		{[]float64{6, 50, 50}, 30, []float64{6, 12, 12}},
		{[]float64{1, 2, 3}, 30, []float64{1, 2, 3}},                                          // every want met; the rest stays unassigned
		{[]float64{math.Inf(1), 5}, 30, []float64{25, 5}},                                     // a demand not known yet takes what is left
		{[]float64{math.Inf(1), math.Inf(1), 2}, 10, []float64{4, 4, 2}},                      // the level: (10 - 2) / 2
		{[]float64{math.Inf(1), math.Inf(1), 4}, 10, []float64{10.0 / 3, 10.0 / 3, 10.0 / 3}}, // 4 is above the level
		{[]float64{20, 5, 20, 5}, 40, []float64{15, 5, 15, 5}},                                // what the small ones leave goes to the large
		{[]float64{}, 10, []float64{}},
	} {
		got := maxMin(c.wants, c.capacity)
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-9 {
				t.Fatalf("maxMin(%v, %v) = %v, want %v", c.wants, c.capacity, got, c.want)
			}
		}
	}
}

// A registry's entries: each asks a quarter more than its demand and
// min(1, R/N); lapsed entries (deadline passed) are left out, but never
// the asker's own; unreadable ones too.
func TestFairShare(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	live, dead := strconv.FormatInt(now.UnixMilli()+5000, 10), strconv.FormatInt(now.UnixMilli()-1, 10)
	reg := map[string]string{
		"a": "8 " + live,    // wants 8 × 1.25 + 1 = 11
		"b": "100 " + live,  // 126
		"c": "+Inf " + live, // not known: what is left
		"d": "50 " + dead,   // lapsed
		"e": "garbage",
		"f": "-3 " + live, // a negative demand is not read
	}
	// R = 40 over a, b, c: a gets 11, b and c (40 - 11) / 2 = 14.5.
	for f, want := range map[string]float64{"a": 11, "b": 14.5, "c": 14.5, "x": 0} {
		if got := fairShare(reg, f, now, 40); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: %v, want %v", f, got, want)
		}
	}
	if got := fairShare(map[string]string{"d": "50 " + dead}, "d", now, 40); got != 40 {
		t.Errorf("own lapsed entry: %v, want 40", got)
	}
}

// A token bucket is kept while the new rate is within a tenth above the
// old (Envoy refills a new one, so a small change would give a burst);
// any fall, or a larger rise, makes a new one; rates are per 60 s, bursts
// the rate's share of L.
func TestTokenBucket(t *testing.T) {
	tb := tokenBucket(nil, 10, 40, 40)
	if tb.GetMaxTokens() != 10 || tb.GetTokensPerFill().GetValue() != 600 || tb.GetFillInterval().GetSeconds() != 60 {
		t.Fatalf("10 of 40 a second, L 40: %v", tb)
	}
	if got := tokenBucket(tb, 10.9, 40, 40); got != tb {
		t.Fatalf("10.9 after 10: a new bucket %v", got)
	}
	if got := tokenBucket(tb, 11.5, 40, 40); got == tb || got.GetTokensPerFill().GetValue() != 690 {
		t.Fatalf("11.5 after 10: %v", got)
	}
	if got := tokenBucket(tb, 9.99, 40, 40); got == tb || got.GetTokensPerFill().GetValue() != 599 || got.GetMaxTokens() != 9 {
		t.Fatalf("9.99 after 10: %v", got)
	}
	if got := tokenBucket(nil, 0.001, 40, 40); got.GetTokensPerFill().GetValue() != 1 || got.GetMaxTokens() != 1 {
		t.Fatalf("a tiny rate: %v", got)
	}
	// 600 a minute: R = 10, L = 600: a quarter of the rate has a quarter of the burst.
	if got := tokenBucket(nil, 2.5, 10, 600); got.GetMaxTokens() != 150 || got.GetTokensPerFill().GetValue() != 150 {
		t.Fatalf("2.5 of 600 a minute: %v", got)
	}
}

// A bucket id is matched as a descriptor in the order the config nests
// its keys, whatever order the map holds them in.
func TestBucketDescriptor(t *testing.T) {
	cfg, err := Parse(map[string][]byte{"c.yaml": []byte(`
domain: envoy
descriptors:
  - key: tenant
    descriptors:
      - key: path
        value: /api*
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: zone
    rate_limit: {unit: minute, requests_per_unit: 7}
`)})
	if err != nil {
		t.Fatal(err)
	}
	q := &Quotas{}
	for _, c := range []struct {
		id      map[string]string
		perUnit int64 // 0: none
		entries string
	}{
		{map[string]string{"path": "/api/x", "tenant": "t1"}, 5, "tenant=t1,path=/api/x"},
		{map[string]string{"tenant": "t1", "path": "/other"}, 0, ""},
		{map[string]string{"zone": "eu"}, 7, "zone=eu"},
		{map[string]string{"zone": "eu", "extra": "1"}, 0, ""},
		{map[string]string{"tenant": "t1"}, 0, ""}, // a prefix of a path has no rule
	} {
		r, _, d := q.ruleOf(cfg, "envoy", c.id)
		var got int64
		if r != nil {
			got = r.perUnit
		}
		var es []string
		for _, e := range d.GetEntries() {
			es = append(es, e.Key+"="+e.Value)
		}
		if got != c.perUnit || (r != nil && strings.Join(es, ",") != c.entries) {
			t.Errorf("%v: rule %d entries %v; want %d %s", c.id, got, es, c.perUnit, c.entries)
		}
	}
	if r, _, _ := q.ruleOf(cfg, "other", map[string]string{"zone": "eu"}); r != nil {
		t.Error("another domain matched")
	}
}

// rlqsHarness is rls processes serving RLQS on one real Redis with the
// module, and fake Envoys against them.
type rlqsHarness struct {
	t       *testing.T
	rdb     *redis.Client
	cfg     *Config
	servers []*rlqsProc
}

type rlqsProc struct {
	addr string
	q    *Quotas
	gs   *grpc.Server
	reg  *prometheus.Registry
}

func newRLQSHarness(t *testing.T, yaml string) *rlqsHarness {
	rdb := redisServer(t, true)
	cfg, err := Parse(map[string][]byte{"c.yaml": []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return &rlqsHarness{t: t, rdb: rdb, cfg: cfg}
}

// serve starts one more rls process (a Service and its Quotas on a gRPC
// server of its own).
func (h *rlqsHarness) serve(o QuotaOptions) *rlqsProc {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	svc := New(h.rdb, h.cfg, Options{Timeout: time.Second})
	p := &rlqsProc{addr: l.Addr().String(), reg: prometheus.NewRegistry()}
	o.Registerer = p.reg
	p.q = NewQuotas(svc, h.rdb, o)
	p.gs = grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(p.gs, p.q)
	go p.gs.Serve(l)
	h.t.Cleanup(func() { p.q.Drain(); p.gs.Stop(); svc.Close() })
	h.servers = append(h.servers, p)
	return p
}

// envoy is a fake Envoy reporting every interval to p.
func (h *rlqsHarness) envoy(p *rlqsProc, interval time.Duration) *fakeEnvoy {
	e := newFakeEnvoy(func() (*grpc.ClientConn, error) {
		return grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}, "envoy", interval)
	h.t.Cleanup(func() {
		select {
		case <-e.stop:
		default:
			e.Close()
		}
	})
	return e
}

// drive sends requests of bucket id from e at rate() a second until stop
// is closed.
func drive(wg *sync.WaitGroup, e *fakeEnvoy, id map[string]string, rate func() float64, stop chan struct{}) {
	wg.Go(func() {
		next := time.Now()
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.Request(id)
			next = next.Add(time.Duration(float64(time.Second) / rate()))
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			} else if d < -time.Second { // far behind (a busy machine): do not catch up in a burst
				next = time.Now()
			}
		}
	})
}

// excess is how many of the admissions (every Envoy's, of one bucket) an
// exact GCRA of L per unit, L at once, would have refused.
func excess(t *testing.T, at []time.Time, L int64, unit time.Duration) int {
	t.Helper()
	lim, err := gcra.New(L-1, L, int64(unit/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	var tat int64
	n := 0
	for _, a := range at {
		d, err := lim.Throttle(tat, a.UnixNano(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Limited {
			n++
			continue
		}
		if d.Write {
			tat = d.TAT
		}
	}
	return n
}

// within is the admissions of e in [from, to).
func within(adm []envoyAdmission, from, to time.Time) int {
	n := 0
	for _, a := range adm {
		if !a.at.Before(from) && a.at.Before(to) {
			n++
		}
	}
	return n
}

// gather is every admission of the envoys, and what each admitted in
// [from, to).
func gather(envoys []*fakeEnvoy, from, to time.Time) (all []time.Time, each []float64) {
	for _, e := range envoys {
		adm := e.admissions()
		for _, x := range adm {
			all = append(all, x.at)
		}
		each = append(each, float64(within(adm, from, to)))
	}
	return all, each
}

func jainOf(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s, s2 = s+x, s2+x*x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

const rlqsConfig = `
domain: envoy
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 40}
`

// One global limit across Envoys: four fake Envoys, two on each of two rls
// processes sharing one Redis, each sending 20 a second (twice its fair
// share) on one bucket limited to 40 a second, reporting every second,
// for 8 s. Every admission of every Envoy, replayed through the exact
// GCRA (40 a second, 40 at once), is over it by at most R × (TTL +
// interval) = 40 × (3 + 1); from the third second on the Envoys admit at
// least 95 % of the limit's 40 a second, and each about a quarter
// (Jain's index at least 0.95).
func TestRLQSGlobalLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 s")
	}
	h := newRLQSHarness(t, rlqsConfig)
	a, b := h.serve(QuotaOptions{}), h.serve(QuotaOptions{})
	id := map[string]string{"tenant": "acme"}
	var envoys []*fakeEnvoy
	for i := range 4 {
		envoys = append(envoys, h.envoy([]*rlqsProc{a, b}[i%2], time.Second))
	}
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, e := range envoys {
		drive(&wg, e, id, func() float64 { return 20 }, stop)
	}
	time.Sleep(8 * time.Second)
	close(stop)
	wg.Wait()
	end := time.Now()
	all, late := gather(envoys, start.Add(2*time.Second), end)
	over := excess(t, all, 40, time.Second)
	var sum float64
	for _, x := range late {
		sum += x
	}
	allowance := 40 * end.Sub(start.Add(2*time.Second)).Seconds()
	t.Logf("%d admitted in all, %d over the exact limiter (bound 160); after 2 s each Envoy admitted %v, %.1f%% of %.0f (Jain %.3f)",
		len(all), over, late, 100*sum/allowance, allowance, jainOf(late))
	if over > 160 {
		t.Fatalf("%d admissions over the exact limiter, bound 160", over)
	}
	if sum < 0.95*allowance {
		t.Fatalf("the Envoys admitted %v after 2 s: %.0f of an allowance of %.0f", late, sum, allowance)
	}
	if j := jainOf(late); j < 0.95 {
		t.Fatalf("each Envoy admitted %v after 2 s: Jain's index %.3f", late, j)
	}
	if r := testutil.ToFloat64(a.q.m.streams) + testutil.ToFloat64(b.q.m.streams); r != 4 {
		t.Fatalf("%v streams open", r)
	}
}

// Shares follow demand: three Envoys on a bucket of 30 a second, one at 4
// a second beside two at 30; the small one is served in full (its 4) and
// the others split the rest. At 4 s it steps up to 30 a second: within
// two reporting intervals (1 s each) its share is the others' (10 each):
// from 6.5 s on it admits at least 90 % of what each other admits. At
// 9 s one of the others goes away (its stream closed): from 11 s on the
// two left share the 30 (each at least 13 a second).
func TestRLQSDemandFollows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 13 s")
	}
	h := newRLQSHarness(t, `
domain: envoy
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 30}
`)
	p := h.serve(QuotaOptions{})
	id := map[string]string{"tenant": "acme"}
	small, big1, big2 := h.envoy(p, time.Second), h.envoy(p, time.Second), h.envoy(p, time.Second)
	start := time.Now()
	stop, stopBig2 := make(chan struct{}), make(chan struct{})
	var wg, wg2 sync.WaitGroup
	drive(&wg, small, id, func() float64 {
		if time.Since(start) < 4*time.Second {
			return 4
		}
		return 30
	}, stop)
	drive(&wg, big1, id, func() float64 { return 30 }, stop)
	drive(&wg2, big2, id, func() float64 { return 30 }, stopBig2)
	time.Sleep(9 * time.Second)
	close(stopBig2)
	wg2.Wait()
	big2.Close()
	time.Sleep(4 * time.Second)
	close(stop)
	wg.Wait()
	at := func(d time.Duration) time.Time { return start.Add(d) }
	s, b1, b2 := small.admissions(), big1.admissions(), big2.admissions()
	before := []int{within(s, at(2*time.Second), at(4*time.Second)), within(b1, at(2*time.Second), at(4*time.Second)), within(b2, at(2*time.Second), at(4*time.Second))}
	after := []int{within(s, at(6500*time.Millisecond), at(9*time.Second)), within(b1, at(6500*time.Millisecond), at(9*time.Second)), within(b2, at(6500*time.Millisecond), at(9*time.Second))}
	gone := []int{within(s, at(11*time.Second), at(13*time.Second)), within(b1, at(11*time.Second), at(13*time.Second))}
	t.Logf("2-4 s: %v; 6.5-9 s: %v; 11-13 s: %v", before, after, gone)
	if before[0] < 7 || before[0] > 9 { // its 4 a second, all admitted
		t.Fatalf("the small Envoy admitted %d in 2 s at 4 a second", before[0])
	}
	if float64(after[0]) < 0.9*float64(min(after[1], after[2])) {
		t.Fatalf("2.5 s after its step the small Envoy admitted %d, the others %v", after[0], after[1:])
	}
	if gone[0] < 26 || gone[1] < 26 {
		t.Fatalf("2 s after an Envoy left the two others admitted %v in 2 s (each at least 26)", gone)
	}
	var all []time.Time
	for _, adm := range [][]envoyAdmission{s, b1, b2} {
		for _, x := range adm {
			all = append(all, x.at)
		}
	}
	if over := excess(t, all, 30, time.Second); over > 30*4 {
		t.Fatalf("%d admissions over the exact limiter, bound 120", over)
	}
}

// An Envoy that stops reporting without closing its stream (hung) keeps
// its registration only until its deadline, two intervals and a second
// after its last report: then the others' shares grow.
func TestRLQSHungEnvoy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 9 s")
	}
	h := newRLQSHarness(t, rlqsConfig)
	p := h.serve(QuotaOptions{})
	id := map[string]string{"tenant": "acme"}
	hung, ok := h.envoy(p, time.Second), h.envoy(p, time.Second)
	start := time.Now()
	stop, stopHung := make(chan struct{}), make(chan struct{})
	var wg, wg2 sync.WaitGroup
	drive(&wg, ok, id, func() float64 { return 60 }, stop)
	drive(&wg2, hung, id, func() float64 { return 60 }, stopHung)
	time.Sleep(3 * time.Second)
	close(stopHung)
	wg2.Wait()
	close(hung.stop) // no more reports; the connection stays open
	time.Sleep(6 * time.Second)
	close(stop)
	wg.Wait()
	adm := ok.admissions()
	shared := within(adm, start.Add(1500*time.Millisecond), start.Add(3*time.Second))
	alone := within(adm, start.Add(7*time.Second), start.Add(9*time.Second))
	t.Logf("the Envoy left admitted %d in 1.5 s beside the other, %d in 2 s alone", shared, alone)
	if shared > 40 || alone < 72 { // 20 a second beside it; 40 a second alone (90 %)
		t.Fatalf("admitted %d in 1.5 s shared (at most 40), %d in 2 s alone (at least 72)", shared, alone)
	}
	hung.mu.Lock()
	if hung.conn != nil {
		hung.conn.Close()
	}
	hung.mu.Unlock()
}

// A hostile client: 100,000 bucket ids (a stream tracks at most
// MaxBuckets), counts of 2^64 - 1 and a time_elapsed of a century; an
// empty bucket id; a second domain on the stream. Nothing breaks, memory
// stays bounded, and the stream is refused for the domain change.
func TestRLQSHostile(t *testing.T) {
	h := newRLQSHarness(t, rlqsConfig)
	p := h.serve(QuotaOptions{MaxBuckets: 500})
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	actions := 0
	for batch := range 20 {
		var us []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
		for i := range 5000 {
			us = append(us, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId:    &rlqspb.BucketId{Bucket: map[string]string{"tenant": strconv.Itoa(batch*5000 + i)}},
				TimeElapsed: durationpb.New(100 * 365 * 24 * time.Hour), NumRequestsAllowed: math.MaxUint64, NumRequestsDenied: math.MaxUint64,
			})
		}
		us = append(us, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqspb.BucketId{}})
		if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "envoy", BucketQuotaUsages: us}); err != nil {
			t.Fatal(err)
		}
		if batch == 0 {
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			actions = len(resp.GetBucketAction())
			for _, a := range resp.GetBucketAction() {
				if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
					t.Fatalf("a bucket that reported 2^64 - 1 admitted: %v", a)
				}
			}
		}
	}
	if actions != 500 {
		t.Fatalf("the first report of 5,000 buckets had %d actions; MaxBuckets is 500", actions)
	}
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "other"}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			if s := err.Error(); !strings.Contains(s, "InvalidArgument") || !strings.Contains(s, "one domain") {
				t.Fatalf("a domain change: %v", err)
			}
			break
		}
	}
	if n := testutil.ToFloat64(p.q.m.ignored); n < 19*5000 {
		t.Fatalf("%v bucket reports ignored", n)
	}
	waitUntil(t, "RLQS", func() bool { return testutil.ToFloat64(p.q.m.buckets) == 0 && testutil.ToFloat64(p.q.m.streams) == 0 })
	// The registrations went with the stream.
	waitUntil(t, "RLQS", func() bool {
		n, _ := h.rdb.Exists(context.Background(), registryOf(p.q.key("envoy", descriptorOf(h.cfg, "envoy", map[string]string{"tenant": "7"}), mustRule(h.cfg)))).Result()
		return n == 0
	})
}

func mustRule(cfg *Config) *rule {
	r, _, _ := (&Quotas{}).ruleOf(cfg, "envoy", map[string]string{"tenant": "x"})
	return r
}

// Drain pushes every bucket a TTL of 0: the Envoy's assignment expires at
// once and its fallback decides; a bucket no rule limits is allowed all.
func TestRLQSDrain(t *testing.T) {
	h := newRLQSHarness(t, rlqsConfig)
	p := h.serve(QuotaOptions{})
	e := h.envoy(p, time.Second)
	e.fallback = &typev3.TokenBucket{MaxTokens: 2, TokensPerFill: nil, FillInterval: durationpb.New(time.Hour)}
	limited, free := map[string]string{"tenant": "acme"}, map[string]string{"other": "x"}
	e.Request(limited)
	e.Request(free)
	waitUntil(t, "the assignment", func() bool { k, _ := e.assigned(limited); return k == "tb" })
	if k, _ := e.assigned(free); k != "allow" {
		t.Fatalf("a bucket no rule limits: %q", k)
	}
	p.q.Drain()
	waitUntil(t, "RLQS", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		b := e.buckets[bucketName(limited)]
		return !b.expires.After(time.Now()) && e.actions >= 4
	})
	n := 0
	for range 5 {
		if e.Request(limited) {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("after Drain the fallback (2 tokens) admitted %d of 5", n)
	}
}

// An rls restart: two Envoys at twice their share of 40 a second report
// to one rls process, which dies at 4 s (stopped, no drain); another,
// started then, takes their next reports. The Envoys keep their
// assignments through the gap (until their TTL), the new process counts
// the old streams' registrations as demand until they lapse (smaller
// shares, never larger), and the account in Redis carries over: over the
// 11 s, the admissions are over the exact limiter by at most the bound,
// and from 9 s on the two admit at least 90 % of the limit again.
func TestRLQSRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 11 s")
	}
	h := newRLQSHarness(t, rlqsConfig)
	first := h.serve(QuotaOptions{})
	var mu sync.Mutex
	addr := first.addr
	id := map[string]string{"tenant": "acme"}
	var envoys []*fakeEnvoy
	for range 2 {
		e := newFakeEnvoy(func() (*grpc.ClientConn, error) {
			mu.Lock()
			defer mu.Unlock()
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		}, "envoy", time.Second)
		t.Cleanup(e.Close)
		envoys = append(envoys, e)
	}
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, e := range envoys {
		drive(&wg, e, id, func() float64 { return 40 }, stop)
	}
	time.Sleep(4 * time.Second)
	first.gs.Stop() // dies: its streams break, nothing is pushed
	second := h.serve(QuotaOptions{})
	mu.Lock()
	addr = second.addr
	mu.Unlock()
	time.Sleep(7 * time.Second)
	close(stop)
	wg.Wait()
	end := time.Now()
	all, after := gather(envoys, start.Add(9*time.Second), end)
	over := excess(t, all, 40, time.Second)
	allowance := 40 * end.Sub(start.Add(9*time.Second)).Seconds()
	t.Logf("%d admitted, %d over the exact limiter (bound 160); from 9 s on %v of %.0f; the new process has %v streams",
		len(all), over, after, allowance, testutil.ToFloat64(second.q.m.streams))
	if over > 160 {
		t.Fatalf("%d admissions over the exact limiter, bound 160", over)
	}
	if after[0]+after[1] < 0.9*allowance {
		t.Fatalf("from 9 s on the Envoys admitted %v of %.0f", after, allowance)
	}
	if n := testutil.ToFloat64(second.q.m.streams); n != 2 {
		t.Fatalf("the new process has %v streams", n)
	}
}

// A bucket with no request for AbandonAfter reports in a row is
// abandoned: the Envoy forgets it (abandon_action), the server too, and
// its registration leaves Redis; its next request starts it again.
func TestRLQSAbandon(t *testing.T) {
	h := newRLQSHarness(t, rlqsConfig)
	p := h.serve(QuotaOptions{AbandonAfter: 2})
	e := h.envoy(p, time.Second)
	id := map[string]string{"tenant": "acme"}
	e.Request(id)
	waitUntil(t, "the assignment", func() bool { k, _ := e.assigned(id); return k == "tb" })
	reg := registryOf(p.q.key("envoy", descriptorOf(h.cfg, "envoy", id), mustRule(h.cfg)))
	if n, err := h.rdb.HLen(context.Background(), reg).Result(); err != nil || n != 1 {
		t.Fatalf("the registry holds %d (%v)", n, err)
	}
	waitUntil(t, "the bucket abandoned", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.buckets[bucketName(id)] == nil
	})
	waitUntil(t, "the server's bucket and registration gone", func() bool {
		n, _ := h.rdb.Exists(context.Background(), reg).Result()
		return testutil.ToFloat64(p.q.m.buckets) == 0 && n == 0
	})
	e.Request(id)
	waitUntil(t, "a new assignment", func() bool { k, _ := e.assigned(id); return k == "tb" })
}
