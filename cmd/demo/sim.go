package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// Scenario is one simulation: a traffic pattern and the limit every
// algorithm enforces, Limit requests per Window.
type Scenario struct {
	Pattern  string  `json:"pattern"`  // steady, bursts, boundary, ramp or random
	Rate     float64 `json:"rate"`     // requests per second (a ramp's mean)
	Duration int     `json:"duration"` // seconds of traffic
	Limit    int64   `json:"limit"`    // requests per window
	Window   int     `json:"window"`   // seconds
	Hold     float64 `json:"hold"`     // seconds each request holds a concurrency slot
	Seed     uint64  `json:"seed"`     // the random pattern's
}

// Patterns are the traffic patterns, in the order the page lists them.
var Patterns = []string{"steady", "bursts", "boundary", "ramp", "random"}

// DefaultScenario is what the page starts with and make charts draws:
// 10 requests per 10 s against 2 a second for a minute.
func DefaultScenario(pattern string) Scenario {
	return Scenario{Pattern: pattern, Rate: 2, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1}
}

// Check says what is wrong with a scenario, in words a person can act on.
func (s Scenario) Check() error {
	switch {
	case !slices.Contains(Patterns, s.Pattern):
		return fmt.Errorf("pattern must be one of %v", Patterns)
	case !(s.Rate > 0 && s.Rate <= 200):
		return fmt.Errorf("rate must be above 0 and at most 200 requests per second")
	case s.Duration < 1 || s.Duration > 600:
		return fmt.Errorf("duration must be 1 to 600 seconds")
	case float64(s.Duration)*s.Rate > 20000:
		return fmt.Errorf("rate × duration must be at most 20000 requests")
	case s.Limit < 1 || s.Limit > 10000:
		return fmt.Errorf("limit must be 1 to 10000")
	case s.Window < 1 || s.Window > 3600:
		return fmt.Errorf("window must be 1 to 3600 seconds")
	case !(s.Hold > 0 && s.Hold <= 600):
		return fmt.Errorf("hold must be above 0 and at most 600 seconds")
	}
	return nil
}

// Arrivals are the scenario's request times, in ns from the start, sorted.
func (s Scenario) Arrivals() []int64 {
	d := int64(s.Duration) * int64(time.Second)
	w := int64(s.Window) * int64(time.Second)
	var at []int64
	switch s.Pattern {
	case "steady":
		step := float64(time.Second) / s.Rate
		for t := 0.0; int64(t) < d; t += step {
			at = append(at, int64(t))
		}
	case "bursts": // everything a window brings, at its start
		per := max(1, int(math.Round(s.Rate*float64(s.Window))))
		for t := int64(0); t < d; t += w {
			for range per {
				at = append(at, t)
			}
		}
	case "boundary": // a limit's worth just before and just after each window's end
		for end := w; end < d; end += 2 * w {
			for range s.Limit {
				at = append(at, end-int64(50*time.Millisecond))
			}
			for range s.Limit {
				at = append(at, end+int64(50*time.Millisecond))
			}
		}
	case "ramp": // from 0 to twice the rate
		for t := 0.0; int64(t) < d; {
			rate := max(2*s.Rate*t/float64(d), s.Rate/20)
			t += float64(time.Second) / rate
			if int64(t) < d {
				at = append(at, int64(t))
			}
		}
	case "random": // Poisson arrivals
		r := rand.New(rand.NewPCG(s.Seed, 16))
		for t := r.ExpFloat64() / s.Rate * float64(time.Second); int64(t) < d; t += r.ExpFloat64() / s.Rate * float64(time.Second) {
			at = append(at, int64(t))
		}
	}
	return at
}

// Algorithm is one of the limiters the simulation runs side by side.
type Algorithm struct {
	Name    string // as the page shows it
	Command string // the command it runs
}

// Algorithms are the seven limiters, in the order they are shown.
var Algorithms = []Algorithm{
	{"GCRA", "GCRA.THROTTLE"}, {"Token bucket", "TB.TAKE"}, {"Leaky bucket (shaper)", "LB.ENQUEUE"},
	{"Sliding window", "SW.HIT"}, {"Fixed window", "FW.HIT"}, {"Sliding log", "SL.HIT"},
	{"Concurrency", "CONC.ACQUIRE"},
}

// limit is algorithm a's limit for the scenario: Limit per Window, as
// each algorithm takes it (the concurrency limiter's is concurrency).
func (s Scenario) limit(a Algorithm) client.Limit {
	L, W := s.Limit, time.Duration(s.Window)*time.Second
	switch a.Command {
	case "GCRA.THROTTLE": // L at once, then L per window
		return client.GCRA(L-1, L, W)
	case "TB.TAKE":
		return client.TokenBucket(L, L, W)
	case "LB.ENQUEUE": // one goes now, L - 1 wait
		return client.Shaper(L-1, L, W)
	case "SW.HIT":
		return client.SlidingWindow(L, W)
	case "FW.HIT":
		return client.FixedWindow(L, W)
	case "SL.HIT":
		return client.SlidingLog(L, W)
	}
	return client.Limit{}
}

