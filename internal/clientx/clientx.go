// Package clientx carries what package lease, the local tier, needs of a
// *client.Client and the client's users do not: package client sets each
// function when it is loaded. Its arguments are a *client.Client, typed as
// any (this package sits below client).
package clientx

import (
	"context"
	"time"
)

var (
	// Await waits for ch until deadline or ctx's end: late when the
	// deadline came first, ctx's error when ctx ended. While the client's
	// start-up work runs the deadline is one piece of that work later, and
	// ctx's deadline passing does not end the wait (start-up work is not
	// the call's to pay for); the caller's own end still does, where a
	// context from client.WithTimeout tells it.
	Await func(c any, ctx context.Context, ch <-chan struct{}, deadline time.Time) (late bool, err error)
	// PrepareTimeout bounds one piece of the client's start-up work.
	PrepareTimeout func(c any) time.Duration
	// Cluster reports a client of a Redis Cluster, which follows
	// redirections itself.
	Cluster func(c any) bool
)
