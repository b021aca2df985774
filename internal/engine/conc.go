package engine

import (
	"time"

	"github.com/seed-6b3823f5/ratelimit/conc"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"

	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// The concurrency limiter's commands:
//
//	CONC.ACQUIRE key limit lease id [MS] [RESERVE n]
//	CONC.PEEK key limit [MS] [RESERVE n]
//	CONC.RELEASE key id
//
// Its state is a sorted set: member the holder's id, score the end of its
// lease in Unix microseconds (the sliding log's unit); the key expires with
// the latest lease, so an abandoned key goes by itself.

// maxID is the longest holder id, in bytes.
const maxID = spec.MaxID

// ConcSweep is RL_CONC_SWEEP (spec.ConcSweep): the most lapsed holders one
// write removes.
const ConcSweep = protocol.ConcSweep

var (
	concLimitArg = argOf(spec.Families[spec.CONC].Args[0])
	leaseArg     = argOf(spec.Families[spec.CONC].Args[1])
)

// concState names the state in errors.
var concState = spec.Families[spec.CONC].State

// HolderSet reads a sorted set key as a concurrency limiter's leases, in
// Unix ns; holder finds the caller's lease and the latest other one.
type HolderSet interface {
	conc.Leases
	Holder(id string) conc.Holder
}

// concCall is one concurrency command, parsed.
type concCall struct {
	limit, lease, reserve int64
	idAt                  int // the id's argument, 0 for CONC.PEEK
	ms                    bool
}

// parseConc reads a concurrency command's arguments: args are the command
// name, the key, the arguments. The error is the reply.
func parseConc(op spec.Exec, args []string, c *concCall) error {
	i := 0 // the first option
	switch op {
	case spec.ExecAcquire:
		c.idAt, i = 4, 5
	case spec.ExecConcPeek:
		i = 3
	case spec.ExecRelease:
		c.idAt, i = 2, 3
	}
	if len(args) < i || len(args) > maxOneKeyArgs || (op == spec.ExecRelease && len(args) != i) {
		return errArity
	}
	if op != spec.ExecRelease {
		var ok bool
		if c.limit, ok = concLimitArg.parse(args[2]); !ok {
			return fail(concLimitArg.rangeError(""))
		}
	}
	if op == spec.ExecAcquire {
		var ok bool
		if c.lease, ok = leaseArg.parse(args[3]); !ok {
			return fail(leaseArg.rangeError(""))
		}
	}
	if c.idAt > 0 {
		if n := len(args[c.idAt]); n < 1 || n > maxID {
			return fail(spec.Fill(spec.TID, maxID, n))
		}
	}
	reserveAt := 0
	if err := parseOptions(args, i, true, spec.Families[spec.CONC].Options(), &c.ms, &reserveAt, nil, nil, nil); err != nil {
		return err
	}
	if reserveAt > 0 {
		var err error
		c.reserve, err = parseReserve(args[reserveAt], c.limit, "")
		return err
	}
	return nil
}

// executeConc runs CONC.ACQUIRE, CONC.PEEK or CONC.RELEASE.
func executeConc(op spec.Exec, args []string, r Reader, o *Outcome) error {
	var c concCall
	if err := parseConc(op, args, &c); err != nil {
		return err
	}
	if r.Keys() != 1 {
		return fail("ERR internal error: the key was not read")
	}
	st := r.Key(0)
	if err := concKey(&st); err != nil {
		return err
	}
	set := r.Holders(0)
	w := &o.Writes[0]
	if op == spec.ExecRelease {
		rel := conc.Free(set.Holder(args[c.idAt]), st.Now)
		o.Action, o.ReplyLen = ActReply, 1
		if rel.Held {
			o.Reply[0] = 1
		}
		switch {
		case !rel.Remove:
		case rel.Expire == 0: // no live lease is left: the state goes
			w.Action = WriteDel
		default:
			w.Action, w.ConcID, w.ConcRemove = WriteConc, c.idAt, true
			w.ZCutoff = FloorDiv(st.Now, 1000)
			w.ExpireMs = leaseExpiry(rel.Expire)
		}
		return nil
	}
	l, err := conc.New(c.limit)
	if err != nil {
		return failErr(err)
	}
	var d conc.Decision
	var h conc.Holder
	if op == spec.ExecConcPeek {
		var latest int64
		if st.Kind == KeyZSet {
			latest = ScoreNs(st.Newest.Score)
		}
		d, err = l.Peek(set, latest, st.Now, c.reserve)
	} else {
		// A lease ends before 2^53 µs, the largest score a double holds exactly.
		if maxLease := ((maxScoreUs-1)*1000 - st.Now) / int64(time.Second); c.lease > maxLease {
			return fail(spec.Fill(spec.TLease, maxLease))
		}
		h = set.Holder(args[c.idAt])
		d, err = l.Acquire(set, h, st.Now, time.Duration(c.lease)*time.Second, c.reserve)
	}
	if err != nil {
		return failErr(err)
	}
	var rep [5]int64
	setReply(&rep, d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, c.ms)
	o.Action, o.ReplyLen = ActReply, 5
	copy(o.Reply[:5], rep[:])
	if op == spec.ExecAcquire && !d.Limited {
		w.Action, w.ConcID, w.ConcAdd = WriteConc, c.idAt, true
		w.ZCutoff = FloorDiv(st.Now, 1000)
		w.ZScore = checked.CeilDiv(d.End, 1000)
		w.ExpireMs = leaseExpiry(d.Expire)
		// A renewal that changes nothing (the same instant's lease, no
		// lapsed holder to sweep, the same expiry) writes nothing, and so
		// replicates and notifies nothing, as the script's ZADD of an
		// unchanged score does not.
		if d.Renewed && w.ZScore == h.Own/1000 && w.ExpireMs == st.ExpireMs && st.Oldest.Score > float64(w.ZCutoff) {
			*w = KeyWrite{}
		}
	}
	return nil
}

// concKey checks that a key holds a concurrency limiter's state, or
// nothing: a sorted set whose oldest and newest members are ids of 1 to
// 128 bytes scored with whole Unix microseconds from 2015 to 2^53, in a key
// expiring with its latest lease (leaseExpiry), as every write leaves it:
// an application's sorted set of timestamps rarely expires exactly there.
// On anything else it returns the error.
func concKey(st *KeyState) error {
	if err := checkKey(st, KeyZSet, concState); err != nil {
		return err
	}
	switch {
	case st.Kind != KeyZSet:
		return nil
	case !holderEntry(st.Oldest) || !holderEntry(st.Newest):
		return fail(otherData(concState, "its members are not holder ids of 1 to 128 bytes scored with a lease's end"))
	case leaseExpiry(int64(st.Newest.Score)*1000) != st.ExpireMs:
		return fail(otherData(concState, "the key does not expire with its latest lease"))
	}
	return nil
}

// leaseExpiry is the key's expiry for a latest lease ending at ns: the
// whole second at or after it, in Unix ms. Rounded to the second, the
// expiry moves (a SetAbsExpire, a replicated PEXPIREAT) once a second on a
// busy key rather than on every acquire; the key outlives its last lease by
// under a second, holding only lapsed leases.
func leaseExpiry(ns int64) int64 {
	return checked.CeilDiv(ns, int64(time.Second)) * 1000
}

// holderEntry reports an entry a concurrency write could have made.
func holderEntry(e ZEntry) bool {
	return e.Length >= 1 && e.Length <= maxID && stateScore(e.Score)
}
