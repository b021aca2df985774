package httplimit

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/redis/go-redis/v9"
)

// fakeRedis answers commands without a network, through go-redis's
// hooks: COMMAND INFO says the module is there, and every other command
// gets what answer returns for its arguments.
type fakeRedis struct {
	mu     sync.Mutex
	sent   [][]any
	answer func(args []any) (any, error)
}

// replyError is an error reply, as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func newFakeRedis(answer func(args []any) (any, error)) (*redis.Client, *fakeRedis) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	f := &fakeRedis{answer: answer}
	rdb.AddHook(f)
	return rdb, f
}

func (f *fakeRedis) calls() [][]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]any(nil), f.sent...)
}

func (f *fakeRedis) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, errors.New("fakeRedis: no network")
	}
}

func (f *fakeRedis) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		setVal := cmd.(interface{ SetVal(any) }).SetVal
		if args[0] == "COMMAND" {
			setVal([]any{[]any{"gcra.throttle"}})
			return nil
		}
		f.mu.Lock()
		f.sent = append(f.sent, args)
		f.mu.Unlock()
		v, err := f.answer(args)
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		setVal(v)
		return nil
	}
}

func (f *fakeRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ints is a reply of integers.
func ints(v ...int64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}