// concurrency is the concurrency limiter's limit: L at once, each for
// Hold seconds.
func (s Scenario) concurrency() client.Concurrency {
	return client.Concurrency{Limit: s.Limit, Lease: time.Duration(s.lease()) * time.Second}
}

// add adds to b the call that asks algorithm a about one request at key.
func (s Scenario) add(b *client.Batch, a Algorithm, key, id string) *client.Call {
	if a.Command == "CONC.ACQUIRE" {
		return b.Acquire(key, s.concurrency(), id)
	}
	return b.Take(key, s.limit(a), 1)
}

// reply is a Result as the page shows it, times in ms (-1: never).
func reply(atMs int64, r client.Result) Reply {
	ms := func(d time.Duration) int64 {
		if d < 0 {
			return -1
		}
		return d.Milliseconds()
	}
	return Reply{At: atMs, Limited: r.Limited, Limit: r.Limit, Remaining: r.Remaining,
		RetryAfter: ms(r.RetryAfter), ResetAfter: ms(r.ResetAfter)}
}

// lease is a concurrency slot's lease: the hold, rounded up, and a second.
func (s Scenario) lease() int64 { return int64(math.Ceil(s.Hold)) + 1 }

// Reply is one command's five integers, times in ms.
type Reply struct {
	At         int64 `json:"at"` // ms from the start
	Limited    bool  `json:"limited"`
	Limit      int64 `json:"limit"`
	Remaining  int64 `json:"remaining"`
	RetryAfter int64 `json:"retry_after"`
	ResetAfter int64 `json:"reset_after"` // the shaper: its delay
}

// Series is one algorithm's run.
type Series struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// Drawn says when an admitted request is counted in Admitted and
	// MostIn: "arrival", or "departure" for the shaper (its arrival plus
	// the delay of its reply).
	Drawn    string  `json:"drawn"`
	Admitted []int   `json:"admitted"`  // per bucket, at Drawn
	Refused  []int   `json:"refused"`   // per bucket, at arrival
	Total    [2]int  `json:"total"`     // admitted, refused
	PassRate float64 `json:"pass_rate"` // admitted / offered, in %, to 0.1
	MostIn   int     `json:"most_in"`   // the most admitted (at Drawn) in any interval of the window
	// Departures are the shaper's admitted requests' departures, ms from
	// the start, in arrival order: each arrival plus its reply's delay.
	Departures []int64 `json:"departures,omitempty"`
	Replies    []Reply `json:"replies"`  // every request's reply
	Expected   string  `json:"expected"` // what the README promises
	Bound      int64   `json:"bound"`    // that promise as a number (0: none)
}

// Result is a simulation's outcome.
type Result struct {
	Scenario Scenario `json:"scenario"`
	// The time axis: Buckets of BucketMs, SpanMs in all. It covers the
	// traffic's duration and, when the shaper's queue is still draining at
	// its end, the shaper's last departure.
	Buckets  int      `json:"buckets"`
	BucketMs int64    `json:"bucket_ms"`
	SpanMs   int64    `json:"span_ms"`
	Offered  []int    `json:"offered"` // requests per bucket
	Requests int      `json:"requests"`
	Series   []Series `json:"series"`
	Start    int64    `json:"start"` // the virtual clock's start, Unix ms
}

// simStart is where the virtual clock starts: the first multiple of the
// window (as the fixed window aligns its windows) from 2030-01-01 UTC.
func (s Scenario) simStart() time.Time {
	w := int64(s.Window)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	return time.Unix((at+w-1)/w*w, 0).UTC()
}

