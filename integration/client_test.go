package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// The client's Result is the module's reply, with times as durations: a
// sequence on each family, compared with the raw command's MS reply read
// right after on a twin key fed the same calls.
func TestClientFamilies(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		c := client.New(s.rdb)
		for _, f := range []struct {
			limit client.Limit
			raw   []any // the raw command's arguments after the key, cost excluded
		}{
			{client.GCRA(2, 1, time.Hour), []any{"GCRA.THROTTLE", 2, 1, 3600}},
			{client.TokenBucket(3, 1, time.Hour), []any{"TB.TAKE", 3, 1, 3600}},
			{client.Shaper(2, 1, time.Hour), []any{"LB.ENQUEUE", 2, 1, 3600}},
			{client.SlidingWindow(3, time.Hour), []any{"SW.HIT", 3, 3600}},
			{client.FixedWindow(3, time.Hour), []any{"FW.HIT", 3, 3600}},
			{client.SlidingLog(3, time.Hour), []any{"SL.HIT", 3, 3600}},
		} {
			k, twin := key(t, "client"), key(t, "raw")
			for i := range 5 {
				got, err := c.Take(ctx, k, f.limit, 1)
				if err != nil {
					t.Fatalf("%v: %v", f.limit, err)
				}
				raw := mustCall(t, s.rdb, f.raw[0].(string), append(append([]any{twin}, f.raw[1:]...), 1, "MS")...)
				want := client.Result{Verdict: ratelimit.Verdict{Limited: raw[0] == 1, Limit: raw[1], Remaining: raw[2],
					RetryAfter: ms(raw[3]), ResetAfter: ms(raw[4])}}
				if got.Limited != want.Limited || got.Limit != want.Limit || got.Remaining != want.Remaining ||
					!near(got.RetryAfter, want.RetryAfter) || !near(got.ResetAfter, want.ResetAfter) {
					t.Fatalf("%v, call %d: client %+v, raw %+v", f.limit, i+1, got, want)
				}
			}
			before := snap(t, s.rdb, k)
			peeked, err := c.Peek(ctx, k, f.limit, 1)
			if err != nil || snap(t, s.rdb, k) != before || !peeked.Limited {
				t.Fatalf("%v: peek %+v %v changed the key or admitted", f.limit, peeked, err)
			}
		}
	})
}

func ms(v int64) time.Duration {
	if v < 0 {
		return ratelimit.Never
	}
	return time.Duration(v) * time.Millisecond
}

// near compares times read a moment apart (a second apart at most, on a
// loaded machine; a unit mix-up would be off by a factor of 1000).
func near(a, b time.Duration) bool {
	if a < 0 || b < 0 {
		return a == b
	}
	return (a - b).Abs() <= time.Second
}

