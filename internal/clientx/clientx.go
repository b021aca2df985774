// Package clientx carries what packages lease and admit need of a
// *client.Client and the client's users do not: package client sets each
// function when it is loaded. Its arguments are a *client.Client, typed as
// any (this package sits below client), and the client's own types where
// the comment says so.
package clientx

import (
	"context"
	"errors"
	"time"
)

// ErrContended is a transaction (Watch) whose keys changed at every
// attempt: nothing of it was counted.
var ErrContended = errors.New("ratelimit: the keys of a decision kept changing: its transaction was not committed")

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
	// Grouped reports a client whose keys live on several servers,
	// grouped by slot (a Cluster) or by hash tag (a Ring): those of one
	// group can be one RL.ALL call.
	Grouped func(c any) bool
	// Moving reports an error of a call that could not be decided before
	// its deadline because its key's slot was moving between a Cluster's
	// nodes the whole time (answered TRYAGAIN, ASK or MOVED on its last
	// attempt): Unavailable, but nothing against its server's health.
	Moving func(err error) bool
	// Watch decides limits (a []client.Keyed of one slot, any number) all
	// or nothing in an optimistic transaction, with RESERVE reserve: each
	// (a []client.Result) gets each limit's answer, known which limits the
	// answer reports (a refusal reports the chunks of up to 16 that
	// refused), taken which are counted. Its keys changing at every
	// attempt is ErrContended.
	Watch func(c any, ctx context.Context, limits, each any, reserve int64, known, taken []bool) error
)
