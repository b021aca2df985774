package main

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
)

// Scenario is one simulation: a traffic pattern, the clients that send
// it and what they do when refused, and the limit every algorithm
// enforces, Limit requests per Window.
type Scenario struct {
	Pattern  string  `json:"pattern"`  // steady, bursts, boundary, ramp, random or onoff
	Rate     float64 `json:"rate"`     // requests per second (a ramp's mean) of one client; with several, each polite one's
	Duration int     `json:"duration"` // seconds of traffic
	Limit    int64   `json:"limit"`    // requests per window
	Window   int     `json:"window"`   // seconds
	Hold     float64 `json:"hold"`     // seconds each request holds a concurrency slot
	Seed     uint64  `json:"seed"`     // the random pattern's, and the retries' jitter
	// Burst is the bucket's size, how many requests may go at once, for
	// GCRA (Burst at once: max_burst Burst − 1), the token bucket (capacity
	// Burst, refilled Limit per Window) and the shaper (one goes at once,
	// Burst − 1 may wait); 0 (left out) is Limit, as before the setting.
	Burst int64 `json:"burst"`
	// Lease is the concurrency limiter's lease on a slot, in seconds: a
	// slot whose holder has not released it by then lapses. 0 (left out)
	// is the hold rounded up, plus 1 s. A lease shorter than the hold is
	// allowed: the slot lapses while its holder still works.
	Lease int64 `json:"lease"`
	// Retry is what a client does with a refused request: none (the open
	// loop: it is dropped), nojitter, full or spread (see Retries).
	Retry string `json:"retry"`
	// Clients is how many clients send the traffic, 1 to 20. With more
	// than one, the first is noisy, sending NoisyFactor times the rate,
	// and the others polite, at the rate.
	Clients int `json:"clients"`
	// Keys is shared (every client counts against one key per algorithm)
	// or per-client (each client its own key, with the whole limit).
	Keys string `json:"keys"`
	// Engine is what runs the limiter calls: module (the module's
	// commands) or lua (the project's FUNCTION library, lua/, loaded
	// beside the module on the same server and called with FCALL).
	Engine string `json:"engine"`
	// Compare is two algorithms' IDs, apart by a comma ("gcra,fw"): only
	// those two run, in that order, on the same traffic and keys as in the
	// run of all seven, so their replies are the same. "" (left out) runs
	// all seven.
	Compare string `json:"compare"`
}

// Engines are what may run the limiter calls, in the order the page lists
// them.
var Engines = []string{"module", "lua"}

// Patterns are the traffic patterns, in the order the page lists them.
var Patterns = []string{"steady", "bursts", "boundary", "ramp", "random", "onoff"}

// Retries are what a client may do with a refused request, in the order
// the page lists them. A retry is sent at the refusal's instant plus a
// wait from the module's retry_after (ra):
//
//	none      no retry: the open loop
//	nojitter  exactly ra later, as the reply says
//	full      AWS' "full jitter" with ra as the base: a uniform random
//	          wait in [0, ra × 2^k], k the retries already made (so the
//	          first in [0, ra], the fifth in [0, 16 ra]), in whole ms
//	spread    the middleware's Retry-After (httplimit): ra rounded up to
//	          whole seconds s, plus a uniform random 0 to max(1, s/10)
//	          whole seconds
var Retries = []string{"none", "nojitter", "full", "spread"}

// KeyModes are how several clients share the limit.
var KeyModes = []string{"shared", "per-client"}

const (
	// MaxRetries is the most retries of one request.
	MaxRetries = 5
	// MaxRequests bounds a scenario: the traffic's requests, and each
	// algorithm's requests with the retries.
	MaxRequests = 20000
	// MaxClients is the most clients.
	MaxClients = 20
	// NoisyFactor is how many times the rate the noisy client sends.
	NoisyFactor = 5
	// MaxBurst is the largest Burst, MaxLease the longest Lease (s).
	MaxBurst = 10000
	MaxLease = 3600
)

