package rls

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed-6b3823f5/ratelimit/admit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// aonConfig: every algorithm at 3 a day, and two limits of 1 a day that
// refuse a second request (a window and a GCRA).
const aonConfig = `
domain: d
descriptors:
  - key: fw
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: sw
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: sliding_window}
  - key: sl
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: sliding_log}
  - key: gcra
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: gcra}
  - key: tb
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: token_bucket}
  - key: tight
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: tightg
    rate_limit: {unit: day, requests_per_unit: 1, algorithm: gcra}
  - key: big
    rate_limit: {unit: day, requests_per_unit: 50}
`

// many is n descriptors of key, values distinct within a test.
func many(key, tag string, n int) []*rlv3.RateLimitDescriptor {
	var ds []*rlv3.RateLimitDescriptor
	for i := range n {
		ds = append(ds, descriptor(key, fmt.Sprintf("%s-%d", tag, i)))
	}
	return ds
}

func ask(t testing.TB, s *Service, ds []*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestAllOrNothingAnyNumber: on a single node, a request of any number of
// limits is counted whole or not at all: a refusal by its last limit
// leaves every other uncounted, whether they can be given back (GCRA,
// token buckets, refunded) or not (windows: more than 16 of them are
// decided in one optimistic transaction). Unfixed, 17 windows with the
// last refused left the other 16 counted. With the module, and with the
// Lua engine (its scripts in the transaction).
func TestAllOrNothingAnyNumber(t *testing.T) {
	type tc struct {
		name  string
		limit []*rlv3.RateLimitDescriptor // 3 a day each
		tight *rlv3.RateLimitDescriptor   // 1 a day, last
	}
	cases := func(tag string) []tc {
		var mixed, mixedWindows, refundable []*rlv3.RateLimitDescriptor
		for _, k := range []string{"fw", "sw", "sl"} {
			mixedWindows = append(mixedWindows, many(k, tag, 12)...)
		}
		mixedWindows = append(mixedWindows, many("gcra", tag+"m", 5)...)
		mixed = append(append(many("gcra", tag, 10), many("tb", tag, 10)...), many("fw", tag+"x", 10)...)
		refundable = append(many("gcra", tag+"r", 16), many("tb", tag+"r", 14)...)
		return []tc{
			{"16 windows and a 17th refusing", many("fw", tag+"17", 16), descriptor("tight", tag+"17")},
			{"41 windows of three kinds and 5 GCRA", mixedWindows, descriptor("tight", tag+"41")},
			{"20 refundable and 11 windows", mixed, descriptor("tight", tag+"31")},
			{"31 refundable", refundable, descriptor("tightg", tag+"31")},
			{"16 windows, the refusing one first", many("fw", tag+"f", 16), descriptor("tight", tag+"f")},
		}
	}
	engines := []struct {
		name   string
		module bool
		engine client.Engine
	}{{"module", true, client.Auto}, {"lua", false, client.Auto}, {"scripts", false, client.Scripts}}
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			rdb := redisServer(t, e.module)
			s := online(t, rdb, aonConfig, Options{Engine: e.engine})
			for _, c := range cases(e.name) {
				all := append(slices.Clone(c.limit), c.tight)
				if strings.HasSuffix(c.name, "first") {
					all = append([]*rlv3.RateLimitDescriptor{c.tight}, c.limit...)
				}
				allOrNothing(t, s, c.name, all, c.limit)
			}
		})
	}
}

