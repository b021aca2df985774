// Package admit decides a request against its limits in one place, for
// every front-end (the net/http middleware, the Envoy rate limit service,
// a gRPC interceptor of your own): the front-end turns its policies or
// descriptors into Wants, and a Gate decides them.
//
// One Decide call runs, in order:
//
//   - remembered refusals (Options.RefusalCache): a key Redis refused until
//     later is refused again with no call, for a request of at least the
//     refused cost;
//   - the circuit breaker per Redis server (Options.BreakerFailures):
//     BreakerFailures failures in a row open a server's breaker, and for
//     BreakerCooldown requests on its keys are not sent;
//   - the local tier (Options.Lease): when every enforcing want leases,
//     one or several (a per-IP and a per-key limit), all or nothing, from
//     units granted ahead, with no call on hot keys (lease.Tier);
//   - else the plan per slot: one RL.ALL per slot, those that give back
//     first, refunds when a later slot refuses, a transaction past 16
//     windows in a slot, each step sent on its own or, with
//     Options.Pipeline, in a round trip shared with other requests';
//   - the failure policy (Options.OnError) when Redis cannot decide:
//     return the error, admit, refuse, or decide in this process and
//     charge Redis what was admitted once it answers.
//
// Shadow wants are counted each on its own, never refuse, and are never
// given back.
//
// Acquire takes a concurrency slot the same way (the tier, Redis, or Local
// while Redis is away) and returns a Held whose Release frees it wherever
// it came from.
package admit

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/breaker"
	"github.com/seed-6b3823f5/ratelimit/internal/clientx"
	"github.com/seed-6b3823f5/ratelimit/internal/refusals"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// Failure is what a Gate does when Redis cannot decide (down, hung past
// the timeout, a breaker open, or refusing the call's arguments).
type Failure int

const (
	// Fail returns the error: the front-end answers it (rls: UNAVAILABLE,
	// and the gateway's own failure mode decides).
	Fail Failure = iota
	// Open admits the request, with no figures.
	Open
	// Closed refuses the request.
	Closed
	// Local decides the rate wants in this process, each quota q per w as
	// a GCRA of q at once and q per w per key (N processes admit up to N
	// times a limit: a floor, not the limit), and once Redis answers again
	// charges it what was admitted here, with DEBT.
	Local
)

func (f Failure) String() string {
	switch f {
	case Fail:
		return "fail"
	case Open:
		return "open"
	case Closed:
		return "closed"
	case Local:
		return "local"
	}
	return "Failure(" + strconv.Itoa(int(f)) + ")"
}

// Options tunes a Gate. The zero value asks Redis for every request, with
// no timeout of its own, and returns Redis's failures.
type Options struct {
	// Timeout bounds a decision's calls together, not counting the
	// client's start-up work (client.WithTimeout); 0: none of the Gate's
	// own (the context's, and StepTimeout's).
	Timeout time.Duration
	// OnError is what the Gate does when Redis cannot decide.
	OnError Failure
	// LocalKeys is how many keys Local keeps (default 10,000), least
	// recently used first out.
	LocalKeys int
	// BreakerFailures, above 0, opens a Redis server's breaker after that
	// many failed calls in a row: for BreakerCooldown (default 5 s) calls
	// on its keys are not sent and OnError decides; then one call probes.
	// A call whose caller went away first, or whose slot was moving, is no
	// failure; one past the caller's deadline is.
	BreakerFailures int
	BreakerCooldown time.Duration
	// RefusalCache is how many refused keys are remembered, each until its
	// RetryAfter (0: none); RefusalCacheBytes bounds them in bytes (0:
	// 16 MiB).
	RefusalCache      int
	RefusalCacheBytes int64
	// Lease, when set, decides through a local tier (lease.New)
	// every group of wants that all lease (Want.Lease), all or nothing.
	Lease *lease.Options
	// Pipeline sends the steps of every decision not taken by the tier
	// through one sender, many requests' steps in one round trip (see
	// pipeline.go), each step within StepTimeout; a transaction past 16
	// windows goes alone. Off, each step goes on its own. It needs a
	// *client.Client.
	Pipeline bool
	// StepTimeout bounds each step of a decision (0: none of its own).
	StepTimeout time.Duration
	// Event receives what happens to calls, breakers and Local's charges
	// (nil: nothing).
	Event func(Event)
	// Now is the clock remembered refusals are read at (nil: time.Now).
	Now func() time.Time
	// Trace, when set, is called as each Redis call of a request starts —
	// a step of a decision (named by its command: RL.ALL, GCRA.THROTTLE,
	// MULTI for a transaction), CONC.ACQUIRE, CONC.RELEASE — with the
	// request's context; the function it returns is called with the call's
	// error when the answer came (a pipelined step: its round trip shared
	// with other requests'). rls makes an OpenTelemetry span of each.
	Trace func(ctx context.Context, command string) func(error)
}

