package client

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// unavailableReplies start the error replies of a server that cannot
// decide now, whatever the command: loading its data, busy with a script,
// cut off from its primary or its cluster, resharding, a replica after a
// failover, out of memory.
var unavailableReplies = []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "OOM"}

// Unavailable reports whether err means that Redis could not decide the
// call: a connection refused, reset or closed, no answer before the
// context's deadline (context.DeadlineExceeded, a network timeout), no
// connection free in go-redis's pool, or a reply saying the server cannot
// serve now (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, READONLY,
// OOM). Those are what a failure policy and a circuit breaker are for.
//
// It is false for nil, for the caller's own cancellation
// (context.Canceled: the caller is gone, Redis did nothing wrong), and for
// every other reply, above all the ERR a limiter answers to arguments
// outside their range: a configuration bug, which no retry or breaker
// cures.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		msg := reply.Error()
		for _, p := range unavailableReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) || errors.Is(err, redis.ErrClosed)
}
