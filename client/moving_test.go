package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
)

// fakeCluster is a Redis Cluster of two fake primaries without a network:
// slots 0-8191 on the first, 8192-16383 on the second.
type fakeCluster struct {
	addrs   [2]string
	servers map[string]*fakeServer
}

func newFakeCluster(t *testing.T, setup func(f *fakeServer)) (*Client, *fakeCluster, *redis.ClusterClient) {
	t.Helper()
	c := fakeredis.NewCluster(2, func(f *fakeServer) {
		f.Reply = []any{int64(0), int64(10), int64(9), int64(-1), int64(6000)}
		setup(f)
	})
	fc := &fakeCluster{servers: map[string]*fakeServer{}}
	for i, f := range c.Servers {
		fc.addrs[i] = f.Addr
		fc.servers[f.Addr] = f
	}
	cc := c.Client(t)
	return New(cc), fc, cc
}

// keyOn is a key whose slot is on primary i (0 or 1) of a fakeCluster.
func keyOn(i int) string {
	for k := 0; ; k++ {
		key := fmt.Sprintf("rl:k%d", k)
		if s := protocol.Slot(key); (s < 8192) == (i == 0) {
			return key
		}
	}
}

// sentNames lists the commands f was sent (their first two words).
func sentNames(f *fakeServer) []string {
	f.Lock()
	defer f.Unlock()
	var out []string
	for _, a := range f.Sent {
		w := fmt.Sprint(a[0])
		if len(a) > 1 && !strings.EqualFold(w, "asking") {
			second := fmt.Sprint(a[1])
			if strings.HasPrefix(strings.ToLower(w), "eval") && !strings.HasPrefix(strings.ToLower(w), "evalsha") {
				second = "<source>"
			}
			w += " " + second
		}
		out = append(out, w)
	}
	return out
}

