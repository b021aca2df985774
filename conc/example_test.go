package conc_test

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/seed-6b3823f5/ratelimit/conc"
)

// leases is a key's leases in memory: id → when it lapses (Unix ns).
type leases map[string]int64

func (s leases) Count(after int64) int64 {
	var n int64
	for _, end := range s {
		if end > after {
			n++
		}
	}
	return n
}

func (s leases) Nth(after, k int64) int64 {
	var ends []int64
	for _, end := range s {
		if end > after {
			ends = append(ends, end)
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
	if k < 1 || k > int64(len(ends)) {
		return math.MinInt64
	}
	return ends[k-1]
}

func (s leases) holder(id string) conc.Holder {
	var h conc.Holder
	for other, end := range s {
		if other == id {
			h.Own = end
		} else {
			h.Latest = max(h.Latest, end)
		}
	}
	return h
}

// Two report exports at once, each lease 30 s: a third is refused until the
// first lease lapses or a holder releases.
func ExampleLimiter_Acquire() {
	l, _ := conc.New(2)
	s := leases{}
	start := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixNano()
	for i, id := range []string{"req-1", "req-2", "req-3"} {
		now := start + int64(i)*int64(time.Second)
		d, _ := l.Acquire(s, s.holder(id), now, 30*time.Second, 0)
		if !d.Limited {
			s[id] = d.End
		}
		fmt.Println(id, "admitted:", !d.Limited, "remaining:", d.Remaining, "retry after:", d.RetryAfter)
	}
	// req-1 finishes and releases: its slot is free at once.
	now := start + int64(3*time.Second)
	r := conc.Free(s.holder("req-1"), now)
	delete(s, "req-1")
	d, _ := l.Acquire(s, s.holder("req-3"), now, 30*time.Second, 0)
	fmt.Println("req-1 released:", r.Held, "then req-3 admitted:", !d.Limited)
	// Output:
	// req-1 admitted: true remaining: 1 retry after: -1ns
	// req-2 admitted: true remaining: 0 retry after: -1ns
	// req-3 admitted: false remaining: 0 retry after: 28s
	// req-1 released: true then req-3 admitted: true
}

// A worker asks for up to 5 slots under its own id on a limit of 8 that
// others hold 5 of: it gets 3, gives 2 back when its queue drains, and its
// remaining slot is renewed with its next acquire.
func ExampleLimiter_AcquireN() {
	l, _ := conc.New(8)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixNano()
	others := leases{"a": now + 9e9, "b": now + 9e9, "c": now + 9e9, "d": now + 9e9, "e": now + 9e9}
	d, _ := l.AcquireN(others, conc.Holder{Latest: now + 9e9}, now, 30*time.Second, 0, 5)
	fmt.Println("granted:", d.Granted, "remaining:", d.Remaining)
	r := conc.FreeN(conc.Holder{Own: d.End, Slots: d.Granted, Latest: now + 9e9}, now, 2)
	fmt.Println("released:", r.Released, "kept:", r.Keep)
	// Output:
	// granted: 3 remaining: 0
	// released: 2 kept: 1
}
