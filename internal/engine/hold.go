package engine

import (
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// RL.HOLD key hold ttl limiter [MS]
// RL.SETTLE key hold limiter [MS]
//
// The limiter is written out as RL.ALL writes one (GCRA max_burst count
// period quantity, ...); its cost is the estimate (RL.HOLD) or what the
// call actually cost (RL.SETTLE), 0 to spec.MaxLimit, and the hold is a
// string key holding the estimate.
//
// RL.HOLD takes the estimate as the family's command takes a cost and,
// when it admits, adds it to the hold, which then expires ttl seconds on
// (holds under one key add up). RL.SETTLE takes actual minus the held
// estimate: more is charged whatever remains, as DEBT charges; less is
// given back, as a negative cost gives back (exactly for GCRA and the token
// bucket, to the current window for the windows); then it deletes the
// hold. Without a hold (it lapsed, or was never taken) RL.SETTLE changes
// nothing: the estimate taken stands. RL.HOLD replies the limiter's five
// integers, RL.SETTLE those and the estimate it settled, -1 for none.
func executeHold(args []string, r Reader, o *Outcome, settle bool) error {
	i, ttl := 3, int64(0)
	if !settle {
		i = 4
	}
	if len(args) <= i || len(args) > maxOneKeyArgs {
		return errArity
	}
	if !settle {
		v, ok := holdTTL.parse(args[3])
		if !ok {
			return fail(holdTTL.rangeError(""))
		}
		ttl = v
	}
	if args[1] == args[2] {
		return fail(spec.Fill(spec.TKeyTwice, quote(args[1])))
	}
	if isWord(args[i]) {
		return fail(spec.Fill(spec.TUnknownLimiter, quote(args[i]), 1, limiters))
	}
	var l limit
	next, err := parseLimiter(args, i, 0, -1, &l, args[1], r)
	if err != nil {
		return err
	}
	cost := holdCosts[0]
	if settle {
		cost = holdCosts[1]
	}
	c, ok := cost.parse(args[i+1+len(families[l.family].syntax.positional)]) // the limiter's cost
	if !ok {
		return fail(cost.rangeError(""))
	}
	var ms bool
	var reserveAt int
	if err := parseOptions(args, next, false, "MS", &ms, &reserveAt, nil, nil, nil, nil, nil, nil); err != nil {
		return err
	}
	if r.Keys() != 2 {
		return fail("ERR internal error: the keys were not read")
	}
	held := int64(-1)
	switch h := r.Key(1); h.Kind {
	case KeyEmpty:
	case KeyString:
		if held, ok = cost.parse(h.Value); !ok {
			return fail(spec.Fill(spec.THold, quote(args[2]), spec.MaxLimit))
		}
	default:
		return errWrongType
	}
	switch {
	case settle && held >= 0:
		d := c - held // both within 0 to MaxLimit: no overflow
		*l.cost(), l.debt = d, d > 0
		if l.debt && l.family == famSL && d > maxLogAdd {
			return fail(spec.Fill(spec.TLogAdd, maxLogAdd, d))
		}
	case settle:
		*l.cost() = 0
	case held > spec.MaxLimit-c:
		return fail(spec.Fill(spec.THoldFull, quote(args[2]), held, c, spec.MaxLimit))
	}
	st := r.Key(0)
	var rep [5]int64
	if err := l.run(&st, r, 0, ms, &rep, &o.Writes[0]); err != nil {
		return err
	}
	o.Action, o.ReplyLen = ActReply, 5
	copy(o.Reply[:5], rep[:])
	switch {
	case settle:
		o.Reply[5], o.ReplyLen = held, 6
		if held >= 0 {
			o.Writes[1].Action = WriteDel
		}
	case rep[0] == 0:
		o.Writes[1].setInt(max(held, 0)+c, st.Now+ttl*1e9) // ttl ≤ a year: no overflow before 2262
	}
	return checkMemory(o, r, 2)
}

// holdTTL is RL.HOLD's ttl; holdCosts its limiter's cost (the estimate)
// and RL.SETTLE's (the actual cost).
var (
	holdTTL   = argOf(spec.HoldTTLArg)
	holdCosts = [2]arg{
		{name: spec.HoldCosts[0], max: spec.MaxLimit},
		{name: spec.HoldCosts[1], max: spec.MaxLimit},
	}
)
