package refusals

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// heap is the bytes the heap and the goroutines' stacks hold after a
// collection.
func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

const mib = 1 << 20

// TestRefusals: a remembered refusal answers requests of at least its
// cost until it ends, and nothing after; a smaller request goes to Redis.
func TestRefusals(t *testing.T) {
	r := New(2, 0)
	t0 := time.Unix(1000, 0)
	r.Add("k", 3, t0.Add(time.Second))
	var until time.Time
	for _, tc := range []struct {
		cost int64
		at   time.Duration
		want bool
	}{
		{3, 0, true},
		{5, 999 * time.Millisecond, true},
		{2, 0, false}, // a smaller request may pass sooner
		{3, time.Second, false},
		{3, 0, false}, // forgotten once it ended
	} {
		if got := r.Refuses("k", tc.cost, t0.Add(tc.at), &until); got != tc.want {
			t.Errorf("cost %d at +%v: %v, want %v", tc.cost, tc.at, got, tc.want)
		}
	}
	r.Add("a", 1, t0.Add(time.Hour))
	r.Add("b", 1, t0.Add(time.Hour))
	r.Add("c", 1, t0.Add(time.Hour)) // the oldest, a, goes
	if r.Refuses("a", 1, t0, &until) || !r.Refuses("c", 1, t0, &until) || !until.Equal(t0.Add(time.Hour)) {
		t.Fatal("the LRU bound")
	}
	r.Forget("c") // units given back to c
	if r.Refuses("c", 1, t0, &until) || !r.Refuses("b", 1, t0, &until) {
		t.Fatal("Forget: c forgotten, b kept")
	}
	if _, bytes := r.Size(); bytes != Cost("b") {
		t.Fatalf("after Forget: %d bytes counted, want b's %d", bytes, Cost("b"))
	}
	r.Purge()
	if r.Refuses("b", 1, t0, &until) {
		t.Fatal("purged, yet remembered")
	}
}

// TestRefusalBytes: 20,000 refused keys of 16 KiB stay within the bytes
// bound (16 MiB by default), the least recently used leaving first; and
// an entry costs no more than the EntryBytes it is counted for.
func TestRefusalBytes(t *testing.T) {
	until := time.Unix(2000, 0)
	before := heap()
	r := New(1<<20, 0)
	big := strings.Repeat("k", 16<<10)
	for i := range 20000 {
		r.Add(fmt.Sprintf("%08d%s", i, big), 1, until)
	}
	grown := heap() - before
	entries, bytes := r.Size()
	t.Logf("20,000 keys of 16 KiB: %d kept, %d bytes counted, heap and stacks +%.1f MiB after GC", entries, bytes, float64(grown)/mib)
	if bytes > DefaultBytes || grown > DefaultBytes+4*mib {
		t.Fatalf("%d bytes counted, heap +%d MiB: past the %d MiB bound", bytes, grown/mib, DefaultBytes/mib)
	}
	var at time.Time
	if r.Refuses(fmt.Sprintf("%08d%s", 0, big), 1, time.Unix(1000, 0), &at) || !r.Refuses(fmt.Sprintf("%08d%s", 19999, big), 1, time.Unix(1000, 0), &at) {
		t.Fatal("not the least recently used that left")
	}
	if entries != int(DefaultBytes/Cost(fmt.Sprintf("%08d%s", 0, big))) {
		t.Fatalf("%d entries kept", entries)
	}
	r.Purge()
	if entries, bytes := r.Size(); entries != 0 || bytes != 0 {
		t.Fatalf("purged: %d entries, %d bytes", entries, bytes)
	}

	// A key larger than the whole bound is not kept; an expired one
	// leaves and gives its bytes back.
	small := New(100, 1000)
	small.Add(strings.Repeat("x", 1000), 1, until)
	small.Add("a", 1, until)
	if n, b := small.Size(); n != 1 || b != Cost("a") {
		t.Fatalf("%d entries, %d bytes", n, b)
	}
	small.Refuses("a", 1, until, &at)
	if n, b := small.Size(); n != 0 || b != 0 {
		t.Fatalf("expired: %d entries, %d bytes", n, b)
	}

	// What an entry of a short key really costs.
	const n = 100000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("rl:%012d", i) // 15 bytes, a 16-byte allocation
	}
	before = heap()
	m := New(n, 1<<40)
	for _, k := range keys {
		m.Add(k, 1, until)
	}
	per := float64(heap()-before) / n
	runtime.KeepAlive(m)
	t.Logf("an entry costs %.0f bytes beside its key", per)
	if per > EntryBytes {
		t.Fatalf("an entry costs %.0f bytes, counted as %d", per, EntryBytes)
	}
}
