package admit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/clientx"
	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// maxAll is the most limits one RL.ALL call decides (its numkeys).
const maxAll = spec.MaxKeys

// MaxCost is the largest cost any limit accepts (2^53 - 1): a Want's cost
// above a limit is refused, never an error, up to it.
const MaxCost = spec.MaxLimit

// ErrContended is a decision of more than 16 windows in one slot (an
// optimistic transaction) whose keys changed at every attempt: nothing of
// it was counted.
var ErrContended = clientx.ErrContended

// step is the limits a decision sends at once: in one call (one RL.ALL,
// or the family's command for one limit), or, watched, in one optimistic
// transaction of several RL.ALL (more limits that cannot give back a
// count than one RL.ALL takes).
type step struct {
	wants   []*Want
	watched bool
}

// command names the step as Redis runs it: MULTI for a transaction,
// RL.ALL for several limits, else its limit's consuming command.
func (st step) command() string {
	switch {
	case st.watched:
		return "MULTI"
	case len(st.wants) == 1:
		if f := spec.Named(st.wants[0].Limit.Family()); f != nil {
			return takeCommand[f.Name]
		}
	}
	return "RL.ALL"
}

// takeCommand is each family's consuming command, by its name: "GCRA" is
// "GCRA.THROTTLE".
var takeCommand = func() map[string]string {
	m := map[string]string{}
	for _, c := range spec.Commands {
		if c.Family >= 0 && !c.Peek && !c.Alias && c.Exec == spec.ExecOne {
			m[spec.Families[c.Family].Name] = c.Name
		}
	}
	return m
}()

// sendFunc sends one step of a decision and fills its wants.
type sendFunc func(ctx context.Context, s step) error

// planner plans decisions for a Redis: grouped when its keys live on
// several servers, by slot (a Cluster) or by hash tag (a Ring), so that
// those of one group can be one RL.ALL call.
type planner struct {
	c       Redis
	grouped bool
}