func TestClientAllAndConcurrency(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		c := client.New(s.rdb)
		rpm, tpm := key(t, "rpm"), key(t, "tpm")
		limits := []client.Keyed{
			{Key: rpm, Limit: client.GCRA(9, 10, time.Minute), Cost: 1},
			{Key: tpm, Limit: client.TokenBucket(1000, 1000, time.Minute), Cost: 995},
		}
		r, err := c.All(ctx, limits)
		if err != nil || r.Limited || r.Policy != 1 || r.Remaining != 5 {
			t.Fatalf("first call: %+v %v (want admitted, decided by the tokens: 5 left, fewer than 9)", r, err)
		}
		r, err = c.All(ctx, limits)
		if err != nil || !r.Limited || r.Policy != 1 || r.RetryAfter < 59*time.Second || r.RetryAfter > 60*time.Second {
			t.Fatalf("second call: %+v %v (want refused by the tokens, 990 short at 1000 a minute: 59.4 s)", r, err)
		}
		if p, _ := c.Peek(ctx, rpm, client.GCRA(9, 10, time.Minute), 0); p.Remaining != 9 {
			t.Fatalf("the refused call took from the request limit: %+v", p)
		}

		k := key(t, "conc")
		conc := client.Concurrency{Limit: 1, Lease: time.Minute}
		if r, err := c.Acquire(ctx, k, conc, "a"); err != nil || r.Limited || r.ResetAfter != time.Minute {
			t.Fatalf("acquire: %+v %v", r, err)
		}
		if r, err := c.Acquire(ctx, k, conc, "b"); err != nil || !r.Limited || !near(r.RetryAfter, time.Minute) {
			t.Fatalf("second holder: %+v %v", r, err)
		}
		if r, err := c.PeekConcurrency(ctx, k, 1); err != nil || !r.Limited {
			t.Fatalf("peek: %+v %v", r, err)
		}
		for i, want := range []bool{true, false} {
			if held, err := c.Release(ctx, k, "a"); err != nil || held != want {
				t.Fatalf("release %d: %v %v", i+1, held, err)
			}
		}
		if r, err := c.Acquire(ctx, k, conc, "b"); err != nil || r.Limited {
			t.Fatalf("after the release: %+v %v", r, err)
		}
		if _, err := c.Take(ctx, k, client.GCRA(1, 1, time.Minute), 1); err == nil {
			t.Fatal("GCRA on a concurrency key: no error")
		}
	})
}

// A server without the module, and a client told to use the module: the
// error says so.
func TestClientNoModule(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		s := startFor(t, f, opts{})
		c := client.NewEngine(s.rdb, client.Module)
		_, err := c.Take(ctx, "k", client.GCRA(1, 1, time.Minute), 1)
		if !errors.Is(err, client.ErrNoModule) {
			t.Fatalf("Take: %v", err)
		}
		if _, err := c.Release(ctx, "k", "id"); !errors.Is(err, client.ErrNoModule) {
			t.Fatalf("Release: %v", err)
		}
	})
}

// dropProxy forwards connections to a server, but once drops the reply to
// the first command that contains marker and closes that connection: the
// command ran, its reply was lost.
type dropProxy struct {
	ln      net.Listener
	target  string
	marker  []byte
	dropped atomic.Bool
	wg      sync.WaitGroup
}

func startDropProxy(t *testing.T, target, marker string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target, marker: []byte(marker)}
	p.wg.Go(func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				down.Close()
				continue
			}
			var armed atomic.Bool
			p.wg.Go(func() { // client to server, watching for the marker
				buf := make([]byte, 64<<10)
				for {
					n, err := down.Read(buf)
					if n > 0 {
						if !p.dropped.Load() && bytes.Contains(buf[:n], p.marker) {
							armed.Store(true)
						}
						if _, werr := up.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						up.Close()
						return
					}
				}
			})
			p.wg.Go(func() { // server to client, dropping the armed reply
				buf := make([]byte, 64<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 && armed.Load() && p.dropped.CompareAndSwap(false, true) {
						down.Close()
						up.Close()
						return
					}
					if n > 0 {
						if _, werr := down.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						down.Close()
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close() })
	return p
}

// A lost reply is an error, never a second charge: through a proxy that
// loses the reply to the first GCRA.THROTTLE, go-redis's own Do (3 retries
// by default) charges twice; the client charges once and reports the error.
func TestClientNeverRetries(t *testing.T) {
	s := shared[0]
	for _, viaClient := range []bool{false, true} {
		k := key(t, "retry")
		p := startDropProxy(t, s.addr(), "GCRA.THROTTLE")
		rdb := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), Protocol: 2}) // default MaxRetries: 3
		var err error
		if viaClient {
			_, err = client.NewEngine(rdb, client.Module).Take(ctx, k, client.GCRA(9, 10, time.Hour), 1)
		} else {
			err = rdb.Do(ctx, "GCRA.THROTTLE", k, 9, 10, 3600, 1).Err()
		}
		rdb.Close()
		if !p.dropped.Load() {
			t.Fatal("the proxy dropped nothing")
		}
		taken := 10 - mustCall(t, s.rdb, "GCRA.PEEK", k, 9, 10, 3600, 0)[2]
		switch {
		case viaClient && (!errors.Is(err, io.EOF) || taken != 1):
			t.Fatalf("client: error %v, %d taken; want EOF and 1 taken", err, taken)
		case !viaClient && (err != nil || taken != 2):
			t.Fatalf("go-redis Do: error %v, %d taken; this test expects its retry to charge twice", err, taken)
		}
		t.Logf("via the client %v: error %v, %d taken", viaClient, err, taken)
	}
}

