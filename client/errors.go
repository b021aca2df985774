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
var unavailableReplies = []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED ", "ASK ", "READONLY", "OOM"}

// movingReplies start the replies of a server that ran nothing because the
// key's slot is moving.
var movingReplies = []string{"TRYAGAIN", "MOVED ", "ASK "}

// Unavailable reports whether err means that Redis could not decide the
// call: a connection refused, reset or closed, no answer before the
// context's deadline (context.DeadlineExceeded, a network timeout), no
// connection free in go-redis's pool, or a reply saying the server cannot
// serve now (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, READONLY, OOM; and
// TRYAGAIN, ASK or MOVED still at the call's deadline: its slot was
// moving). Those are what a failure policy and a circuit breaker are for.
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

// movedOut reports a call that could not be decided before its deadline
// because its key's slot was moving between a Cluster's nodes the whole
// time (it was answered TRYAGAIN, ASK or MOVED on its last attempt; the
// client sends such a call again until its deadline). Such a call is
// Unavailable, but says nothing of its server's health: a circuit breaker
// (package admit's, through clientx.Moving) does not count it against
// the server, whose other slots are served.
func movedOut(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	for _, p := range movingReplies {
		if strings.HasPrefix(reply.Error(), p) {
			return true
		}
	}
	return false
}

// ServerError is a call's error and the server the call was sent to: the
// address of a Cluster's primary or a Ring's shard, the Addr of a
// single-server client, "" where the client does not say (a client it
// could not reach to ask which node holds the key). A circuit breaker per
// server, keyed by Server, keeps one node's trouble from deciding keys
// held elsewhere. Every error of a limiter call is one; errors.Is and
// errors.As see through it, and its text is Err's.
type ServerError struct {
	Server string
	Err    error
}

func (e *ServerError) Error() string { return e.Err.Error() }

func (e *ServerError) Unwrap() error { return e.Err }
