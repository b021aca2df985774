package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// loader drives every algorithm on keys prefix0..prefix(n-1) with periods
// long enough that nothing expires during a test, until stopped.
type loader struct {
	stop chan struct{}
	wg   sync.WaitGroup
	err  error
	n    int // calls made
}

func startLoad(c *redis.Client, prefix string, keys int) *loader {
	ld := &loader{stop: make(chan struct{})}
	ld.wg.Go(func() {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		for {
			select {
			case <-ld.stop:
				return
			default:
			}
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for range 50 {
					l := limiters[rng.IntN(len(limiters))]
					i := rng.IntN(keys)
					args := append([]any{l.cmd, fmt.Sprintf("%s%s:%d", prefix, l.name, i)}, l.params(5+i%5, slow+i)...)
					p.Do(ctx, append(args, rng.IntN(3))...)
				}
				return nil
			})
			if err != nil {
				ld.err = err
				return
			}
			ld.n += 50
		}
	})
	return ld
}

func (ld *loader) finish(t *testing.T) {
	t.Helper()
	close(ld.stop)
	ld.wg.Wait()
	if ld.err != nil {
		t.Fatalf("load: %v", ld.err)
	}
	if ld.n == 0 {
		t.Fatal("the load made no calls")
	}
}

// waitPersistence waits until no background save or rewrite runs and
// checks that the last ones succeeded.
func waitPersistence(t *testing.T, s *server) {
	t.Helper()
	waitFor(t, 60*time.Second, "background save and rewrite", func() bool {
		info := s.rdb.Info(ctx, "persistence").Val()
		return strings.Contains(info, "rdb_bgsave_in_progress:0") && strings.Contains(info, "aof_rewrite_in_progress:0") &&
			!strings.Contains(info, "aof_rewrite_scheduled:1")
	})
	info := s.rdb.Info(ctx, "persistence").Val()
	for _, ok := range []string{"rdb_last_bgsave_status:ok", "aof_last_bgrewrite_status:ok"} {
		if !strings.Contains(info, ok) {
			t.Fatalf("persistence failed:\n%s", info)
		}
	}
}

func sameKeys(t *testing.T, what string, got, want map[string]snapshot) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: nothing to compare", what)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		for k, w := range want {
			if got[k] != w {
				t.Fatalf("%s: %d keys, want %d; first difference %s: %v, want %v", what, len(got), len(want), k, got[k], w)
			}
		}
		t.Fatalf("%s: %d keys, want %d", what, len(got), len(want))
	}
}

// BGSAVE and BGREWRITEAOF during load succeed (the module has no data type,
// so the forked child runs no Go); restarts from the AOF, with and without
// the RDB preamble, and from the RDB keep every key as it was.
func TestPersistence(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		for _, preamble := range []string{"yes", "no"} {
			dir := t.TempDir()
			s := startFor(t, f, opts{module: true, dataDir: dir,
				args: []string{"--appendonly", "yes", "--appendfsync", "everysec", "--aof-use-rdb-preamble", preamble}})
			prefix := "rl:{persist}:"
			ld := startLoad(s.rdb, prefix, 200)
			time.Sleep(200 * time.Millisecond)
			for _, cmd := range []string{"BGSAVE", "BGREWRITEAOF"} {
				if err := s.rdb.Do(ctx, cmd).Err(); err != nil && !strings.Contains(err.Error(), "scheduled") {
					t.Fatalf("%s: %v", cmd, err)
				}
				waitPersistence(t, s)
			}
			time.Sleep(200 * time.Millisecond)
			ld.finish(t)
			want := snapAll(t, s.rdb, prefix+"*")

			if err := s.restart(ctx); err != nil {
				t.Fatal(err)
			}
			sameKeys(t, "after an AOF restart (preamble "+preamble+")", snapAll(t, s.rdb, prefix+"*"), want)
			if preamble == "no" {
				continue
			}
			// The RDB: SAVE, then a server without AOF and without the module.
			if err := s.rdb.Save(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			s.stop(ctx)
			r := startFor(t, f, opts{dataDir: dir})
			sameKeys(t, "after an RDB restart without the module", snapAll(t, r.rdb, prefix+"*"), want)
		}
	})
}

// A replica that does its full sync while the primary is under load ends
// identical to it.
func TestFullSyncDuringLoad(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		p := startFor(t, f, opts{module: true})
		prefix := "rl:{sync}:"
		ld := startLoad(p.rdb, prefix, 500)
		time.Sleep(300 * time.Millisecond)
		rep := startReplica(t, p, false)
		time.Sleep(300 * time.Millisecond)
		ld.finish(t)
		waitReplicas(t, p, 1)
		sameKeys(t, "replica after a full sync under load", snapAll(t, rep.rdb, prefix+"*"), snapAll(t, p.rdb, prefix+"*"))
		if v := infoField(t, p.rdb, "stats", "sync_full"); v != "1" {
			t.Fatalf("sync_full %q, want 1", v)
		}
	})
}