// decide decides wants all or nothing, as the limits of one request: each
// limit admits and is counted, or the decision is refused and none stays
// counted. Per cluster slot and reserve (a single server is one slot, a
// Ring's shards are by hash tag as a Cluster's slots):
//
//   - up to 16 limits: one step, one RL.ALL (the family's command for one
//     limit);
//   - more, of which at most 16 cannot give back a count (the windows):
//     those that can (GCRA, token buckets) in steps of 16 first, then the
//     others in one last step, filled up to 16 with the rest;
//   - more than 16 windows: one watched step, an optimistic transaction
//     on the slot's server (see send).
//
// Steps whose limits can all give back come first, slot by slot, in the
// order of wants; then the others. When a step refuses, the steps before
// it are given back (refund, through send) and no later step is sent:
// decide returns nil with a Known, Limited want. On an error, what was
// taken is given back and the error returned. Across slots, two steps
// that cannot give back can still leave the first counted when the
// second refuses: a cluster has no transaction across slots.
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
func (p planner) decide(ctx context.Context, wants []*Want, send sendFunc) error {
	if repeated(wants) {
		return p.decideOnce(ctx, wants, send)
	}
	if slices.ContainsFunc(wants, func(w *Want) bool { return w.Debt }) {
		return p.decideDebt(ctx, wants, send)
	}
	budget := time.Second // what a refund may take: as long as ctx had at first, up to a second
	if d, ok := ctx.Deadline(); ok {
		budget = min(max(time.Until(d), 50*time.Millisecond), time.Second)
	}
	steps := p.plan(wants)
	for g, st := range steps {
		err := send(ctx, st)
		if err == nil && !slices.ContainsFunc(st.wants, func(w *Want) bool { return w.Known && w.Result.Limited }) {
			continue
		}
		var taken []*Want
		for _, s := range steps[:g+1] {
			taken = append(taken, s.wants...)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
		refund(rctx, taken, send)
		cancel()
		return err
	}
	return nil
}

// decideDebt charges the wants with Debt, then, unless one of them
// answers Limited, decides the others all or nothing (see decide).
func (p planner) decideDebt(ctx context.Context, wants []*Want, send sendFunc) error {
	var all, debt []*Want
	for _, w := range wants {
		switch {
		case !w.Debt:
			all = append(all, w)
		case w.Reserve != 0:
			return fmt.Errorf("admit: key %q is charged with DEBT, which takes no reserve", w.Key)
		default:
			debt = append(debt, w)
		}
	}
	for _, s := range p.chargeSteps(debt) {
		if err := send(ctx, s); err != nil {
			return err
		}
	}
	if len(all) == 0 || slices.ContainsFunc(debt, func(w *Want) bool { return w.Result.Limited }) {
		return nil
	}
	return p.decide(ctx, all, send)
}

// chargeSteps groups charges by slot into steps of up to 16 limits whose
// sliding logs add at most spec.MaxLogAdd entries (a log's charge above it
// alone, which the server refuses).
func (p planner) chargeSteps(debt []*Want) []step {
	var steps []step
	for _, g := range p.groups(debt) {
		var st []*Want
		entries := int64(0)
		for _, w := range g {
			var add int64
			if w.Limit.Family() == spec.Families[spec.SL].Name {
				add = max(w.Cost, 0)
			}
			if len(st) == maxAll || (len(st) > 0 && entries+add > spec.MaxLogAdd) {
				steps = append(steps, step{wants: st})
				st, entries = nil, 0
			}
			st, entries = append(st, w), entries+add
		}
		steps = append(steps, step{wants: st})
	}
	return steps
}

// repeated reports wants that name a key more than once.
func repeated(wants []*Want) bool {
	if len(wants) > maxAll {
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
func (p planner) decideOnce(ctx context.Context, wants []*Want, send sendFunc) error {
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
			return fmt.Errorf("admit: key %q is decided twice, with two limits, reserves or debts", w.Key)
		default:
			once[k].Cost = min(once[k].Cost+w.Cost, MaxCost)
		}
		of[i] = k
	}
	err := p.decide(ctx, once, send)
	for i, w := range wants {
		one := once[of[i]]
		w.Result, w.Known, w.Taken = one.Result, one.Known, one.Taken
	}
	return err
}

// plan is the steps that decide wants all or nothing (see decide).
func (p planner) plan(wants []*Want) []step {
	if p.oneStep(wants) { // the common case, planned without a map
		return []step{{wants: wants}}
	}
	var first, last []step
	for _, in := range p.groups(wants) {
		var give, keep []*Want // limits that can give back, and the others
		for _, w := range in {
			if Refunds(w.Limit) {
				give = append(give, w)
			} else {
				keep = append(keep, w)
			}
		}
		switch {
		case len(in) <= maxAll && len(keep) == 0:
			first = append(first, step{wants: in})
		case len(in) <= maxAll:
			last = append(last, step{wants: in})
		case len(keep) > maxAll:
			last = append(last, step{wants: in, watched: true})
		default:
			n := len(give) - min(len(give), maxAll-len(keep)) // the refundable ones in steps of their own
			for s := range slices.Chunk(give[:n], maxAll) {
				first = append(first, step{wants: s})
			}
			last = append(last, step{wants: append(keep, give[n:]...)})
		}
	}
	return append(first, last...)
}

// groups are wants by cluster slot (one, on a single server) and reserve,
// in the order each group first appears.
func (p planner) groups(wants []*Want) [][]*Want {
	type group struct {
		slot    int
		reserve int64
	}
	var groups [][]*Want
	index := map[group]int{}
	for _, w := range wants {
		g := group{reserve: w.Reserve}
		if p.grouped {
			g.slot = protocol.Slot(w.Key)
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

// oneStep reports wants that are one step: at most 16, one reserve, one
// slot (always, on a single server).
func (p planner) oneStep(wants []*Want) bool {
	if len(wants) == 0 || len(wants) > maxAll {
		return false
	}
	slot := 0
	for i, w := range wants {
		if w.Reserve != wants[0].Reserve {
			return false
		}
		if !p.grouped {
			continue
		}
		if s := protocol.Slot(w.Key); i == 0 {
			slot = s
		} else if s != slot {
			return false
		}
	}
	return true
}

// send sends one step of a decision on its own: one call (the family's
// command for one limit, RL.ALL EACH for several, with their reserve), or,
// watched, an optimistic transaction on the server of the step's keys
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
// to a millisecond per attempt; then the step fails with ErrContended,
// nothing counted. On a server without the module the transaction runs the
// Lua engine the client runs there.
func (p planner) send(ctx context.Context, s step) error {
	if s.watched {
		return p.watch(ctx, s.wants)
	}
	if len(s.wants) == 1 {
		w := s.wants[0]
		var r client.Result
		var err error
		switch {
		case w.Debt:
			r, err = p.c.Take(ctx, w.Key, w.Limit, w.Cost, client.Debt())
		case w.Reserve != 0:
			r, err = p.c.Take(ctx, w.Key, w.Limit, w.Cost, client.Reserve(w.Reserve))
		default:
			r, err = p.c.Take(ctx, w.Key, w.Limit, w.Cost)
		}
		if err != nil {
			return err
		}
		w.Result, w.Known, w.Taken = r, true, !r.Limited || w.Debt
		return nil
	}
	var kbuf [maxAll]client.Keyed
	var ebuf [maxAll]client.Result
	keyed, each := keyedOf(s.wants, kbuf[:0]), ebuf[:len(s.wants)]
	var r client.Result
	var err error
	switch w := s.wants[0]; {
	case w.Debt:
		r, err = p.c.AllEach(ctx, keyed, each, client.Debt())
	case w.Reserve != 0:
		r, err = p.c.AllEach(ctx, keyed, each, client.Reserve(w.Reserve))
	default:
		r, err = p.c.AllEach(ctx, keyed, each)
	}
	if err != nil {
		return err
	}
	fill(s.wants, each, r.Limited)
	return nil
}

// watch decides a watched step: the client's transaction (clientx.Watch),
// each want Known as it reports.
func (p planner) watch(ctx context.Context, wants []*Want) error {
	keyed := keyedOf(wants, make([]client.Keyed, 0, len(wants)))
	each := make([]client.Result, len(wants))
	known := make([]bool, len(wants))
	taken := make([]bool, len(wants))
	err := clientx.Watch(p.c, ctx, keyed, each, wants[0].Reserve, known, taken)
	for i, w := range wants {
		w.Result, w.Known, w.Taken = each[i], known[i], taken[i]
	}
	return err
}

// keyedOf appends wants as All takes them.
func keyedOf(wants []*Want, keyed []client.Keyed) []client.Keyed {
	for _, w := range wants {
		keyed = append(keyed, client.Keyed{Key: w.Key, Limit: w.Limit, Cost: w.Cost})
	}
	return keyed
}

// fill gives wants their answers from an RL.ALL EACH call (a charge is
// taken, limited or not).
func fill(wants []*Want, each []client.Result, limited bool) {
	for i, w := range wants {
		w.Result, w.Known, w.Taken = each[i], true, !limited || w.Debt
	}
}

// Refunds reports whether a Want of l undoes a take exactly with a
// negative cost (a refund), whenever it comes: true of GCRA and the token
// bucket, as the command table says of their families. A window takes a
// negative cost too, but gives back to its current window only, so a take
// it undoes late stays counted: false. Refunds(client.PerSecond(10)) is
// true, Refunds(client.FixedWindow(10, time.Second)) false.
func Refunds(l client.Limit) bool { return spec.Refunds(l.Family()) }

// refund gives back what wants took (Taken), where their limits can
// exactly (Refunds: GCRA and the token bucket; a window's count stays),
// each in a step of its own sent by send, and records the state
// each leaves in its Result (Remaining and ResetAfter). A refund that
// fails leaves its want Taken.
func refund(ctx context.Context, wants []*Want, send sendFunc) {
	for _, w := range wants {
		if !w.Taken || w.Cost == 0 || !Refunds(w.Limit) || w.Debt {
			continue // a charge stays
		}
		back := &Want{Key: w.Key, Limit: w.Limit, Cost: -w.Cost}
		if err := send(ctx, step{wants: []*Want{back}}); err == nil && back.Known {
			w.Taken = false
			w.Result.Remaining, w.Result.ResetAfter = back.Result.Remaining, back.Result.ResetAfter
		}
	}
}

// Refund gives back what wants took (Taken) where their limits can exactly
// (Refunds: GCRA and the token bucket; a window's count stays, as does a
// Debt's charge), each in a call of its own through the gate's sender,
// and records the state each leaves in its Result (Remaining and
// ResetAfter). A refund that fails leaves its want Taken; one that
// succeeds forgets its key's remembered refusal. httplimit gives back a
// request's policies this way when its handler answers a status the policy
// does not count.
func (g *Gate) Refund(ctx context.Context, wants []*Want) {
	for _, w := range wants {
		if !w.Taken {
			continue
		}
		refund(ctx, []*Want{w}, g.send)
		if !w.Taken && g.refusals != nil {
			g.refusals.Forget(w.Key) // given back: a refusal remembered since may pass now
		}
	}
}
