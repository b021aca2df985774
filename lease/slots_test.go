package lease

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// work is a simulated holder: its id and when its work ends.
type work struct {
	id   string
	ends int64
}

// slotRun is a run of holders on tr's processes, carried from one
// run to the next: each process's holders, and the ids given.
type slotRun struct {
	tr   *tier
	held [][]work
	seq  int
}

func newSlotRun(tr *tier) *slotRun { return &slotRun{tr: tr, held: make([][]work, len(tr.procs))} }

// run has each of the run's processes try to start a holder every step
// (its work lasting 5 to 30 ms) and release those whose work ended, for
// d, sweeping every Target as the sweeper would; it returns the holders
// admitted, the decisions, the errors, and the most holding at once.
func (sr *slotRun) run(t *testing.T, key string, l client.Concurrency, d, step time.Duration, failing bool) (admitted, decisions, errs, most int, live float64) {
	t.Helper()
	tr, held := sr.tr, sr.held
	lastSweep := tr.now()
	var sum, samples float64
	for end := tr.now() + int64(d); tr.now() < end; {
		now := tr.now()
		n := 0
		for i, p := range tr.procs {
			kept := held[i][:0]
			for _, w := range held[i] {
				if w.ends <= now {
					if _, err := p.Release(ctx, key, w.id); err != nil && !failing {
						t.Fatal(err)
					}
					continue
				}
				kept = append(kept, w)
			}
			held[i] = kept
			sr.seq++
			id := "job-" + strconv.Itoa(sr.seq)
			r, err := p.Acquire(ctx, key, l, id)
			decisions++
			switch {
			case err != nil:
				errs++
			case !r.Limited:
				admitted++
				held[i] = append(held[i], work{id, now + int64(5*time.Millisecond) + rand.Int64N(int64(25*time.Millisecond))})
			}
			n += len(held[i])
		}
		most = max(most, n)
		sum += float64(n)
		samples++
		tr.settle()
		if now-lastSweep >= int64(50*time.Millisecond) {
			for _, p := range tr.procs {
				p.sweep(now)
			}
			tr.settle()
			lastSweep = now
		}
		tr.advance(step)
	}
	return admitted, decisions, errs, most, sum / samples
}