// DefaultScenario is what the page starts with and make charts draws:
// 10 requests per 10 s against 2 a second for a minute, from one client
// that does not retry.
func DefaultScenario(pattern string) Scenario {
	return Scenario{Pattern: pattern, Rate: 2, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1,
		Retry: "none", Clients: 1, Keys: "shared", Engine: "module"}
}

// withDefaults is s with the settings it leaves out (as a scenario from
// before retries and clients does) as DefaultScenario has them.
func (s Scenario) withDefaults() Scenario {
	if s.Retry == "" {
		s.Retry = "none"
	}
	if s.Clients == 0 {
		s.Clients = 1
	}
	if s.Keys == "" {
		s.Keys = "shared"
	}
	if s.Engine == "" {
		s.Engine = "module"
	}
	return s
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
	case s.Limit < 1 || s.Limit > 10000:
		return fmt.Errorf("limit must be 1 to 10000")
	case s.Window < 1 || s.Window > 3600:
		return fmt.Errorf("window must be 1 to 3600 seconds")
	case !(s.Hold > 0 && s.Hold <= 600):
		return fmt.Errorf("hold must be above 0 and at most 600 seconds")
	case s.Burst < 0 || s.Burst > MaxBurst:
		return fmt.Errorf("burst must be 1 to %d (0 or left out: the limit)", MaxBurst)
	case s.Lease < 0 || s.Lease > MaxLease:
		return fmt.Errorf("lease must be 1 to %d seconds (0 or left out: the hold rounded up, plus 1)", MaxLease)
	case !slices.Contains(Retries, s.Retry):
		return fmt.Errorf("retry must be one of %v", Retries)
	case s.Clients < 1 || s.Clients > MaxClients:
		return fmt.Errorf("clients must be 1 to %d", MaxClients)
	case !slices.Contains(KeyModes, s.Keys):
		return fmt.Errorf("keys must be one of %v", KeyModes)
	case !slices.Contains(Engines, s.Engine):
		return fmt.Errorf("engine must be one of %v", Engines)
	case s.Compare != "" && len(s.algorithms()) != 2:
		return fmt.Errorf("compare must be two different algorithms of %v, apart by a comma (compare=gcra,fw), or left out for all seven", algorithmIDs())
	case s.Clients == 1 && float64(s.Duration)*s.Rate > MaxRequests:
		return fmt.Errorf("rate × duration must be at most %d requests", MaxRequests)
	case s.Clients > 1 && float64(s.Duration)*s.Rate*float64(s.Clients-1+NoisyFactor) > MaxRequests:
		return fmt.Errorf("rate × duration × (clients + %d) must be at most %d requests: the noisy client sends %d × the rate",
			NoisyFactor-1, MaxRequests, NoisyFactor)
	}
	if s.Pattern == "boundary" { // the limit's worth on each side of each edge, whatever the rate
		edges := max(0, (int64(s.Duration)-int64(s.Window)+2*int64(s.Window)-1)/(2*int64(s.Window)))
		if n := 2 * s.Limit * edges * int64(s.Clients); n > MaxRequests {
			return fmt.Errorf("the boundary attack sends 2 × limit at each of its %d window edges, from each client: %d requests, at most %d", edges, n, MaxRequests)
		}
	}
	if n := len(s.Arrivals()); n > MaxRequests {
		return fmt.Errorf("the %s pattern makes %d requests here, at most %d: lower the rate or the duration", s.Pattern, n, MaxRequests)
	}
	return nil
}

// Arrival is one request of the traffic: its instant, in ns from the
// start, and the client that sends it (0 is the noisy one when there are
// several).
type Arrival struct {
	At     int64
	Client int
}

// rateOf is client c's rate: the noisy client's is NoisyFactor times the
// others'.
func (s Scenario) rateOf(c int) float64 {
	if s.Clients > 1 && c == 0 {
		return NoisyFactor * s.Rate
	}
	return s.Rate
}