// A Ring of two servers: the client's calls go to each key's shard, and
// the middleware takes policies of two hash tags one by one (refunding),
// since a Ring, like a cluster, may put them on different shards.
func TestClientRing(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": shared[1].addr(), "b": shared[2].addr()}, Protocol: 2})
	defer ring.Close()
	c := client.New(ring)
	spread := fmt.Sprintf("rl:ring:%d:", time.Now().UnixNano()) // no hash tag: keys spread over the shards
	for i := range 50 {
		if r, err := c.Take(ctx, fmt.Sprintf("%s%d", spread, i), client.FixedWindow(2, time.Hour), 1); err != nil || r.Remaining != 1 {
			t.Fatalf("key %d: %+v %v", i, r, err)
		}
	}
	var onA, onB int64
	for i := range 50 {
		k := fmt.Sprintf("%s%d", spread, i)
		onA += shared[1].rdb.Exists(ctx, k).Val()
		onB += shared[2].rdb.Exists(ctx, k).Val()
	}
	if onA+onB != 50 || onA == 0 || onB == 0 {
		t.Fatalf("50 keys: %d on one shard, %d on the other", onA, onB)
	}

	refundAcrossTags(t, ring, spread+"http:")
}

// The client's engines on real servers: Auto runs the scripts on a server
// without the module (loading them on NOSCRIPT) and the module's commands
// on one with it, per shard of a Ring; Scripts runs the scripts even where
// the module is; and a key either engine wrote, the other continues.
func TestClientEngines(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		plain := startFor(t, f, opts{})
		mod := startFor(t, f, opts{module: true})
		calls := func(s *server, stat string) int64 {
			v := infoField(t, s.rdb, "commandstats", "cmdstat_"+stat)
			var n int64
			fmt.Sscanf(v, "calls=%d", &n)
			return n
		}
		gcra := client.GCRA(1, 1, time.Minute) // 2 at once, then 1 a minute
		exercise := func(c *client.Client, p string) {
			t.Helper()
			for i, want := range []bool{false, false, true} {
				r, err := c.Take(ctx, p+"g", gcra, 1)
				if err != nil || r.Limited != want || r.Limit != 2 {
					t.Fatalf("%s take %d: %+v, %v", p, i, r, err)
				}
			}
			if r, err := c.Peek(ctx, p+"g", gcra, 1); err != nil || !r.Limited || r.RetryAfter <= 0 {
				t.Fatalf("%s peek: %+v, %v", p, r, err)
			}
			r, err := c.All(ctx, []client.Keyed{{Key: "{" + p + "}a", Limit: gcra, Cost: 1}, {Key: "{" + p + "}b", Limit: client.FixedWindow(1, time.Minute), Cost: 1}})
			if err != nil || r.Limited || r.Policy != 1 || r.Remaining != 0 {
				t.Fatalf("%s all: %+v, %v", p, r, err)
			}
			conc := client.Concurrency{Limit: 1, Lease: time.Minute}
			if r, err := c.Acquire(ctx, p+"c", conc, "a"); err != nil || r.Limited {
				t.Fatalf("%s acquire: %+v, %v", p, r, err)
			}
			if r, err := c.Acquire(ctx, p+"c", conc, "b"); err != nil || !r.Limited {
				t.Fatalf("%s second acquire: %+v, %v", p, r, err)
			}
			if held, err := c.Release(ctx, p+"c", "a"); err != nil || !held {
				t.Fatalf("%s release: %v, %v", p, held, err)
			}
			if r, err := c.PeekConcurrency(ctx, p+"c", 1); err != nil || r.Limited || r.Remaining != 0 { // what an acquire would leave
				t.Fatalf("%s peek concurrency: %+v, %v", p, r, err)
			}
		}

		// Without the module: the FUNCTION library, loaded once.
		auto := client.New(plain.rdb)
		exercise(auto, "auto:")
		if n := calls(plain, "fcall") + calls(plain, "fcall_ro"); n < 9 {
			t.Fatalf("the server without the module ran %d functions", n)
		}
		if n := calls(plain, "eval") + calls(plain, "evalsha") + calls(plain, "evalsha_ro"); n != 0 {
			t.Fatalf("the server without the module ran %d scripts, not functions", n)
		}
		if e := auto.Engines()[plain.addr()]; e != client.Functions {
			t.Fatalf("Engines: %v", auto.Engines())
		}
		libs := fmt.Sprint(plain.rdb.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", lua.Versioned().Name).Val())
		if !strings.Contains(libs, "gcra_throttle") || calls(plain, "function|load") != 1 {
			t.Fatalf("the library after the calls: %d loads, %.200s", calls(plain, "function|load"), libs)
		}
		// Flushed (or a new primary): loaded again, the call sent again.
		if err := plain.rdb.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if r, err := auto.Take(ctx, "auto:flushed", gcra, 1); err != nil || r.Limited {
			t.Fatalf("a take after FUNCTION FLUSH: %+v %v", r, err)
		}
		if calls(plain, "function|load") != 2 {
			t.Fatalf("%d library loads after a flush, want 2", calls(plain, "function|load"))
		}
		// The same library on another client: not loaded again.
		exercise(client.New(plain.rdb), "auto2:")
		if calls(plain, "function|load") != 2 {
			t.Fatalf("a second client loaded the library again: %d loads", calls(plain, "function|load"))
		}

		// The scripts, forced, and where FUNCTION is refused (an ACL).
		exercise(client.NewEngine(plain.rdb, client.Scripts), "scripts:")
		sha := plain.rdb.ScriptExists(ctx, lua.Must("GCRA.THROTTLE").SHA1).Val()
		if len(sha) != 1 || !sha[0] {
			t.Fatal("the client did not load GCRA.THROTTLE's script")
		}
		if err := plain.rdb.Do(ctx, "ACL", "SETUSER", "nofunc", "on", ">pw", "~*", "+@all", "-function", "-fcall", "-fcall_ro").Err(); err != nil {
			t.Fatal(err)
		}
		nofunc := redis.NewClient(&redis.Options{Addr: plain.addr(), Username: "nofunc", Password: "pw", Protocol: 2})
		defer nofunc.Close()
		refused := client.New(nofunc)
		exercise(refused, "acl:")
		if e := refused.Engines()[plain.addr()]; e != client.Scripts {
			t.Fatalf("with FUNCTION refused, Engines: %v", refused.Engines())
		}

		exercise(client.New(mod.rdb), "auto:")
		if calls(mod, "gcra.throttle") != 3 || calls(mod, "evalsha")+calls(mod, "eval") != 0 {
			t.Fatalf("with the module: %d GCRA.THROTTLE, %d scripts", calls(mod, "gcra.throttle"), calls(mod, "evalsha")+calls(mod, "eval"))
		}
		exercise(client.NewEngine(mod.rdb, client.Scripts), "scripts:")
		if calls(mod, "gcra.throttle") != 3 {
			t.Fatal("the Scripts engine ran GCRA.THROTTLE")
		}

		// A key the scripts wrote, the module continues, and back (3 at
		// once: 1, 1, then 2 is refused; the costs keep clear of the edge,
		// since Redis 7.0's module reads the clock in whole ms, the
		// scripts' TIME in µs).
		viaScripts, viaModule := client.NewEngine(mod.rdb, client.Scripts), client.NewEngine(mod.rdb, client.Module)
		three := client.GCRA(2, 1, time.Minute)
		for i, c := range []*client.Client{viaScripts, viaModule, viaScripts} {
			r, err := c.Take(ctx, "both", three, int64(1+i/2))
			if err != nil || r.Limited != (i == 2) {
				t.Fatalf("take %d on a key both engines write: %+v, %v", i, r, err)
			}
		}

		// A Ring of a server with the module and one without: each shard
		// gets its own engine.
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"m": mod.addr(), "p": plain.addr()}, Protocol: 2})
		defer ring.Close()
		c := client.New(ring)
		beforeM, beforeP := calls(mod, "gcra.throttle"), calls(plain, "fcall")
		for i := range 40 {
			if _, err := c.Take(ctx, fmt.Sprintf("ring:%d", i), gcra, 1); err != nil {
				t.Fatalf("ring take %d: %v", i, err)
			}
		}
		gotM, gotP := calls(mod, "gcra.throttle")-beforeM, calls(plain, "fcall")-beforeP
		if gotM == 0 || gotP == 0 || gotM+gotP != 40 {
			t.Fatalf("over the Ring: %d GCRA.THROTTLE on the module's shard, %d functions on the other", gotM, gotP)
		}
		if e := c.Engines(); e[mod.addr()] != client.Module || e[plain.addr()] != client.Functions {
			t.Fatalf("over the Ring, Engines: %v", e)
		}
	})
}

