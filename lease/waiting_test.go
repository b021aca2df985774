package lease

// Short of units: a decision waits for a grant, never past Timeout nor its
// caller's deadline (keyState waiting).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// A caller whose own deadline has passed gets its context's error, and
// the key stays up: the grant runs on the tier's own Timeout, so a
// caller's deadline never reads as Redis failing.
func TestLeasedCallerDeadline(t *testing.T) {
	tr := newTier(t, 1, Options{Hot: 2})
	p := tr.procs[0]
	l := client.PerSecond(1000)
	if _, err := p.Take(ctx, "k", l, 1); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Millisecond))
	defer cancel()
	if _, err := p.Take(gone, "k", l, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller past its deadline: %v", err)
	}
	tr.settle()
	if r, err := p.Take(ctx, "k", l, 1); err != nil || r.Limited {
		t.Fatalf("the next caller: %+v %v", r, err)
	}
	if s := p.Stats(); s.Unclaimed != 0 || s.Fallback != 0 {
		t.Fatalf("the key went down: %+v", s)
	}
}

// No decision waits past Timeout for grants, even when the first it
// waits for does not cover it: each grant here answers in 70 ms, Timeout
// is 100 ms.
func TestLeasedWaitBounded(t *testing.T) {
	tr := newTier(t, 1, Options{Hot: 2, Target: 10 * time.Second, Timeout: 100 * time.Millisecond})
	p := tr.procs[0]
	l := client.PerSecond(1000)
	for range 2 {
		p.Take(ctx, "k", l, 1)
		tr.settle()
	}
	k := p.entry("k", l)
	p.lock(k)
	k.n, k.pace = 0, 0 // nothing held, not paced
	p.unlock(k, tr.now())
	started := make(chan struct{}, 8)
	tr.f.Before = func(cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 0 && a[len(a)-2] == "UPTO" {
			started <- struct{}{}
			time.Sleep(70 * time.Millisecond)
		}
		return nil
	}
	go p.Take(ctx, "k", l, 1)
	<-started
	began := time.Now()
	p.Take(ctx, "k", l, 8)
	if took := time.Since(began); took > 100*time.Millisecond+30*time.Millisecond {
		t.Fatalf("a decision waited %v for grants, Timeout 100 ms", took)
	}
}