// Arrivals are the scenario's requests, every client's, sorted by time.
// Requests of one instant take turns: each client's first, then each
// one's second, and so on, so no client is always first.
func (s Scenario) Arrivals() []Arrival {
	type turn struct {
		Arrival
		rank int // the request's place among its client's at its instant
	}
	var all []turn
	for c := range max(s.Clients, 1) {
		at := s.clientArrivals(c)
		for i, t := range at {
			rank := 0
			if i > 0 && at[i-1] == t {
				rank = all[len(all)-1].rank + 1
			}
			all = append(all, turn{Arrival{t, c}, rank})
		}
	}
	slices.SortStableFunc(all, func(a, b turn) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.rank, b.rank), cmp.Compare(a.Client, b.Client))
	})
	out := make([]Arrival, len(all))
	for i, a := range all {
		out[i] = a.Arrival
	}
	return out
}

// clientArrivals are client c's request times, in ns from the start,
// sorted. The periodic patterns (steady, on/off) start polite client c of
// n a fraction (c + ½)/n of its period late, so that no two clients ever
// send at one instant: the noisy client (c = 0) sends at whole multiples
// of a fifth of the polite ones' period, which (5c + 2.5)/n never is.
func (s Scenario) clientArrivals(c int) []int64 {
	d := int64(s.Duration) * int64(time.Second)
	w := int64(s.Window) * int64(time.Second)
	rate := s.rateOf(c)
	phase := 0.0
	if c > 0 {
		phase = (float64(c) + 0.5) / float64(s.Clients)
	}
	var at []int64
	switch s.Pattern {
	case "steady": // k steps from the client's phase, to the nearest ns
		step := float64(time.Second) / rate
		for k := 0.0; ; k++ {
			t := int64(math.Round((phase + k) * step))
			if t >= d {
				break
			}
			at = append(at, t)
		}
	case "bursts": // everything a window brings, at its start
		per := max(1, int(math.Round(rate*float64(s.Window))))
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
			r := max(2*rate*t/float64(d), rate/20)
			t += float64(time.Second) / r
			if int64(t) < d {
				at = append(at, int64(t))
			}
		}
	case "random": // Poisson arrivals, each client's its own
		r := rand.New(rand.NewPCG(s.Seed, 16+uint64(c)))
		for t := r.ExpFloat64() / rate * float64(time.Second); int64(t) < d; t += r.ExpFloat64() / rate * float64(time.Second) {
			at = append(at, int64(t))
		}
	case "onoff": // steady at the rate for the first half of each window, then silent for the second
		step := float64(time.Second) / rate
		for p := int64(0); p < d; p += w {
			for k := 0.0; ; k++ {
				t := p + int64(math.Round((phase+k)*step))
				if t >= min(p+w/2, d) {
					break
				}
				at = append(at, t)
			}
		}
	}
	return at
}

// Algorithm is one of the limiters the simulation runs side by side.
type Algorithm struct {
	ID      string // its short name in Scenario.Compare and the page's address
	Name    string // as the page shows it
	Command string // the command it runs
}

// Algorithms are the seven limiters, in the order they are shown.
var Algorithms = []Algorithm{
	{"gcra", "GCRA", "GCRA.THROTTLE"}, {"tb", "Token bucket", "TB.TAKE"}, {"lb", "Leaky bucket (shaper)", "LB.ENQUEUE"},
	{"sw", "Sliding window", "SW.HIT"}, {"fw", "Fixed window", "FW.HIT"}, {"sl", "Sliding log", "SL.HIT"},
	{"conc", "Concurrency", "CONC.ACQUIRE"},
}

func algorithmIDs() []string {
	var ids []string
	for _, a := range Algorithms {
		ids = append(ids, a.ID)
	}
	return ids
}