// A batch is one round trip deciding each call on its own, as the calls
// one by one would: on a server with the module, and on one without (the
// library loaded once, then each call an FCALL).
func TestClientBatch(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		bare := startFor(t, f, opts{})
		for _, s := range []*server{sharedOf(f), bare} {
			c := client.New(s.rdb)
			k := key(t, "batch")
			b := c.Batch()
			var takes []*client.Call
			for range 3 {
				takes = append(takes, b.Take(k+":g", client.PerMinute(2), 1))
			}
			all := b.All([]client.Keyed{{Key: k + ":a", Limit: client.FixedWindow(5, time.Minute), Cost: 1},
				{Key: k + ":b", Limit: client.SlidingLog(3, time.Minute), Cost: 1}})
			acq := b.Acquire(k+":c", client.Concurrency{Limit: 1, Lease: time.Minute}, "r1")
			peek := b.Peek(k+":g", client.PerMinute(2), 0)
			if err := b.Exec(ctx); err != nil {
				t.Fatalf("%s: Exec: %v", s.name, err)
			}
			var got []string
			for _, call := range append(takes, all, acq, peek) {
				r, err := call.Result()
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				got = append(got, fmt.Sprint(r.Limited, r.Remaining, r.Policy))
			}
			// 2 per minute: two pass, the third is refused; RL.ALL decided by
			// the log (2 left); one slot taken; the peek of cost 0 sees nothing left.
			want := "[false 1 0 false 0 0 true 0 0 false 2 1 false 0 0 false 0 0]"
			if fmt.Sprint(got) != want {
				t.Fatalf("%s: %v, want %s", s.name, got, want)
			}
			b = c.Batch()
			rel := b.Release(k+":c", "r1")
			again := b.Release(k+":c", "r1")
			if err := b.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if h1, _ := rel.Released(); !h1 {
				t.Fatalf("%s: the slot was not held", s.name)
			}
			if h2, _ := again.Released(); h2 {
				t.Fatalf("%s: released twice", s.name)
			}
		}
	})
}

// sharedOf is the suite's shared server (with the module) of flavor f.
func sharedOf(f flavor) *server {
	for _, s := range shared {
		if s.name == f.name {
			return s
		}
	}
	return nil
}
