package admit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

var ctx = context.Background()

// plannerOn is the planner of a Gate deciding through c.
func plannerOn(c *client.Client) planner { return New(c, Options{}).plan }

// decideOn decides wants as a Gate's plan sends them, each step alone.
func (p planner) decideOn(ctx context.Context, wants []*Want) error {
	return p.decide(ctx, wants, p.send)
}

// TestPlan: the steps planned for a slot's limits hold at most 16 each;
// those that can be given back come first; at most one cannot, last; more
// than 16 windows make one watched step.
func TestPlan(t *testing.T) {
	p := plannerOn(client.New(fakeredis.New().Client()))
	limits := map[string]client.Limit{
		"fixed_window": client.FixedWindow(3, time.Hour), "sliding_window": client.SlidingWindow(3, time.Hour),
		"sliding_log": client.SlidingLog(3, time.Hour), "gcra": client.GCRA(2, 3, time.Hour), "token_bucket": client.TokenBucket(3, 3, time.Hour),
	}
	wants := func(spec ...any) []*Want {
		var out []*Want
		for i := 0; i < len(spec); i += 2 {
			for range spec[i+1].(int) {
				out = append(out, &Want{Key: fmt.Sprint("k", len(out)), Limit: limits[spec[i].(string)], Cost: 1})
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		wants []*Want
		want  string // each step: its size, and w when watched or * when it cannot be given back
	}{
		{"16 windows", wants("fixed_window", 16), "16*"},
		{"17 windows", wants("fixed_window", 17), "17w"},
		{"40 GCRA", wants("gcra", 40), "16 8 16"},
		{"20 GCRA, 10 windows", wants("gcra", 20, "fixed_window", 10), "14 16*"},
		{"10 windows, 20 token buckets", wants("sliding_log", 10, "token_bucket", 20), "14 16*"},
		{"16 windows, 1 GCRA", wants("sliding_window", 16, "gcra", 1), "1 16*"},
		{"17 windows, 30 GCRA", wants("fixed_window", 17, "gcra", 30), "47w"},
	} {
		var got []string
		for _, st := range p.plan(tc.wants) {
			mark := ""
			switch {
			case st.watched:
				mark = "w"
			case slices.ContainsFunc(st.wants, func(w *Want) bool { return !Refunds(w.Limit) }):
				mark = "*"
			}
			got = append(got, fmt.Sprint(len(st.wants), mark))
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%s: steps %s, want %s", tc.name, g, tc.want)
		}
	}
}

// TestPlanBySlot: in a Cluster, one step per slot, refundable steps first
// whatever the order of the wants; a different reserve is a step of its own.
func TestPlanBySlot(t *testing.T) {
	p := plannerOn(client.New(fakeredis.NewCluster(2, func(*fakeredis.Server) {}).Client(t)))
	w := []*Want{
		{Key: "{a}:fw", Limit: client.FixedWindow(3, time.Hour)},
		{Key: "{b}:gcra", Limit: client.PerHour(3)},
		{Key: "{a}:gcra", Limit: client.PerHour(3)},
		{Key: "{b}:tb", Limit: client.TokenBucket(3, 3, time.Hour)},
		{Key: "{b}:tb2", Limit: client.TokenBucket(3, 3, time.Hour), Reserve: 1},
	}
	var got []string
	for _, st := range p.plan(w) {
		var keys []string
		for _, x := range st.wants {
			keys = append(keys, x.Key)
		}
		got = append(got, strings.Join(keys, "+"))
	}
	if g, want := strings.Join(got, " "), "{b}:gcra+{b}:tb {b}:tb2 {a}:fw+{a}:gcra"; g != want {
		t.Fatalf("steps %s, want %s", g, want)
	}
}

// TestDecideRepeatedKey: a key named twice in one decision is decided once
// for the sum of its costs (on the engine, in one call), and both wants
// get that answer; the same key with two limits is an error and sends
// nothing.
func TestDecideRepeatedKey(t *testing.T) {
	f := fakeredis.New()
	p := plannerOn(client.New(f.Client()))
	w := func(key string, l client.Limit, cost int64) *Want { return &Want{Key: key, Limit: l, Cost: cost} }
	a, b, other := w("k", client.FixedWindow(5, time.Minute), 2), w("k", client.FixedWindow(5, time.Minute), 2), w("j", client.GCRA(4, 5, time.Minute), 1)
	if err := p.decideOn(ctx, []*Want{a, other, b}); err != nil {
		t.Fatal(err)
	}
	for i, x := range []*Want{a, b} {
		if !x.Known || !x.Taken || x.Result.Limited || x.Result.Remaining != 1 || x.Cost != 2 {
			t.Errorf("want %d: %+v, want admitted with 1 remaining (5 - 2 - 2), its cost still 2", i, x)
		}
	}
	if n := len(f.Calls()); n != 1 {
		t.Errorf("%d calls, want 1 (one RL.ALL)", n)
	}
	a, b = w("k", client.FixedWindow(5, time.Minute), 1), w("k", client.FixedWindow(5, time.Minute), 1)
	if err := p.decideOn(ctx, []*Want{a, b}); err != nil || !a.Result.Limited || !b.Result.Limited || a.Taken {
		t.Errorf("2 more of 1 left: %v %+v %+v, want both refused", err, a, b)
	}
	before := len(f.Calls())
	err := p.decideOn(ctx, []*Want{w("k", client.FixedWindow(5, time.Minute), 1), w("k", client.FixedWindow(6, time.Minute), 1)})
	if err == nil || !strings.Contains(err.Error(), `"k"`) || len(f.Calls()) != before {
		t.Errorf("one key, two limits: %v after %d calls, want an error naming it and none", err, len(f.Calls())-before)
	}
}

// TestDecideDebt: a decision charges Debt wants whatever the others
// decide, without giving them back (client's TestDebt: DEBT itself).
func TestDecideDebt(t *testing.T) {
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_020, 0) // 40 s into a minute
	at := time.Hour
	f.Clock = func() time.Time { return t0.Add(at) }
	c := client.New(f.Client())
	p := plannerOn(c)
	tokens := client.TokenBucket(1000, 1000, time.Minute) // one token every 60 ms

	// A request of two limits, one refusing, and a charge within its
	// limit: the charge is counted, the refused limit is not, the other is
	// given back.
	window := client.FixedWindow(2, time.Minute)
	if _, err := c.Take(ctx, "w", window, 2); err != nil {
		t.Fatal(err)
	}
	g := client.GCRA(4, 5, time.Minute)
	wants := []*Want{
		{Key: "g", Limit: g, Cost: 1},
		{Key: "w", Limit: window, Cost: 1},
		{Key: "budget", Limit: tokens, Cost: 500, Debt: true},
	}
	if err := p.decideOn(ctx, wants); err != nil {
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
	if err := p.decideOn(ctx, wants); err != nil {
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
		{Key: "l1", Limit: client.SlidingLog(10, time.Minute), Cost: 60000, Debt: true},
		{Key: "l2", Limit: client.SlidingLog(10, time.Minute), Cost: 60000, Debt: true},
	}
	if steps := p.chargeSteps(logs); len(steps) != 2 {
		t.Fatalf("two charges of 60000 entries in %d steps, want 2", len(steps))
	}
	if err := p.decideOn(ctx, logs); err != nil || !logs[0].Taken || !logs[1].Taken {
		t.Fatalf("two logs' charges: %v %+v %+v", err, logs[0], logs[1])
	}
	bad := []*Want{{Key: "x", Limit: tokens, Cost: 1, Reserve: 1, Debt: true}}
	if err := p.decideOn(ctx, bad); err == nil {
		t.Fatal("a Debt want with a reserve: no error")
	}
}

// The calls made with one context after a wait for start-up work have the
// time it had, the wait not counted: a herd of decisions of two limits in
// two slots (two calls each, the first waiting past the context's
// deadline), every one decided, 10 admitted.
func TestStartupDecideSteps(t *testing.T) {
	const (
		herdDeadline = 200 * time.Millisecond // ample for a call once the start-up work is done
		herdHold     = 3 * herdDeadline       // how long the work is held: every call waits past its deadline
	)
	for _, cx := range []struct {
		name string
		mk   func() (context.Context, context.CancelFunc)
	}{
		{"context.WithTimeout", func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, herdDeadline) }},
		{"client.WithTimeout", func() (context.Context, context.CancelFunc) { return client.WithTimeout(ctx, herdDeadline) }},
	} {
		t.Run(cx.name, func(t *testing.T) {
			f := fakeredis.New()
			t0 := time.Unix(1_700_000_020, 0)
			f.Clock = func() time.Time { return t0 }
			f.NoModule, f.Functions = true, true
			h := fakeredis.NewHeld()
			p := plannerOn(client.New(h.Client(f, t.Cleanup)))
			res, errs := fakeredis.FirstCalls(h, 40, herdHold, cx.mk, func(ctx context.Context, _ int) (client.Result, error) {
				wants := []*Want{
					{Key: "{a}:fw", Limit: client.FixedWindow(10, time.Minute), Cost: 1},
					{Key: "{b}:gcra", Limit: client.GCRA(99, 100, time.Minute), Cost: 1},
				}
				err := p.decideOn(ctx, wants)
				var r client.Result
				r.Limited = !wants[0].Known || !wants[1].Known || wants[0].Result.Limited || wants[1].Result.Limited
				return r, err
			})
			if n := fakeredis.Admitted(t, res, errs, func(r client.Result) bool { return r.Limited }); n != 10 {
				t.Fatalf("%d of 40 decisions admitted, want 10", n)
			}
		})
	}
}

