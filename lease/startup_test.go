package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// herdDeadline is the deadline of each call of a herd: ample for a call to
// the fake on a loaded machine once the start-up work is done. herdHold,
// three times longer, is how long the work is held past the moment every
// call's context was made: every call waits past its deadline (as the
// client's own start-up tests).
const (
	herdDeadline = 200 * time.Millisecond
	herdHold     = 3 * herdDeadline
)

// heldFake is a fake server (engine: the module or the library) at a
// fixed instant, mid-minute, and a client of it whose start-up work h
// holds.
func heldFake(t *testing.T, engine client.Engine) (*client.Client, *fakeredis.Held) {
	t.Helper()
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_020, 0)
	f.Clock = func() time.Time { return t0 }
	if engine == client.Functions {
		f.NoModule, f.Functions = true, true
	}
	h := fakeredis.NewHeld()
	rdb := h.Client(f, t.Cleanup)
	return client.New(rdb), h
}

// admitted counts the calls admitted, and fails the test on any error.
func admitted(t *testing.T, res []client.Result, errs []error) int {
	t.Helper()
	return fakeredis.Admitted(t, res, errs, func(r client.Result) bool { return r.Limited })
}

// The same herd through the local tier (the key cold, so the first call
// goes to the limiter and the rest share the next, UpTo; the key hot
// after 8, its calls waiting for a grant): the calls that wait on another's
// call wait past their deadline too while the start-up work runs, so
// exactly 10 of 60 are admitted, none failed, whether the work takes less
// than the tier's Timeout (1 s) or more (1.5 s; the probe's own bound is
// 2 s). (They failed at their deadlines, to be decided by the caller's
// failure policy; past the Timeout, the hot key's were refused here.)
func TestStartupHerdLeased(t *testing.T) {
	for _, c := range []struct {
		engine client.Engine
		hold   time.Duration
	}{{client.Module, herdHold}, {client.Functions, herdHold}, {client.Module, 1500 * time.Millisecond}} {
		t.Run(fmt.Sprint(c.engine, "/", c.hold), func(t *testing.T) {
			cl, h := heldFake(t, c.engine)
			tier := New(cl, Options{})
			t.Cleanup(func() { tier.Close(context.Background()) })
			res, errs := fakeredis.FirstCalls(h, 60, c.hold, func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, herdDeadline) }, func(ctx context.Context, _ int) (client.Result, error) {
				return tier.Take(ctx, "herd", client.FixedWindow(10, time.Minute), 1)
			})
			if n := admitted(t, res, errs); n != 10 {
				t.Fatalf("%d of 60 admitted, want 10; the tier %+v", n, tier.Stats())
			}
			if s := tier.Stats(); s.Coalesced == 0 {
				t.Fatalf("no call shared another's: %+v", s)
			}
		})
	}
}
