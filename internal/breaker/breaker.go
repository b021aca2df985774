// Package breaker is the circuit breaker per Redis server that httplimit
// and rls put in front of their calls: after Failures failures in a row a
// server's breaker opens, its keys' calls are not sent for Cooldown, then
// one call probes it.
package breaker

import (
	"slices"
	"strconv"
	"sync"
	"time"
)

// Kind is what happened to a breaker.
type Kind int

const (
	Failure  Kind = iota // a call failed because Redis could not decide (Err says why)
	Open                 // calls are no longer sent until the cooldown ends
	HalfOpen             // one call probes the server
	Closed               // calls are sent again
)

var kindNames = [...]string{"failure", "breaker-open", "breaker-half-open", "breaker-closed"}

// String names k as httplimit's events do: "failure", "breaker-open",
// "breaker-half-open", "breaker-closed".
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
	return kindNames[k]
}

// Event is one thing that happened to a server's breaker.
type Event struct {
	Kind   Kind
	Server string // "" for a Breaker made alone
	Err    error  // for Failure and Open
}

// Breaker stops calling Redis after `failures` failures in a row, for
// `cooldown`; then one request probes it: a success closes the breaker, a
// failure opens it again.
type Breaker struct {
	failures int
	cooldown time.Duration
	event    func(Event)

	mu        sync.Mutex
	state     state
	fails     int
	openUntil time.Time
}

// New is a breaker that opens after failures failures in a row, for
// cooldown, and tells event what happens to it.
func New(failures int, cooldown time.Duration, event func(Event)) *Breaker {
	return &Breaker{failures: failures, cooldown: cooldown, event: event}
}

type state int

const (
	closed state = iota
	open
	halfOpen // one probe in flight
)

// Allow reports whether this call may go to Redis.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	var e *Event
	ok := true
	switch b.state {
	case open:
		if time.Now().Before(b.openUntil) {
			ok = false
		} else {
			b.state = halfOpen
			e = &Event{Kind: HalfOpen}
		}
	case halfOpen:
		ok = false // the probe decides
	}
	b.mu.Unlock()
	if e != nil {
		b.event(*e)
	}
	return ok
}

// Success records a call Redis answered.
func (b *Breaker) Success() {
	b.mu.Lock()
	was := b.state
	b.state, b.fails = closed, 0
	b.mu.Unlock()
	if was != closed {
		b.event(Event{Kind: Closed})
	}
}

// Failure records a call that failed because Redis could not decide.
func (b *Breaker) Failure(err error) {
	b.mu.Lock()
	b.fails++
	opened := false
	if b.state == halfOpen || (b.state == closed && b.fails >= b.failures) {
		b.state, b.openUntil, opened = open, time.Now().Add(b.cooldown), true
	}
	b.mu.Unlock()
	b.event(Event{Kind: Failure, Err: err})
	if opened {
		b.event(Event{Kind: Open, Err: err})
	}
}

// Answered records a call Redis answered with an error of its arguments:
// Redis is up, so a half-open probe closes the breaker; otherwise nothing
// moves (a configuration bug is not a failure, nor does it prove Redis
// healthy for the calls that failed).
func (b *Breaker) Answered() {
	b.mu.Lock()
	probe := b.state == halfOpen
	b.mu.Unlock()
	if probe {
		b.Success()
	}
}

// Abandon records a call whose client went away before Redis answered:
// if it was the half-open probe, the next call probes instead.
func (b *Breaker) Abandon() {
	b.mu.Lock()
	if b.state == halfOpen {
		b.state, b.openUntil = open, time.Now()
	}
	b.mu.Unlock()
}

// IsOpen reports whether calls are kept from Redis now.
func (b *Breaker) IsOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != closed
}

// RetryAfter is how long until Redis is asked again: the rest of the
// cooldown, at least a second.
func (b *Breaker) RetryAfter() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(time.Until(b.openUntil), time.Second)
}

// Set is one breaker per Redis server (a Cluster's primary, a Ring's
// shard, the one server of other clients), each made when its server is
// first met, so that one server's trouble never decides keys another
// holds: a failing node opens its own breaker, and requests whose keys
// live elsewhere still go to Redis.
type Set struct {
	Failures int           // failures in a row that open a server's breaker
	Cooldown time.Duration // how long it stays open
	Event    func(Event)   // what happens to each, with its Server

	mu sync.Mutex
	m  map[string]*Breaker
}

// maxBreakers bounds the servers remembered: past it, the closed breakers
// of servers met before are forgotten (addresses change as nodes are
// replaced).
const maxBreakers = 256

// Of is server's breaker.
func (bs *Set) Of(server string) *Breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b, ok := bs.m[server]; ok {
		return b
	}
	if bs.m == nil {
		bs.m = map[string]*Breaker{}
	}
	if len(bs.m) >= maxBreakers {
		for s, b := range bs.m {
			if !b.IsOpen() {
				delete(bs.m, s)
			}
		}
	}
	b := New(bs.Failures, bs.Cooldown, func(e Event) {
		e.Server = server
		bs.Event(e)
	})
	bs.m[server] = b
	return b
}

// AnyOpen reports whether some server's breaker keeps calls from it.
func (bs *Set) AnyOpen() bool {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, b := range bs.m {
		if b.IsOpen() {
			return true
		}
	}
	return false
}

// Allow reports whether a call may go to every server of servers, and
// their breakers. When one refuses, the others' probes (a half-open
// breaker lets one call through) are handed to the next call.
func (bs *Set) Allow(servers []string) ([]*Breaker, bool) {
	out := make([]*Breaker, 0, len(servers))
	for _, s := range servers {
		b := bs.Of(s)
		if !b.Allow() {
			for _, a := range out {
				a.Abandon()
			}
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// RetryAfter is how long until the servers' breakers let calls through
// again: the longest of them, at least a second.
func (bs *Set) RetryAfter(servers []string) time.Duration {
	d := time.Second
	for _, s := range servers {
		d = max(d, bs.Of(s).RetryAfter())
	}
	return d
}

// Outcome is how a call went, for Settle.
type Outcome int

const (
	Succeeded Outcome = iota // Redis answered it
	Rejected                 // Redis answered with an error of the call's own (its arguments): Redis is up
	Gone                     // its caller went away first: not Redis's failure
	Moving                   // its slot was moving until its deadline: the server is well, its other slots served
	Failed                   // Redis could not decide it (down, hung, refused the connection)
)

// Settle tells the breakers of a call's servers (those Allow gave it) how
// it went: a failure counts toward the breaker of the server that failed
// (failed, from the error) when it is one of them, else toward each; a
// call that succeeded closes them; one rejected closes a half-open one; one
// whose caller went, or that failed on another server, hands its probes on.
func (bs *Set) Settle(called []*Breaker, o Outcome, failed string, err error) {
	var culprit *Breaker
	if o == Failed {
		culprit = bs.Of(failed)
		if !slices.Contains(called, culprit) {
			culprit = nil // the error names no server of the call's: each is to blame
		}
	}
	for _, b := range called {
		switch {
		case o == Succeeded:
			b.Success()
		case o == Rejected || o == Moving:
			b.Answered()
		case o == Gone:
			b.Abandon()
		case culprit == nil || b == culprit:
			b.Failure(err)
		default:
			b.Abandon()
		}
	}
}
