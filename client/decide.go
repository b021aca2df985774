package client

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// MaxAll is the most limits one RL.ALL call decides (its numkeys).
const MaxAll = spec.MaxKeys

// MaxCost is the largest cost any limit accepts (2^53 - 1): a cost above
// a limit is refused, never an error, up to it.
const MaxCost = spec.MaxLimit

// Want is one limit of a decision (Decide): its key, limit, cost and
// reserve, and once decided its own answer.
type Want struct {
	Key     string
	Limit   Limit
	Cost    int64
	Reserve int64 // the module's RESERVE n (see Reserve)
	// Debt: the cost is taken whatever remains (see Debt): the want is
	// charged even when other limits refuse, and Limited reports a charge
	// that left its limit over it, taken all the same.
	Debt bool

	// Result is the limit's own answer, when Known. A limit of a step after
	// one that refused is not asked, and stays not Known.
	Result Result
	Known  bool
	// Taken reports a limit counted in Redis: it admitted, and was not
	// given back.
	Taken bool
}

// Step is the limits a decision sends at once: in one call (one RL.ALL,
// or the family's command for one limit), or, Watched, in one optimistic
// transaction of several RL.ALL (more limits that cannot give back a
// count than one RL.ALL takes).
type Step struct {
	Wants   []*Want
	Watched bool
}

// StepFunc sends one step of a decision and fills its wants. Client.Send
// sends it alone; a caller that gathers many decisions' steps into one
// round trip (rls) sends a step that is not Watched in its next Batch
// (Batch.Step) and hands a Watched one to Client.Send.
type StepFunc func(ctx context.Context, s Step) error

