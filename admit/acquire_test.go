package admit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// TestPipelinedHolds: under Pipeline, CONC.ACQUIRE and CONC.RELEASE go
// through the pipelined sender, as the decisions' steps do (each a Sent
// event), and answer as on their own: a slot taken, refused when none is
// free, freed by a release from another call, taken again.
func TestPipelinedHolds(t *testing.T) {
	f := fakeredis.New()
	rdb := f.Client()
	defer rdb.Close()
	var sent atomic.Int32
	g := New(client.New(rdb), Options{Pipeline: true, StepTimeout: 5 * time.Second, Event: func(e Event) {
		if e.Kind == Sent {
			sent.Add(1)
		}
	}})
	defer g.Close(context.Background())
	ctx := context.Background()
	l := client.Concurrency{Limit: 1, Lease: time.Minute}
	acquire := func(id string) bool {
		t.Helper()
		w := &Want{Key: "slots"}
		h, out, err := g.Acquire(ctx, w, l, id)
		if out != Decided || err != nil || (h != nil) == w.Result.Limited {
			t.Fatalf("acquire %s: %v %v %v %+v", id, h, out, err, w.Result)
		}
		return h != nil
	}
	if !acquire("a") || acquire("b") {
		t.Fatal("a slot of 1: a takes it, b is refused")
	}
	if freed, err := g.Release(ctx, "slots", "a"); !freed || err != nil {
		t.Fatalf("release a: %v %v", freed, err)
	}
	if freed, _ := g.Release(ctx, "slots", "a"); freed {
		t.Fatal("released twice")
	}
	if !acquire("b") {
		t.Fatal("b refused after a's release")
	}
	if n := sent.Load(); n != 5 {
		t.Fatalf("%d calls through the pipeline, want 5", n)
	}
}
