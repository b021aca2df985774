package integration

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// With maxmemory and noeviction, the consuming commands get the server's
// OOM error before they run: no key is created or changed. Peeks still
// answer.
func TestOutOfMemory(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		s := startFor(t, f, opts{module: true})
		live := map[string]string{}
		for _, l := range limiters {
			k := "rl:{oom}:" + l.name
			l.call(t, s.rdb, l.cmd, k, 5, slow)
			live[l.name] = k
		}
		before := snapAll(t, s.rdb, "rl:{oom}:*")
		// maxmemory below what the server already uses: with noeviction,
		// every command flagged deny-oom is refused before it runs.
		used, _ := strconv.ParseInt(infoField(t, s.rdb, "memory", "used_memory"), 10, 64)
		if err := s.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(used/2)).Err(); err != nil {
			t.Fatal(err)
		}
		assertErr(t, "SET out of memory", s.rdb.Set(ctx, "plain", "x", 0).Err(), "OOM")
		for _, l := range limiters {
			for _, k := range []string{live[l.name], "rl:{oom}:fresh:" + l.name} {
				_, err := call(s.rdb, l.cmd, append([]any{k}, l.params(5, slow)...)...)
				assertErr(t, l.cmd+" out of memory", err, "OOM")
				if _, err := call(s.rdb, l.peek, append([]any{k}, l.params(5, slow)...)...); err != nil {
					t.Fatalf("%s out of memory: %v", l.peek, err)
				}
			}
		}
		sameKeys(t, "out of memory", snapAll(t, s.rdb, "rl:{oom}:*"), before)
	})
}

// A million distinct keys, each from a limiter whose state is full again
// within a second or two, all expire on their own: nothing leaks.
func TestMillionKeysExpire(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		s := startFor(t, f, opts{module: true, args: []string{"--hz", "100"}})
		const n = 1_000_000
		start := time.Now()
		for i := 0; i < n; i += 10000 {
			_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j := i; j < i+10000; j++ {
					l := limiters[j%len(limiters)]
					p.Do(ctx, append([]any{l.cmd, "rl:m:" + strconv.Itoa(j)}, l.params(3, 2)...)...)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		written := time.Since(start)
		peak := s.rdb.DBSize(ctx).Val()
		expired := func() int64 {
			v, _ := strconv.ParseInt(infoField(t, s.rdb, "stats", "expired_keys"), 10, 64)
			return v
		}
		// Every key the calls created expires by itself: a million expiries
		// and an empty keyspace.
		waitFor(t, 180*time.Second, "every key to expire", func() bool { return expired() == n && s.rdb.DBSize(ctx).Val() == 0 })
		t.Logf("%s: %d keys created in %v (%d alive at the end of the writes), all expired %v after the first",
			f.name, n, written.Round(time.Millisecond), peak, time.Since(start).Round(time.Second))
	})
}
