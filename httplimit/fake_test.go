package httplimit

import (
	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// replyError is an error reply, as go-redis returns one.
type replyError = fakeredis.ReplyError

// newFakeRedis is a client of the shared fake Redis (internal/fakeredis):
// COMMAND INFO says the module is there, and every other command gets
// what answer returns for its arguments; f.Calls lists them.
func newFakeRedis(answer func(args []any) (any, error)) (*redis.Client, *fakeredis.Server) {
	f := fakeredis.New()
	f.Answer = answer
	return f.Client(), f
}

// ints is a reply of integers.
func ints(v ...int64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}
