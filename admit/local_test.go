package admit

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

func TestLocalLimiter(t *testing.T) {
	ll := newLocal(2)
	l := client.FixedWindow(3, time.Minute)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixNano()
	var codes []bool
	for range 5 {
		rate := []*Want{{Key: "a", Limit: l, Cost: 1}}
		ll.decide(rate, now)
		codes = append(codes, rate[0].Result.Limited)
	}
	if fmt.Sprint(codes) != "[false false false true true]" {
		t.Fatalf("3 per minute locally: limited %v", codes)
	}
	// The bound, 2 keys, evicts the key used longest ago: "a", used on
	// every request, stays through a stream of new keys, its count intact.
	for _, k := range []string{"b", "c", "d"} {
		ll.decide([]*Want{{Key: "a", Limit: l, Cost: 0}}, now)
		ll.decide([]*Want{{Key: k, Limit: l, Cost: 1}}, now)
	}
	if ll.keys() != 2 {
		t.Fatalf("%d keys kept, bound 2", ll.keys())
	}
	rate := []*Want{{Key: "a", Limit: l, Cost: 1}}
	if ll.decide(rate, now); !rate[0].Result.Limited {
		t.Fatalf("the heavy user's key was evicted: admitted again %+v", rate[0].Result)
	}
}

// BenchmarkLocalFlood is Local under a flood of distinct keys (one
// per request, as from spoofed addresses) into a full table of the default
// 10000 keys: each new key evicts the least recently used in constant
// time. It reports the table's keys and the heap it holds after 1,000,000.
func BenchmarkLocalFlood(b *testing.B) {
	l := client.FixedWindow(10, time.Minute)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixNano()
	keys := make([]string, 1_000_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("rl:http:{198.%d.%d.%d}:p", i>>16, i>>8&255, i&255)
	}
	b.ReportAllocs()
	var ll *localLimiter
	var before runtime.MemStats
	for b.Loop() {
		ll = nil
		runtime.GC()
		runtime.ReadMemStats(&before)
		ll = newLocal(10000)
		for _, k := range keys {
			ll.decide([]*Want{{Key: k, Limit: l, Cost: 1}}, now)
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
	b.ReportMetric(float64(ll.keys()), "keys-kept")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "MiB-held")
	runtime.KeepAlive(ll)
	runtime.KeepAlive(keys)
}

// takeOnly is a Redis whose Take is take (the rest unused).
type takeOnly struct {
	Redis
	take func(key string, cost int64) error
}

func (d takeOnly) Take(_ context.Context, key string, _ client.Limit, cost int64, _ ...client.Option) (client.Result, error) {
	return client.Result{}, d.take(key, cost)
}

// A key decided here long ago owes nothing; decided here again while the
// settle charges another key, it keeps its local GCRA as that decision
// left it: the settle takes off only what it charged (it moved the key an
// hour ahead, a whole quota owed, refused here at the next outage).
func TestFailLocalSettleKeepsLaterDecisions(t *testing.T) {
	ll := newLocal(10)
	l := client.PerMinute(10)
	now := time.Now().UnixNano()
	w := int64(time.Minute)
	ll.tats.Add("b", localKey{tat: now + w/10, limit: l, q: 10, w: w})             // owes 1
	ll.tats.Add("a", localKey{tat: now - int64(time.Hour), limit: l, q: 10, w: w}) // owes nothing
	var charged []string
	d := takeOnly{take: func(key string, cost int64) error {
		charged = append(charged, fmt.Sprint(key, ":", cost))
		if key == "b" { // "a" is decided here meanwhile
			ll.decide([]*Want{{Key: "a", Limit: l, Cost: 1}}, time.Now().UnixNano())
		}
		return nil
	}}
	if _, _, err := ll.settle(d, time.Second); err != nil {
		t.Fatal(err)
	}
	k, ok := ll.tats.Peek("a")
	if !ok || k.tat > time.Now().UnixNano()+w/10+int64(time.Second) {
		t.Fatalf("after the settle: %q's local GCRA %v ahead, want one unit's 6 s at most (charged %v)", "a", time.Duration(k.tat-time.Now().UnixNano()), charged)
	}
	if fmt.Sprint(charged) != "[b:1]" {
		t.Fatalf("charged %v, want b's one unit", charged)
	}
}

// Local's concurrency slots: one per key held, given back by release.
func TestLocalSlots(t *testing.T) {
	var ls localSlots
	if !ls.acquire("x", 1) || ls.acquire("x", 1) {
		t.Fatal("one slot")
	}
	ls.release("x")
	if !ls.acquire("x", 1) {
		t.Fatal("a released slot")
	}
}