// A slot that migrates answers TRYAGAIN to a command of several keys, some
// of them moved; the command ran nothing, so the client sends it again
// until it is decided, within the call's deadline.
func TestTryAgain(t *testing.T) {
	c, fc, _ := newFakeCluster(t, func(*fakeServer) {})
	key := keyOn(0)
	f := fc.servers[fc.addrs[0]]
	tries := 0
	f.Before = func(redis.Cmder) error {
		if tries++; tries <= 3 {
			return replyError("TRYAGAIN Multiple keys request during rehashing of slot")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, err := c.All(ctx, []Keyed{{"{" + key + "}:a", PerMinute(10), 1}, {"{" + key + "}:b", PerMinute(10), 1}})
	if err != nil || r.Remaining != 9 {
		t.Fatalf("All while the slot migrates: %+v %v", r, err)
	}
	if tries != 4 {
		t.Fatalf("sent %d times, want 4 (3 TRYAGAIN, then decided)", tries)
	}

	// A slot that keeps moving past the deadline: the call is unavailable,
	// as a moving slot, on that server.
	f.Lock()
	f.Before = func(redis.Cmder) error { return replyError("TRYAGAIN Multiple keys request during rehashing of slot") }
	f.Unlock()
	short, cancel2 := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel2()
	start := time.Now()
	_, err = c.Take(short, key, PerMinute(10), 1)
	took := time.Since(start)
	if !Unavailable(err) || !movedOut(err) || serverOf(err) != fc.addrs[0] {
		t.Fatalf("still moving at the deadline: %v (unavailable %v, moving %v, server %q)", err, Unavailable(err), movedOut(err), serverOf(err))
	}
	if took > time.Second {
		t.Fatalf("the call took %v with a deadline of 30 ms", took)
	}

	// Without a deadline, the budget ends it.
	start = time.Now()
	if _, err = c.Take(context.Background(), key, PerMinute(10), 1); !movedOut(err) {
		t.Fatalf("without a deadline: %v", err)
	}
	if took := time.Since(start); took < redirectBudget/2 || took > 3*redirectBudget {
		t.Fatalf("without a deadline the call gave up after %v; the budget is %v", took, redirectBudget)
	}

	// Any other refusal is not sent again.
	f.Lock()
	tries = 0
	f.Before = func(redis.Cmder) error { tries++; return replyError("ERR max_burst must be 0 to 9007199254740990") }
	f.Unlock()
	if _, err = c.Take(context.Background(), key, PerMinute(10), 1); err == nil || Unavailable(err) || tries != 1 {
		t.Fatalf("an ERR reply: %v, sent %d times", err, tries)
	}
}

// CLUSTERDOWN while a failover is in progress: sent again too; a batch's
// calls likewise.
func TestClusterDownBatch(t *testing.T) {
	c, fc, _ := newFakeCluster(t, func(*fakeServer) {})
	f := fc.servers[fc.addrs[1]]
	tries := 0
	f.Before = func(redis.Cmder) error {
		if tries++; tries <= 2 {
			return replyError("CLUSTERDOWN The cluster is down")
		}
		return nil
	}
	b := c.Batch()
	one := b.Take(keyOn(1), PerMinute(10), 1)
	other := b.Take(keyOn(0), PerMinute(10), 1)
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := b.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for _, call := range []*Call{one, other} {
		if r, err := call.Result(); err != nil || r.Remaining != 9 {
			t.Fatalf("%+v %v", r, err)
		}
	}
	if tries != 3 {
		t.Fatalf("the call on the failing-over node was sent %d times, want 3", tries)
	}
}

// A call of the Lua engine that go-redis follows (ASK) to a primary that
// never had the library is decided by the script's source, one round trip
// more; the new primary gets the library behind it.
func TestLibraryFollowsTheCall(t *testing.T) {
	c, fc, _ := newFakeCluster(t, func(f *fakeServer) { f.NoModule, f.Functions = true, true })
	key := keyOn(0)
	from, to := fc.servers[fc.addrs[0]], fc.servers[fc.addrs[1]]
	if r, err := c.Take(ctx, key, PerMinute(10), 1); err != nil || r.Remaining != 9 {
		t.Fatalf("before the migration: %+v %v", r, err)
	}
	to.Lock()
	loaded := to.Lib
	to.Unlock()
	if loaded != "" {
		t.Fatalf("the second primary holds %q before any call reached it", loaded)
	}
	from.Lock()
	from.Sent = nil
	from.Before = func(cmd redis.Cmder) error { // the key has moved to the importing node
		return replyError(fmt.Sprintf("ASK %d %s", protocol.Slot(key), fc.addrs[1]))
	}
	from.Unlock()
	if r, err := c.Take(ctx, key, PerMinute(10), 1); err != nil || r.Remaining != 9 {
		t.Fatalf("during the migration: %+v %v", r, err)
	}
	if got, want := fmt.Sprint(sentNames(to)), fmt.Sprintf("[asking fcall %s asking eval <source>]", fn("gcra_throttle")); got != want {
		t.Fatalf("the importing primary was sent %s, want %s", got, want)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		to.Lock()
		loaded = to.Lib
		to.Unlock()
		if loaded == libVersion {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the importing primary holds %q, not the library", loaded)
		}
		time.Sleep(5 * time.Millisecond)
	}
	to.Lock()
	to.Sent = nil
	to.Unlock()
	if _, err := c.Take(ctx, key, PerMinute(10), 1); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(sentNames(to)), fmt.Sprintf("[asking fcall %s]", fn("gcra_throttle")); got != want {
		t.Fatalf("once readied, the importing primary was sent %s, want %s", got, want)
	}
	if to.Replaced != 0 || from.Replaced != 0 {
		t.Fatal("FUNCTION LOAD REPLACE sent")
	}
}

// ServerFor names the server ServerError does.
func TestServerFor(t *testing.T) {
	c, fc, _ := newFakeCluster(t, func(*fakeServer) {})
	for i, a := range fc.addrs {
		if got := c.ServerFor(ctx, keyOn(i)); got != a {
			t.Fatalf("ServerFor(%s) = %q, want %q", keyOn(i), got, a)
		}
	}
	f := fc.servers[fc.addrs[1]]
	f.Err = errors.New("dial tcp: connection refused")
	_, err := c.Take(ctx, keyOn(1), PerMinute(10), 1)
	if serverOf(err) != fc.addrs[1] {
		t.Fatalf("serverOf(%v) = %q", err, serverOf(err))
	}
	single, _ := newFake(0, 10, 9, -1, 6000)
	if got := single.ServerFor(ctx, "k"); got != "127.0.0.1:1" {
		t.Fatalf("single server: %q", got)
	}
}

// serverOf is the server a call's error names (ServerError), or "".
func serverOf(err error) string {
	var se *ServerError
	if errors.As(err, &se) {
		return se.Server
	}
	return ""
}
