package httplimit

import (
	"sync"
	"time"
)

// breaker stops calling Redis after `failures` failures in a row, for
// `cooldown`; then one request probes it: a success closes the breaker, a
// failure opens it again.
type breaker struct {
	failures int
	cooldown time.Duration
	event    func(Event)

	mu        sync.Mutex
	state     breakerState
	fails     int
	openUntil time.Time
}

type breakerState int

const (
	closed breakerState = iota
	open
	halfOpen // one probe in flight
)

// allow reports whether this call may go to Redis.
func (b *breaker) allow() bool {
	b.mu.Lock()
	var e *Event
	ok := true
	switch b.state {
	case open:
		if time.Now().Before(b.openUntil) {
			ok = false
		} else {
			b.state = halfOpen
			e = &Event{Kind: BreakerHalfOpen}
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

func (b *breaker) success() {
	b.mu.Lock()
	was := b.state
	b.state, b.fails = closed, 0
	b.mu.Unlock()
	if was != closed {
		b.event(Event{Kind: BreakerClosed})
	}
}

func (b *breaker) failure(err error) {
	b.mu.Lock()
	b.fails++
	opened := false
	if b.state == halfOpen || (b.state == closed && b.fails >= b.failures) {
		b.state, b.openUntil, opened = open, time.Now().Add(b.cooldown), true
	}
	b.mu.Unlock()
	b.event(Event{Kind: Failure, Err: err})
	if opened {
		b.event(Event{Kind: BreakerOpen, Err: err})
	}
}

// answered records a call Redis answered with an error of its arguments:
// Redis is up, so a half-open probe closes the breaker; otherwise nothing
// moves (a configuration bug is not a failure, nor does it prove Redis
// healthy for the calls that failed).
func (b *breaker) answered() {
	b.mu.Lock()
	probe := b.state == halfOpen
	b.mu.Unlock()
	if probe {
		b.success()
	}
}

// abandon records a call whose client went away before Redis answered:
// if it was the half-open probe, the next call probes instead.
func (b *breaker) abandon() {
	b.mu.Lock()
	if b.state == halfOpen {
		b.state, b.openUntil = open, time.Now()
	}
	b.mu.Unlock()
}

// isOpen reports whether calls are kept from Redis now.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != closed
}

// retryAfter is how long until Redis is asked again: the rest of the
// cooldown, at least a second.
func (b *breaker) retryAfter() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(time.Until(b.openUntil), time.Second)
}

// breakers are one breaker per Redis server (a Cluster's primary, a Ring's
// shard, the one server of other clients), each made when its server is
// first met, so that one server's trouble never decides keys another
// holds: a failing node opens its own breaker, and requests whose keys
// live elsewhere still go to Redis.
type breakers struct {
	failures int
	cooldown time.Duration
	event    func(Event)

	mu sync.Mutex
	m  map[string]*breaker
}

// maxBreakers bounds the servers remembered: past it, the closed breakers
// of servers met before are forgotten (addresses change as nodes are
// replaced).
const maxBreakers = 256

// of is server's breaker.
func (bs *breakers) of(server string) *breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b, ok := bs.m[server]; ok {
		return b
	}
	if bs.m == nil {
		bs.m = map[string]*breaker{}
	}
	if len(bs.m) >= maxBreakers {
		for s, b := range bs.m {
			if !b.isOpen() {
				delete(bs.m, s)
			}
		}
	}
	b := &breaker{failures: bs.failures, cooldown: bs.cooldown, event: func(e Event) {
		e.Server = server
		bs.event(e)
	}}
	bs.m[server] = b
	return b
}

// anyOpen reports whether some server's breaker keeps calls from it.
func (bs *breakers) anyOpen() bool {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, b := range bs.m {
		if b.isOpen() {
			return true
		}
	}
	return false
}

// allow reports whether a call may go to every server of servers, and
// their breakers. When one refuses, the others' probes (a half-open
// breaker lets one call through) are handed to the next call.
func (bs *breakers) allow(servers []string) ([]*breaker, bool) {
	out := make([]*breaker, 0, len(servers))
	for _, s := range servers {
		b := bs.of(s)
		if !b.allow() {
			for _, a := range out {
				a.abandon()
			}
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// retryAfter is how long until the servers' breakers let calls through
// again: the longest of them, at least a second.
func (bs *breakers) retryAfter(servers []string) time.Duration {
	d := time.Second
	for _, s := range servers {
		d = max(d, bs.of(s).retryAfter())
	}
	return d
}
