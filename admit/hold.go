package admit

import (
	"context"
	"errors"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// holds is what Hold and Settle ask of the Gate's Redis: a
// *client.Client has it.
type holds interface {
	Hold(ctx context.Context, key, id string, l client.Limit, estimate int64, ttl time.Duration) (client.Result, error)
	Settle(ctx context.Context, key, id string, l client.Limit, actual int64) (client.Result, int64, error)
}

// errNoHolds is Hold's and Settle's error on a Redis without them.
var errNoHolds = errors.New("admit: holds need a *client.Client")

// Hold takes w.Cost from w's limit at w.Key as an estimate held under id
// for ttl (client.Hold, RL.HOLD), at the limiter in Redis within Timeout
// and the breakers, as Decide's calls. Never through the local tier nor
// decided in this process, whatever OnError says: the hold is settled by
// a later call, perhaps to another process. Decided (nil), w's Result says
// whether the estimate was admitted; on an error nothing is known.
func (g *Gate) Hold(ctx context.Context, w *Want, id string, ttl time.Duration) error {
	h, ok := g.c.(holds)
	if !ok {
		return errNoHolds
	}
	var res client.Result
	err := g.run(ctx, func() []string { return []string{w.Key} }, func(ctx context.Context) error {
		return g.traced(ctx, "RL.HOLD", func() (err error) {
			res, err = h.Hold(ctx, w.Key, id, w.Limit, w.Cost, ttl)
			return err
		})
	})
	if err == nil {
		w.Result, w.Known = res, true
	}
	return err
}

// Settle settles id's hold at w.Key at the actual cost w.Cost
// (client.Settle, RL.SETTLE), as Hold calls: w's Result is the limit's
// state after it, held the estimate settled (-1: no hold, nothing
// changed).
func (g *Gate) Settle(ctx context.Context, w *Want, id string) (held int64, err error) {
	h, ok := g.c.(holds)
	if !ok {
		return 0, errNoHolds
	}
	var res client.Result
	err = g.run(ctx, func() []string { return []string{w.Key} }, func(ctx context.Context) error {
		return g.traced(ctx, "RL.SETTLE", func() (err error) {
			res, held, err = h.Settle(ctx, w.Key, id, w.Limit, w.Cost)
			return err
		})
	})
	if err == nil {
		w.Result, w.Known = res, true
	}
	return held, err
}
