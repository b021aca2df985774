package integration

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// readOnlyUser creates an ACL user, named after prefix and the server, who
// may run every command but only read keys matching rl:*, and returns a
// client logged in as that user (closed when the test ends) and its name.
func readOnlyUser(t *testing.T, s *server, prefix string) (*redis.Client, string) {
	t.Helper()
	user := strings.NewReplacer(".", "", "-", "").Replace(prefix + s.name)
	if err := s.rdb.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "resetkeys", "%R~rl:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Username: user, Password: "pw", Protocol: 2})
	t.Cleanup(func() { c.Close() })
	return c, user
}

// ACLs: a user allowed only to read rl:* keys can peek and cannot consume;
// where the server has module categories, +@ratelimit grants exactly the
// module's commands.
func TestACL(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		reader, user := readOnlyUser(t, s, "reader")
		for _, l := range limiters {
			k := key(t, l.name)
			if _, err := call(reader, l.peek, append([]any{k}, l.params(3, 60)...)...); err != nil {
				t.Fatalf("%s by a read-only user: %v", l.peek, err)
			}
			_, err := call(reader, l.cmd, append([]any{k}, l.params(3, 60)...)...)
			assertErr(t, l.cmd+" by a read-only user", err, "NOPERM")
			// Outside the pattern even a peek is refused.
			_, err = call(reader, l.peek, append([]any{"other:" + k}, l.params(3, 60)...)...)
			assertErr(t, l.peek+" outside rl:*", err, "NOPERM")
		}
		if !s.aclCategories {
			return
		}
		cat := user + "cat"
		if err := s.rdb.Do(ctx, "ACL", "SETUSER", cat, "on", ">pw", "~*", "+@ratelimit").Err(); err != nil {
			t.Fatal(err)
		}
		limited := redis.NewClient(&redis.Options{Addr: s.addr(), Username: cat, Password: "pw", Protocol: 2})
		defer limited.Close()
		for _, l := range limiters {
			k := key(t, l.name)
			for _, c := range []string{l.cmd, l.peek} {
				if _, err := call(limited, c, append([]any{k}, l.params(3, 60)...)...); err != nil {
					t.Fatalf("%s with +@ratelimit: %v", c, err)
				}
			}
		}
		err := limited.Get(ctx, "rl:x").Err()
		assertErr(t, "GET with only +@ratelimit", err, "NOPERM")
	})
}

// hostileArg returns one argument from the shapes that break parsers.
func hostileArg(rng *rand.Rand) string {
	switch rng.IntN(14) {
	case 0:
		return []string{"0", "1", "-1", "2", "100", "9223372036854775807", "-9223372036854775808",
			"9223372036854775806", "9223372036854775808", "-9223372036854775809", "9223372036", "9223372037",
			"100000", "100001", "1000000000", "1000000001"}[rng.IntN(16)]
	case 1:
		return []string{"+5", "-0", "+0", "007", "-007"}[rng.IntN(5)]
	case 2:
		return []string{" 1", "1 ", " ", "\t1", "1\n", "\r\n"}[rng.IntN(6)]
	case 3:
		return []string{"1.5", "1.0", ".5", "-1.5", "1e3", "1E3", "inf", "nan", "-inf"}[rng.IntN(9)]
	case 4:
		return []string{"0x10", "0b1", "0o7", "1_000", "١٢"}[rng.IntN(5)]
	case 5:
		return string([]byte{0xff, 0xfe, byte(rng.IntN(256))})
	case 6:
		return ""
	case 7:
		return strings.Repeat("9", 400)
	case 8:
		return []string{"MS", "ms", "Ms", "XX", "NX", "MS ", "MSS", "M"}[rng.IntN(8)]
	case 9:
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	default:
		return strconv.FormatInt(rng.Int64N(200)-20, 10) // mostly valid numbers, so calls get through
	}
}

// expired reports that a key went away because its expiry came (a live key
// of a window limiter can expire while the fuzzer runs), not by a write.
func expired(t *testing.T, c *redis.Client, before, after snapshot) bool {
	t.Helper()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return after.Type == "none" && before.Expire >= 0 && before.Expire <= tm.UnixMilli()
}

// keyPool makes a key of each foreign kind (setup writes it), and names
// `live` more for the limiters to create: the keys random vectors run on.
func keyPool(t *testing.T, prefix string, foreign map[string]func(k string) error, live int) []string {
	t.Helper()
	var pool []string
	for typ, setup := range foreign {
		k := prefix + "foreign:" + typ
		if err := setup(k); err != nil {
			t.Fatal(err)
		}
		pool = append(pool, k)
	}
	for i := range live {
		pool = append(pool, fmt.Sprintf("%slive:%d", prefix, i))
	}
	return pool
}

