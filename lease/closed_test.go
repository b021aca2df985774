package lease

// The tier closed: what it holds goes back, and the limiter decides (keyState
// closed).

import (
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// Close gives back every unit held: the limiter then holds only what was
// spent.
func TestLeasedCloseGivesBack(t *testing.T) {
	tr := newTier(t, 1, Options{Hot: 2})
	p := tr.procs[0]
	l := client.TokenBucket(100, 10, time.Second)
	for i := range 12 {
		if r, err := p.Take(ctx, "tb", l, 1); err != nil || r.Limited {
			t.Fatalf("decision %d: %+v %v", i, r, err)
		}
		tr.settle()
	}
	if s := p.Stats(); s.Grants == 0 || s.Granted <= 12-2 {
		t.Fatalf("the key did not lease: %+v", s)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := client.New(tr.f.Client()).Peek(ctx, "tb", l, 0)
	if err != nil || r.Remaining != 100-12 {
		t.Fatalf("after Close: %+v %v, want 88 tokens left (12 spent)", r, err)
	}
	// The first decision was exact (the key was not yet hot); the rest
	// were spent from grants.
	if s := p.Stats(); s.Exact != 1 || s.Local != 11 || s.Returned != s.Granted-11 {
		t.Fatalf("returned %d of %d granted, 11 spent from grants: %+v", s.Returned, s.Granted, s)
	}
}
