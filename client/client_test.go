package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// fn is a command's function in this version's edition.
func fn(name string) string { return name + lua.Versioned().Suffix }

// libVersion is the version this client's edition returns.
var libVersion = lua.Versioned().Version

// fakeServer is the shared fake Redis (internal/fakeredis), and
// replyError its error reply.
type (
	fakeServer = fakeredis.Server
	replyError = fakeredis.ReplyError
)

// TestMain gives each client the tests make 10 s for a piece of start-up
// work, where a server has 2: the fake's probe is a function call, but on
// a machine whose cores are busy with other work it was starved past 2 s
// (TestTryAgain failed so, once). The tests of the bound set their own.
func TestMain(m *testing.M) {
	prepareTimeout = 10 * time.Second
	os.Exit(m.Run())
}

func newFake(reply ...int64) (*Client, *fakeServer) {
	f := fakeredis.New()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	vals := make([]any, len(reply))
	for i, v := range reply {
		vals[i] = v
	}
	f.Reply = vals
	rdb.AddHook(f)
	return New(rdb), f
}

var ctx = context.Background()

func TestArguments(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		peek bool
		cost int64
		opts []Option
		want string
	}{
		{GCRA(9, 10, time.Minute), false, 1, nil, "[GCRA.THROTTLE k 9 10 60 1 MS]"},
		{GCRA(9, 10, time.Minute), true, 0, nil, "[GCRA.PEEK k 9 10 60 0 MS]"},
		{TokenBucket(100, 10, time.Second), false, 5, []Option{Reserve(20)}, "[TB.TAKE k 100 10 1 5 MS RESERVE 20]"},
		{Shaper(3, 1, 2*time.Second), false, 1, nil, "[LB.ENQUEUE k 3 1 2 1 MS]"},
		{SlidingWindow(50, time.Minute), false, 1, nil, "[SW.HIT k 50 60 1 MS]"},
		{FixedWindow(1000, time.Hour), true, 1, nil, "[FW.PEEK k 1000 3600 1 MS]"},
		{SlidingLog(5, 15*time.Minute), false, 1, []Option{Reserve(0)}, "[SL.HIT k 5 900 1 MS]"},
	} {
		c2, f := newFake(0, 1, 0, -1, 0)
		var err error
		if c.peek {
			_, err = c2.Peek(ctx, "k", c.l, c.cost, c.opts...)
		} else {
			_, err = c2.Take(ctx, "k", c.l, c.cost, c.opts...)
		}
		if err != nil || len(f.Sent) != 1 || fmt.Sprint(f.Sent[0]) != c.want {
			t.Errorf("%v: sent %v (%v), want %s", c.l, f.Sent, err, c.want)
		}
	}
}

// A period that is not whole seconds is an error, and nothing is sent: the
// module takes seconds, and rounding would change the limit silently.
func TestWholeSeconds(t *testing.T) {
	c, f := newFake(0, 1, 0, -1, 0)
	for _, l := range []Limit{
		GCRA(1, 1, 1500*time.Millisecond),
		SlidingWindow(1, 0),
		FixedWindow(1, -time.Second),
	} {
		if _, err := c.Take(ctx, "k", l, 1); err == nil {
			t.Errorf("%+v: no error", l)
		}
	}
	if _, err := c.Acquire(ctx, "k", Concurrency{Limit: 1, Lease: time.Millisecond}, "id"); err == nil {
		t.Error("a lease of 1 ms: no error")
	}
	if len(f.Sent) != 0 {
		t.Fatalf("sent %v", f.Sent)
	}
}

func TestResult(t *testing.T) {
	c, _ := newFake(1, 10, 0, 1500, 60000)
	r, err := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1)
	want := Result{Verdict: ratelimit.Verdict{Limited: true, Limit: 10, Remaining: 0, RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Minute}}
	if err != nil || r != want {
		t.Fatalf("%+v %v, want %+v", r, err, want)
	}
	c, _ = newFake(0, 10, 9, -1, 6000)
	if r, _ := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); r.Limited || r.RetryAfter != ratelimit.Never {
		t.Fatalf("admitted: %+v", r)
	}
	c, _ = newFake(0, 1, 2, 3)
	if _, err := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err == nil {
		t.Fatal("a four-integer reply was taken")
	}
}