// The black-box fuzzer: random argument lists against every command, on
// fresh keys, live limiter keys and keys of every other type. The server
// stays up, every failure is an ERR or WRONGTYPE reply, an error changes no
// key, and no key the module wrote is left without an expiry.
//
// HOSTILE_VECTORS sets the vectors per server (default 5000).
func TestHostileInput(t *testing.T) {
	vectors := 5000
	if v, err := strconv.Atoi(os.Getenv("HOSTILE_VECTORS")); err == nil && v > 0 {
		vectors = v
	}

	each(t, func(t *testing.T, s *server) {
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 9))
		prefix := key(t, "") // one hash slot, one test
		foreign := otherTypes(s.rdb)
		foreign["garbage"] = func(k string) error { return s.rdb.Set(ctx, k, "not a limiter", 0).Err() }
		foreign["digits"] = func(k string) error { return s.rdb.Set(ctx, k, "12", 0).Err() }
		pool := keyPool(t, prefix, foreign, 8)
		var errs, oks int
		for n := range vectors {
			k := pool[rng.IntN(len(pool))]
			l := limiters[rng.IntN(len(limiters))]
			cmd := l.cmd
			if rng.IntN(3) == 0 {
				cmd = l.peek
			}
			args := []any{cmd, k}
			switch rng.IntN(4) {
			case 0: // nothing but hostile arguments, sometimes not even a key
				if rng.IntN(5) == 0 {
					args = args[:1]
				}
				for range rng.IntN(9) {
					args = append(args, hostileArg(rng))
				}
			default: // valid arguments, then one of them (or one more) hostile
				args = append(args, l.params(1+rng.IntN(5), 1+rng.IntN(100))...)
				if rng.IntN(2) == 0 {
					args = append(args, rng.IntN(4))
				}
				if rng.IntN(3) == 0 {
					args = append(args, "MS")
				}
				if i := rng.IntN(len(args) + 1); i >= 2 && i < len(args) {
					args[i] = hostileArg(rng)
				} else if i == len(args) && rng.IntN(2) == 0 {
					args = append(args, hostileArg(rng))
				}
			}
			res, before, after, err := hostileCall(t, s.rdb, n, k, args)
			if err != nil {
				errs++
				continue
			}
			oks++
			if r, ok := res.([]any); !ok || len(r) != 5 {
				t.Fatalf("vector %d %q: reply %v", n, args, res)
			}
			if after != before && after.Type != "none" && after.Expire < 0 {
				t.Fatalf("vector %d %q left %s without an expiry: %v", n, args, k, after)
			}
		}
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("server down after the fuzzer: %v", err)
		}
		for _, k := range pool {
			if sn := snap(t, s.rdb, k); strings.Contains(k, ":live:") && sn.Type != "none" && sn.Expire < 0 {
				t.Fatalf("%s has no expiry: %v", k, sn)
			}
		}
		t.Logf("%s: %d vectors, %d errors, %d replies", s.name, vectors, errs, oks)

		// RL.ALL and RL.PEEK: 1 to 3 keys from the pool (live, foreign and of
		// other types), limiters of every family with a hostile word now and
		// then. An error changes no key; a reply has six fields.
		families := [][]any{{"GCRA", 2, 1, 100, 1}, {"TB", 3, 1, 100, 1}, {"SW", 3, 100, 1}, {"FW", 3, 100, 1}, {"SL", 3, 100, 1}}
		errs, oks = 0, 0
		for n := range vectors / 5 {
			cmd := "RL.ALL"
			if rng.IntN(3) == 0 {
				cmd = "RL.PEEK"
			}
			nk := 1 + rng.IntN(3)
			keys := make([]string, nk)
			for i := range keys {
				keys[i] = pool[rng.IntN(len(pool))]
			}
			args := append([]any{cmd, nk}, toAny(keys)...)
			for range nk + rng.IntN(2) - rng.IntN(2) {
				args = append(args, families[rng.IntN(len(families))]...)
			}
			for _, opt := range [][]any{{"MS"}, {"RESERVE", rng.IntN(4)}} {
				if rng.IntN(3) == 0 {
					args = append(args, opt...)
				}
			}
			if rng.IntN(2) == 0 {
				args[1+rng.IntN(len(args)-1)] = hostileArg(rng)
			}
			before := make([]snapshot, nk)
			for i, k := range keys {
				before[i] = snap(t, s.rdb, k)
			}
			res, err := s.rdb.Do(ctx, args...).Result()
			if err != nil {
				errs++
				if !strings.HasPrefix(err.Error(), "ERR ") && !strings.HasPrefix(err.Error(), "WRONGTYPE ") {
					t.Fatalf("RL vector %d %q: %v", n, args, err)
				}
				for i, k := range keys {
					if after := snap(t, s.rdb, k); after != before[i] && !expired(t, s.rdb, before[i], after) {
						t.Fatalf("RL vector %d %q failed (%v) but changed %s: %v -> %v", n, args, err, k, before[i], after)
					}
				}
				continue
			}
			oks++
			if r, ok := res.([]any); !ok || len(r) != 6 {
				t.Fatalf("RL vector %d %q: reply %v", n, args, res)
			}
		}
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("server down after the RL.ALL fuzzer: %v", err)
		}
		t.Logf("%s: %d RL.ALL vectors, %d errors, %d replies", s.name, vectors/5, errs, oks)
	})
}

// hostileCall sends the n-th hostile vector, whose key is k, and returns
// its reply, the key before and after it, and its error. An error must be the
// module's own (ERR or WRONGTYPE) and leave k as it was (or expired).
func hostileCall(t *testing.T, c *redis.Client, n int, k string, args []any) (res any, before, after snapshot, err error) {
	t.Helper()
	before = snap(t, c, k)
	res, err = c.Do(ctx, args...).Result()
	after = snap(t, c, k)
	if err != nil {
		var re redis.Error
		if !errors.As(err, &re) || !(strings.HasPrefix(err.Error(), "ERR ") || strings.HasPrefix(err.Error(), "WRONGTYPE ")) {
			t.Fatalf("vector %d %q: %v", n, args, err)
		}
		if after != before && !expired(t, c, before, after) {
			t.Fatalf("vector %d %q failed (%v) but changed %s: %v -> %v", n, args, err, k, before, after)
		}
	}
	return res, before, after, err
}
