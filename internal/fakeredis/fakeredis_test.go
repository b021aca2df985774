package fakeredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

var ctx = context.Background()

// at is a server whose clock stands at a fixed instant until Advance.
func at() *Server {
	s := New()
	t0 := time.Unix(1_700_000_000, 0)
	s.Clock = func() time.Time { return t0 }
	return s
}

func reply(t *testing.T, rdb interface {
	Do(context.Context, ...any) *redis.Cmd
}, args ...any) string {
	t.Helper()
	v, err := rdb.Do(ctx, args...).Result()
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprint(v)
}

// The module's commands run on the engine, keep their state, and follow
// the clock: GCRA at 10 a minute (burst 10) takes 11, refuses the 12th,
// and has one back 6 s later.
func TestModuleCommands(t *testing.T) {
	s := at()
	rdb := s.Client()
	for i := range 11 {
		if got, want := reply(t, rdb, "GCRA.THROTTLE", "k", 10, 10, 60), fmt.Sprintf("[0 11 %d -1 %d]", 10-i, 6*(i+1)); got != want {
			t.Fatalf("call %d: %s, want %s", i+1, got, want)
		}
	}
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{
		{0, "[1 11 0 6 66]"},
		{6 * time.Second, "[0 11 0 -1 66]"},
		{0, "[1 11 0 6 66]"},
	} {
		s.Advance(step.advance)
		if got := reply(t, rdb, "GCRA.THROTTLE", "k", 10, 10, 60); got != step.want {
			t.Fatalf("after %v: %s, want %s", step.advance, got, step.want)
		}
	}
	if got := reply(t, rdb, "PTTL", "k"); got != "66000" {
		t.Errorf("PTTL %s, want 66000: the key expires when the bucket is full again", got)
	}
	for _, tc := range []struct{ args []any }{
		{[]any{"GCRA.THROTTLE", "k", 10, 10, 0}},
		{[]any{"GCRA.THROTTLE", "k", 10}},
		{[]any{"SW.HIT", "k", 5, 60}},
	} {
		if got := reply(t, rdb, tc.args...); !strings.HasPrefix(got, "error: ERR") && !strings.HasPrefix(got, "error: WRONGTYPE") {
			t.Errorf("%v: %s, want an error", tc.args, got)
		}
	}
	if got := reply(t, rdb, "GET", "k"); strings.HasPrefix(got, "error") {
		t.Errorf("GET k after bad input: %s; the key must be unchanged", got)
	}
}

// The sliding log and the concurrency limiter keep sorted sets as the
// module's C writes them.
func TestSortedSets(t *testing.T) {
	s := at()
	rdb := s.Client()
	for i := range 3 {
		if got, want := reply(t, rdb, "SL.HIT", "log", 3, 10), fmt.Sprintf("[0 3 %d -1 10]", 2-i); got != want {
			t.Fatalf("hit %d: %s, want %s", i+1, got, want)
		}
	}
	if got := reply(t, rdb, "SL.HIT", "log", 3, 10); got != "[1 3 0 10 10]" {
		t.Fatalf("fourth hit %s, want refused for 10 s", got)
	}
	if got := reply(t, rdb, "ZCARD", "log"); got != "3" {
		t.Errorf("ZCARD %s, want 3 entries", got)
	}
	s.Advance(10 * time.Second)
	if got := reply(t, rdb, "SL.HIT", "log", 3, 10); got != "[0 3 2 -1 10]" {
		t.Errorf("after the window: %s", got)
	}
	if got := reply(t, rdb, "ZCARD", "log"); got != "1" {
		t.Errorf("ZCARD %s after the window, want the old entries trimmed", got)
	}

	for _, id := range []string{"a", "b"} {
		if got := reply(t, rdb, "CONC.ACQUIRE", "c", 2, 30, id); !strings.HasPrefix(got, "[0 2 ") {
			t.Fatalf("acquire %s: %s", id, got)
		}
	}
	if got := reply(t, rdb, "CONC.ACQUIRE", "c", 2, 30, "x"); !strings.HasPrefix(got, "[1 2 0 ") {
		t.Fatalf("a third holder: %s, want refused", got)
	}
	if got := reply(t, rdb, "CONC.RELEASE", "c", "a"); got != "1" {
		t.Fatalf("release: %s", got)
	}
	if got := reply(t, rdb, "CONC.ACQUIRE", "c", 2, 30, "x"); !strings.HasPrefix(got, "[0 2 0 ") {
		t.Fatalf("after a release: %s", got)
	}
	s.Advance(31 * time.Second)
	if got := s.Keys(); len(got) != 0 {
		t.Errorf("keys %v after every lease and window ended", got)
	}
}