// TestTrace: Options.Trace sees each call of a request with the request's
// context, named by its command, and its error.
func TestTrace(t *testing.T) {
	f := fakeredis.New()
	rdb := f.Client()
	defer rdb.Close()
	type key struct{}
	var seen []string
	g := New(client.New(rdb), Options{Pipeline: true, StepTimeout: 5 * time.Second, Trace: func(ctx context.Context, command string) func(error) {
		return func(err error) { seen = append(seen, fmt.Sprintf("%v %s %v", ctx.Value(key{}), command, err)) }
	}})
	defer g.Close(context.Background())
	ctx := context.WithValue(context.Background(), key{}, "r1")
	one := []*Want{{Key: "a", Limit: client.PerSecond(5), Cost: 1}}
	two := []*Want{{Key: "{s}b", Limit: client.PerSecond(5), Cost: 1}, {Key: "{s}c", Limit: client.FixedWindow(5, time.Second), Cost: 1}}
	for _, ws := range [][]*Want{one, two} {
		if out, err := g.Decide(ctx, ws); out != Decided || err != nil {
			t.Fatal(out, err)
		}
	}
	h, _, err := g.Acquire(ctx, &Want{Key: "conc"}, client.Concurrency{Limit: 2, Lease: time.Second}, "id1")
	if err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if _, err := g.Release(ctx, "conc", "id1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"r1 GCRA.THROTTLE <nil>", "r1 RL.ALL <nil>", "r1 CONC.ACQUIRE <nil>", "r1 CONC.RELEASE <nil>", "r1 CONC.RELEASE <nil>"}
	if !slices.Equal(seen, want) {
		t.Fatalf("traced %q, want %q", seen, want)
	}
}
