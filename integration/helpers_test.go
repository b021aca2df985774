package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

var ctx = context.Background()

// call runs a limiter command and returns its five integers.
func call(c *redis.Client, name string, args ...any) ([]int64, error) {
	return c.Do(ctx, append([]any{name}, args...)...).Int64Slice()
}

// mustCall is call that fails the test on an error reply.
func mustCall(t *testing.T, c *redis.Client, name string, args ...any) []int64 {
	t.Helper()
	r, err := call(c, name, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return r
}

// assertReply checks the five integers; -2 in want matches anything (a
// field that depends on the clock, checked separately).
func assertReply(t *testing.T, what string, got []int64, want ...int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for i := range want {
		if want[i] != -2 && got[i] != want[i] {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
}

// assertBetween checks a clock-dependent field.
func assertBetween(t *testing.T, what string, got, lo, hi int64) {
	t.Helper()
	if got < lo || got > hi {
		t.Fatalf("%s = %d, want within [%d, %d]", what, got, lo, hi)
	}
}

// assertErr checks that err is an error reply starting with prefix and
// containing every one of parts.
func assertErr(t *testing.T, what string, err error, prefix string, parts ...string) {
	t.Helper()
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		t.Fatalf("%s: got %v, want a %s error reply", what, err, prefix)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		t.Fatalf("%s: error %q does not start with %q", what, msg, prefix)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Fatalf("%s: error %q does not mention %q", what, msg, p)
		}
	}
}

// snapshot is everything a limiter key is: type, value, absolute expiry.
type snapshot struct {
	Type   string
	Value  string
	Expire int64 // PEXPIRETIME: -2 missing, -1 no expiry
}

func (s snapshot) String() string {
	return fmt.Sprintf("%s %q pexpiretime=%d", s.Type, s.Value, s.Expire)
}

// snap reads a key's snapshot. Sorted sets and other types are dumped, so
// any change shows.
func snap(t *testing.T, c *redis.Client, key string) snapshot {
	t.Helper()
	typ, err := c.Type(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	exp, err := c.Do(ctx, "PEXPIRETIME", key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot{Type: typ, Expire: exp}
	switch typ {
	case "none":
	case "string":
		s.Value, err = c.Get(ctx, key).Result()
	default:
		s.Value, err = c.Dump(ctx, key).Result()
	}
	if errors.Is(err, redis.Nil) { // the key expired between the reads
		return snapshot{Type: "none", Expire: -2}
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertExpiresAtState checks a key holding an instant (GCRA, token bucket,
// shaper): it expires at that instant, absolute, rounded up to the ms.
func assertExpiresAtState(t *testing.T, c *redis.Client, key string) {
	t.Helper()
	sn := snap(t, c, key)
	state, err := strconv.ParseInt(sn.Value, 10, 64)
	if err != nil || sn.Expire != (state+999_999)/1_000_000 {
		t.Fatalf("%s: state %q expires at %d, want ceil(state/1e6)", key, sn.Value, sn.Expire)
	}
}

// snapAll reads every key matching pattern.
func snapAll(t *testing.T, c *redis.Client, pattern string) map[string]snapshot {
	t.Helper()
	keys, err := c.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	m := make(map[string]snapshot, len(keys))
	for _, k := range keys {
		m[k] = snap(t, c, k)
	}
	return m
}

// infoField reads one field of an INFO section.
func infoField(t *testing.T, c *redis.Client, section, field string) string {
	t.Helper()
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// counters reads one command's INFO ratelimit counters.
func counters(t *testing.T, c *redis.Client, field string) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	v := infoField(t, c, "ratelimit", "ratelimit_"+field)
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if err == nil {
			m[k] = n
		}
	}
	return m
}

func replOffset(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	n, err := strconv.ParseInt(infoField(t, c, "replication", "master_repl_offset"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitReplicas blocks until every replica acknowledged the primary's writes.
func waitReplicas(t *testing.T, primary *server, n int) {
	t.Helper()
	got, err := primary.rdb.Do(ctx, "WAIT", n, 10000).Int64()
	if err != nil || got < int64(n) {
		t.Fatalf("WAIT %d: %d replicas acknowledged, %v", n, got, err)
	}
}
