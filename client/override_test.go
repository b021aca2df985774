package client

import (
	"strings"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// TestOverride: a limit with an Override decides with the parameters its
// hash holds once SetLimit wrote them, on every call that carries it (Take,
// Peek, All, Hold, Settle, a batch), with its own before and after
// ClearLimit; GetLimit reads them back.
func TestOverride(t *testing.T) {
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_000, 0)
	f.Clock = func() time.Time { return t0 }
	c := New(f.Client())
	fw := FixedWindow(10, time.Minute).Override("{acme}:plan", "api")
	if k, field, ok := fw.Overridden(); !ok || k != "{acme}:plan" || field != "api" {
		t.Fatalf("Overridden() = %q %q %v", k, field, ok)
	}
	if r, err := c.Take(ctx, "{acme}:a", fw, 1); err != nil || r.Limit != 10 || r.Remaining != 9 {
		t.Fatalf("without the field: %+v %v, want the call's limit 10", r, err)
	}
	if _, ok, err := c.GetLimit(ctx, "{acme}:plan", "api", fw); ok || err != nil {
		t.Fatalf("GetLimit before SetLimit: %v %v", ok, err)
	}
	if err := c.SetLimit(ctx, "{acme}:plan", "api", FixedWindow(3, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := c.GetLimit(ctx, "{acme}:plan", "api", fw); !ok || err != nil || got.n != 3 || got.period != time.Minute {
		t.Fatalf("GetLimit: %v %v %v", got, ok, err)
	}
	// The key counted 1 under 10; under 3 it has 2 left.
	if r, err := c.Take(ctx, "{acme}:a", fw, 1); err != nil || r.Limit != 3 || r.Remaining != 1 {
		t.Fatalf("overridden: %+v %v, want limit 3, 1 left", r, err)
	}
	if r, err := c.Peek(ctx, "{acme}:a", fw, 1); err != nil || r.Limit != 3 || r.Remaining != 0 {
		t.Fatalf("peek: %+v %v", r, err)
	}
	r, err := c.All(ctx, []Keyed{{Key: "{acme}:a", Limit: fw, Cost: 1}, {Key: "{acme}:b", Limit: PerMinute(100), Cost: 1}})
	if err != nil || r.Limited || r.Limit != 3 || r.Remaining != 0 {
		t.Fatalf("All: %+v %v, want the overridden limit deciding with none left", r, err)
	}
	if r, err := c.Take(ctx, "{acme}:a", fw, 1); err != nil || !r.Limited {
		t.Fatalf("past the override: %+v %v, want refused", r, err)
	}
	if r, err := c.Hold(ctx, "{acme}:h", "r1", fw, 2, time.Minute); err != nil || r.Limit != 3 || r.Remaining != 1 {
		t.Fatalf("Hold: %+v %v", r, err)
	}
	if r, held, err := c.Settle(ctx, "{acme}:h", "r1", fw, 3); err != nil || held != 2 || r.Remaining != 0 {
		t.Fatalf("Settle: %+v %d %v", r, held, err)
	}
	b := c.Batch()
	take := b.Take("{acme}:c", fw, 3)
	if err := b.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := take.Result(); err != nil || r.Limit != 3 || r.Remaining != 0 {
		t.Fatalf("batch: %+v %v", r, err)
	}
	if err := c.ClearLimit(ctx, "{acme}:plan", "api"); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Take(ctx, "{acme}:a", fw, 1); err != nil || r.Limit != 10 || r.Remaining != 6 {
		t.Fatalf("after ClearLimit: %+v %v, want the call's 10 with 3 counted", r, err)
	}
	// A field that holds another family's parameters fails the call.
	if err := c.SetLimit(ctx, "{acme}:plan", "api", PerMinute(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Take(ctx, "{acme}:a", fw, 1); err == nil || !strings.Contains(err.Error(), `LIMITS "{acme}:plan" field "api" must hold 2 integers`) {
		t.Fatalf("a GCRA's parameters for a window: %v", err)
	}
	if _, _, err := c.GetLimit(ctx, "{acme}:plan", "api", fw); err == nil {
		t.Fatal("GetLimit read a GCRA's parameters as a window's")
	}
	if got, ok, err := c.GetLimit(ctx, "{acme}:plan", "api", PerSecond(1)); !ok || err != nil || got.String() != "GCRA(burst 4, rate 5, period 1m0s)" {
		t.Fatalf("GetLimit as a GCRA: %v %v %v", got, ok, err)
	}
}
