package engine

import (
	"fmt"
	"strconv"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"
	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
	"github.com/seed-6b3823f5/ratelimit/window"
)

// The protocol's numbers (internal/protocol), by the names the engine
// has always used.
const (
	ActError     = protocol.ActError
	ActReply     = protocol.ActReply
	ActWrongType = protocol.ActWrongType
	ActArity     = protocol.ActArity

	WriteNone = protocol.WriteNone
	WriteSet  = protocol.WriteSet
	WriteDel  = protocol.WriteDel
	WriteZLog = protocol.WriteZLog
	WriteConc = protocol.WriteConc

	LimitsAbsent    = protocol.LimitsAbsent
	LimitsFound     = protocol.LimitsFound
	LimitsWrongType = protocol.LimitsWrongType
	LimitsUnread    = protocol.LimitsUnread

	MaxArgs  = protocol.MaxArgs
	MaxKeys  = protocol.MaxKeys
	MaxReply = protocol.MaxReply
)

// KeyKind is what a key holds.
type KeyKind = protocol.KeyKind

const (
	KeyEmpty  = protocol.KeyEmpty
	KeyString = protocol.KeyString
	KeyZSet   = protocol.KeyZSet
	KeyOther  = protocol.KeyOther
)

// KeyState is one key as C read it, with the command's clock.
type KeyState struct {
	Now      int64 // Unix nanoseconds, read once per command
	Kind     KeyKind
	Value    string // the string value; valid only during the call
	ExpireMs int64  // the key's absolute expiry in Unix ms, -1 for none
	// A sorted set: its size, and its oldest and newest entries.
	ZLen           int64
	Oldest, Newest ZEntry
}

// ZEntry is a sorted-set entry as C copies it.
type ZEntry struct {
	Score  float64
	Member string // valid only during the call; cut at MaxMember bytes
	Length int    // the member's whole length
}

// ErrCapacity and MaxMember: see internal/protocol.
const (
	ErrCapacity = protocol.ErrCapacity
	MaxMember   = protocol.MaxMember
)

// Reader gives the command's keys, which C read before the arguments were
// parsed (reading is not a side effect bad input must avoid; writing is):
// keys is how many, key(i) one of them; log(i) reads a sorted set key as a
// sliding log; memoryRoom is how many bytes the server may still allocate
// before maxmemory (-1: no maxmemory); holders(i) reads a sorted set key
// as a concurrency limiter's leases; limits(arg) is the field of the
// LIMITS key field whose key is argument arg, read with the keys: its
// value and what was found (LimitsFound, LimitsAbsent, LimitsWrongType, or
// LimitsUnread where no LIMITS was read at arg).
type Reader interface {
	Keys() int
	Key(i int) KeyState
	Log(i int) window.Log
	Holders(i int) HolderSet
	MemoryRoom() int64
	Limits(arg int) (value string, kind int)
}

// KeyWrite is what a command writes to one key.
type KeyWrite struct {
	Action   int                   // WriteNone, WriteSet, WriteDel or WriteZLog
	ExpireMs int64                 // absolute Unix milliseconds, for WriteSet and WriteZLog
	ValueLen int                   // WriteSet: the value
	Value    [protocol.SetMax]byte //
	// WriteZLog: remove the entries scored at or below zCutoff, move those
	// scored after zScore to zScore when zRedate, add zAdd entries scored
	// zScore (Unix microseconds), remove the newest zRemove entries (a
	// return); zGrowth is the entries the write costs in memory (zAdd, and
	// the whole log when it leaves the compact encoding).
	ZCutoff, ZAdd, ZScore, ZGrowth, ZRemove int64
	ZRedate                                 bool
	// WriteConc: remove up to ConcSweep holders scored at or below zCutoff
	// (never the caller's first slot), then set the caller's slots 1 to
	// ConcTo (SlotMember of argument ConcID) scored zScore (ConcAdd), or
	// remove its slots ConcFrom to ConcTo (ConcRemove).
	ConcID              int
	ConcAdd, ConcRemove bool
	ConcFrom, ConcTo    int64
}

// Outcome is what a command decided: the reply, and each key's write.
type Outcome struct {
	Action   int
	Reply    [MaxReply]int64
	ReplyLen int // 5, 6 for RL.ALL and RL.PEEK (6 + 5 per limit with EACH), one more with UPTO, 1 for CONC.RELEASE
	Err      string
	Writes   [MaxKeys]KeyWrite
}

// reset makes o a fresh Outcome for a command of n keys, as a zero one
// would be, without clearing the writes no key uses.
func (o *Outcome) Reset(n int) {
	o.Action, o.ReplyLen, o.Err = ActError, 0, ""
	o.Reply[0], o.Reply[1], o.Reply[2], o.Reply[3], o.Reply[4], o.Reply[5] = 0, 0, 0, 0, 0, 0
	for i := range min(n, MaxKeys) {
		o.Writes[i] = KeyWrite{}
	}
}

// A failure is why a command replies an error instead of its integers:
// the text C replies (starting ERR or OOM), or one of the server's standard
// errors (action ActWrongType or ActArity).
type failure struct {
	action int
	msg    string
}

func (f *failure) Error() string { return f.msg }

// The server's standard errors, which C replies itself.
var (
	errWrongType = &failure{action: ActWrongType}
	errArity     = &failure{action: ActArity}
)

// fail is the error reply msg. Errors are made only on the way out, never
// on a call that succeeds (making one allocates).
func fail(msg string) error { return &failure{ActError, msg} }