// EventKind is what an Event reports.
type EventKind int

const (
	// Called: a decision's calls to Redis ended (Duration, and Err when
	// Redis did not decide).
	Called EventKind = iota
	// Sent: one step of a decision went to Redis, in a pipelined round
	// trip or on its own (Duration, Err).
	Sent
	// ServerFailed: a call failed because Redis could not decide (Server,
	// Err).
	ServerFailed
	// BreakerOpen, BreakerHalfOpen, BreakerClosed: a server's breaker
	// opened (calls are no longer sent until its cooldown ends), lets one
	// probe through, closed again.
	BreakerOpen
	BreakerHalfOpen
	BreakerClosed
	// Rejected: Redis refused a call's arguments (a configuration bug);
	// Redis is up, and OnError decides.
	Rejected
	// Charged: what Local admitted was charged to Redis (Keys, Units; Err
	// when a charge failed, to be tried again after the next call).
	Charged
	// Remembered: a remembered refusal answered a request, with no call.
	Remembered
)

// Event is one thing a Gate saw.
type Event struct {
	Kind     EventKind
	Server   string        // the Redis server, for a breaker's events
	Err      error         // why, where it failed
	Duration time.Duration // for Called and Sent
	Timeout  bool          // for Called: it ran out of time
	Keys     int64         // for Charged
	Units    int64         // for Charged
}

// Want is one limit a request is counted against (its key, limit, cost,
// reserve, whether it is a debt, a shadow, leased) and once decided its
// answer: Known when Result is the limit's own, Taken when it is counted.
type Want struct {
	Key     string
	Limit   client.Limit
	Cost    int64
	Reserve int64 // the module's RESERVE n (client.Reserve)
	// Debt: the cost is taken whatever remains (client.Debt): the want is
	// charged even when other limits refuse, and Limited reports a charge
	// that left its limit over it, taken all the same.
	Debt bool
	// Shadow counts the want on its own: it never refuses the request and
	// is never given back.
	Shadow bool
	// Lease lets the local tier decide it (Options.Lease).
	Lease bool

	// Result is the limit's own answer, when Known. A limit of a step after
	// one that refused is not asked, and stays not Known.
	Result client.Result
	Known  bool
	// Taken reports a limit counted: it admitted, and was not given back.
	Taken bool
	// Remembered: set by Decide when a remembered refusal answered it.
	Remembered bool
	// Local: set by Decide when Local decided it in this process.
	Local bool
}

// Outcome is how a decision ended.
type Outcome int

const (
	// Decided: by Redis, the tier, a remembered refusal or Local; each
	// Want's Known, Result and flags say how.
	Decided Outcome = iota
	// Gone: the caller's context ended first; nothing more was asked.
	Gone
	// FailedOpen, FailedClosed, Failed: Redis could not decide, and
	// OnError admits (no want Known), refuses, or returns the error.
	FailedOpen
	FailedClosed
	Failed
)

// A Gate decides requests against Redis. It is safe for concurrent use.
type Gate struct {
	c        Redis
	o        Options
	leased   *lease.Tier
	refusals *refusals.Cache
	breakers *breaker.Set
	local    *localLimiter
	slots    localSlots // Local's concurrency slots
	plan     planner
	send     sendFunc  // each step of a plan
	mapped   bool      // finding a key's server may call Redis (a Cluster's map): bounded by Timeout
	pipe     *pipeline // Options.Pipeline's, or nil
}

