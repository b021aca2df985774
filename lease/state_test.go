package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// A key's state, as a decision finds it, in the order the states are
// asked: units held are spent first, even while its grants fail; a closed
// tier sends the rest to the limiter; then a cold key goes to the limiter,
// a failing one decides in fallback, a paced one (or one that waited a
// Timeout) refuses here, and a hot one short of units waits for a grant.
func TestKeyState(t *testing.T) {
	const now, cost = int64(1_000_000_000), 2
	for _, c := range []struct {
		name  string
		units int64
		hot   bool
		down  int64 // when its grants began to fail (0: they answer)
		pace  int64
		late  bool
		shut  bool
		want  keyState
	}{
		{"holding", 5, true, 0, 0, false, false, holding},
		{"holding, its grants failing", 2, true, now - 1, 0, false, false, holding},
		{"holding, the tier closed", 2, true, 0, 0, false, true, holding},
		{"closed", 1, true, 0, 0, false, true, closed},
		{"closed, cold", 0, false, 0, 0, false, true, closed},
		{"cold", 1, false, 0, 0, false, false, cold},
		{"cold, paced", 0, false, 0, now + 1, false, false, cold},
		{"failing", 1, true, now - 1, now + 1, true, false, failing},
		{"paced", 1, true, 0, now + 1, false, false, paced},
		{"paced: waited a Timeout", 0, true, 0, 0, true, false, paced},
		{"waiting", 1, true, 0, now, false, false, waiting},
	} {
		k := &leaseKey{hot: c.hot, down: c.down, pace: c.pace}
		if c.units > 0 {
			k.add(c.units, now+int64(time.Second))
		}
		if got := k.state(now, cost, c.late, c.shut); got != c.want {
			t.Errorf("%s: state %v, want %v", c.name, got, c.want)
		}
	}
}

// A concurrency pool's state: a cold pool goes to the limiter; a holder
// that holds a slot here renews it, and a new one takes a free slot, while
// the pool's slots are fresh; then failing grants return their error, a
// paced pool refuses, and a hot one with no slot free waits for a grant.
func TestSlotPoolState(t *testing.T) {
	const now = int64(1_000_000_000)
	l := client.Concurrency{Limit: 4, Lease: time.Minute}
	for _, c := range []struct {
		name    string
		hot     bool
		held    int64 // slots the pool holds, granted at now
		holders []string
		err     error
		pace    int64
		late    bool
		want    keyState
		free    int64
	}{
		{"cold", false, 2, nil, nil, 0, false, cold, 0},
		{"holding: a slot free", true, 2, []string{"b"}, nil, 0, false, holding, 1},
		{"holding: renewing its own", true, 1, []string{"a"}, nil, 0, false, holding, 0},
		{"failing", true, 1, []string{"b"}, errors.New("down"), 0, false, failing, 0},
		{"paced", true, 1, []string{"b"}, nil, now + 1, false, paced, 0},
		{"paced: waited a Timeout", true, 0, nil, nil, 0, true, paced, 0},
		{"waiting", true, 1, []string{"b"}, nil, 0, false, waiting, 0},
	} {
		p := &slotPool{l: l, hot: c.hot, held: c.held, sent: now, holders: map[string]int64{}, err: c.err, pace: c.pace}
		for _, h := range c.holders {
			p.holders[h] = now + int64(l.Lease)
		}
		if got, free := p.state(now, "a", c.late); got != c.want || free != c.free {
			t.Errorf("%s: state %v with %d free, want %v with %d", c.name, got, free, c.want, c.free)
		}
	}
}