// Simulate runs the scenario through the real commands on rdb, at virtual
// instants set with setClock (Unix ns), under keys starting with prefix,
// which it deletes afterwards.
func Simulate(ctx context.Context, c *client.Client, rdb *redis.Client, setClock func(int64) error, prefix string, s Scenario) (*Result, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	arrivals := s.Arrivals()
	start := s.simStart().UnixNano()
	res := &Result{Scenario: s, Requests: len(arrivals), Start: s.simStart().UnixMilli()}
	keys := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		keys[i] = fmt.Sprintf("%s{%s}:%d", prefix, "sim", i)
		res.Series = append(res.Series, Series{Name: a.Name, Command: a.Command, Drawn: "arrival"})
	}
	defer func() {
		rdb.Del(context.WithoutCancel(ctx), keys...)
		_ = setClock(0)
	}()

	// Concurrency slots end Hold after their request: releases are events
	// too, run before any request at or after their instant.
	type release struct {
		at int64
		id string
	}
	var releases []release
	hold := int64(s.Hold * float64(time.Second))
	conc := len(Algorithms) - 1
	for n, t := range arrivals {
		for len(releases) > 0 && releases[0].at <= t {
			if err := setClock(start + releases[0].at); err != nil {
				return nil, err
			}
			if _, err := c.Release(ctx, keys[conc], releases[0].id); err != nil {
				return nil, err
			}
			releases = releases[1:]
		}
		if err := setClock(start + t); err != nil {
			return nil, err
		}
		id := fmt.Sprint("r", n)
		b := c.Batch()
		calls := make([]*client.Call, len(Algorithms))
		for i, a := range Algorithms {
			calls[i] = s.add(b, a, keys[i], id)
		}
		if err := b.Exec(ctx); err != nil {
			return nil, fmt.Errorf("at %v: %w", time.Duration(t), err)
		}
		for i, call := range calls {
			got, _ := call.Result()
			r := reply(t/1e6, got)
			se := &res.Series[i]
			se.Replies = append(se.Replies, r)
			if !r.Limited && i == conc {
				end := t + hold
				at, _ := slices.BinarySearchFunc(releases, end, func(r release, e int64) int { return int(r.at - e) })
				releases = slices.Insert(releases, at, release{end, id})
			}
		}
	}
	res.tally(arrivals)
	return res, nil
}

// tally fills in what the replies say: the shaper's departures, the time
// axis, each bucket's counts, the totals, the pass rates and the most in
// any window.
func (res *Result) tally(arrivals []int64) {
	s := res.Scenario
	span := int64(s.Duration) * 1000
	for i := range res.Series {
		se := &res.Series[i]
		if se.Command != "LB.ENQUEUE" {
			continue
		}
		se.Drawn = "departure"
		for _, r := range se.Replies {
			if !r.Limited {
				d := r.At + max(r.ResetAfter, 0) // ResetAfter is the shaper's delay
				se.Departures = append(se.Departures, d)
				span = max(span, d+1)
			}
		}
	}
	secs := (span + 999) / 1000
	res.Buckets = int(min(secs, 120))
	res.BucketMs = (secs*1000 + int64(res.Buckets) - 1) / int64(res.Buckets)
	res.SpanMs = res.BucketMs * int64(res.Buckets)
	bucket := func(ms int64) int { return min(int(ms/res.BucketMs), res.Buckets-1) }
	res.Offered = make([]int, res.Buckets)
	for _, t := range arrivals {
		res.Offered[bucket(t/1e6)]++
	}
	for i := range res.Series {
		se := &res.Series[i]
		se.Admitted, se.Refused = make([]int, res.Buckets), make([]int, res.Buckets)
		var admitted []int64 // at Drawn
		for _, r := range se.Replies {
			if r.Limited {
				se.Refused[bucket(r.At)]++
				se.Total[1]++
			} else {
				se.Total[0]++
				if se.Drawn == "arrival" {
					admitted = append(admitted, r.At)
				}
			}
		}
		if se.Drawn == "departure" {
			admitted = slices.Sorted(slices.Values(se.Departures))
		}
		for _, at := range admitted {
			se.Admitted[bucket(at)]++
		}
		if res.Requests > 0 {
			se.PassRate = math.Round(1000*float64(se.Total[0])/float64(res.Requests)) / 10
		}
		se.MostIn = mostIn(admitted, int64(s.Window)*1000)
		se.Expected, se.Bound = promise(se.Command, s)
	}
}

// mostIn is the most instants of at (ms, ascending) in any interval of w
// ms: [t, t+w) for some t.
func mostIn(at []int64, w int64) int {
	most, lo := 0, 0
	for hi := range at {
		for at[hi]-at[lo] >= w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// promise is what the README says an algorithm admits at most in any
// window of the scenario's length (the shaper: lets depart; the
// concurrency limiter bounds holders at once, not requests).
func promise(command string, s Scenario) (string, int64) {
	L := s.Limit
	switch command {
	case "GCRA.THROTTLE", "TB.TAKE":
		return "at most limit + rate × W = 2 × limit", 2 * L
	case "LB.ENQUEUE": // counted at departure
		return "departures W / limit apart: at most limit", L
	case "FW.HIT":
		return "up to 2 × limit across a boundary", 2 * L
	case "SW.HIT":
		return "about limit (an estimate; more at a boundary burst)", 2 * L
	case "SL.HIT":
		return "exactly limit", L
	}
	return "at most limit holders at once", 0
}