// The Lua engine's scripts and library functions answer as the module's
// commands do, each on its own server.
func TestLuaEngine(t *testing.T) {
	want := func() string {
		s := at()
		return reply(t, s.Client(), "RL.ALL", 2, "a", "b", "GCRA", 5, 10, 60, 1, "FW", 3, 60, 2)
	}()
	sc := lua.Must("RL.ALL")

	s := at()
	rdb := s.Client()
	if got := reply(t, rdb, "EVALSHA", sc.SHA1, 2, "a", "b", "GCRA", 5, 10, 60, 1, "FW", 3, 60, 2); !strings.HasPrefix(got, "error: NOSCRIPT") {
		t.Fatalf("EVALSHA before SCRIPT LOAD: %s", got)
	}
	rdb.ScriptLoad(ctx, sc.Source)
	if got := reply(t, rdb, "EVALSHA", sc.SHA1, 2, "a", "b", "GCRA", 5, 10, 60, 1, "FW", 3, 60, 2); got != want {
		t.Errorf("EVALSHA %s, want %s", got, want)
	}

	s = at()
	s.Functions = true
	rdb = s.Client()
	fcall := []any{"FCALL", sc.Function + lua.Versioned().Suffix, 2, "a", "b", "GCRA", 5, 10, 60, 1, "FW", 3, 60, 2}
	if got := reply(t, rdb, fcall...); got != "error: ERR Function not found" {
		t.Fatalf("FCALL before FUNCTION LOAD: %s", got)
	}
	rdb.FunctionLoad(ctx, lua.Versioned().Source)
	if got := reply(t, rdb, fcall...); got != want {
		t.Errorf("FCALL %s, want %s", got, want)
	}
}

// A transaction runs together (a fixed window of 2 a minute, 40 s of it
// left at the clock's instant); TxFails fails the next EXEC as a watched
// key's change does.
func TestTransactions(t *testing.T) {
	s := at()
	rdb := s.Client()
	tx := func() ([]redis.Cmder, error) {
		return rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "FW.HIT", "f", 2, 60)
			p.Do(ctx, "FW.HIT", "f", 2, 60)
			return nil
		})
	}
	cmds, err := tx()
	if err != nil || len(cmds) != 2 || fmt.Sprint(cmds[1].(*redis.Cmd).Val()) != "[0 2 0 -1 40]" {
		t.Fatalf("transaction: %v %v", cmds, err)
	}
	s.Lock()
	s.TxFails = 1
	s.Unlock()
	if _, err := tx(); !errors.Is(err, redis.TxFailedErr) {
		t.Fatalf("with TxFails: %v", err)
	}
	if got := reply(t, rdb, "FW.PEEK", "f", 2, 60); got != "[1 2 0 40 40]" {
		t.Errorf("after a failed EXEC: %s, want the two hits only", got)
	}
}

// A cluster's primaries answer only for their slots: the cluster client
// finds each key's, and keys of two slots in one command are refused.
func TestCluster(t *testing.T) {
	c := NewCluster(3, nil)
	cc := c.Client(t)
	for i := range 3 {
		k := c.KeyOn(i, "rl:")
		if got := reply(t, cc, "TB.TAKE", k, 5, 1, 1); got != "[0 5 4 -1 1]" {
			t.Fatalf("server %d: %s", i, got)
		}
		if keys := c.Servers[i].Keys(); len(keys) != 1 || keys[0] != k {
			t.Errorf("server %d holds %v, want %s", i, keys, k)
		}
	}
	a, b := c.KeyOn(0, "x"), c.KeyOn(1, "x")
	if got := reply(t, cc, "RL.ALL", 2, a, b, "FW", 3, 60, 1, "FW", 3, 60, 1); !strings.Contains(got, "CROSSSLOT") {
		t.Errorf("keys of two slots: %s", got)
	}
	moved := c.Servers[0].Client()
	if got := reply(t, moved, "TB.TAKE", b, 5, 1, 1); got != "error: MOVED "+fmt.Sprint(slotOf(b))+" fake2:6379" {
		t.Errorf("a key of another's slot: %s", got)
	}
}

func slotOf(k string) int { return protocol.Slot(k) }