// Four processes start holders of 5 to 30 ms on a concurrency limit of 40
// at about 6× what it holds, for 3 s: the holders at once never pass 40
// (the slots handed out here are slots each process holds at the key),
// the limit is used (on average at least 36 held), and the calls stay
// under 0.01 a decision.
func TestLeasedSlots(t *testing.T) {
	tr := newTierSwept(t, 4, Options{}, false)
	l := client.Concurrency{Limit: 40, Lease: 30 * time.Second}
	admitted, decisions, errs, most, live := newSlotRun(tr).run(t, "conc", l, 3*time.Second, 250*time.Microsecond, false)
	if errs != 0 || most > 40 {
		t.Fatalf("%d errors; %d holders at once on a limit of 40", errs, most)
	}
	if live < 36 {
		t.Fatalf("%.1f holders on average on a limit of 40 at 6x demand", live)
	}
	if per := float64(tr.calls.Load()) / float64(decisions); per > 0.01 {
		t.Fatalf("%d calls for %d decisions", tr.calls.Load(), decisions)
	}
	// What the key holds is what the processes hold, each under its id.
	var held int64
	for _, p := range tr.procs {
		v, _ := p.pools.Load("conc")
		sp := v.(*slotPool)
		sp.mu.Lock()
		held += sp.held
		sp.mu.Unlock()
	}
	r, err := tr.procs[0].c.PeekConcurrency(ctx, "conc", 40)
	if err != nil || 40-freeSlots(r) != held {
		t.Fatalf("the key has %d free (%v); the processes hold %d", freeSlots(r), err, held)
	}
	// Each process gets about a quarter of the slots: what each admitted
	// in the run, by Jain's index.
	var each []int64
	for _, p := range tr.procs {
		each = append(each, p.Stats().Local)
	}
	if j := jain(each); j < 0.95 {
		t.Fatalf("admitted %v: Jain's index %.3f", each, j)
	}
	t.Logf("%d admitted of %d decisions, at most %d at once, %.1f on average, %d calls; each process admitted %v (Jain %.4f)",
		admitted, decisions, most, live, tr.calls.Load(), each, jain(each))
	// Close gives back the free slots; those in use stay held.
	var inUse int64
	for _, p := range tr.procs {
		v, _ := p.pools.Load("conc")
		sp := v.(*slotPool)
		sp.mu.Lock()
		inUse += int64(len(sp.holders))
		sp.mu.Unlock()
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := tr.procs[0].c.PeekConcurrency(ctx, "conc", 40); err != nil || freeSlots(r) != 40-inUse {
		t.Fatalf("after Close the key has %d free (%v); %d are in use", freeSlots(r), err, inUse)
	}
}

// freeSlots is the slots free at a key, from CONC.PEEK's reply (which
// says what remains after one more acquire).
func freeSlots(r client.Result) int64 {
	if r.Limited {
		return 0
	}
	return r.Remaining + 1
}

// A holder that never releases lapses here with its Lease, and its slot
// goes to the next; a renewing holder keeps its slot; Close gives back
// the free slots, and a holder's Release after Close releases its slot
// at the key.
func TestLeasedSlotLapse(t *testing.T) {
	tr := newTierSwept(t, 1, Options{Hot: 1}, false)
	p := tr.procs[0]
	l := client.Concurrency{Limit: 2, Lease: 2 * time.Second}
	acquire := func(id string) bool {
		t.Helper()
		r, err := p.Acquire(ctx, "c", l, id)
		if err != nil {
			t.Fatal(err)
		}
		tr.settle()
		return !r.Limited
	}
	if !acquire("a") || !acquire("b") || acquire("c") {
		t.Fatal("a and b admitted, c refused: not so")
	}
	if s := p.Stats(); s.Local < 1 || s.Exact != 0 {
		t.Fatalf("stats %+v", s)
	}
	for range 40 { // 2 s; b renews each 100 ms, a never; the slots are renewed at the key
		tr.advance(50 * time.Millisecond)
		p.sweep(tr.now())
		tr.settle()
		if tr.now()%int64(100*time.Millisecond) == 0 && !acquire("b") {
			t.Fatal("b's renewal refused")
		}
	}
	tr.advance(time.Millisecond)
	if !acquire("c") || acquire("d") {
		t.Fatal("after a's lease: c admitted, d refused: not so")
	}
	r, err := p.c.PeekConcurrency(ctx, "c", 2)
	if err != nil || freeSlots(r) != 0 {
		t.Fatalf("the key: %+v %v", r, err)
	}
	if live, err := p.Release(ctx, "c", "a"); err != nil || live {
		t.Fatalf("a's release after its lease: %v %v", live, err)
	}
	if live, err := p.Release(ctx, "c", "c"); err != nil || !live {
		t.Fatalf("c's release: %v %v", live, err)
	}
	if err := p.Close(ctx); err != nil { // gives back c's free slot
		t.Fatal(err)
	}
	if r, _ = p.c.PeekConcurrency(ctx, "c", 2); freeSlots(r) != 1 {
		t.Fatalf("after Close the key has %d free; want 1 (b holds one)", freeSlots(r))
	}
	if live, err := p.Release(ctx, "c", "b"); err != nil || !live {
		t.Fatalf("b's release after Close: %v %v", live, err)
	}
	if r, _ = p.c.PeekConcurrency(ctx, "c", 2); freeSlots(r) != 2 {
		t.Fatalf("after b's release the key has %d free; want 2", freeSlots(r))
	}
}

// Redis fails under four processes at 6× a limit of 40: the slots held
// are handed out while fresh (the key holds them a Lease past any), then
// Acquire returns the error at once; the holders at once never pass 40,
// and no decision waits for the call. Redis back, the tier recovers.
func TestLeasedSlotsRedisAway(t *testing.T) {
	tr := newTierSwept(t, 4, Options{}, false)
	var failing atomic.Bool
	tr.downWhile(&failing)
	l := client.Concurrency{Limit: 40, Lease: 5 * time.Second}
	sr := newSlotRun(tr)
	if _, _, errs, most, _ := sr.run(t, "conc", l, time.Second, 250*time.Microsecond, false); errs != 0 || most > 40 {
		t.Fatalf("before: %d errors, %d at once", errs, most)
	}
	failing.Store(true)
	start := time.Now()
	admitted, decisions, errs, most, _ := sr.run(t, "conc", l, 3*time.Second, 250*time.Microsecond, true)
	if most > 40 || errs < decisions/2 || admitted == 0 {
		t.Fatalf("a 3 s outage: %d admitted, %d errors of %d decisions, %d at once", admitted, errs, decisions, most)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the outage's decisions took %v", took)
	}
	t.Logf("a 3 s outage: %d admitted (from the slots held), %d errors of %d decisions", admitted, errs, decisions)
	failing.Store(false)
	if _, _, errs, most, live := sr.run(t, "conc", l, 2*time.Second, 250*time.Microsecond, false); errs > 8 || most > 40 || live < 30 {
		t.Fatalf("after: %d errors, %d at once, %.1f on average", errs, most, live)
	}
}

// A holder that never releases, away from the limit: it lapses with its
// Lease, and once the key has been idle a Lifetime the pool is forgotten
// and every slot goes back to the key.
func TestLeasedSlotForgotten(t *testing.T) {
	tr := newTierSwept(t, 1, Options{Hot: 1}, false)
	p := tr.procs[0]
	l := client.Concurrency{Limit: 10, Lease: 2 * time.Second}
	for _, id := range []string{"a", "b"} {
		if r, err := p.Acquire(ctx, "c", l, id); err != nil || r.Limited {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
		tr.settle()
	}
	if live, err := p.Release(ctx, "c", "b"); err != nil || !live {
		t.Fatalf("b's release: %v %v", live, err)
	}
	for range 60 { // 3 s: a's lease ends at 2 s, the key is forgotten a Lifetime later
		tr.advance(50 * time.Millisecond)
		p.sweep(tr.now())
		tr.settle()
	}
	if _, ok := p.pools.Load("c"); ok {
		t.Fatal("the pool of a key idle since its holder lapsed is still kept")
	}
	if r, err := p.c.PeekConcurrency(ctx, "c", 10); err != nil || freeSlots(r) != 10 {
		t.Fatalf("the key has %d free (%v); want 10", freeSlots(r), err)
	}
}

// The slot calls of one pool never cross: with every release at the key
// taking 30 ms, a process whose holders come and go (giving back spare
// slots, asking for more) never has more holders than the slots the key
// holds for it.
func TestLeasedSlotCallsInOrder(t *testing.T) {
	tr := newTierSwept(t, 1, Options{Hot: 1}, false)
	tr.f.Before = func(cmd redis.Cmder) error {
		tr.calls.Add(1)
		if cmd.Name() == "conc.release" {
			time.Sleep(30 * time.Millisecond) // real time: the grant that follows is sent meanwhile
		}
		return nil
	}
	p := tr.procs[0]
	l := client.Concurrency{Limit: 50, Lease: 10 * time.Second}
	var held []string
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 400 {
		if len(held) > 0 && rng.IntN(3) == 0 { // release some
			n := rng.IntN(len(held)) + 1
			for _, id := range held[:n] {
				if _, err := p.Release(ctx, "c", id); err != nil {
					t.Fatal(err)
				}
			}
			held = held[n:]
		}
		for range rng.IntN(4) {
			id := "h" + strconv.Itoa(i) + "-" + strconv.Itoa(len(held))
			if r, err := p.Acquire(ctx, "c", l, id); err != nil {
				t.Fatal(err)
			} else if !r.Limited {
				held = append(held, id)
			}
		}
		tr.advance(20 * time.Millisecond)
		if i%3 == 0 {
			p.sweep(tr.now())
		}
		// Without waiting for the calls in flight: what the key holds now.
		r, err := p.c.PeekConcurrency(ctx, "c", 50)
		if err != nil {
			t.Fatal(err)
		}
		if atKey := 50 - freeSlots(r); int64(len(held)) > atKey {
			t.Fatalf("step %d: %d holders here, the key holds %d for the process", i, len(held), atKey)
		}
	}
	tr.settle()
	if s := p.Stats(); s.Returned == 0 || s.Granted == 0 {
		t.Fatalf("no slot went back or came: %+v", s)
	}
}

// A release whose call fails but which the server runs later, after the
// next renewal (a command that timed out in a stalled connection): the
// pool never hands out the slots it may have released, so its holders and
// the others' stay within the limit; once it has no holder, its id
// retires with them and a new one takes their place.
func TestLeasedSlotStaleRelease(t *testing.T) {
	tr := newTierSwept(t, 1, Options{Hot: 1}, false)
	var mu sync.Mutex
	var stale []any
	tr.f.Before = func(cmd redis.Cmder) error {
		mu.Lock()
		defer mu.Unlock()
		if cmd.Name() == "conc.release" && stale == nil {
			stale = cmd.Args()
			return errors.New("read tcp 127.0.0.1:6379: i/o timeout")
		}
		return nil
	}
	p := tr.procs[0]
	l := client.Concurrency{Limit: 10, Lease: 10 * time.Second}
	var ids []string
	for i := range 8 {
		id := "h" + strconv.Itoa(i)
		if r, err := p.Acquire(ctx, "c", l, id); err != nil || r.Limited {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
		ids = append(ids, id)
		tr.settle()
	}
	for _, id := range ids[:6] { // the spare goes back at the next sweeps: its release fails
		p.Release(ctx, "c", id)
	}
	ids = ids[6:]
	for range 3 {
		tr.advance(100 * time.Millisecond)
		p.sweep(tr.now())
		tr.settle()
	}
	mu.Lock()
	args := stale
	mu.Unlock()
	if args == nil {
		t.Fatal("no release was sent")
	}
	tr.advance(600 * time.Millisecond) // the next renewal answers
	p.sweep(tr.now())
	tr.settle()
	if _, err := p.c.ReleaseN(ctx, args[1].(string), args[2].(string), args[3].(int64)); err != nil { // and the stale release runs now
		t.Fatal(err)
	}
	others := 0
	for i := range 10 { // another process takes what the key has free
		if r, err := p.c.Acquire(ctx, "c", l, "other"+strconv.Itoa(i)); err == nil && !r.Limited {
			others++
		}
	}
	for i := range 10 {
		id := "n" + strconv.Itoa(i)
		r, err := p.Acquire(ctx, "c", l, id)
		tr.settle()
		if err == nil && !r.Limited {
			ids = append(ids, id)
		}
	}
	if len(ids)+others > 10 {
		t.Fatalf("%d holders here and %d elsewhere on a limit of 10", len(ids), others)
	}
	// Once the pool has no holder its id retires: a new id's slots serve.
	for _, id := range ids {
		p.Release(ctx, "c", id)
	}
	for i := range others {
		p.c.Release(ctx, "c", "other"+strconv.Itoa(i))
	}
	tr.advance(50 * time.Millisecond) // one sweep, well within a Lifetime of the releases: the pool is kept
	p.sweep(tr.now())
	tr.settle()
	v, _ := p.pools.Load("c")
	if sp := v.(*slotPool); sp.doubt != 0 || sp.id == args[2].(string) {
		t.Fatalf("the pool kept its id %s with %d doubtful slots", sp.id, sp.doubt)
	}
	tr.advance(100 * time.Millisecond) // past the pace of the refusals above
	for i := range 5 {
		if r, err := p.Acquire(ctx, "c", l, "m"+strconv.Itoa(i)); err != nil || r.Limited {
			t.Fatalf("after the retirement, acquire %d: %+v %v", i, r, err)
		}
		tr.settle()
	}
}

// Redis restarted without persistence under four processes at 6× a limit
// of 40: its connections refused for 300 ms, then back with no keys, where
// another client at once takes every slot it can. A pool that met the
// refused connection hands out none of the slots it held (they did not
// come back with the server) until a grant answers, so the holders the
// pools admitted since the failure and the other client's never pass 40
// together. (A pool that handed out its slots while fresh, as it does
// while a server does not answer, admitted 40 more on top.)
func TestLeasedSlotsRestarted(t *testing.T) {
	tr := newTierSwept(t, 4, Options{}, false)
	var failing atomic.Bool
	tr.f.Before = func(redis.Cmder) error {
		if failing.Load() {
			return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return nil
	}
	l := client.Concurrency{Limit: 40, Lease: 5 * time.Second}
	sr := newSlotRun(tr)
	if _, _, errs, most, _ := sr.run(t, "conc", l, time.Second, 250*time.Microsecond, false); errs != 0 || most > 40 {
		t.Fatalf("before: %d errors, %d at once", errs, most)
	}
	failed := tr.now()
	failing.Store(true)
	sr.run(t, "conc", l, 300*time.Millisecond, 250*time.Microsecond, true)
	tr.f.Flush()
	failing.Store(false)
	other := client.New(tr.f.Client())
	taken := 0
	for i := range 40 {
		if r, err := other.Acquire(ctx, "conc", l, "other-"+strconv.Itoa(i)); err == nil && !r.Limited {
			taken++
		}
	}
	since := func() (n int) { // the holders the pools admitted since the failure began, holding now
		for _, held := range sr.held {
			for _, w := range held {
				if w.ends-int64(30*time.Millisecond) >= failed { // (work lasts at most 30 ms)
					n++
				}
			}
		}
		return n
	}
	for i := range 100 { // a second more, watching them
		if n := since(); n+taken > 40 {
			t.Fatalf("%d ms after the restart: the other client holds %d, the pools' holders admitted since the failure %d: more than 40", i*10, taken, n)
		}
		sr.run(t, "conc", l, 10*time.Millisecond, 250*time.Microsecond, false)
	}
	if taken == 0 {
		t.Fatal("the other client took no slot after the restart")
	}
	t.Logf("the other client took %d slots after the restart; first process %+v", taken, tr.procs[0].Stats())
}
