package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// held is fakeredis.Held: a server slow at its start-up work.
type held = fakeredis.Held

func newHeld() *held { return fakeredis.NewHeld() }

// heldFake is a fake server (engine: the module, the library or the
// scripts) at a fixed instant, mid-minute, and a client of it whose
// start-up work h holds.
func heldFake(t *testing.T, engine Engine) (*Client, *fakeServer, *held) {
	t.Helper()
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_020, 0)
	f.Clock = func() time.Time { return t0 }
	switch engine {
	case Functions:
		f.NoModule, f.Functions = true, true
	case Scripts:
		f.NoModule = true
	}
	h := newHeld()
	rdb := h.Client(f, t.Cleanup)
	return New(rdb), f, h
}

// firstCalls is fakeredis.FirstCalls for the client's calls.
func firstCalls(h *held, n int, wait time.Duration, mk func() (context.Context, context.CancelFunc), call func(ctx context.Context, i int) (Result, error)) ([]Result, []error) {
	return fakeredis.FirstCalls(h, n, wait, mk, call)
}

// admitted counts the calls admitted, and fails the test on any error.
func admitted(t *testing.T, res []Result, errs []error) int {
	t.Helper()
	return fakeredis.Admitted(t, res, errs, func(r Result) bool { return r.Limited })
}

// The contexts a herd's calls are made with: a plain deadline, and
// WithTimeout's (whose parent's end also ends a wait past its deadline).
var startupContexts = []struct {
	name string
	mk   func(d time.Duration) func() (context.Context, context.CancelFunc)
}{
	{"context.WithTimeout", func(d time.Duration) func() (context.Context, context.CancelFunc) {
		return func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, d) }
	}},
	{"client.WithTimeout", func(d time.Duration) func() (context.Context, context.CancelFunc) {
		return func() (context.Context, context.CancelFunc) { return WithTimeout(ctx, d) }
	}},
}

// herdDeadline is the deadline of each call of a herd: ample for a call to
// the fake on a loaded machine once the start-up work is done. herdHold,
// three times longer, is how long the work is held past the moment every
// call's context was made: every call waits past its deadline.
const (
	herdDeadline = 200 * time.Millisecond
	herdHold     = 3 * herdDeadline
)

// A herd of 60 first calls, each with a 200 ms deadline, on a fixed window
// of 10, while the server takes longer than that to answer the start-up
// work (the probe; the library's load, or a script's): every call waits
// for it and is then decided by the limiter: exactly 10 admitted, none
// failed; one probe, one load.
func TestStartupHerd(t *testing.T) {
	for _, engine := range []Engine{Module, Functions, Scripts} {
		for _, cx := range startupContexts {
			t.Run(engine.String()+"/"+cx.name, func(t *testing.T) {
				c, f, h := heldFake(t, engine)
				res, errs := firstCalls(h, 60, herdHold, cx.mk(herdDeadline), func(ctx context.Context, _ int) (Result, error) {
					return c.Take(ctx, "herd", FixedWindow(10, time.Minute), 1)
				})
				if n := admitted(t, res, errs); n != 10 {
					t.Fatalf("%d of 60 admitted, want 10", n)
				}
				scriptLoads := 0
				for _, a := range f.Calls() {
					if a[0] == "SCRIPT" {
						scriptLoads++
					}
				}
				f.Lock()
				defer f.Unlock()
				if f.Probes != 1 || f.Loads != map[Engine]int{Functions: 1}[engine] || scriptLoads != map[Engine]int{Scripts: 1}[engine] {
					t.Fatalf("%d probes, %d FUNCTION LOADs, %d SCRIPT LOADs", f.Probes, f.Loads, scriptLoads)
				}
				if e := c.Engines()[f.Addr]; e != engine {
					t.Fatalf("engine %v, want %v", e, engine)
				}
			})
		}
	}
}