// failErr replies an error from an algorithm package, which names the
// arguments at fault.
func failErr(err error) error { return fail("ERR " + err.Error()) }

// setErr makes err the outcome.
func (o *Outcome) setErr(err error) {
	if f, ok := err.(*failure); ok {
		o.Action, o.Err = f.action, f.msg
		return
	}
	o.Action, o.Err = ActError, "ERR internal error: "+err.Error()
}

// setReply fills five integers. Times are whole seconds rounded as
// redis-cell rounds them, or milliseconds rounded up with MS; a negative
// time is the sentinel -1.
func setReply(rep *[5]int64, limited bool, limit, remaining int64, retry, reset time.Duration, ms bool) {
	rep[0] = 0
	if limited {
		rep[0] = 1
	}
	rep[1] = limit
	rep[2] = remaining
	rep[3] = replyTime(retry, ms)
	rep[4] = replyTime(reset, ms)
}

// setInt asks for the key to be set to v, expiring at the absolute instant
// at (Unix ns), rounded up to the millisecond.
func (w *KeyWrite) setInt(v, at int64) {
	w.Action = WriteSet
	w.ValueLen = len(strconv.AppendInt(w.Value[:0], v, 10))
	w.ExpireMs = ceilMs(at)
}

// ceilMs converts an instant in Unix ns to ms, rounded up: a key never
// expires before its state is full again.
func ceilMs(ns int64) int64 { return checked.CeilDiv(ns, int64(time.Millisecond)) }

// replyTime rounds d for the Reply: with ms, milliseconds rounded up;
// otherwise whole seconds plus one when the remainder has a non-zero
// millisecond part (redis-cell's rounding: 1.0005 s is 1, 1.001 s is 2).
func replyTime(d time.Duration, ms bool) int64 {
	if d < 0 {
		return -1
	}
	if ms {
		return checked.CeilDiv(int64(d), int64(time.Millisecond))
	}
	s := int64(d / time.Second)
	if (d%time.Second)/time.Millisecond > 0 {
		s++
	}
	return s
}

// Each operation's command, from the command table: what it runs, its
// family (for a command of one key) and whether it only peeks.
var opExec, opFamily, opPeek = func() (e [spec.NumOps]spec.Exec, f [spec.NumOps]int, p [spec.NumOps]bool) {
	for _, c := range spec.Commands {
		e[c.Op], f[c.Op], p[c.Op] = c.Exec, c.Family, c.Peek
	}
	return e, f, p
}()

// execute runs one command: parse every argument, run each limit on its
// key, and decide what to write and reply. Nothing is written unless the
// whole command parsed and computed. Dispatch is by switch, not a table of
// functions, so that nothing here escapes to the heap.
func Execute(op spec.Op, args []string, r Reader, o *Outcome) {
	var err error
	if op < 0 || op >= spec.NumOps {
		err = fail(fmt.Sprintf("ERR internal error: unknown operation %d", op))
	} else {
		switch e := opExec[op]; e {
		case spec.ExecOne:
			err = executeOne(opFamily[op], args, r, o, opPeek[op])
		case spec.ExecAll:
			err = executeAll(args, r, o, opPeek[op])
		case spec.ExecHold, spec.ExecSettle:
			err = executeHold(args, r, o, e == spec.ExecSettle)
		default:
			err = executeConc(e, args, r, o)
		}
	}
	if err != nil {
		o.setErr(err)
	}
}

// executeOne runs a command of one key: key first, then the family's
// arguments and options.
func executeOne(family int, args []string, r Reader, o *Outcome, peek bool) error {
	l := limit{family: family}
	var ms bool
	var upto int64
	at := &upto
	if peek {
		at = nil
	}
	if err := families[family].syntax.parse(args, &l, &ms, at, r); err != nil {
		return err
	}
	if r.Keys() != 1 {
		return fail("ERR internal error: the key was not read")
	}
	st := r.Key(0)
	var granted int64
	if upto > 0 {
		rem, err := l.remaining(st, r, 0)
		if err != nil {
			return err
		}
		if granted = ratelimit.Grant(rem, *l.cost(), l.reserve, upto); granted > 0 {
			*l.cost() *= granted // ≤ rem ≤ the limit: no overflow
		}
	}
	var rep [5]int64
	w := &o.Writes[0]
	if err := l.run(&st, r, 0, ms, &rep, w); err != nil {
		return err
	}
	o.Action = ActReply
	o.ReplyLen = 5
	copy(o.Reply[:5], rep[:])
	if upto > 0 {
		if rep[0] == 1 { // a refusal grants none (a cost of 0 refused by its reserve, or by a window over its limit)
			granted = 0
		}
		o.Reply[5], o.ReplyLen = granted, 6
	}
	if peek {
		*w = KeyWrite{}
		return nil
	}
	return checkMemory(o, r, 1)
}

// checkMemory refuses, with the server's OOM error, writes that would take
// the server past maxmemory. deny-oom is checked before a command runs; one
// sliding-log write can add 100000 entries, so log writes are checked here
// against what the server has left.
func checkMemory(o *Outcome, r Reader, n int) error {
	var entries int64
	for i := range n {
		entries += o.Writes[i].ZGrowth
	}
	if entries == 0 {
		return nil
	}
	if room := r.MemoryRoom(); room >= 0 && entries > room/bytesPerLogEntry {
		return fail(errOOM)
	}
	return nil
}

// errOOM is the server's own reply to a command refused for memory.
const errOOM = "OOM command not allowed when used memory > 'maxmemory'."
