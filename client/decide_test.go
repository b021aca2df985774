package client

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// TestPlan: the steps planned for a slot's limits hold at most 16 each;
// those that can be given back come first; at most one cannot, last; more
// than 16 windows make one watched step.
func TestPlan(t *testing.T) {
	c, _ := newFake()
	limits := map[string]Limit{
		"fixed_window": FixedWindow(3, time.Hour), "sliding_window": SlidingWindow(3, time.Hour),
		"sliding_log": SlidingLog(3, time.Hour), "gcra": GCRA(2, 3, time.Hour), "token_bucket": TokenBucket(3, 3, time.Hour),
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
		for _, st := range c.plan(tc.wants) {
			mark := ""
			switch {
			case st.Watched:
				mark = "w"
			case slices.ContainsFunc(st.Wants, func(w *Want) bool { return !w.Limit.Refundable() }):
				mark = "*"
			}
			got = append(got, fmt.Sprint(len(st.Wants), mark))
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%s: steps %s, want %s", tc.name, g, tc.want)
		}
	}
}

// TestPlanBySlot: in a Cluster, one step per slot, refundable steps first
// whatever the order of the wants; a different reserve is a step of its own.
func TestPlanBySlot(t *testing.T) {
	c, _, _ := newFakeCluster(t, func(*fakeServer) {})
	w := []*Want{
		{Key: "{a}:fw", Limit: FixedWindow(3, time.Hour)},
		{Key: "{b}:gcra", Limit: PerHour(3)},
		{Key: "{a}:gcra", Limit: PerHour(3)},
		{Key: "{b}:tb", Limit: TokenBucket(3, 3, time.Hour)},
		{Key: "{b}:tb2", Limit: TokenBucket(3, 3, time.Hour), Reserve: 1},
	}
	var got []string
	for _, st := range c.plan(w) {
		var keys []string
		for _, x := range st.Wants {
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
	c := New(f.Client())
	w := func(key string, l Limit, cost int64) *Want { return &Want{Key: key, Limit: l, Cost: cost} }
	a, b, other := w("k", FixedWindow(5, time.Minute), 2), w("k", FixedWindow(5, time.Minute), 2), w("j", GCRA(4, 5, time.Minute), 1)
	if err := c.Decide(ctx, []*Want{a, other, b}, nil); err != nil {
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
	a, b = w("k", FixedWindow(5, time.Minute), 1), w("k", FixedWindow(5, time.Minute), 1)
	if err := c.Decide(ctx, []*Want{a, b}, nil); err != nil || !a.Result.Limited || !b.Result.Limited || a.Taken {
		t.Errorf("2 more of 1 left: %v %+v %+v, want both refused", err, a, b)
	}
	before := len(f.Calls())
	err := c.Decide(ctx, []*Want{w("k", FixedWindow(5, time.Minute), 1), w("k", FixedWindow(6, time.Minute), 1)}, nil)
	if err == nil || !strings.Contains(err.Error(), `"k"`) || len(f.Calls()) != before {
		t.Errorf("one key, two limits: %v after %d calls, want an error naming it and none", err, len(f.Calls())-before)
	}
}
