package client

import (
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// TestDebt: Debt() charges the whole cost past the limit (the module's
// DEBT), on the shared fake (the module's engine), and Decide charges Debt
// wants whatever the others decide, without giving them back.
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

	// A request of two limits, one refusing, and a charge within its
	// limit: the charge is counted, the refused limit is not, the other is
	// given back.
	at = time.Hour
	window := FixedWindow(2, time.Minute)
	if _, err := c.Take(ctx, "w", window, 2); err != nil {
		t.Fatal(err)
	}
	g := GCRA(4, 5, time.Minute)
	wants := []*Want{
		{Key: "g", Limit: g, Cost: 1},
		{Key: "w", Limit: window, Cost: 1},
		{Key: "budget", Limit: tokens, Cost: 500, Debt: true},
	}
	if err := c.Decide(ctx, wants, nil); err != nil {
		t.Fatal(err)
	}
	if !wants[1].Result.Limited || wants[0].Taken || wants[1].Taken {
		t.Fatalf("the window refuses, the GCRA is given back: %+v %+v", wants[0], wants[1])
	}
	if b := wants[2]; !b.Known || !b.Taken || b.Result.Limited || b.Result.Remaining != 500 {
		t.Fatalf("the charge: %+v, want 500 taken", b)
	}
	// A charge past its limit: the request's other limits are not asked.
	wants = []*Want{{Key: "g", Limit: g, Cost: 1}, {Key: "budget", Limit: tokens, Cost: 1500, Debt: true}}
	if err := c.Decide(ctx, wants, nil); err != nil {
		t.Fatal(err)
	}
	if b := wants[1]; !b.Taken || !b.Result.Limited || b.Result.ResetAfter != 120*time.Second || wants[0].Known || wants[0].Taken {
		t.Fatalf("a charge 1000 into debt: %+v, and the GCRA %+v, want not asked", b, wants[0])
	}
	if r, err := c.Peek(ctx, "budget", tokens, 0); err != nil || !r.Limited || r.RetryAfter != time.Minute {
		t.Fatalf("the budget after the charge: %+v %v, want a minute of debt", r, err)
	}
	if r, err := c.Peek(ctx, "g", g, 0); err != nil || r.Remaining != 5 {
		t.Fatalf("the GCRA: %+v %v, want never counted", r, err)
	}
	// Two logs' charges of 60000 go in two steps: one RL.ALL adds at most
	// 100000 entries.
	logs := []*Want{
		{Key: "l1", Limit: SlidingLog(10, time.Minute), Cost: 60000, Debt: true},
		{Key: "l2", Limit: SlidingLog(10, time.Minute), Cost: 60000, Debt: true},
	}
	if steps := c.chargeSteps(logs); len(steps) != 2 {
		t.Fatalf("two charges of 60000 entries in %d steps, want 2", len(steps))
	}
	if err := c.Decide(ctx, logs, nil); err != nil || !logs[0].Taken || !logs[1].Taken {
		t.Fatalf("two logs' charges: %v %+v %+v", err, logs[0], logs[1])
	}
	bad := []*Want{{Key: "x", Limit: tokens, Cost: 1, Reserve: 1, Debt: true}}
	if err := c.Decide(ctx, bad, nil); err == nil {
		t.Fatal("a Debt want with a reserve: no error")
	}
}
