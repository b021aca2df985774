package fakeredis

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/lua"
)

// Held is a server slow at its start-up work: a go-redis hook, added
// before the fake's so that it runs first (go-redis runs hooks in the
// order they were added), that keeps the commands of the client's start-up
// work (COMMAND INFO, the library's version check and FUNCTION LOAD,
// SCRIPT LOAD) until Release is closed, whatever their context says, and
// lets every other command through at once.
type Held struct {
	Release chan struct{}
	Arrived atomic.Int32 // start-up commands that reached the server
}

// NewHeld is a Held holding the work until its Release is closed.
func NewHeld() *Held { return &Held{Release: make(chan struct{})} }

// Client is a client of f whose start-up work h holds (h's hook runs
// before f's), go-redis bounding each call by its context; cleanup (a
// test's Cleanup) releases the work at the end if the test did not.
func (h *Held) Client(f *Server, cleanup func(func())) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: f.Addr, ContextTimeoutEnabled: true})
	rdb.AddHook(h)
	rdb.AddHook(f)
	cleanup(func() {
		select {
		case <-h.Release:
		default:
			close(h.Release)
		}
	})
	return rdb
}

// Startup reports a command of the client's start-up work.
func Startup(cmd redis.Cmder) bool {
	args := cmd.Args()
	name, _ := args[0].(string)
	switch strings.ToLower(name) {
	case "command", "function", "script":
		return true
	case "fcall_ro":
		return len(args) > 1 && args[1] == lua.VersionFunction+lua.Versioned().Suffix
	}
	return false
}

func (h *Held) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *Held) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if Startup(cmd) {
			h.Arrived.Add(1)
			<-h.Release
		}
		return next(ctx, cmd)
	}
}

func (h *Held) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// FirstCalls sends n calls at once, each with the context mk gives it,
// while h holds the start-up work they need; once every call's context
// has been made and past (wait) its deadline, it releases the work, and
// returns each call's answer. Every call waits past its deadline: the work
// cannot end before the release.
func FirstCalls[R any](h *Held, n int, wait time.Duration, mk func() (context.Context, context.CancelFunc), call func(ctx context.Context, i int) (R, error)) ([]R, []error) {
	res, errs := make([]R, n), make([]error, n)
	var made, ended sync.WaitGroup
	made.Add(n)
	for i := range n {
		ended.Go(func() {
			ctx, cancel := mk()
			defer cancel()
			made.Done()
			res[i], errs[i] = call(ctx, i)
		})
	}
	made.Wait()
	time.Sleep(wait)
	close(h.Release)
	ended.Wait()
	return res, errs
}

// Admitted counts the calls of res that admitted (limited false), and
// fails t on any error: a call that erred was decided by a failure
// policy, not by the limiter.
func Admitted[R any](t testing.TB, res []R, errs []error, limited func(R) bool) int {
	t.Helper()
	n := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v: decided by the failure policy, not by the limiter", i, err)
		}
		if !limited(res[i]) {
			n++
		}
	}
	return n
}
