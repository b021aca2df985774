package client

import (
	"strings"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// TestSpread: a spread window's calls carry SPREAD wherever the limit goes
// (Take, Peek, All, Hold, a batch), so each key's windows end at its own
// offset: "user:42" at hh:mm:55.114, "user:43" at hh:mm:30.535, where an
// unspread minute ends at hh:(mm+1):00; t0 is 20 s into a minute.
func TestSpread(t *testing.T) {
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_000, 0)
	f.Clock = func() time.Time { return t0 }
	c := New(f.Client())
	fw := FixedWindow(10, time.Minute)
	if r, err := c.Take(ctx, "plain", fw, 1); err != nil || r.ResetAfter != 40*time.Second {
		t.Fatalf("unspread: %+v %v, want the minute's end 40 s on", r, err)
	}
	if r, err := c.Take(ctx, "user:42", fw.Spread(), 1); err != nil || r.ResetAfter != 35114*time.Millisecond {
		t.Fatalf("spread: %+v %v, want its minute's end 35.114 s on", r, err)
	}
	if r, err := c.Peek(ctx, "user:42", fw.Spread(), 0); err != nil || r.Remaining != 9 || r.ResetAfter != 35114*time.Millisecond {
		t.Fatalf("peek: %+v %v", r, err)
	}
	r, err := c.All(ctx, []Keyed{{Key: "{u}:a", Limit: fw.Spread(), Cost: 1}, {Key: "{u}:b", Limit: SlidingWindow(5, 10*time.Second).Spread(), Cost: 1}})
	if err != nil || r.Limited || r.Policy != 1 {
		t.Fatalf("All: %+v %v", r, err)
	}
	if r, err := c.Hold(ctx, "user:43", "r1", fw.Spread(), 4, time.Minute); err != nil || r.Remaining != 6 || r.ResetAfter != 10535*time.Millisecond {
		t.Fatalf("Hold: %+v %v, want the minute of user:43 to end 10.535 s on", r, err)
	}
	if r, held, err := c.Settle(ctx, "user:43", "r1", fw.Spread(), 1); err != nil || held != 4 || r.Remaining != 9 {
		t.Fatalf("Settle: %+v %d %v", r, held, err)
	}
	b := c.Batch()
	take := b.Take("user:42", fw.Spread(), 1)
	if err := b.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := take.Result(); err != nil || r.Remaining != 8 || r.ResetAfter != 35114*time.Millisecond {
		t.Fatalf("batch: %+v %v", r, err)
	}
	if _, err := c.Take(ctx, "g", PerMinute(10).Spread(), 1); err == nil || !strings.Contains(err.Error(), "only a FixedWindow or a SlidingWindow spreads") {
		t.Fatalf("a GCRA spread: %v, want refused before the call", err)
	}
	if got := fw.Spread().String(); got != "FW(limit 10, window 1m0s, spread)" {
		t.Errorf("String() = %q", got)
	}
}