func TestAll(t *testing.T) {
	c, f := newFake(1, 100, 0, 2000, 30000, 1)
	r, err := c.All(ctx, []Keyed{
		{Key: "{u}:rpm", Limit: GCRA(59, 60, time.Minute), Cost: 1},
		{Key: "{u}:tpm", Limit: TokenBucket(40000, 40000, time.Minute), Cost: 1200},
	}, Reserve(5))
	want := "[RL.ALL 2 {u}:rpm {u}:tpm GCRA 59 60 60 1 TB 40000 40000 60 1200 MS RESERVE 5]"
	if err != nil || fmt.Sprint(f.Sent[0]) != want || r.Policy != 1 || !r.Limited || r.RetryAfter != 2*time.Second {
		t.Fatalf("sent %v, got %+v %v", f.Sent, r, err)
	}
	if _, err := c.PeekAll(ctx, []Keyed{{Key: "k", Limit: Shaper(1, 1, time.Second)}}); err == nil {
		t.Fatal("a shaper in All: no error")
	}
	if len(f.Sent) != 1 {
		t.Fatalf("sent %v", f.Sent)
	}
}

func TestConcurrency(t *testing.T) {
	c, f := newFake(0, 4, 3, -1, 120000)
	r, err := c.Acquire(ctx, "rl:conc:export", Concurrency{Limit: 4, Lease: 2 * time.Minute}, "req-1", Reserve(1))
	if err != nil || r.Remaining != 3 || r.ResetAfter != 2*time.Minute ||
		fmt.Sprint(f.Sent[0]) != "[CONC.ACQUIRE rl:conc:export 4 120 req-1 MS RESERVE 1]" {
		t.Fatalf("%+v %v, sent %v", r, err, f.Sent)
	}
	if _, err := c.PeekConcurrency(ctx, "rl:conc:export", 4); err != nil || fmt.Sprint(f.Sent[1]) != "[CONC.PEEK rl:conc:export 4 MS]" {
		t.Fatalf("peek: %v, sent %v", err, f.Sent)
	}
	f.Reply = int64(1)
	if held, err := c.Release(ctx, "rl:conc:export", "req-1"); !held || err != nil || fmt.Sprint(f.Sent[2]) != "[CONC.RELEASE rl:conc:export req-1]" {
		t.Fatalf("release: %v %v, sent %v", held, err, f.Sent)
	}
}

// With the Module engine, a server without the module is ErrNoModule.
func TestNoModule(t *testing.T) {
	c, f := newFake()
	c.engine = Module
	f.Err = errors.New("ERR unknown command 'GCRA.THROTTLE', with args beginning with: 'k' '9' ")
	_, err := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1)
	if !errors.Is(err, ErrNoModule) {
		t.Fatalf("%v does not wrap ErrNoModule", err)
	}
	f.Err = errors.New("ERR max_burst must be an integer from 0 to 9007199254740990")
	if _, err := c.Take(ctx, "k", GCRA(-1, 10, time.Minute), 1); errors.Is(err, ErrNoModule) || err == nil {
		t.Fatalf("an argument error became %v", err)
	}
	if _, err := c.Release(ctx, "k", "id"); !errors.Is(err, ErrNoModule) && !errors.Is(err, f.Err) {
		t.Fatalf("release: %v", err)
	}
}

