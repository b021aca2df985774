package client

import (
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// TestDebt: Debt() charges the whole cost past the limit (the module's
// DEBT), on the shared fake (the module's engine). (A decision's Debt
// wants: admit's TestDecideDebt.)
func TestDebt(t *testing.T) {
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_020, 0) // 40 s into a minute
	var at time.Duration
	f.Clock = func() time.Time { return t0.Add(at) }
	c := New(f.Client())
	tokens := TokenBucket(1000, 1000, time.Minute) // one token every 60 ms
	if r, err := c.Take(ctx, "tpm", tokens, 900, Debt()); err != nil || r.Limited || r.Remaining != 100 {
		t.Fatalf("900 of 1000: %+v %v", r, err)
	}
	if r, err := c.Take(ctx, "tpm", tokens, 300); err != nil || !r.Limited || r.Remaining != 100 {
		t.Fatalf("300 without Debt: %+v %v, want refused, nothing taken", r, err)
	}
	r, err := c.Take(ctx, "tpm", tokens, 300, Debt())
	if err != nil || !r.Limited || r.Remaining != 0 || r.RetryAfter != 12060*time.Millisecond || r.ResetAfter != 72*time.Second {
		t.Fatalf("300 with Debt: %+v %v, want taken 200 into debt: one token after 12.06 s", r, err)
	}
	if r, err := c.Take(ctx, "tpm", tokens, 0); err != nil || !r.Limited || r.RetryAfter != 12*time.Second {
		t.Fatalf("a check of cost 0 in debt: %+v %v, want refused for 12 s", r, err)
	}
	at = 12 * time.Second
	if r, err := c.Take(ctx, "tpm", tokens, 0); err != nil || r.Limited {
		t.Fatalf("a check once the debt is paid: %+v %v", r, err)
	}
	if r, err := c.Take(ctx, "tpm", tokens, 1, Debt(), Reserve(1)); err == nil {
		t.Fatalf("Debt with Reserve: %+v, want the server's error", r)
	}
}