// allOrNothing asks for all (limit and a tight limit of 1) twice, then
// for limit (limits of 3) alone: the first is OK; the second OVER_LIMIT,
// refused by a limit of 1 only; and the refused request took nothing, so
// each of limit has counted two requests, the first and the last, and
// has 1 remaining.
func allOrNothing(t *testing.T, s *Service, name string, all, limit []*rlv3.RateLimitDescriptor) {
	t.Helper()
	if r := ask(t, s, all); r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("%s: the first request %v", name, brief(r))
	}
	r := ask(t, s, all)
	if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("%s: the second request %v", name, brief(r))
	}
	for _, st := range r.Statuses {
		if st.Code == pb.RateLimitResponse_OVER_LIMIT && st.CurrentLimit.RequestsPerUnit != 1 {
			t.Fatalf("%s: a limit of 3 refused: %v", name, brief(r))
		}
	}
	r = ask(t, s, limit)
	for i, st := range r.Statuses {
		if st.Code != pb.RateLimitResponse_OK || st.LimitRemaining != 1 {
			t.Fatalf("%s: descriptor %d after a refused request: %v (want remaining 1: the refusal was counted)", name, i, brief(r))
		}
	}
}

// brief is a response in one line: the overall code and each status's
// code and remaining.
func brief(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, s := range r.Statuses {
		fmt.Fprintf(&b, " %s/%d", s.Code, s.LimitRemaining)
	}
	return b.String()
}

// TestAllOrNothingConcurrent: 8 callers at once send 6 requests each of
// the same 20 window limits of 50 a day (one transaction each), twice:
// each limit ends with the same count, the number of requests admitted
// (48 at most the first time, when none can be refused; 50 the second,
// when the limit refuses the rest). A request counted in part would leave
// a count apart from the others.
func TestAllOrNothingConcurrent(t *testing.T) {
	rdb := redisServer(t, true)
	s := online(t, rdb, aonConfig, Options{})
	ds := many("big", "c", 20)
	check := make([]*rlv3.RateLimitDescriptor, len(ds))
	for i, d := range ds {
		check[i] = descriptor(d.Entries[0].Key, d.Entries[0].Value)
		check[i].HitsAddend = wrapperspb.UInt64(0)
	}
	var admitted, refused, failed atomic.Int64
	for round := range 2 {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 6 {
					resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds})
					switch {
					case err != nil:
						failed.Add(1)
					case resp.OverallCode == pb.RateLimitResponse_OK:
						admitted.Add(1)
					default:
						refused.Add(1)
					}
				}
			})
		}
		wg.Wait()
		r := ask(t, s, check)
		t.Logf("round %d: %d admitted, %d refused, %d failed (the keys kept changing); remaining %s", round+1, admitted.Load(), refused.Load(), failed.Load(), brief(r))
		for i, st := range r.Statuses {
			if int64(50-st.LimitRemaining) != admitted.Load() {
				t.Fatalf("limit %d counted %d, but %d requests were admitted: %s", i, 50-st.LimitRemaining, admitted.Load(), brief(r))
			}
		}
		if admitted.Load() > 50 || admitted.Load() == 0 || round == 0 && refused.Load() > 0 {
			t.Fatalf("%d admitted and %d refused of a limit of 50", admitted.Load(), refused.Load())
		}
	}
}

// TestDurationUntilReset: as the peer fills it, the end of the unit's
// window where the limit says nothing else: a check (hits_addend 0) of an
// empty fixed window, and a hit above the whole limit, whatever the
// algorithm. Unfixed, both were 0.
func TestDurationUntilReset(t *testing.T) {
	rdb := redisServer(t, true)
	s := online(t, rdb, `
domain: d
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: gcra
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: gcra}
  - key: sl
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_log}
`, Options{})
	for _, c := range []struct {
		key     string
		hits    uint64
		refused bool
	}{{"fw", 0, false}, {"fw", 11, true}, {"gcra", 11, true}, {"sl", 11, true}} {
		d := descriptor(c.key, fmt.Sprint("empty-", c.hits))
		d.HitsAddend = wrapperspb.UInt64(c.hits)
		before := time.Now().Unix()
		r := ask(t, s, []*rlv3.RateLimitDescriptor{d})
		after := time.Now().Unix()
		st := r.Statuses[0]
		got := st.DurationUntilReset.AsDuration()
		if (st.Code == pb.RateLimitResponse_OVER_LIMIT) != c.refused {
			t.Fatalf("%s hits %d: %v", c.key, c.hits, brief(r))
		}
		// The minute's end in whole seconds, rounded up, seen from some
		// second of the call.
		var want []time.Duration
		for s := before; s <= after; s++ {
			want = append(want, time.Duration(60-s%60)*time.Second)
		}
		if !slices.Contains(want, got) {
			t.Errorf("%s hits %d: duration_until_reset %v, want the minute's end, one of %v", c.key, c.hits, got, want)
		}
	}
}

