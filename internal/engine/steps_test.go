package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// step is one call of a step table: at t0 + at, its arguments and its
// reply as fmt.Sprint prints it ("error: " and the text for an error).
type step struct {
	at   time.Duration // from t0
	args []any
	want string
}

// bad is a call refused with the error want, which changes no key.
type bad struct {
	args []any
	want string
}

// runSteps runs steps in order on the shared fake Redis (the engine on
// keys in memory) whose clock is t0, 1,700,000,000 s (20 s into a minute),
// plus each step's at; then each bad call at the last step's instant.
func runSteps(t *testing.T, steps []step, bads []bad) {
	t.Helper()
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_000, 0)
	var at time.Duration
	f.Clock = func() time.Time { return t0.Add(at) }
	rdb := f.Client()
	ctx := context.Background()
	for _, step := range steps {
		at = step.at
		v, err := rdb.Do(ctx, step.args...).Result()
		got := fmt.Sprint(v)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != step.want {
			t.Fatalf("at t0+%v: %v answered %s, want %s", step.at, step.args, got, step.want)
		}
	}
	for _, bad := range bads {
		before := fmt.Sprint(f.Keys())
		if err := rdb.Do(ctx, bad.args...).Err(); err == nil || err.Error() != bad.want {
			t.Errorf("%v: %v, want %s", bad.args, err, bad.want)
		}
		if after := fmt.Sprint(f.Keys()); after != before {
			t.Errorf("%v changed the keys: %s, then %s", bad.args, before, after)
		}
	}
}
