package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// holdFake is a client on the fake running the module's commands, on a
// clock that moves only by advance.
func holdFake() (c *Client, f *fakeServer, advance func(time.Duration)) {
	f = fakeredis.New()
	t0, at := time.Unix(1_700_000_020, 0), time.Duration(0)
	f.Clock = func() time.Time { return t0.Add(at) }
	return New(f.Client()), f, func(d time.Duration) { at += d }
}

// A hold takes its estimate; settling takes what the work cost beyond it
// or gives back what it did not use, once; a lapsed hold's estimate stays.
func TestHoldSettle(t *testing.T) {
	c, f, advance := holdFake()
	l := TokenBucket(1000, 1000, time.Minute) // 1000 tokens, 1000 a minute
	key := "rl:{u:1}:tpm"
	r, err := c.Hold(ctx, key, "r1", l, 300, time.Minute)
	if err != nil || r.Limited || r.Remaining != 700 {
		t.Fatalf("hold of 300: %+v %v", r, err)
	}
	if got := fmt.Sprint(f.Calls()[len(f.Calls())-1]); got != "[RL.HOLD rl:{u:1}:tpm rl:{u:1}:tpm:hold:r1 60 TB 1000 1000 60 300 MS]" {
		t.Fatalf("sent %s", got)
	}
	r, held, err := c.Settle(ctx, key, "r1", l, 500)
	if err != nil || held != 300 || r.Remaining != 500 {
		t.Fatalf("settled at 500: %+v, held %d, %v", r, held, err)
	}
	if r, held, err := c.Settle(ctx, key, "r1", l, 500); err != nil || held != -1 || r.Remaining != 500 {
		t.Fatalf("settled again: %+v, held %d, %v", r, held, err)
	}

	// Under the estimate: the rest comes back.
	c.Hold(ctx, key, "r2", l, 400, time.Minute)
	if r, held, _ := c.Settle(ctx, key, "r2", l, 100); held != 400 || r.Remaining != 400 {
		t.Fatalf("400 held, 100 spent: %+v, held %d", r, held)
	}
	// Past the limit: taken anyway, and later calls wait for it.
	c.Hold(ctx, key, "r3", l, 400, time.Minute)
	if r, _, _ := c.Settle(ctx, key, "r3", l, 700); !r.Limited || r.Remaining != 0 {
		t.Fatalf("400 held, 700 spent with 400 left: %+v", r)
	}
	if r, _ := c.Peek(ctx, key, l, 1); r.RetryAfter != 18060*time.Millisecond { // 300 owed, then 1: 301 at 60 ms each
		t.Fatalf("after the debt: %+v", r)
	}

	// A hold that lapses: its estimate stands.
	advance(time.Hour)
	c.Hold(ctx, key, "r4", l, 250, time.Second)
	advance(2 * time.Second)
	if r, held, _ := c.Settle(ctx, key, "r4", l, 10); held != -1 || r.Remaining != 750+33 {
		t.Fatalf("settled after its hold lapsed: %+v, held %d", r, held)
	}
	// A refused hold holds nothing.
	if r, _ := c.Hold(ctx, key, "r5", l, 900, time.Minute); !r.Limited {
		t.Fatalf("a hold of 900 with 783 left: %+v", r)
	}
	if _, held, _ := c.Settle(ctx, key, "r5", l, 1); held != -1 {
		t.Fatalf("a refused hold was kept: %d", held)
	}
}

// What the module would refuse, or what could not share a slot, is an
// error before anything is sent.
func TestHoldErrors(t *testing.T) {
	c, f, _ := holdFake()
	l := GCRA(9, 10, time.Minute)
	for _, err := range []error{
		func() error { _, err := c.Hold(ctx, "k", "r", Shaper(3, 1, time.Second), 1, time.Minute); return err }(),
		func() error { _, err := c.Hold(ctx, "k", "", l, 1, time.Minute); return err }(),
		func() error { _, err := c.Hold(ctx, "k", string(make([]byte, 129)), l, 1, time.Minute); return err }(),
		func() error { _, err := c.Hold(ctx, "a}b", "r", l, 1, time.Minute); return err }(),
		func() error { _, err := c.Hold(ctx, "k", "r", l, 1, 1500*time.Millisecond); return err }(),
		func() error { _, _, err := c.Settle(ctx, "a{}b", "r", l, 1); return err }(),
		func() error { _, _, err := c.Settle(ctx, "k", "r", Limit{}, 1); return err }(),
	} {
		if err == nil {
			t.Error("no error")
		}
	}
	if len(f.Calls()) != 0 {
		t.Fatalf("sent %v", f.Calls())
	}
	// The module's own errors come back as they are.
	if _, err := c.Hold(ctx, "k", "r", l, -1, time.Minute); err == nil || err.Error() != "ERR estimate must be an integer from 0 to 9007199254740991" {
		t.Fatalf("a negative estimate: %v", err)
	}
}

func TestHoldKey(t *testing.T) {
	for key, want := range map[string]string{
		"rl:{user:42}:tpm": "rl:{user:42}:tpm:hold:r1",
		"rl:tpm":           "{rl:tpm}:hold:r1",
		"rl:{:tpm":         "{rl:{:tpm}:hold:r1",
	} {
		if got := HoldKey(key, "r1"); got != want {
			t.Errorf("HoldKey(%q) = %q, want %q", key, got, want)
		}
	}
}
