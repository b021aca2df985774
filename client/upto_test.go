package client

import (
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