// A server without the module: the client asks once, loads the script
// once, then calls it by its SHA1; a server that lost its scripts (a
// restart, a failover) gets it loaded again and the call sent again.
func TestAutoEngine(t *testing.T) {
	c, f := newFake(0, 10, 9, -1, 6000)
	f.NoModule = true
	for range 2 {
		if _, err := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := lua.Get("GCRA.THROTTLE")
	call := []any{"evalsha", s.SHA1, int64(1), "k", int64(9), int64(10), int64(60), int64(1), "MS"}
	load := []any{"SCRIPT", "LOAD", s.Source}
	if got, want := fmt.Sprint(f.Sent), fmt.Sprint([][]any{load, call, call}); got != want {
		t.Fatalf("sent %.300s...", got)
	}
	f.Sent, f.Loaded = nil, nil // the server restarted: no scripts
	if _, err := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(f.Sent), fmt.Sprint([][]any{call, load, call}); got != want {
		t.Fatalf("after a restart, sent %.300s...", got)
	}
	if f.Probes != 1 {
		t.Fatalf("%d COMMAND INFO probes, want 1", f.Probes)
	}
	f.Sent = nil
	p, _ := lua.Get("GCRA.PEEK")
	if _, err := c.Peek(ctx, "k", GCRA(9, 10, time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	if len(f.Sent) != 2 || f.Sent[1][0] != "evalsha_ro" || f.Sent[1][1] != p.SHA1 {
		t.Fatalf("a peek sent %v", f.Sent)
	}
	f.Sent = nil
	if _, err := c.All(ctx, []Keyed{{"{u}:a", GCRA(9, 10, time.Minute), 1}, {"{u}:b", FixedWindow(5, time.Minute), 1}}); err != nil {
		t.Fatal(err)
	}
	if a, _ := lua.Get("RL.ALL"); fmt.Sprint(f.Sent[1][:5]) != fmt.Sprint([]any{"evalsha", a.SHA1, int64(2), "{u}:a", "{u}:b"}) {
		t.Fatalf("All sent %v", f.Sent)
	}

	// Forced engines: the module's command whatever COMMAND INFO says, and
	// the scripts on a server that has the module.
	m, fm := newFake(0, 10, 9, -1, 6000)
	fm.NoModule = true
	m.engine = Module
	if _, err := m.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err != nil || fm.Sent[0][0] != "GCRA.THROTTLE" {
		t.Fatalf("Module sent %v (%v)", fm.Sent, err)
	}
	sc, fs := newFake(0, 10, 9, -1, 6000)
	sc.engine = Scripts
	if _, err := sc.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err != nil || fs.Sent[1][0] != "evalsha" || fs.Probes != 0 {
		t.Fatalf("Scripts sent %v (%v)", fs.Sent, err)
	}
}

// A server that will not answer COMMAND (an ACL), and has no module: the
// module's command comes back unknown, so it runs as its script, and the
// next call goes to the script at once.
func TestEngineWithoutCommand(t *testing.T) {
	c, f := newFake(0, 10, 9, -1, 6000)
	f.NoCommand, f.Unknown = true, true
	for range 2 {
		if r, err := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err != nil || r.Limit != 10 {
			t.Fatalf("take: %+v, %v", r, err)
		}
	}
	var sent []any
	for _, a := range f.Sent {
		sent = append(sent, a[0])
	}
	if fmt.Sprint(sent) != "[GCRA.THROTTLE SCRIPT evalsha evalsha]" {
		t.Fatalf("sent %v", sent)
	}
}

// BenchmarkTake measures the client's own work per call, go-redis's
// included, without a network (make bench reports its allocations).
func BenchmarkTake(b *testing.B) {
	c, _ := newFake(0, 10, 9, -1, 6000)
	l := GCRA(9, 10, time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Take(ctx, "rl:api:key:abc", l, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGoRedisDo is the reference for BenchmarkTake: go-redis's own
// rdb.Do of the same command, with the same fake server.
func BenchmarkGoRedisDo(b *testing.B) {
	c, _ := newFake(0, 10, 9, -1, 6000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.rdb.Do(ctx, "GCRA.THROTTLE", "rl:api:key:abc", int64(9), int64(10), int64(60), int64(1), "MS").Int64Slice(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestQuota(t *testing.T) {
	for _, c := range []struct {
		l Limit
		q int64
		w time.Duration
	}{
		{GCRA(9, 10, time.Minute), 10, time.Minute},
		{GCRA(0, 3, 10*time.Second), 1, 4 * time.Second}, // 3.33 s rounded up
		{TokenBucket(100, 10, time.Second), 100, 10 * time.Second},
		{Shaper(4, 1, time.Second), 5, 5 * time.Second},
		{SlidingWindow(50, time.Minute), 50, time.Minute},
		{FixedWindow(1000, time.Hour), 1000, time.Hour},
		{SlidingLog(5, 15*time.Minute), 5, 15 * time.Minute},
		{Limit{}, 0, 0},
	} {
		if q, w := c.l.Quota(); q != c.q || w != c.w {
			t.Errorf("%v: %d per %v, want %d per %v", c.l, q, w, c.q, c.w)
		}
	}
}

// A Limit says its family and its parameters, as the command table names
// them (whether it refunds and leases: lease's TestLeases).
func TestLimitFamily(t *testing.T) {
	for _, c := range []struct {
		l      Limit
		family string
		n, m   int64
		period time.Duration
	}{
		{PerSecond(10), "GCRA", 9, 10, time.Second},
		{TokenBucket(100, 10, time.Minute), "TB", 100, 10, time.Minute},
		{Shaper(4, 1, time.Second), "LB", 4, 1, time.Second},
		{SlidingWindow(50, time.Minute), "SW", 50, 0, time.Minute},
		{FixedWindow(1000, time.Hour), "FW", 1000, 0, time.Hour},
		{SlidingLog(5, 15*time.Minute), "SL", 5, 0, 15 * time.Minute},
		{Limit{}, "", 0, 0, 0},
	} {
		n, m, period := c.l.Params()
		if f := c.l.Family(); f != c.family || n != c.n || m != c.m || period != c.period {
			t.Errorf("%v: family %q, params %d %d %v; want %q, %d %d %v", c.l, f, n, m, period, c.family, c.n, c.m, c.period)
		}
	}
}

func TestAllEach(t *testing.T) {
	c, f := newFake(1, 10, 0, 6000, 60000, 0, 1, 10, 0, 6000, 60000, 0, 100, 40, -1, 3000)
	each := make([]Result, 2)
	r, err := c.AllEach(ctx, []Keyed{
		{Key: "{u}:a", Limit: GCRA(9, 10, time.Minute), Cost: 1},
		{Key: "{u}:b", Limit: SlidingWindow(100, time.Hour), Cost: 1},
	}, each)
	want := "[RL.ALL 2 {u}:a {u}:b GCRA 9 10 60 1 SW 100 3600 1 MS EACH]"
	if err != nil || fmt.Sprint(f.Sent[0]) != want || !r.Limited || r.Policy != 0 ||
		!each[0].Limited || each[1].Limited || each[1].Remaining != 40 || each[1].ResetAfter != 3*time.Second {
		t.Fatalf("sent %v, got %+v %+v %v", f.Sent, r, each, err)
	}
	if _, err := c.AllEach(ctx, []Keyed{{Key: "a", Limit: GCRA(1, 1, time.Second)}}, nil); err == nil {
		t.Fatal("no room for the results: no error")
	}
	c, _ = newFake(0, 10, 9, -1, 6000, 0) // six integers: the server ignored EACH
	if _, err := c.AllEach(ctx, []Keyed{{Key: "a", Limit: GCRA(9, 10, time.Minute), Cost: 1}}, make([]Result, 1)); err == nil {
		t.Fatal("a reply without the limits' own figures: no error")
	}
}

// A herd of first calls to a server without the module: one COMMAND INFO
// and one SCRIPT LOAD, whatever the number of calls waiting for them.
func TestFirstCallsHerd(t *testing.T) {
	c, f := newFake(0, 10, 9, -1, 6000)
	f.NoModule = true
	herd(t, c, f)
	loads := 0
	for _, a := range f.Sent {
		if a[0] == "SCRIPT" {
			loads++
		}
	}
	if f.Probes != 1 || loads != 1 || len(f.Sent) != 61 {
		t.Fatalf("%d probes, %d loads, %d commands for 60 calls; want 1, 1, 61", f.Probes, loads, len(f.Sent))
	}
	if e := c.Engines(); len(e) != 1 || e["127.0.0.1:1"] != Scripts {
		t.Fatalf("Engines() = %v", e)
	}
}

// herd sends 60 first calls at once: the server holds every command until
// all of them wait on the probe, then answers; each call must succeed.
func herd(t *testing.T, c *Client, f *fakeServer) {
	t.Helper()
	f.Hold = make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for range 60 {
		wg.Go(func() {
			_, err := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1)
			errs <- err
		})
	}
	time.Sleep(50 * time.Millisecond) // let every call reach the probe
	f.Lock()
	close(f.Hold)
	f.Hold = nil
	f.Unlock()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A server that accepts and never answers: a client built without
// ContextTimeoutEnabled still returns at the context's deadline, and a
// caller already gone sends nothing.
func TestDeadlineWithoutContextTimeout(t *testing.T) {
	c, f := newFake(0, 10, 9, -1, 6000)
	c.engine = Module
	if c.deadlines {
		t.Fatal("a client without ContextTimeoutEnabled honours deadlines?")
	}
	f.Hold = make(chan struct{}) // never closed while the call runs
	defer close(f.Hold)
	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := c.Take(dctx, "k", GCRA(9, 10, time.Minute), 1)
	if !errors.Is(err, context.DeadlineExceeded) || !Unavailable(err) {
		t.Fatalf("a hung server: %v, want the deadline", err)
	}
	gone, cancel2 := context.WithCancel(ctx)
	cancel2()
	f.Lock()
	sent := len(f.Sent)
	f.Unlock()
	if _, err := c.Take(gone, "k", GCRA(9, 10, time.Minute), 1); !errors.Is(err, context.Canceled) || Unavailable(err) {
		t.Fatalf("a caller gone: %v", err)
	}
	f.Lock()
	defer f.Unlock()
	if len(f.Sent) != sent {
		t.Fatalf("a caller gone still sent %v", f.Sent[sent:])
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rdb.Close()
	if !New(rdb).deadlines {
		t.Fatal("ContextTimeoutEnabled: true, yet not honoured")
	}
}

func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{fmt.Errorf("wrapped: %w", context.Canceled), false},
		{context.DeadlineExceeded, true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{redis.ErrPoolTimeout, true},
		{replyError("LOADING Redis is loading the dataset in memory"), true},
		{replyError("BUSY Redis is busy running a script."), true},
		{replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("ERR max_burst must be an integer from 0 to 9007199254740990"), false},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyError("NOPERM this user has no permissions"), false},
		{fmt.Errorf("%w: ERR unknown command", ErrNoModule), false},
		{errors.New("ratelimit: period must be a positive whole number of seconds, not 1.5s"), false},
	} {
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// PerSecond, PerMinute and PerHour are redis_rate's: n at once, n per
// period after.
func TestPerPeriod(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		want string
		q    int64
		w    time.Duration
	}{
		{PerSecond(5), "[GCRA.THROTTLE k 4 5 1 1 MS]", 5, time.Second},
		{PerMinute(10), "[GCRA.THROTTLE k 9 10 60 1 MS]", 10, time.Minute},
		{PerHour(1000), "[GCRA.THROTTLE k 999 1000 3600 1 MS]", 1000, time.Hour},
	} {
		cl, f := newFake(0, 1, 0, -1, 0)
		if _, err := cl.Take(ctx, "k", c.l, 1); err != nil || fmt.Sprint(f.Sent[len(f.Sent)-1]) != c.want {
			t.Errorf("%v sent %v (%v), want %s", c.l, f.Sent, err, c.want)
		}
		if q, w := c.l.Quota(); q != c.q || w != c.w {
			t.Errorf("%v: quota %d per %v, want %d per %v", c.l, q, w, c.q, c.w)
		}
	}
}

// A batch: every call in one pipeline, each answered on its own, a call
// with bad arguments failing alone; on a server without the module, each
// script loaded once before the pipeline and called by its SHA1.
func TestBatch(t *testing.T) {
	for _, scripts := range []bool{false, true} {
		c, f := newFake(0, 10, 9, -1, 6000)
		f.NoModule = scripts
		b := c.Batch()
		take := b.Take("k1", PerMinute(10), 1)
		peek := b.Peek("k2", FixedWindow(5, time.Minute), 0, Reserve(1))
		bad := b.Take("k3", GCRA(1, 1, 1500*time.Millisecond), 1)
		acq := b.Acquire("k4", Concurrency{Limit: 4, Lease: time.Minute}, "id")
		err := b.Exec(ctx)
		if err == nil || !strings.Contains(err.Error(), "whole number of seconds") {
			t.Fatalf("scripts %v: Exec: %v, want the bad call's error", scripts, err)
		}
		for i, call := range []*Call{take, peek, acq} {
			if r, err := call.Result(); err != nil || r.Remaining != 9 || r.ResetAfter != 6*time.Second {
				t.Fatalf("scripts %v: call %d: %+v %v", scripts, i, r, err)
			}
		}
		if _, err := bad.Result(); err == nil {
			t.Fatal("the bad call has no error")
		}
		var sent []string
		for _, a := range f.Sent {
			sent = append(sent, fmt.Sprint(a[0]))
		}
		want := "[GCRA.THROTTLE FW.PEEK CONC.ACQUIRE]"
		if scripts {
			want = "[SCRIPT SCRIPT SCRIPT evalsha evalsha_ro evalsha]"
		}
		if got := fmt.Sprint(sent); got != want {
			t.Fatalf("scripts %v: sent %s, want %s", scripts, got, want)
		}
		if !scripts && fmt.Sprint(f.Sent[1]) != "[FW.PEEK k2 5 60 0 MS RESERVE 1]" {
			t.Fatalf("the peek: %v", f.Sent[1])
		}
		f.Reply = int64(1)
		b = c.Batch()
		rel := b.Release("k4", "id")
		if err := b.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if held, err := rel.Released(); !held || err != nil {
			t.Fatalf("release: %v %v", held, err)
		}
	}
}

// A batch's RL.ALL with EACH fills each limit's result, as AllEach does.
func TestBatchAllEach(t *testing.T) {
	c, f := newFake(1, 5, 0, 3000, 9000, 1, 0, 10, 8, -1, 6000, 1, 5, 0, 3000, 9000)
	b := c.Batch()
	each := make([]Result, 2)
	limits := []Keyed{{"{u}:a", GCRA(9, 10, time.Minute), 1}, {"{u}:b", FixedWindow(5, time.Minute), 1}}
	all := b.AllEach(limits, each)
	short := b.AllEach(limits, make([]Result, 1))
	if err := b.Exec(ctx); err == nil || !strings.Contains(err.Error(), "1 results for 2 limits") {
		t.Fatalf("Exec: %v", err)
	}
	r, err := all.Result()
	if err != nil || !r.Limited || r.Policy != 1 || r.RetryAfter != 3*time.Second {
		t.Fatalf("all: %+v %v", r, err)
	}
	if each[0].Limited || each[0].Remaining != 8 || !each[1].Limited || each[1].Limit != 5 {
		t.Fatalf("each: %+v", each)
	}
	if got := fmt.Sprint(f.Sent); got != "[[RL.ALL 2 {u}:a {u}:b GCRA 9 10 60 1 FW 5 60 1 MS EACH]]" {
		t.Fatalf("sent %s", got)
	}
	if _, err := short.Result(); err == nil {
		t.Fatal("too few results: no error")
	}
	f.Reply = []any{int64(0), int64(1), int64(2), int64(-1), int64(0), int64(0)}
	b = c.Batch()
	b.AllEach(limits, each)
	if err := b.Exec(ctx); err == nil || !strings.Contains(err.Error(), "replied 6 integers for 2 limits") {
		t.Fatalf("a reply without EACH's figures: %v", err)
	}
}

// A server without the module that takes FUNCTION: the client asks once,
// loads the library once (only when the server holds another version),
// then calls FCALL (FCALL_RO for a peek); a server that lost the library
// (FUNCTION FLUSH, a new primary) gets it loaded again and the call sent
// again.
func TestFunctionsEngine(t *testing.T) {
	c, f := newFake(0, 10, 9, -1, 6000)
	f.NoModule, f.Functions, f.Lib = true, true, "an older version"
	for range 2 {
		if r, err := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err != nil || r.Remaining != 9 {
			t.Fatalf("take: %+v %v", r, err)
		}
	}
	call := []any{"fcall", fn("gcra_throttle"), int64(1), "k", int64(9), int64(10), int64(60), int64(1), "MS"}
	if got, want := fmt.Sprint(f.Sent), fmt.Sprint([][]any{call, call}); got != want {
		t.Fatalf("sent %v, want %v", got, want)
	}
	if f.Probes != 1 || f.VersionAsks != 1 || f.Loads != 1 || f.Lib != libVersion {
		t.Fatalf("%d probes, %d version checks, %d loads (library %q); want 1, 1, 1", f.Probes, f.VersionAsks, f.Loads, f.Lib)
	}
	if f.Replaced != 0 {
		t.Fatalf("%d FUNCTION LOAD REPLACE: another version's library must stay", f.Replaced)
	}
	if e := c.Engines(); e["127.0.0.1:1"] != Functions {
		t.Fatalf("Engines() = %v", e)
	}
	f.Sent, f.Lib = nil, "" // flushed
	if _, err := c.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(f.Sent), fmt.Sprint([][]any{call, call}); got != want || f.Loads != 2 {
		t.Fatalf("after a flush, sent %v and loaded %d times", got, f.Loads)
	}
	f.Sent = nil
	if _, err := c.Peek(ctx, "k", GCRA(9, 10, time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.All(ctx, []Keyed{{"{u}:a", GCRA(9, 10, time.Minute), 1}, {"{u}:b", FixedWindow(5, time.Minute), 1}}); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(f.Sent[0][:3], f.Sent[1][:5]), fmt.Sprintf("[fcall_ro %s 1] [fcall %s 2 {u}:a {u}:b]", fn("gcra_peek"), fn("rl_all")); got != want {
		t.Fatalf("a peek and RL.ALL sent %s", got)
	}

	// A server that already holds this version is not loaded again.
	c2, f2 := newFake(0, 10, 9, -1, 6000)
	f2.NoModule, f2.Functions, f2.Lib = true, true, libVersion
	if _, err := c2.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err != nil || f2.Loads != 0 || f2.VersionAsks != 1 {
		t.Fatalf("%d loads, %d version checks (%v)", f2.Loads, f2.VersionAsks, err)
	}

	// Forced: the library on a server that has the module, with no probe.
	c3, f3 := newFake(0, 10, 9, -1, 6000)
	f3.Functions = true
	c3.engine = Functions
	if _, err := c3.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err != nil || f3.Probes != 0 || f3.Sent[0][0] != "fcall" {
		t.Fatalf("Functions sent %v, %d probes (%v)", f3.Sent, f3.Probes, err)
	}
	// Forced on a server without FUNCTION: its error, not the scripts.
	c4, _ := newFake(0, 10, 9, -1, 6000)
	c4.engine = Functions
	if _, err := c4.Take(ctx, "k", GCRA(9, 10, time.Minute), 1); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("Functions without FUNCTION: %v", err)
	}
}

// A herd of first calls on a server without the module that takes
// FUNCTION costs one probe and one library load.
func TestFirstCallsHerdFunctions(t *testing.T) {
	c, f := newFake(0, 10, 9, -1, 6000)
	f.NoModule, f.Functions = true, true
	herd(t, c, f)
	if f.Probes != 1 || f.Loads != 1 || f.VersionAsks != 1 || len(f.Sent) != 60 {
		t.Fatalf("%d probes, %d loads, %d version checks, %d commands for 60 calls; want 1, 1, 1, 60", f.Probes, f.Loads, f.VersionAsks, len(f.Sent))
	}
}

// A batch on a server without the module that takes FUNCTION: one FCALL
// per call in one pipeline.
func TestBatchFunctions(t *testing.T) {
	c, f := newFake(0, 10, 9, -1, 6000)
	f.NoModule, f.Functions = true, true
	b := c.Batch()
	take := b.Take("k1", PerMinute(10), 1)
	peek := b.Peek("k2", FixedWindow(5, time.Minute), 0)
	if err := b.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for _, call := range []*Call{take, peek} {
		if r, err := call.Result(); err != nil || r.Remaining != 9 {
			t.Fatalf("%+v %v", r, err)
		}
	}
	if got, want := fmt.Sprint(f.Sent[0][:2], f.Sent[1][:2]), fmt.Sprintf("[fcall %s] [fcall_ro %s]", fn("gcra_throttle"), fn("fw_peek")); got != want {
		t.Fatalf("sent %s", got)
	}
	f.Lib, f.Sent = "", nil // flushed: loaded again, the call sent again
	b = c.Batch()
	take = b.Take("k1", PerMinute(10), 1)
	if err := b.Exec(ctx); err != nil || f.Loads != 2 || len(f.Sent) != 2 {
		t.Fatalf("after a flush: %v, %d loads, sent %v", err, f.Loads, f.Sent)
	}
	if r, err := take.Result(); err != nil || r.Remaining != 9 {
		t.Fatalf("after a flush: %+v %v", r, err)
	}
}