// TestWatchedRetries: a transaction whose keys change between its peeks
// and EXEC (another client counts one on the first key) commits nothing
// and is tried again; one whose keys change at every attempt fails after
// 8 attempts, having counted nothing.
func TestWatchedRetries(t *testing.T) {
	rdb := redisServer(t, true)
	s := online(t, rdb, aonConfig, Options{})
	var hits atomic.Int64
	spoil := func(times int64) {
		rdb.AddHook(hook{before: func(ctx context.Context, cmds []redis.Cmder) {
			if len(cmds) > 0 && cmds[0].Name() == "multi" && hits.Add(1) <= times {
				// Another client writes a watched key before EXEC.
				other := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
				defer other.Close()
				other.Do(ctx, "FW.HIT", cmds[1].Args()[2], 1000, 86400, 1)
			}
		}})
	}
	spoil(2)
	ds := many("big", "w", 17)
	if r := ask(t, s, ds); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 47 || r.Statuses[1].LimitRemaining != 49 {
		t.Fatalf("after two spoiled attempts: %s (want 47 on the spoiled key, 49 on the others)", brief(r))
	}
	if hits.Load() != 3 {
		t.Fatalf("%d attempts, want 3", hits.Load())
	}
	hits.Store(-1 << 40) // every attempt spoiled from now on
	if _, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds}); err == nil || !strings.Contains(err.Error(), admit.ErrContended.Error()) {
		t.Fatalf("spoiled at every attempt: %v", err)
	}
	hits.Store(1 << 40) // none
	check := make([]*rlv3.RateLimitDescriptor, len(ds))
	for i, d := range ds {
		check[i] = descriptor(d.Entries[0].Key, d.Entries[0].Value)
		check[i].HitsAddend = wrapperspb.UInt64(0)
	}
	for i, st := range ask(t, s, check).Statuses {
		want := uint32(49)
		if i == 0 {
			want = 47 - 8 // the other client's hits, one per attempt (8)
		}
		if st.LimitRemaining != want {
			t.Fatalf("limit %d: remaining %d, want %d", i, st.LimitRemaining, want)
		}
	}
}

// hook runs before on every transaction go-redis sends.
type hook struct {
	before func(ctx context.Context, cmds []redis.Cmder)
}

func (hook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.before(ctx, cmds)
		return next(ctx, cmds)
	}
}

// TestAllOrNothingCluster: on Redis Cluster, limits whose keys share a slot
// (a prefix with a hash tag puts them all in one) are all or nothing
// whatever their number, as on a single node: the transaction runs on the
// slot's node.
func TestAllOrNothingCluster(t *testing.T) {
	cc := redisCluster(t)
	s := online(t, cc, aonConfig, Options{Prefix: "{rls}:"})
	for _, c := range []struct {
		name  string
		limit []*rlv3.RateLimitDescriptor
		tight *rlv3.RateLimitDescriptor
	}{
		{"16 windows and a 17th refusing", many("fw", "c17", 16), descriptor("tight", "c17")},
		{"20 refundable and 10 windows", append(append(many("gcra", "c", 10), many("tb", "c", 10)...), many("sl", "c", 10)...), descriptor("tight", "c31")},
	} {
		allOrNothing(t, s, c.name, append(slices.Clone(c.limit), c.tight), c.limit)
	}
}
