package client

import (
	"strings"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// TestUpTo: UpTo(n) reads the grant the reply ends with, for Take, All,
// AllEach and a Batch's calls, on the shared fake (the module's engine).
func TestUpTo(t *testing.T) {
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_020, 0) // 40 s into a minute
	f.Clock = func() time.Time { return t0 }
	c := New(f.Client())
	l := FixedWindow(10, time.Minute)
	if r, err := c.Take(ctx, "k", l, 7); err != nil || r.Remaining != 3 || r.Granted != 0 {
		t.Fatalf("7 of 10: %+v %v", r, err)
	}
	if r, err := c.Take(ctx, "k", l, 2, UpTo(5)); err != nil || r.Limited || r.Granted != 1 || r.Remaining != 1 {
		t.Fatalf("cost 2 up to 5 with 3 left: %+v %v, want 1 granted, 1 remaining", r, err)
	}
	if r, err := c.Take(ctx, "k", l, 2, UpTo(5)); err != nil || !r.Limited || r.Granted != 0 || r.RetryAfter != 20*time.Second {
		t.Fatalf("cost 2 up to 5 with 1 left: %+v %v, want refused for 20 s", r, err)
	}
	limits := []Keyed{{Key: "a", Limit: GCRA(9, 10, time.Minute), Cost: 1}, {Key: "b", Limit: FixedWindow(4, time.Minute), Cost: 1}}
	if r, err := c.All(ctx, limits, UpTo(100), Reserve(1)); err != nil || r.Granted != 3 || r.Policy != 1 || r.Remaining != 1 {
		t.Fatalf("All up to 100, reserve 1: %+v %v, want 3 granted by the window", r, err)
	}
	each := make([]Result, 2)
	if r, err := c.AllEach(ctx, limits, each, UpTo(100)); err != nil || r.Granted != 1 || each[0].Remaining != 6 || each[1].Remaining != 0 {
		t.Fatalf("AllEach up to 100: %+v %+v %v, want 1 granted", r, each, err)
	}
	b := c.Batch()
	take := b.Take("g", GCRA(4, 5, time.Minute), 1, UpTo(3))
	plain := b.Take("h", GCRA(4, 5, time.Minute), 1)
	if err := b.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := take.Result(); err != nil || r.Granted != 3 || r.Remaining != 2 {
		t.Errorf("a batch's UpTo: %+v %v", r, err)
	}
	if r, err := plain.Result(); err != nil || r.Granted != 0 || r.Remaining != 4 {
		t.Errorf("a batch's plain Take: %+v %v", r, err)
	}
	if _, err := c.Peek(ctx, "k", l, 1, UpTo(2)); err == nil {
		t.Error("Peek with UpTo: no error")
	}
	if r, err := c.Take(ctx, "k2", l, 1, UpTo(0)); err == nil {
		t.Errorf("UpTo(0): %+v, want the server's error, not a call without UPTO", r)
	}
}

// Several concurrency slots under one id: Acquire with UpTo, ReleaseN,
// Release of all, and a batch's Release of several, on the engine through
// fakeredis.
func TestAcquireSlots(t *testing.T) {
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_000, 0)
	f.Clock = func() time.Time { return t0 }
	c := New(f.Client())
	l := Concurrency{Limit: 10, Lease: 30 * time.Second}
	for i, id := range []string{"x", "y", "z", "w", "v", "u"} {
		if r, err := c.Acquire(ctx, "k", l, id); err != nil || r.Remaining != int64(9-i) {
			t.Fatalf("acquire %s: %+v %v", id, r, err)
		}
	}
	r, err := c.Acquire(ctx, "k", l, "w1", UpTo(5))
	if err != nil || r.Limited || r.Granted != 4 || r.Remaining != 0 {
		t.Fatalf("up to 5 with 4 free: %+v %v, want 4 granted", r, err)
	}
	if r, err := c.Acquire(ctx, "k", l, "w2", UpTo(5)); err != nil || !r.Limited || r.Granted != 0 || r.RetryAfter != 30*time.Second {
		t.Fatalf("up to 5 with none free: %+v %v, want refused for 30 s", r, err)
	}
	if n, err := c.ReleaseN(ctx, "k", "w1", 3); err != nil || n != 3 {
		t.Fatalf("ReleaseN 3 of 4: %d %v", n, err)
	}
	t0 = t0.Add(10 * time.Second)
	if r, err := c.Acquire(ctx, "k", l, "w1", UpTo(2)); err != nil || r.Granted != 2 || r.Remaining != 2 {
		t.Fatalf("w1 holding 1 asks up to 2: %+v %v, want 2 held, 2 free", r, err)
	}
	// Its two slots share the renewed lease: 20 s after x's lapse, w1 holds them.
	t0 = t0.Add(25 * time.Second)
	if r, err := c.Acquire(ctx, "k", l, "n", UpTo(10)); err != nil || r.Granted != 8 || r.Remaining != 0 {
		t.Fatalf("after the first six lapse: %+v %v, want 8 granted", r, err)
	}
	b := c.Batch()
	all := b.Release("k", "n")
	if err := b.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := all.Released(); err != nil || !held {
		t.Fatalf("a batch's Release of 8 slots: %v %v", held, err)
	}
	if held, err := c.Release(ctx, "k", "w1"); err != nil || !held {
		t.Fatalf("Release of w1's 2: %v %v", held, err)
	}
	if n, err := c.ReleaseN(ctx, "k", "w1", 1); err != nil || n != 0 {
		t.Fatalf("ReleaseN after all were released: %d %v", n, err)
	}
	if _, err := c.ReleaseN(ctx, "k", "w1", 0); err == nil || !strings.Contains(err.Error(), "n must be an integer from 1 to 1000000") {
		t.Fatalf("ReleaseN 0: %v", err)
	}
}