// Decide decides wants all or nothing, as the limits of one request: each
// limit admits and is counted, or the decision is refused and none stays
// counted. Per cluster slot and reserve (a single server is one slot, a
// Ring's shards are by hash tag as a Cluster's slots):
//
//   - up to MaxAll (16) limits: one step, one RL.ALL (the family's command
//     for one limit);
//   - more, of which at most 16 cannot give back a count (the windows):
//     those that can (GCRA, token buckets) in steps of 16 first, then the
//     others in one last step, filled up to 16 with the rest;
//   - more than 16 windows: one Watched step, an optimistic transaction
//     on the slot's server (see Send).
//
// Steps whose limits can all give back come first, slot by slot, in the
// order of wants; then the others. When a step refuses, the steps before
// it are given back (Refund, through send) and no later step is sent: Decide returns nil
// with a Known, Limited want. On an error, what was taken is given back
// and the error returned. Across slots, two steps that cannot give back
// can still leave the first counted when the second refuses: a cluster has
// no transaction across slots.
//
// A key named more than once (the same descriptor twice in one request)
// is decided once, for the sum of its costs, and each of its wants gets
// that answer; the same key with two different limits or reserves is an
// error, and nothing is sent.
//
// Wants with Debt are not part of the all or nothing: they are charged
// first, in steps sent with DEBT (per slot, up to 16 limits and 100,000
// sliding-log entries each), and stay Taken whatever they answer; none is
// given back. When one answers Limited (the charge left its limit over
// it), the others are not asked, so a refused request counts nothing but
// its charges; otherwise the others are decided all or nothing. A Debt want
// takes no Reserve. An error leaves the charges sent before it taken.
//
// send sends each step (nil: Client.Send).
func (c *Client) Decide(ctx context.Context, wants []*Want, send StepFunc) error {
	if send == nil {
		send = c.Send
	}
	if repeated(wants) {
		return c.decideOnce(ctx, wants, send)
	}
	if slices.ContainsFunc(wants, func(w *Want) bool { return w.Debt }) {
		return c.decideDebt(ctx, wants, send)
	}
	budget := time.Second // what a refund may take: as long as ctx had at first, up to a second
	if d, ok := ctx.Deadline(); ok {
		budget = min(max(time.Until(d), 50*time.Millisecond), time.Second)
	}
	steps := c.plan(wants)
	for g, st := range steps {
		err := send(ctx, st)
		if err == nil && !slices.ContainsFunc(st.Wants, func(w *Want) bool { return w.Known && w.Result.Limited }) {
			continue
		}
		var taken []*Want
		for _, s := range steps[:g+1] {
			taken = append(taken, s.Wants...)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
		c.Refund(rctx, taken, send)
		cancel()
		return err
	}
	return nil
}

// decideDebt charges the wants with Debt, then, unless one of them
// answers Limited, decides the others all or nothing (see Decide).
func (c *Client) decideDebt(ctx context.Context, wants []*Want, send StepFunc) error {
	var all, debt []*Want
	for _, w := range wants {
		switch {
		case !w.Debt:
			all = append(all, w)
		case w.Reserve != 0:
			return fmt.Errorf("client: key %q is charged with DEBT, which takes no reserve", w.Key)
		default:
			debt = append(debt, w)
		}
	}
	for _, s := range c.chargeSteps(debt) {
		if err := send(ctx, s); err != nil {
			return err
		}
	}
	if len(all) == 0 || slices.ContainsFunc(debt, func(w *Want) bool { return w.Result.Limited }) {
		return nil
	}
	return c.Decide(ctx, all, send)
}

// chargeSteps groups charges by slot into steps of up to MaxAll limits
// whose sliding logs add at most spec.MaxLogAdd entries (a log's charge
// above it alone, which the server refuses).
func (c *Client) chargeSteps(debt []*Want) []Step {
	var steps []Step
	for _, g := range c.groups(debt) {
		var step []*Want
		entries := int64(0)
		for _, w := range g {
			var add int64
			if w.Limit.algo == algoSL {
				add = max(w.Cost, 0)
			}
			if len(step) == MaxAll || (len(step) > 0 && entries+add > spec.MaxLogAdd) {
				steps = append(steps, Step{Wants: step})
				step, entries = nil, 0
			}
			step, entries = append(step, w), entries+add
		}
		steps = append(steps, Step{Wants: step})
	}
	return steps
}

// repeated reports wants that name a key more than once.
func repeated(wants []*Want) bool {
	if len(wants) > MaxAll {
		seen := make(map[string]bool, len(wants))
		for _, w := range wants {
			if seen[w.Key] {
				return true
			}
			seen[w.Key] = true
		}
		return false
	}
	for i, w := range wants {
		for _, v := range wants[i+1:] {
			if v.Key == w.Key {
				return true
			}
		}
	}
	return false
}

// decideOnce decides wants that name a key more than once as wants of
// each key once, their costs summed, and gives each want its key's answer.
func (c *Client) decideOnce(ctx context.Context, wants []*Want, send StepFunc) error {
	var once []*Want
	of := make([]int, len(wants))
	at := map[string]int{}
	for i, w := range wants {
		k, ok := at[w.Key]
		switch {
		case !ok:
			k = len(once)
			at[w.Key] = k
			one := *w
			once = append(once, &one)
		case once[k].Limit != w.Limit || once[k].Reserve != w.Reserve || once[k].Debt != w.Debt:
			return fmt.Errorf("client: key %q is decided twice, with two limits, reserves or debts", w.Key)
		default:
			once[k].Cost = min(once[k].Cost+w.Cost, MaxCost)
		}
		of[i] = k
	}
	err := c.Decide(ctx, once, send)
	for i, w := range wants {
		one := once[of[i]]
		w.Result, w.Known, w.Taken = one.Result, one.Known, one.Taken
	}
	return err
}

// grouped reports a client whose keys live on several servers, grouped
// by slot (a Cluster) or by hash tag (a Ring): those of one group can be
// one RL.ALL call.
func (c *Client) grouped() bool {
	switch c.rdb.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// plan is the steps that decide wants all or nothing (see Decide).
func (c *Client) plan(wants []*Want) []Step {
	if c.oneStep(wants) { // the common case, planned without a map
		return []Step{{Wants: wants}}
	}
	var first, last []Step
	for _, in := range c.groups(wants) {
		var give, keep []*Want // limits that can give back, and the others
		for _, w := range in {
			if w.Limit.Refundable() {
				give = append(give, w)
			} else {
				keep = append(keep, w)
			}
		}
		switch {
		case len(in) <= MaxAll && len(keep) == 0:
			first = append(first, Step{Wants: in})
		case len(in) <= MaxAll:
			last = append(last, Step{Wants: in})
		case len(keep) > MaxAll:
			last = append(last, Step{Wants: in, Watched: true})
		default:
			n := len(give) - min(len(give), MaxAll-len(keep)) // the refundable ones in steps of their own
			for s := range slices.Chunk(give[:n], MaxAll) {
				first = append(first, Step{Wants: s})
			}
			last = append(last, Step{Wants: append(keep, give[n:]...)})
		}
	}
	return append(first, last...)
}

// groups are wants by cluster slot (one, on a single server) and reserve,
// in the order each group first appears.
func (c *Client) groups(wants []*Want) [][]*Want {
	type group struct {
		slot    int
		reserve int64
	}
	var groups [][]*Want
	index := map[group]int{}
	for _, w := range wants {
		g := group{reserve: w.Reserve}
		if c.grouped() {
			g.slot = Slot(w.Key)
		}
		k, ok := index[g]
		if !ok {
			k = len(groups)
			index[g] = k
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], w)
	}
	return groups
}

// oneStep reports wants that are one step: at most MaxAll, one reserve,
// one slot (always, on a single server).
func (c *Client) oneStep(wants []*Want) bool {
	if len(wants) == 0 || len(wants) > MaxAll {
		return false
	}
	grouped, slot := c.grouped(), 0
	for i, w := range wants {
		if w.Reserve != wants[0].Reserve {
			return false
		}
		if !grouped {
			continue
		}
		if s := Slot(w.Key); i == 0 {
			slot = s
		} else if s != slot {
			return false
		}
	}
	return true
}

// Send sends one step of a decision on its own: one call (the family's
// command for one limit, RL.ALL EACH for several, with their reserve), or,
// Watched, an optimistic transaction on the server of the step's keys
// (which share a slot):
//
//	WATCH k1 … kn
//	RL.PEEK <chunk 1> EACH MS … RL.PEEK <chunk m> EACH MS   (one round trip)
//	MULTI  RL.ALL <chunk 1> EACH MS … RL.ALL <chunk m> EACH MS  EXEC
//
// with chunks of at most 16 limits. When a peek refuses, nothing is
// written and the step is refused. When every chunk admits, EXEC runs the
// RL.ALL calls only if no watched key changed since WATCH; each chunk then
// meets the state its peek saw and, since no limit grows stricter while
// time passes, admits what its peek admitted: all are counted, or none and
// the transaction is tried again, up to 8 times with a random pause of up
// to a millisecond per attempt; then the step fails with
// ErrContended, nothing counted. On a server without the module the
// transaction runs the Lua engine the client runs there.
func (c *Client) Send(ctx context.Context, s Step) error {
	if s.Watched {
		return c.watched(ctx, s.Wants)
	}
	if len(s.Wants) == 1 {
		w := s.Wants[0]
		r, err := c.Take(ctx, w.Key, w.Limit, w.Cost, stepOption(s))
		if err != nil {
			return err
		}
		w.Result, w.Known, w.Taken = r, true, !r.Limited || w.Debt
		return nil
	}
	var kbuf [MaxAll]Keyed
	var ebuf [MaxAll]Result
	keyed, each := keyedOf(s.Wants, kbuf[:0]), ebuf[:len(s.Wants)]
	r, err := c.AllEach(ctx, keyed, each, stepOption(s))
	if err != nil {
		return err
	}
	fill(s.Wants, each, r.Limited)
	return nil
}

// stepOption is a step's option: its wants' reserve, or DEBT (a step's
// wants share both).
func stepOption(s Step) Option {
	return Option{reserve: s.Wants[0].Reserve, debt: s.Wants[0].Debt}
}

// keyedOf appends wants as All takes them.
func keyedOf(wants []*Want, keyed []Keyed) []Keyed {
	for _, w := range wants {
		keyed = append(keyed, Keyed{Key: w.Key, Limit: w.Limit, Cost: w.Cost})
	}
	return keyed
}

// fill gives wants their answers from an RL.ALL EACH call (a charge is
// taken, limited or not).
func fill(wants []*Want, each []Result, limited bool) {
	for i, w := range wants {
		w.Result, w.Known, w.Taken = each[i], true, !limited || w.Debt
	}
}

// Refund gives back what wants took (Taken), where their limits can
// (GCRA and the token bucket take a negative cost; a window keeps its
// count), each in a step of its own sent by send (nil: Client.Send), and
// records the state each leaves in its Result (Remaining and ResetAfter).
// A refund that fails leaves its want Taken.
func (c *Client) Refund(ctx context.Context, wants []*Want, send StepFunc) {
	if send == nil {
		send = c.Send
	}
	for _, w := range wants {
		if !w.Taken || w.Cost == 0 || !w.Limit.Refundable() || w.Debt {
			continue // a charge stays
		}
		back := &Want{Key: w.Key, Limit: w.Limit, Cost: -w.Cost}
		if err := send(ctx, Step{Wants: []*Want{back}}); err == nil && back.Known {
			w.Taken = false
			w.Result.Remaining, w.Result.ResetAfter = back.Result.Remaining, back.Result.ResetAfter
		}
	}
}

// Step adds a step of a decision that is not Watched to the batch (see
// Client.Send): after Exec, its wants hold their answers.
func (b *Batch) Step(s Step) *Call {
	if len(s.Wants) == 1 {
		w := s.Wants[0]
		call := b.Take(w.Key, w.Limit, w.Cost, stepOption(s))
		call.wants = s.Wants
		return call
	}
	each := make([]Result, len(s.Wants))
	call := b.AllEach(keyedOf(s.Wants, make([]Keyed, 0, len(s.Wants))), each, stepOption(s))
	call.wants = s.Wants
	return call
}