// Start-up work met later, when a failover brings a server that lacks what
// the client ran there: the module's commands answered "unknown command"
// (the client re-detects: the library, loaded again), the library flushed
// (function not found), the scripts flushed (NOSCRIPT). A herd of calls
// meeting it waits for the load, past its deadlines, and is decided.
func TestStartupAfterFailover(t *testing.T) {
	for _, cx := range startupContexts {
		for _, c := range []struct {
			name   string
			engine Engine
			lose   func(f *fakeServer)
		}{
			{"module lost", Module, func(f *fakeServer) { f.NoModule, f.Unknown, f.Functions = true, true, true }},
			{"library flushed", Functions, func(f *fakeServer) { f.Lib = "" }},
			{"scripts flushed", Scripts, func(f *fakeServer) { f.Loaded = nil }},
		} {
			t.Run(cx.name+"/"+c.name, func(t *testing.T) {
				cl, f, h := heldFake(t, c.engine)
				close(h.Release) // start-up as usual
				if r, err := cl.Take(ctx, "herd", FixedWindow(10, time.Minute), 4); err != nil || r.Limited {
					t.Fatalf("before the failover: %+v %v", r, err)
				}
				h.Release = make(chan struct{}) // the new server is slow at it
				f.Lock()
				c.lose(f)
				f.Unlock()
				res, errs := firstCalls(h, 30, herdHold, cx.mk(herdDeadline), func(ctx context.Context, _ int) (Result, error) {
					return cl.Take(ctx, "herd", FixedWindow(10, time.Minute), 1)
				})
				if n := admitted(t, res, errs); n != 6 {
					t.Fatalf("%d of 30 admitted after the failover, want the 6 left", n)
				}
				if h.Arrived.Load() == 0 {
					t.Fatal("no start-up work was asked for after the failover")
				}
			})
		}
	}
}

