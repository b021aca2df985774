package engine

import (
	"strconv"
	"time"

	"github.com/seed-6b3823f5/ratelimit/conc"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"

	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// The concurrency limiter's commands:
//
//	CONC.ACQUIRE key limit lease id [MS] [RESERVE n] [UPTO n]
//	CONC.PEEK key limit [MS] [RESERVE n]
//	CONC.RELEASE key id [n]
//
// Its state is a sorted set: member the holder's id, score the end of its
// lease in Unix microseconds (the sliding log's unit); the key expires with
// the latest lease, so an abandoned key goes by itself. An id holding
// several slots (UPTO) has one member per slot (SlotMember), all scored
// with its lease's end.

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

// releaseN is CONC.RELEASE's optional n; the options CONC.PEEK and
// CONC.ACQUIRE take, for errors.
var (
	releaseN                 = argOf(*spec.Of(spec.OpConcRelease).Then)
	peekOptions, concOptions = spec.Families[spec.CONC].Options(), spec.Families[spec.CONC].UpToOptions()
)

// SlotMember is the sorted-set member of id's k-th slot (k ≥ 1): id
// itself for the first; for k ≥ 2, id, NUL bytes up to 128 bytes, one
// byte of id's length, then k in decimal. Longer than any id, it is never
// one, and the id is read back from it whole.
func SlotMember(id string, k int64) string {
	if k <= 1 {
		return id
	}
	b := make([]byte, maxID+1, maxID+21)
	copy(b, id)
	b[maxID] = byte(len(id))
	return string(strconv.AppendInt(b, k, 10))
}

// SlotsHeld is how many slots id holds whose first is scored own in a set
// of size members: the largest k for which SlotMember(id, 2..k) are all
// scored own (score looks a member up), found in O(log k) lookups, probing
// 2, 4, 8 ... up to size and then halving, as zset.c and the Lua library
// find it. An id's slots are added and removed from the top, so they run
// from 1 without a gap.
func SlotsHeld(id string, own float64, size int64, score func(member string) (float64, bool)) int64 {
	has := func(k int64) bool {
		s, ok := score(SlotMember(id, k))
		return ok && s == own
	}
	lo, hi := int64(1), int64(2) // slot lo is held; hi may not be
	for hi <= size && has(hi) {
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; has(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// slotMember reports whether a member of n bytes can be an id's slot
// beyond the first (SlotMember).
func slotMember(n int) bool { return n > maxID+1 && n <= maxID+8 }

// HolderSet reads a sorted set key as a concurrency limiter's leases, in
// Unix ns; holder finds the caller's lease and the latest other one.
type HolderSet interface {
	conc.Leases
	Holder(id string) conc.Holder
}

// concCall is one concurrency command, parsed.
type concCall struct {
	limit, lease, reserve int64
	idAt                  int   // the id's argument, 0 for CONC.PEEK
	n                     int64 // UPTO's n, CONC.RELEASE's n; 0 when absent
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
	if len(args) < i || len(args) > maxOneKeyArgs || (op == spec.ExecRelease && len(args) > i+1) {
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
	if op == spec.ExecRelease {
		if len(args) > i {
			var ok bool
			if c.n, ok = releaseN.parse(args[i]); !ok {
				return fail(releaseN.rangeError(""))
			}
		}
		return nil
	}
	reserveAt, uptoAt, names, upto := 0, 0, peekOptions, (*int)(nil)
	if op == spec.ExecAcquire {
		names, upto = concOptions, &uptoAt
	}
	if err := parseOptions(args, i, true, names, &c.ms, &reserveAt, nil, upto, nil, nil, nil, nil); err != nil {
		return err
	}
	if reserveAt > 0 {
		var err error
		if c.reserve, err = parseReserve(args[reserveAt], c.limit, ""); err != nil {
			return err
		}
	}
	if uptoAt > 0 {
		var err error
		c.n, err = parseUpTo(args[uptoAt], 1, "")
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
		h := set.Holder(args[c.idAt])
		rel := conc.FreeN(h, st.Now, max(c.n, 1))
		if c.n == 0 {
			rel = conc.Free(h, st.Now)
		}
		o.Action, o.ReplyLen = ActReply, 1
		o.Reply[0] = rel.Released
		switch {
		case !rel.Remove && rel.Released == 0:
		case rel.Expire == 0: // no live lease is left: the state goes
			w.Action = WriteDel
		default:
			w.Action, w.ConcID, w.ConcRemove = WriteConc, c.idAt, true
			w.ConcFrom, w.ConcTo = rel.Keep+1, max(h.Slots, 1)
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
		d, err = l.AcquireN(set, h, st.Now, time.Duration(c.lease)*time.Second, c.reserve, max(c.n, 1))
	}
	if err != nil {
		return failErr(err)
	}
	var rep [5]int64
	setReply(&rep, d.Limited, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, c.ms)
	o.Action, o.ReplyLen = ActReply, 5
	copy(o.Reply[:5], rep[:])
	if c.n > 0 {
		o.Reply[5], o.ReplyLen = d.Granted, 6
	}
	if op == spec.ExecAcquire && !d.Limited {
		w.Action, w.ConcID, w.ConcAdd = WriteConc, c.idAt, true
		w.ConcFrom, w.ConcTo = 1, d.Granted
		w.ZCutoff = FloorDiv(st.Now, 1000)
		w.ZScore = checked.CeilDiv(d.End, 1000)
		w.ExpireMs = leaseExpiry(d.Expire)
		// A renewal that changes nothing (the same instant's lease, no
		// slot added, no lapsed holder to sweep, the same expiry) writes
		// nothing, and so replicates and notifies nothing, as the script's
		// ZADD of an unchanged score does not.
		if d.Renewed && d.Added == 0 && w.ZScore == h.Own/1000 && w.ExpireMs == st.ExpireMs && st.Oldest.Score > float64(w.ZCutoff) {
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

// holderEntry reports an entry a concurrency write could have made: an
// id, or the length of an id's further slot (SlotMember).
func holderEntry(e ZEntry) bool {
	return (e.Length >= 1 && e.Length <= maxID || slotMember(e.Length)) && stateScore(e.Score)
}
