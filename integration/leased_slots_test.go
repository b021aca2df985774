package integration

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// Concurrency through the local tier on a real server: four processes
// (each its own client), 16 goroutines each, start jobs of 1 to 6 ms on a
// limit of 32 slots for 1.5 s, each acquiring before and releasing after.
// The jobs running at once, counted by the jobs themselves, never pass 32;
// the slots are used (on average at least 80% held), each process gets
// about a quarter (Jain's index at least 0.85), fewer than 0.05 calls
// reach Redis per decision, and after Close the key holds nothing.
func TestLeasedSlots(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "conc")
		l := client.Concurrency{Limit: 32, Lease: 10 * time.Second}
		var calls sent
		procs := leasedProcs(t, s, 4, &calls)
		var running, most, admitted, decisions atomic.Int64
		var busy atomic.Int64 // running, summed at each sample
		var samples atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var seq atomic.Int64
		for i, p := range procs {
			for range 16 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						id := "job-" + strconv.Itoa(i) + "-" + strconv.FormatInt(seq.Add(1), 10)
						r, err := p.Acquire(ctx, k, l, id)
						decisions.Add(1)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Limited {
							time.Sleep(time.Millisecond)
							continue
						}
						admitted.Add(1)
						n := running.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						busy.Add(n)
						samples.Add(1)
						time.Sleep(time.Millisecond + rand.N(5*time.Millisecond))
						running.Add(-1)
						if _, err := p.Release(ctx, k, id); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
		}
		time.Sleep(1500 * time.Millisecond)
		close(stop)
		wg.Wait()
		for _, p := range procs {
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		peek, err := client.New(s.rdb).PeekConcurrency(ctx, k, 32)
		if err != nil || peek.Limited || peek.Remaining != 31 {
			t.Fatalf("after Close the key: %+v %v; want every slot free", peek, err)
		}
		mean := float64(busy.Load()) / float64(max(samples.Load(), 1))
		// Each process gets about its share: what each admitted, by Jain's index.
		var each []float64
		for _, p := range procs {
			each = append(each, float64(p.Stats().Local))
		}
		var sum, sum2 float64
		for _, x := range each {
			sum, sum2 = sum+x, sum2+x*x
		}
		jain := sum * sum / (float64(len(each)) * sum2)
		if jain < 0.85 {
			t.Fatalf("each process admitted %v: Jain's index %.3f", each, jain)
		}
		d, c := decisions.Load(), calls.n.Load()
		if most.Load() > 32 || mean < 0.8*32 || float64(c)/float64(d) > 0.05 {
			t.Fatalf("%d jobs at once at most, %.1f on average (limit 32); %d calls for %d decisions; the first process: %+v",
				most.Load(), mean, c, d, procs[0].Stats())
		}
		t.Logf("%d admitted of %d decisions; at most %d at once, %.1f on average as each job started; %d calls (%.4f each); each process admitted %v (Jain %.3f)",
			admitted.Load(), d, most.Load(), mean, c, float64(c)/float64(d), each, jain)
	})
}

// A fixed window through the local tier on a real server: four processes,
// 32 goroutines at many times FixedWindow(2000, 1 s) for 2.5 s. Each
// second (the windows are the server's, and its clock is this machine's)
// admits at most 2000 — an admission is counted in the window it was
// asked for and answered in, one that straddles a window's end in the one
// of the two with room — and the full windows at least 95 % of it, with
// fewer than 0.01 calls per decision.
func TestLeasedFixedWindow(t *testing.T) {
	each(t, func(t *testing.T, s *server) {
		k := key(t, "fw")
		l := client.FixedWindow(2000, time.Second)
		var calls sent
		procs := leasedProcs(t, s, 4, &calls)
		start := time.Now()
		run := leasedRun(t, procs, k, l, 32, 2500*time.Millisecond)
		for _, p := range procs {
			p.Close(ctx)
		}
		perWindow := fixedWindows(t, run.admitted, 2000, time.Second)
		first, last := start.UnixNano()/int64(time.Second), (start.UnixNano()+int64(2500*time.Millisecond))/int64(time.Second)
		for w, n := range perWindow {
			if full := w > first && w < last; full && n < 1900 { // windows the run covered whole
				t.Fatalf("window %d admitted %d of 2000; all %v", w, n, perWindow)
			}
		}
		if d, c := run.decisions, calls.n.Load(); run.errors != 0 || float64(c)/float64(d) > 0.01 {
			t.Fatalf("%d errors; %d calls for %d decisions", run.errors, c, d)
		}
		t.Logf("admitted per window %v; %d decisions, %d calls", perWindow, run.decisions, calls.n.Load())
	})
}