// A caller that gives up while its call waits for start-up work gets
// context.Canceled at once, before the work ends and whether or not its
// deadline has passed meanwhile (a context from WithTimeout still tells):
// not a Redis failure (Unavailable is false). The work goes on for the
// others: the next call is answered by the same probe.
func TestStartupCanceled(t *testing.T) {
	for _, c := range []struct {
		name string
		mk   func(parent context.Context) (context.Context, context.CancelFunc)
	}{
		{"no deadline", func(p context.Context) (context.Context, context.CancelFunc) { return p, func() {} }},
		{"context.WithTimeout, before its deadline", func(p context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(p, time.Hour)
		}},
		{"client.WithTimeout, after its deadline", func(p context.Context) (context.Context, context.CancelFunc) {
			return WithTimeout(p, herdDeadline)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, f, h := heldFake(t, Functions)
			cl.prepareTimeout = time.Hour // only the caller can end the wait
			parent, hangUp := context.WithCancel(ctx)
			defer hangUp()
			cctx, cancel := c.mk(parent)
			defer cancel()
			answer := make(chan error, 1)
			go func() {
				_, err := cl.Take(cctx, "k", FixedWindow(10, time.Minute), 1)
				answer <- err
			}()
			for h.Arrived.Load() == 0 { // the probe is held: the call waits
				select {
				case err := <-answer:
					t.Fatalf("the call ended before the probe reached the server: %v", err)
				case <-time.After(time.Millisecond):
				}
			}
			if d, ok := cctx.Deadline(); ok && d.Before(time.Now().Add(time.Minute)) {
				time.Sleep(time.Until(d) + 20*time.Millisecond) // past the deadline
			}
			hangUp()
			select {
			case err := <-answer:
				if !errors.Is(err, context.Canceled) || Unavailable(err) {
					t.Fatalf("a caller gone: %v (Unavailable %v), want context.Canceled", err, Unavailable(err))
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the call still waits for the start-up work after its caller went")
			}
			close(h.Release)
			if r, err := cl.Take(ctx, "k", FixedWindow(10, time.Minute), 1); err != nil || r.Remaining != 9 {
				t.Fatalf("the next call: %+v %v", r, err)
			}
			f.Lock()
			defer f.Unlock()
			if f.Probes != 1 {
				t.Fatalf("%d probes, want 1: the work went on for the others", f.Probes)
			}
		})
	}
}

// A server that never answers the probe (a stopped process): the calls
// waiting for it fail with the probe's own error once prepareTimeout has
// passed, not at their deadlines, and then it is an outage: the next calls
// are decided within their own deadlines (their failure policy's to
// decide, fast), while the work is tried again behind them. Once the
// server answers, calls are decided again.
func TestStartupProbeNeverAnswers(t *testing.T) {
	for _, cx := range startupContexts {
		t.Run(cx.name, func(t *testing.T) {
			cl, f, h := heldFake(t, Functions)
			cl.prepareTimeout = 3 * herdDeadline
			mk := cx.mk(herdDeadline)
			start := time.Now()
			var wg sync.WaitGroup
			errs := make([]error, 10)
			for i := range errs {
				wg.Go(func() {
					cctx, cancel := mk()
					defer cancel()
					_, errs[i] = cl.Take(cctx, "k", FixedWindow(10, time.Minute), 1)
				})
			}
			wg.Wait()
			if waited := time.Since(start); waited < cl.prepareTimeout {
				t.Fatalf("the calls failed after %v, before the probe's own timeout (%v)", waited, cl.prepareTimeout)
			}
			for i, err := range errs {
				if !Unavailable(err) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "start-up work") {
					t.Fatalf("call %d: %v, want the probe's timeout, Unavailable", i, err)
				}
			}

			cl.prepareTimeout = time.Hour // were the next call to wait for the probe, it would wait an hour
			answer := make(chan error, 1)
			go func() {
				cctx, cancel := mk()
				defer cancel()
				_, err := cl.Take(cctx, "k", FixedWindow(10, time.Minute), 1)
				answer <- err
			}()
			select {
			case err := <-answer:
				if !Unavailable(err) || !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "start-up work") {
					t.Fatalf("a call during the outage: %v, want its own deadline", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a call during the outage waits for the probe")
			}

			close(h.Release) // the server answers again
			if r, err := cl.Take(ctx, "k", FixedWindow(10, time.Minute), 1); err != nil || r.Limited || r.Remaining != 9 {
				t.Fatalf("once the server answers: %+v %v", r, err)
			}
			if e := cl.Engines()[f.Addr]; e != Functions {
				t.Fatalf("engine %v", e)
			}
		})
	}
}

// In a Cluster, start-up work is per primary (its probe, its library) and
// the cluster's map is read before the first calls: a herd of first calls
// on keys of two primaries, with each primary's probe held and the map
// slow to come, waits for them and is decided: 10 admitted on each key,
// one probe and one library load on each primary.
func TestStartupCluster(t *testing.T) {
	for _, cx := range startupContexts {
		t.Run(cx.name, func(t *testing.T) {
			cl := fakeredis.NewCluster(2, func(s *fakeServer) {
				t0 := time.Unix(1_700_000_020, 0)
				s.Clock = func() time.Time { return t0 }
				s.NoModule, s.Functions = true, true
			})
			h := newHeld()
			t.Cleanup(func() {
				select {
				case <-h.Release:
				default:
					close(h.Release)
				}
			})
			var maps atomic.Int32
			cc := heldCluster(t, cl, h, &maps)
			c := New(cc)
			keys := []string{cl.KeyOn(0, "herd"), cl.KeyOn(1, "herd")}
			res, errs := firstCalls(h, 60, herdHold, cx.mk(herdDeadline), func(ctx context.Context, i int) (Result, error) {
				return c.Take(ctx, keys[i%2], FixedWindow(10, time.Minute), 1)
			})
			n := admitted(t, res, errs)
			on0 := 0
			for i := 0; i < len(res); i += 2 {
				if !res[i].Limited {
					on0++
				}
			}
			if n != 20 || on0 != 10 {
				t.Fatalf("%d of 60 admitted, %d on %s; want 10 on each key", n, on0, keys[0])
			}
			for i, s := range cl.Servers {
				s.Lock()
				probes, loads := s.Probes, s.Loads
				s.Unlock()
				if probes != 1 || loads != 1 {
					t.Errorf("primary %d: %d probes, %d library loads; want 1 and 1", i, probes, loads)
				}
			}
			if maps.Load() == 0 {
				t.Fatal("the cluster's map was never read")
			}
		})
	}
}

// heldCluster is a client of cl (as fakeredis.Cluster.Client: each server
// owns one of equal ranges of slots) whose start-up work h holds: each
// node's, and the cluster's map, counted in maps.
func heldCluster(t *testing.T, cl *fakeredis.Cluster, h *held, maps *atomic.Int32) *redis.ClusterClient {
	byAddr := map[string]*fakeServer{}
	var slots []redis.ClusterSlot
	n := len(cl.Servers)
	for i, s := range cl.Servers {
		byAddr[s.Addr] = s
		slots = append(slots, redis.ClusterSlot{Start: i * 16384 / n, End: (i+1)*16384/n - 1, Nodes: []redis.ClusterNode{{Addr: s.Addr}}})
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(ctx context.Context) ([]redis.ClusterSlot, error) {
			maps.Add(1)
			select {
			case <-h.Release:
				return slots, nil
			case <-ctx.Done(): // a slow server, as go-redis meets one
				return nil, ctx.Err()
			}
		},
		DisableRoutingPolicies: true,
		ContextTimeoutEnabled:  true,
	})
	cc.OnNewNode(func(rdb *redis.Client) {
		rdb.AddHook(h)
		rdb.AddHook(byAddr[rdb.Options().Addr])
	})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// valueKey is a context value a caller attaches (a trace's span, say).
type valueKey struct{}

// After a call waited for start-up work with its context pushed back: the
// calls made with a context derived from it by WithValue carry that
// context's values (the pushed-back one is found by its Done channel,
// which the two share), and once the caller cancels a context from
// WithTimeout, a call made with it sends nothing and returns
// context.Canceled at once. (A context.WithTimeout context whose deadline
// has passed cannot tell a cancel: its Err stays DeadlineExceeded.)
func TestStartupResumedContext(t *testing.T) {
	for _, cx := range startupContexts {
		t.Run(cx.name, func(t *testing.T) {
			var seen, missing atomic.Int32
			f := fakeredis.New()
			h := newHeld()
			rdb := redis.NewClient(&redis.Options{Addr: f.Addr, ContextTimeoutEnabled: true})
			rdb.AddHook(valueHook{seen: &seen, missing: &missing}) // first: it sees every command
			rdb.AddHook(h)
			rdb.AddHook(f)
			cl := New(rdb)
			cctx, cancel := cx.mk(herdDeadline)()
			defer cancel()
			go func() { time.Sleep(herdHold); close(h.Release) }()
			if _, err := cl.Take(cctx, "k", FixedWindow(10, time.Minute), 1); err != nil { // waits past its deadline
				t.Fatal(err)
			}
			child := context.WithValue(cctx, valueKey{}, "span-1")
			seen.Store(0)
			missing.Store(0)
			if _, err := cl.Take(child, "k", FixedWindow(10, time.Minute), 1); err != nil {
				t.Fatal(err)
			}
			if seen.Load() == 0 || missing.Load() != 0 {
				t.Fatalf("the derived context's value: on %d commands, missing on %d", seen.Load(), missing.Load())
			}
			if cx.name != "client.WithTimeout" {
				return
			}
			cancel()
			sent := len(f.Calls())
			if _, err := cl.Take(cctx, "k", FixedWindow(10, time.Minute), 1); !errors.Is(err, context.Canceled) {
				t.Fatalf("a call with the cancelled context: %v, want context.Canceled", err)
			}
			if n := len(f.Calls()); n != sent {
				t.Fatalf("a call with the cancelled context sent %d commands", n-sent)
			}
		})
	}
}

// valueHook counts the commands that carry valueKey's value, and those
// that do not.
type valueHook struct{ seen, missing *atomic.Int32 }

func (valueHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h valueHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(valueKey{}) == "span-1" {
			h.seen.Add(1)
		} else {
			h.missing.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (valueHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