// algorithms are the indexes in Algorithms of the algorithms the scenario
// runs: all seven, or Compare's two in its order (nil when Compare names
// anything else).
func (s Scenario) algorithms() []int {
	if s.Compare == "" {
		all := make([]int, len(Algorithms))
		for i := range all {
			all[i] = i
		}
		return all
	}
	ids := strings.Split(s.Compare, ",")
	var out []int
	for _, id := range ids {
		i := slices.IndexFunc(Algorithms, func(a Algorithm) bool { return a.ID == id })
		if i < 0 || slices.Contains(out, i) {
			return nil
		}
		out = append(out, i)
	}
	if len(out) != 2 {
		return nil
	}
	return out
}

// limit is algorithm a's limit for the scenario: Limit per Window, as
// each algorithm takes it (the concurrency limiter's is concurrency), the
// buckets' size Burst.
func (s Scenario) limit(a Algorithm) client.Limit {
	L, B, W := s.Limit, s.burst(), time.Duration(s.Window)*time.Second
	switch a.Command {
	case "GCRA.THROTTLE": // B at once, then L per window
		return client.GCRA(B-1, L, W)
	case "TB.TAKE": // B tokens, refilled L per window
		return client.TokenBucket(B, L, W)
	case "LB.ENQUEUE": // one goes now, B - 1 wait
		return client.Shaper(B-1, L, W)
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

// lease is a concurrency slot's lease: Lease, or when left out the hold,
// rounded up, and a second.
func (s Scenario) lease() int64 {
	if s.Lease > 0 {
		return s.Lease
	}
	return int64(math.Ceil(s.Hold)) + 1
}

// burst is the buckets' size: Burst, or when left out the limit.
func (s Scenario) burst() int64 {
	if s.Burst > 0 {
		return s.Burst
	}
	return s.Limit
}

// Reply is one command's five integers, times in ms, and which request
// it answered.
type Reply struct {
	At         int64 `json:"at"` // ms from the start
	Limited    bool  `json:"limited"`
	Limit      int64 `json:"limit"`
	Remaining  int64 `json:"remaining"`
	RetryAfter int64 `json:"retry_after"`
	ResetAfter int64 `json:"reset_after"`      // the shaper: its delay
	Client     int   `json:"client,omitempty"` // the client that sent it (0: the first, the noisy one when there are several)
	Try        int   `json:"try,omitempty"`    // 0: the request itself, then each retry
}

// Series is one algorithm's run.
type Series struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// Drawn says when an admitted request is counted in Admitted and
	// MostIn: "arrival", or "departure" for the shaper (its arrival plus
	// the delay of its reply).
	Drawn    string `json:"drawn"`
	Offered  []int  `json:"offered"`  // requests sent per bucket, retries included
	Admitted []int  `json:"admitted"` // per bucket, at Drawn
	Refused  []int  `json:"refused"`  // per bucket, at arrival
	Total    [2]int `json:"total"`    // admitted, refused: every reply, retries included
	// Retries is how many retries the clients sent (the replies with Try
	// above 0); the algorithm answered Result.Requests + Retries in all.
	Retries  int     `json:"retries"`
	PassRate float64 `json:"pass_rate"` // admitted / sent, retries included, in %, to 0.1
	// Served is the share of the traffic's requests admitted at last,
	// after any retries: admitted / Result.Requests, in %, to 0.1 (the
	// pass rate, without retries).
	Served float64 `json:"served"`
	// PeakMean is the peak-to-mean ratio of the requests sent, retries
	// included, per second of the traffic: the most sent in any whole
	// second [k, k+1) over the mean per second, to 0.01. A herd of
	// retries at a window's edge shows as a high peak.
	PeakMean float64 `json:"peak_mean"`
	MostIn   int     `json:"most_in"` // the most admitted (at Drawn) in any interval of the window
	// Clients is, with several clients, each one's requests, admissions
	// and share; Jain is Jain's fairness index over them (see fairness).
	Clients []ClientShare `json:"clients,omitempty"`
	Jain    float64       `json:"jain,omitempty"`
	// Departures are the shaper's admitted requests' departures, ms from
	// the start, in arrival order: each arrival plus its reply's delay.
	Departures []int64 `json:"departures,omitempty"`
	// StateOf names the algorithm's own state that State follows, from its
	// replies only (see stateSeries): "remaining" (GCRA's allowance, the
	// token bucket's tokens), "queue" (the shaper's admitted requests not
	// yet departed), "count" (the windows' requests in the current window,
	// limit − remaining), "log" (the sliding log's size, limit − remaining)
	// or "holders" (concurrency: limit − remaining).
	StateOf string `json:"state_of"`
	// State is that state at the end of each second of the time axis
	// (second k: just before (k+1) s), one per second of SpanMs rounded
	// up; -1 before the first reply.
	State    []int64 `json:"state"`
	Replies  []Reply `json:"replies"`  // every request's reply, retries included, in time order
	Expected string  `json:"expected"` // what the README promises
	Bound    int64   `json:"bound"`    // that promise as a number (0: none)
}

// ClientShare is one client's part in an algorithm's run.
type ClientShare struct {
	Offered  int     `json:"offered"`  // the client's requests, retries not counted
	Admitted int     `json:"admitted"` // of them admitted, at once or after retries
	Share    float64 `json:"share"`    // its share of the algorithm's admitted, in %, to 0.1
	Fair     float64 `json:"fair"`     // its max-min fair share of them, in requests, to 0.1
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
	Offered  []int    `json:"offered"`  // the traffic's requests per bucket, retries not counted
	Requests int      `json:"requests"` // the traffic's requests, retries not counted
	Series   []Series `json:"series"`
	Start    int64    `json:"start"` // the virtual clock's start, Unix ms
	// Caption is what the run shows, in a sentence or a few, from its
	// figures (see Caption).
	Caption string `json:"caption"`
}

// simStart is where the virtual clock starts: the first multiple of the
// window (as the fixed window aligns its windows) from 2030-01-01 UTC.
func (s Scenario) simStart() time.Time {
	w := int64(s.Window)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	return time.Unix((at+w-1)/w*w, 0).UTC()
}

// event is a retry, or the end of a concurrency slot's hold, on the
// virtual clock.
type event struct {
	at      int64 // ns from the start
	seq     int   // the order it was scheduled in
	algo    int   // its algorithm's index among those the scenario runs
	req     int   // the request's index in the arrivals
	try     int   // a retry: how many tries came before it
	release bool  // the end of a hold, not a retry
}

// events is a priority queue of events: by instant, the ends of holds
// first, then in the order they were scheduled.
type events []event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	a, b := q[i], q[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.release != b.release {
		return a.release
	}
	return a.seq < b.seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// retryWait is how long after a refusal with retry_after ra (ns, ≥ 0) a
// client sends its retry, having made k retries of the request before;
// see Retries.
func retryWait(mode string, ra time.Duration, k int, r *rand.Rand) time.Duration {
	switch mode {
	case "nojitter":
		return ra
	case "full":
		ms := (ra + time.Millisecond - 1) / time.Millisecond << k
		return time.Duration(r.Int64N(int64(ms)+1)) * time.Millisecond
	case "spread":
		s := ratelimit.FieldSeconds(ra)
		return time.Duration(s+r.Int64N(max(1, s/10)+1)) * time.Second
	}
	return -1
}

// Simulate runs the scenario through the real commands on rdb, at virtual
// instants set with setClock (Unix ns), under keys starting with prefix,
// which it deletes afterwards.
//
// The traffic's requests go to every algorithm at their instants. A
// refused one, when the clients retry, comes back to the same algorithm
// as a new request at its retry's instant: retries and the ends of
// concurrency holds wait in a priority queue, and the clock moves to each
// next instant in time order, where the instant's ends of holds, the
// traffic's requests and the retries are sent in one pipeline, in that
// order. A request is retried at most MaxRetries times, never at or after
// the traffic's end, and no algorithm is sent more than MaxRequests
// requests in all; so every decision is a reply of the module on its
// virtual clock.
func Simulate(ctx context.Context, c *client.Client, rdb *redis.Client, setClock func(int64) error, prefix string, s Scenario) (*Result, error) {
	s = s.withDefaults()
	if err := s.Check(); err != nil {
		return nil, err
	}
	arrivals := s.Arrivals()
	start := s.simStart().UnixNano()
	end := int64(s.Duration) * int64(time.Second)
	res := &Result{Scenario: s, Requests: len(arrivals), Start: s.simStart().UnixMilli()}
	// The algorithms run, by their index in Algorithms: below, algorithm k
	// is the k-th of them, Algorithms[idx[k]]. Its key and its jitter are
	// named by idx[k], so that two compared run as they do among all seven.
	idx := s.algorithms()
	// keys[k][c] is algorithm k's key for client c: one per algorithm when
	// the clients share the limit.
	keys := make([][]string, len(idx))
	var all []string
	conc := -1
	for k, i := range idx {
		a := Algorithms[i]
		keys[k] = make([]string, s.Clients)
		for c := range s.Clients {
			keys[k][c] = fmt.Sprintf("%s{%s}:%d", prefix, "sim", i)
			if s.Keys == "per-client" && s.Clients > 1 {
				keys[k][c] += fmt.Sprintf(":c%d", c)
			}
			if c == 0 || keys[k][c] != keys[k][0] {
				all = append(all, keys[k][c])
			}
		}
		res.Series = append(res.Series, Series{Name: a.Name, Command: a.Command, Drawn: "arrival"})
		if a.Command == "CONC.ACQUIRE" {
			conc = k
		}
	}
	defer func() {
		rdb.Del(context.WithoutCancel(ctx), all...)
		_ = setClock(0)
	}()

	hold := int64(s.Hold * float64(time.Second))
	sent := make([]int, len(idx)) // each algorithm's requests, the traffic's all and the retries so far
	for k := range sent {
		sent[k] = len(arrivals)
	}
	jitter := make([]*rand.Rand, len(idx))
	for k := range jitter {
		jitter[k] = rand.New(rand.NewPCG(s.Seed, 100+uint64(idx[k])))
	}
	var queue events
	seq := 0
	schedule := func(e event) {
		e.seq, seq = seq, seq+1
		heap.Push(&queue, e)
	}
	type ask struct {
		event
		call *client.Call
	}
	for next := 0; next < len(arrivals) || queue.Len() > 0; {
		t := int64(math.MaxInt64)
		if next < len(arrivals) {
			t = arrivals[next].At
		}
		if queue.Len() > 0 {
			t = min(t, queue[0].at)
		}
		var releases, retries []event
		for queue.Len() > 0 && queue[0].at == t {
			if e := heap.Pop(&queue).(event); e.release {
				releases = append(releases, e)
			} else {
				retries = append(retries, e)
			}
		}
		if err := setClock(start + t); err != nil {
			return nil, err
		}
		b := c.Batch()
		for _, e := range releases {
			b.Release(keys[e.algo][arrivals[e.req].Client], fmt.Sprint("r", e.req))
		}
		var asks []ask
		for ; next < len(arrivals) && arrivals[next].At == t; next++ {
			for k := range idx {
				asks = append(asks, ask{event: event{at: t, algo: k, req: next}})
			}
		}
		for _, e := range retries {
			asks = append(asks, ask{event: e})
		}
		for k, a := range asks {
			asks[k].call = s.add(b, Algorithms[idx[a.algo]], keys[a.algo][arrivals[a.req].Client], fmt.Sprint("r", a.req))
		}
		if err := b.Exec(ctx); err != nil {
			return nil, fmt.Errorf("at %v: %w", time.Duration(t), err)
		}
		for _, a := range asks {
			got, _ := a.call.Result()
			r := reply(t/1e6, got)
			r.Client, r.Try = arrivals[a.req].Client, a.try
			se := &res.Series[a.algo]
			se.Replies = append(se.Replies, r)
			switch {
			case !r.Limited && a.algo == conc:
				schedule(event{at: t + hold, algo: a.algo, req: a.req, release: true})
			case r.Limited && s.Retry != "none" && a.try < MaxRetries && got.RetryAfter >= 0 && sent[a.algo] < MaxRequests:
				if at := t + int64(retryWait(s.Retry, got.RetryAfter, a.try, jitter[a.algo])); at < end {
					schedule(event{at: at, algo: a.algo, req: a.req, try: a.try + 1})
					sent[a.algo]++
				}
			}
		}
	}
	res.tally(arrivals)
	res.Caption = Caption(res)
	return res, nil
}

// tally fills in what the replies say: the shaper's departures, the time
// axis, each bucket's counts, the totals, the pass rates, the peak-to-mean
// ratio, the most in any window, and each client's share.
func (res *Result) tally(arrivals []Arrival) {
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
	demand := make([]int, s.Clients) // each client's requests
	for _, a := range arrivals {
		res.Offered[bucket(a.At/1e6)]++
		demand[a.Client]++
	}
	for i := range res.Series {
		se := &res.Series[i]
		se.Offered, se.Admitted, se.Refused = make([]int, res.Buckets), make([]int, res.Buckets), make([]int, res.Buckets)
		perSecond := make([]int, s.Duration)
		admittedBy := make([]int, s.Clients)
		for _, r := range se.Replies {
			se.Offered[bucket(r.At)]++
			perSecond[min(int(r.At/1000), s.Duration-1)]++
			if r.Try > 0 {
				se.Retries++
			}
			if r.Limited {
				se.Refused[bucket(r.At)]++
				se.Total[1]++
			} else {
				se.Total[0]++
				admittedBy[r.Client]++
			}
		}
		admitted := se.admittedTimes()
		for _, at := range admitted {
			se.Admitted[bucket(at)]++
		}
		if n := len(se.Replies); n > 0 {
			se.PassRate = math.Round(1000*float64(se.Total[0])/float64(n)) / 10
			se.PeakMean = math.Round(100*float64(slices.Max(perSecond))*float64(s.Duration)/float64(n)) / 100
		}
		if res.Requests > 0 {
			se.Served = math.Round(1000*float64(se.Total[0])/float64(res.Requests)) / 10
		}
		se.MostIn = mostIn(admitted, int64(s.Window)*1000)
		se.StateOf, se.State = stateSeries(se, s, int(secs))
		se.Expected, se.Bound = promise(se.Command, s)
		if s.Clients > 1 {
			se.Clients, se.Jain = fairness(demand, admittedBy)
		}
	}
}

// admittedTimes are the instants (ms from the start, ascending) of the
// series' admitted requests, at Drawn: their arrival, or the shaper's
// departure.
func (se *Series) admittedTimes() []int64 {
	if se.Drawn == "departure" {
		return slices.Sorted(slices.Values(se.Departures))
	}
	var at []int64
	for _, r := range se.Replies {
		if !r.Limited {
			at = append(at, r.At)
		}
	}
	return at
}

// stateOf is what stateSeries follows for each command.
var stateOf = map[string]string{"GCRA.THROTTLE": "remaining", "TB.TAKE": "remaining", "LB.ENQUEUE": "queue",
	"SW.HIT": "count", "FW.HIT": "count", "SL.HIT": "log", "CONC.ACQUIRE": "holders"}

// stateSeries is an algorithm's own state at the end of each of secs
// seconds, read from its replies only: the value at the instant just
// before (k+1) s, for second k.
//
// The shaper's is its queue: the admitted requests that arrived before
// that instant and depart at it or later (arrival + the reply's delay).
// Every other algorithm's is what its last reply before that instant
// said: remaining for GCRA and the token bucket, limit − remaining for
// the windows, the sliding log and the concurrency limiter. A second
// without a reply carries the last value on (the state as last
// reported: a bucket refills and a window rolls over between replies,
// unseen); before the first reply the value is -1. With a key per client
// it is the sum over the keys that have replied.
func stateSeries(se *Series, s Scenario, secs int) (string, []int64) {
	what := stateOf[se.Command]
	out := make([]int64, secs)
	if what == "queue" {
		var adm []Reply
		for _, r := range se.Replies {
			if !r.Limited {
				adm = append(adm, r)
			}
		}
		for k := range out {
			end := int64(k+1) * 1000
			for _, r := range adm {
				if r.At < end && r.At+max(r.ResetAfter, 0) >= end {
					out[k]++
				}
			}
		}
		return what, out
	}
	perKey := s.Keys == "per-client" && s.Clients > 1
	last := map[int]int64{} // each key's last value: by client with a key each, else one
	i := 0
	for k := range out {
		end := int64(k+1) * 1000
		for ; i < len(se.Replies) && se.Replies[i].At < end; i++ {
			r := se.Replies[i]
			key := 0
			if perKey {
				key = r.Client
			}
			v := r.Remaining
			if what != "remaining" {
				v = r.Limit - r.Remaining
			}
			last[key] = v
		}
		if len(last) == 0 {
			out[k] = -1
			continue
		}
		for _, v := range last {
			out[k] += v
		}
	}
	return what, out
}

// fairness is each client's share of what an algorithm admitted, and
// Jain's fairness index over them, (Σx)² / (n Σx²), where x is a client's
// admitted requests over its max-min fair share of all that was admitted:
// the whole admitted count shared out equally, but no client given more
// than it asked for and what it leaves shared by the others (water
// filling). 1 is every client given its fair share; 1/n one client given
// everything. A client that asked for nothing is left out; when nothing
// was admitted every fair share is 0 and the index 1. (Over admitted /
// offered instead, a shared limit that refuses every request alike would
// score 1 though the noisy client takes most of it.) Index to 0.001.
func fairness(demand, admitted []int) ([]ClientShare, float64) {
	total := 0
	for _, a := range admitted {
		total += a
	}
	fair := maxMinFair(demand, float64(total))
	shares := make([]ClientShare, len(demand))
	var sum, sq float64
	n := 0
	for c := range demand {
		shares[c] = ClientShare{Offered: demand[c], Admitted: admitted[c], Fair: math.Round(10*fair[c]) / 10}
		if total > 0 {
			shares[c].Share = math.Round(1000*float64(admitted[c])/float64(total)) / 10
		}
		if fair[c] > 0 {
			x := float64(admitted[c]) / fair[c]
			sum, sq, n = sum+x, sq+x*x, n+1
		}
	}
	if n == 0 {
		return shares, 1
	}
	return shares, math.Round(1000*sum*sum/(float64(n)*sq)) / 1000
}

// maxMinFair shares capacity among demands, max-min fairly: in order of
// demand, each gets its demand or an equal part of what is left, the
// smaller.
func maxMinFair(demand []int, capacity float64) []float64 {
	order := make([]int, len(demand))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(demand[a], demand[b]) })
	fair := make([]float64, len(demand))
	left := capacity
	for k, i := range order {
		fair[i] = min(float64(demand[i]), left/float64(len(order)-k))
		left -= fair[i]
	}
	return fair
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
// concurrency limiter bounds holders at once, not requests); with a key
// per client, that many times as much in all.
func promise(command string, s Scenario) (string, int64) {
	text, bound := promise1(command, s.Limit)
	if b := s.burst(); b != s.Limit && (command == "GCRA.THROTTLE" || command == "TB.TAKE") {
		text, bound = fmt.Sprintf("at most burst + rate × W = %d + %d", b, s.Limit), b+s.Limit
	}
	if n := int64(s.Clients); n > 1 && s.Keys == "per-client" {
		return fmt.Sprintf("%s, on each of %d keys", text, n), bound * n
	}
	return text, bound
}

func promise1(command string, L int64) (string, int64) {
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