// Redis is what a Gate asks: a *client.Client (or a fake in tests; the
// local tier, the pipeline and a transaction past 16 windows need a
// *client.Client).
type Redis interface {
	Take(ctx context.Context, key string, l client.Limit, cost int64, opts ...client.Option) (client.Result, error)
	AllEach(ctx context.Context, limits []client.Keyed, each []client.Result, opts ...client.Option) (client.Result, error)
	Acquire(ctx context.Context, key string, l client.Concurrency, id string, opts ...client.Option) (client.Result, error)
	Release(ctx context.Context, key, id string) (bool, error)
	ServerFor(ctx context.Context, key string) string
}

// New returns a Gate deciding through c.
func New(c Redis, o Options) *Gate {
	if o.LocalKeys <= 0 {
		o.LocalKeys = 10000
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	g := &Gate{c: c, o: o, mapped: true, plan: planner{c: c}}
	g.send = g.plan.send
	cc, isClient := c.(*client.Client)
	if isClient {
		g.mapped = clientx.Cluster(cc)
		g.plan.grouped = clientx.Grouped(cc)
		if o.Lease != nil {
			g.leased = lease.New(cc, *o.Lease)
		}
		if o.Pipeline {
			g.pipe = newPipeline(cc, o.StepTimeout, func(took time.Duration, err error) { g.event(Event{Kind: Sent, Duration: took, Err: err}) })
		}
	}
	if o.RefusalCache > 0 {
		g.refusals = refusals.New(o.RefusalCache, o.RefusalCacheBytes)
	}
	if o.BreakerFailures > 0 {
		g.breakers = &breaker.Set{Failures: o.BreakerFailures, Cooldown: o.BreakerCooldown, Event: g.breakerEvent}
	}
	g.local = newLocal(o.LocalKeys) // DecideWith may ask for Local whatever OnError says
	if isClient && (g.pipe != nil || o.StepTimeout > 0) {
		g.send = g.sendStep
	}
	return g
}

// sendStep sends one step of a decision within StepTimeout: in the next
// pipelined round trip, or, a transaction (a watched step) or without
// Pipeline, on its own.
func (g *Gate) sendStep(parent context.Context, st step) (err error) {
	ctx, cancel := parent, context.CancelFunc(func() {})
	if g.o.StepTimeout > 0 {
		ctx, cancel = context.WithTimeout(parent, g.o.StepTimeout)
	}
	defer cancel()
	if g.o.Trace != nil {
		end := g.o.Trace(parent, st.command())
		defer func() { end(err) }()
	}
	if g.pipe == nil || st.watched {
		start := time.Now()
		err := g.plan.send(ctx, st)
		g.event(Event{Kind: Sent, Duration: time.Since(start), Err: err})
		return err
	}
	return g.pipe.do(ctx, st)
}

// traced runs call, reported to Trace as command.
func (g *Gate) traced(ctx context.Context, command string, call func() error) error {
	if g.o.Trace == nil {
		return call()
	}
	end := g.o.Trace(ctx, command)
	err := call()
	end(err)
	return err
}

// breakerKinds are the breakers' events as the Gate's.
var breakerKinds = [...]EventKind{breaker.Failure: ServerFailed, breaker.Open: BreakerOpen, breaker.HalfOpen: BreakerHalfOpen, breaker.Closed: BreakerClosed}

func (g *Gate) breakerEvent(be breaker.Event) {
	g.event(Event{Kind: breakerKinds[be.Kind], Server: be.Server, Err: be.Err})
}

func (g *Gate) event(e Event) {
	if g.o.Event != nil {
		g.o.Event(e)
	}
}

// Decide decides wants for one request: the enforcing ones all or nothing
// (when one refuses, none is counted: Taken false; a refused one Known
// with its own figures, one not asked not Known), the shadow ones each on
// its own. See the package comment for the order; the Outcome says how it
// ended, and for FailedClosed and Failed the error says why Redis did not
// decide.
func (g *Gate) Decide(ctx context.Context, wants []*Want) (Outcome, error) {
	return g.DecideWith(ctx, wants, g.o.OnError)
}

// DecideWith is Decide with onError in place of Options.OnError for this
// request: a front-end whose policies fail each their own way (httplimit's
// Policy.OnError) passes the strictest of the request's.
func (g *Gate) DecideWith(ctx context.Context, wants []*Want, onError Failure) (Outcome, error) {
	var now time.Time // for the remembered refusals only: no clock read per request without them
	if g.refusals != nil {
		now = g.o.Now()
	}
	if g.recall(wants, now) {
		g.event(Event{Kind: Remembered})
		return Decided, nil
	}
	if len(wants) == 0 {
		return Decided, nil
	}
	if err := ctx.Err(); err != nil {
		return Gone, err
	}
	var err error
	if bs, ok := g.allow(ctx, wants); !ok {
		err = ErrBreakerOpen
	} else {
		b := bounded{parent: ctx, timeout: g.o.Timeout}
		start := time.Now()
		err = g.decide(&b, wants)
		b.end()
		g.settle(ctx, bs, err, time.Since(start))
	}
	switch {
	case err == nil:
		g.remember(wants, now)
		return Decided, nil
	case ctx.Err() != nil:
		return Gone, ctx.Err()
	}
	switch onError {
	case Open:
		for _, w := range wants {
			w.Known, w.Taken = false, false
		}
		return FailedOpen, err
	case Closed:
		return FailedClosed, err
	case Local:
		g.local.decide(wants, time.Now().UnixNano())
		return Decided, nil
	}
	return Failed, err
}

// allow asks the breakers of the servers holding the wants' keys (true
// without breakers): the breakers to settle, or false when one is open.
func (g *Gate) allow(ctx context.Context, wants []*Want) ([]*breaker.Breaker, bool) {
	if g.breakers == nil {
		return nil, true
	}
	return g.breakers.Allow(g.servers(ctx, len(wants), func(i int) string { return wants[i].Key }))
}

// bounded is the context a decision's calls go with: its parent within
// Timeout (client.WithTimeout), made when a call first needs it, so that
// a decision the tier answers at once, from units held, makes none.
type bounded struct {
	parent  context.Context
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
}

func (b *bounded) get() context.Context {
	if b.ctx == nil {
		b.ctx = b.parent
		if b.timeout > 0 {
			b.ctx, b.cancel = client.WithTimeout(b.parent, b.timeout)
		}
	}
	return b.ctx
}

func (b *bounded) end() {
	if b.cancel != nil {
		b.cancel()
	}
}

// decide asks Redis (or the tier) for the enforcing wants, all or
// nothing, then for the shadow ones each on its own, their calls within
// b's context.
func (g *Gate) decide(b *bounded, wants []*Want) error {
	n, leases := 0, g.leased != nil
	var one *Want
	for _, w := range wants {
		if !w.Shadow {
			n++
			leases = leases && w.Lease
			one = w
		}
	}
	switch {
	case n == 1 && leases && lease.Leases(one.Limit) && one.Cost > 0 && one.Reserve == 0 && !one.Debt:
		r, ok := g.leased.TryTake(one.Key, one.Limit, one.Cost) // from units held: no context made
		if !ok {
			var err error
			if r, err = g.leased.Take(b.get(), one.Key, one.Limit, one.Cost); err != nil { // with the tier's fallback while Redis fails
				return err
			}
		}
		one.Result, one.Known, one.Taken = r, true, !r.Limited
	case n > 0:
		enforcing := wants
		if n < len(wants) {
			enforcing = make([]*Want, 0, n)
			for _, w := range wants {
				if !w.Shadow {
					enforcing = append(enforcing, w)
				}
			}
		}
		here := false
		if n > 1 && leases { // all or nothing through the tier
			var err error
			if here, err = g.allHere(b, enforcing); err != nil {
				return err
			}
		}
		if !here {
			if err := g.plan.decide(b.get(), enforcing, g.send); err != nil {
				return err
			}
		}
	}
	for _, w := range wants {
		if w.Shadow {
			if err := g.plan.decide(b.get(), []*Want{w}, g.send); err != nil {
				return err
			}
			w.Taken = false
		}
	}
	return nil
}

// allHere decides wants through the tier when it can (lease.Tier.AllHere):
// admitted, each want its own key's answer; refused here, the refusing
// want alone Known, as a refused step leaves the later ones. More than 16
// wants, or a reserve or a debt, go to the limiter (counted exact there).
func (g *Gate) allHere(b *bounded, wants []*Want) (bool, error) {
	var kb [maxAll]client.Keyed
	var eb [maxAll]client.Result
	limits, each := kb[:0], eb[:min(len(wants), maxAll)]
	var opts []client.Option
	for _, w := range wants[:min(len(wants), maxAll)] {
		switch {
		case w.Debt:
			opts = []client.Option{client.Debt()}
		case w.Reserve != 0:
			opts = []client.Option{client.Reserve(w.Reserve)}
		}
		limits = append(limits, client.Keyed{Key: w.Key, Limit: w.Limit, Cost: w.Cost})
	}
	if len(wants) > maxAll {
		limits = nil // more than one RL.ALL takes: the tier counts them exact
	}
	r, here, err := g.leased.AllHere(b.get(), limits, each, opts...)
	if err != nil || !here {
		return false, err
	}
	for i, w := range wants {
		switch {
		case !r.Limited:
			w.Result, w.Known, w.Taken = each[i], true, true
		case i == r.Policy:
			w.Result, w.Known, w.Taken = each[i], true, false
		default:
			w.Result, w.Known, w.Taken = client.Result{}, false, false
		}
	}
	return true, nil
}

// ErrBreakerOpen is a call not sent: the breaker of a server holding one
// of its keys is open.
var ErrBreakerOpen = errors.New("circuit breaker open: the server's calls failed; not asked until its cooldown ends")

// Call runs call against Redis as Decide runs its calls: within Timeout,
// unless ctx already ended (its error) or the breaker of a
// server holding one of keys is open (ErrBreakerOpen); how it went moves
// those breakers and is reported (Called, Rejected). It is for what a
// front-end still asks on its own (a concurrency slot): the same
// breakers see it.
func (g *Gate) Call(ctx context.Context, keys []string, call func(ctx context.Context) error) error {
	return g.run(ctx, func() []string { return keys }, call)
}

// run is Call with the keys listed only when a breaker asks for them.
func (g *Gate) run(ctx context.Context, keys func() []string, call func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var bs []*breaker.Breaker
	if g.breakers != nil {
		var ok bool
		keys := keys()
		if bs, ok = g.breakers.Allow(g.servers(ctx, len(keys), func(i int) string { return keys[i] })); !ok {
			return ErrBreakerOpen
		}
	}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if g.o.Timeout > 0 {
		cctx, cancel = client.WithTimeout(ctx, g.o.Timeout)
	}
	start := time.Now()
	err := call(cctx)
	cancel()
	g.settle(ctx, bs, err, time.Since(start))
	return err
}

// servers lists the servers holding the n keys key gives, each once
// (client.Client.ServerFor).
func (g *Gate) servers(ctx context.Context, n int, key func(i int) string) []string {
	if g.o.Timeout > 0 && g.mapped { // a Cluster's map may have to be fetched first
		var cancel context.CancelFunc
		ctx, cancel = client.WithTimeout(ctx, g.o.Timeout)
		defer cancel()
	}
	servers := make([]string, 0, 1)
	for i := range n {
		if s := g.c.ServerFor(ctx, key(i)); !slices.Contains(servers, s) {
			servers = append(servers, s)
		}
	}
	return servers
}

// RetryAfter is how long until a call on keys is sent again: until the
// latest open breaker of their servers lets one through, at least a
// second (a second without breakers).
func (g *Gate) RetryAfter(ctx context.Context, keys []string) time.Duration {
	if g.breakers == nil {
		return time.Second
	}
	return g.breakers.RetryAfter(g.servers(ctx, len(keys), func(i int) string { return keys[i] }))
}

// settle tells the breakers of the call's servers and the hook how a call
// went; parent is the context the call's timeout was derived from. A
// failure counts toward the breaker of the server that failed (all of
// them when the error does not say which); a call whose caller hung up,
// or whose slot was moving until its deadline, counts toward none.
func (g *Gate) settle(parent context.Context, bs []*breaker.Breaker, err error, took time.Duration) {
	settle := func(o breaker.Outcome, server string) {
		if g.breakers != nil {
			g.breakers.Settle(bs, o, server, err)
		}
	}
	switch {
	case err == nil:
		settle(breaker.Succeeded, "")
		g.event(Event{Kind: Called, Duration: took})
		g.chargeLocal()
	case errors.Is(parent.Err(), context.Canceled): // the caller hung up: not Redis's failure
		settle(breaker.Gone, "")
	case client.Unavailable(err) || errors.Is(err, context.DeadlineExceeded):
		g.event(Event{Kind: Called, Duration: took, Err: err, Timeout: isTimeout(err)})
		if clientx.Moving(err) {
			settle(breaker.Moving, "")
			return
		}
		settle(breaker.Failed, serverOf(err))
	default:
		g.event(Event{Kind: Called, Duration: took, Err: err})
		settle(breaker.Rejected, "")
		g.event(Event{Kind: Rejected, Err: err})
	}
}

// serverOf is the server a call's error names (client.ServerError), or "".
func serverOf(err error) string {
	var se *client.ServerError
	if errors.As(err, &se) {
		return se.Server
	}
	return ""
}

// isTimeout reports a call that ran out of time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// recall answers the wants from the remembered refusals at now: true when
// an enforcing want's key is refused until later for its cost (not a
// debt, a reserve or a cost of 0), the request then refused by it alone,
// with no call (the others not asked, as after a refusal in Redis; the
// shadow ones not counted).
func (g *Gate) recall(wants []*Want, now time.Time) bool {
	if g.refusals == nil {
		return false
	}
	var until time.Time
	for _, w := range wants {
		if w.Shadow || w.Debt || w.Reserve != 0 || w.Cost <= 0 || !g.refusals.Refuses(w.Key, w.Cost, now, &until) {
			continue
		}
		for _, o := range wants {
			o.Known, o.Taken = false, false
		}
		q, _ := w.Limit.Quota()
		wait := until.Sub(now)
		w.Result = client.Result{Verdict: ratelimit.Verdict{Limited: true, Limit: q, RetryAfter: wait, ResetAfter: wait}}
		w.Known, w.Remembered = true, true
		return true
	}
	return false
}

// remember keeps what Redis (or the tier) refused, asked at started, until
// the refusal's RetryAfter: a request of at least that cost would be
// refused until then (no limit admits sooner because of more traffic).
// Shadow wants, debts and reserves are not remembered. A want of a
// negative cost that was taken gave units back: its key's refusal is
// forgotten.
func (g *Gate) remember(wants []*Want, started time.Time) {
	if g.refusals == nil {
		return
	}
	for _, w := range wants {
		switch {
		case w.Cost < 0 && w.Taken:
			g.refusals.Forget(w.Key)
		case !w.Shadow && !w.Debt && w.Reserve == 0 && w.Cost > 0 && w.Known && w.Result.Limited && w.Result.RetryAfter > 0:
			g.refusals.Add(w.Key, w.Cost, started.Add(w.Result.RetryAfter))
		}
	}
}

// Forget drops every remembered refusal (a limit may have been raised).
func (g *Gate) Forget() {
	if g.refusals != nil {
		g.refusals.Purge()
	}
}

// Tier is the local tier (Options.Lease), or nil: for what a front-end
// still asks it on its own (a concurrency slot).
func (g *Gate) Tier() *lease.Tier { return g.leased }

// BreakerOpen reports whether a breaker keeps calls from a Redis server
// now (open, or half-open with its one probe in flight).
func (g *Gate) BreakerOpen() bool { return g.breakers != nil && g.breakers.AnyOpen() }

// Close gives back what the local tier holds and stops it (later requests
// are decided as without it), and stops the pipelined sender (later steps
// fail).
func (g *Gate) Close(ctx context.Context) error {
	if g.pipe != nil {
		defer g.pipe.close()
	}
	if g.leased == nil {
		return nil
	}
	return g.leased.Close(ctx)
}

// Stats are a Gate's counts.
type Stats struct {
	Lease     lease.Stats // the local tier's (zero without Lease)
	LocalKeys int         // keys Local decided and has not yet charged
	Charged   int64       // units Local admitted and charged to Redis since New
	Owing     bool        // Local decided keys since the last charge
	Charging  bool        // a charge is running
}

// Stats reports the Gate's counts.
func (g *Gate) Stats() Stats {
	var s Stats
	if g.leased != nil {
		s.Lease = g.leased.Stats()
	}
	if g.local != nil {
		s.LocalKeys, s.Charged = g.local.keys(), g.local.charged.Load()
		s.Owing, s.Charging = g.local.owing.Load(), g.local.settling.Load()
	}
	return s
}
