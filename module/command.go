package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/checked"
	"github.com/seed-6b3823f5/ratelimit/window"
)

// The commands, numbered as enum rl_op in shim.h.
const (
	opGCRAThrottle = iota
	opGCRAPeek
	opTBTake
	opTBPeek
	opLBEnqueue
	opLBPeek
	opSWHit
	opSWPeek
	opFWHit
	opFWPeek
	opSLHit
	opSLPeek
	opRLAll
	opRLPeek
	opConcAcquire
	opConcRelease
	opConcPeek
	opCount
)

// What call.c does once execute returns, numbered as enum rl_action.
const (
	actError = iota
	actReply
	actWrongType
	actArity
)

// What call.c writes to one key, numbered as enum rl_write.
const (
	writeNone = iota
	writeSet
	writeDel
	writeZLog
	writeConc
)

// maxArgs is RL_MAX_ARGS: the most arguments, command name included.
const maxArgs = 128

// maxKeys is RL_MAX_KEYS: the most keys one command names.
const maxKeys = 16

// maxReply is RL_MAX_REPLY: RL.ALL ... EACH's six integers and five per
// limit.
const maxReply = 6 + 5*maxKeys

// keyKind is what a key holds, numbered as enum rl_keykind.
type keyKind int

const (
	keyEmpty keyKind = iota
	keyString
	keyZSet
	keyOther
)

// keyState is one key as C read it, with the command's clock.
type keyState struct {
	now      int64 // Unix nanoseconds, read once per command
	kind     keyKind
	value    string // the string value; valid only during the call
	expireMs int64  // the key's absolute expiry in Unix ms, -1 for none
	// A sorted set: its size, and its oldest and newest entries.
	zLen           int64
	oldest, newest zEntry
}

// zEntry is a sorted-set entry as C copies it.
type zEntry struct {
	score  float64
	member string // valid only during the call; cut at maxMember bytes
	length int    // the member's whole length
}

// maxMember is RL_MEMBER_MAX - 1: members are copied up to it.
const maxMember = 63

// reader gives the command's keys, which C read before the arguments were
// parsed (reading is not a side effect bad input must avoid; writing is):
// keys is how many, key(i) one of them; log(i) reads a sorted set key as a
// sliding log; memoryRoom is how many bytes the server may still allocate
// before maxmemory (-1: no maxmemory); holders(i) reads a sorted set key
// as a concurrency limiter's leases.
type reader interface {
	keys() int
	key(i int) keyState
	log(i int) window.Log
	holders(i int) holderSet
	memoryRoom() int64
}

// keyWrite is what a command writes to one key.
type keyWrite struct {
	action   int      // writeNone, writeSet, writeDel or writeZLog
	expireMs int64    // absolute Unix milliseconds, for writeSet and writeZLog
	valueLen int      // writeSet: the value
	value    [64]byte //
	// writeZLog: remove the entries scored at or below zCutoff, move those
	// scored after zScore to zScore when zRedate, add zAdd entries scored
	// zScore (Unix microseconds); zGrowth is the entries the write costs in
	// memory (zAdd, and the whole log when it leaves the compact encoding).
	zCutoff, zAdd, zScore, zGrowth int64
	zRedate                        bool
	// writeConc: remove up to concSweep holders scored at or below zCutoff
	// (never the caller), then add the caller, argument concID, scored
	// zScore (concAdd) or remove it (concRemove).
	concID              int
	concAdd, concRemove bool
}

// outcome is what a command decided: the reply, and each key's write.
type outcome struct {
	action   int
	reply    [maxReply]int64
	replyLen int // 5, 6 for RL.ALL and RL.PEEK (6 + 5 per limit with EACH), 1 for CONC.RELEASE
	err      string
	writes   [maxKeys]keyWrite
}

// reset makes o a fresh outcome for a command of n keys, as a zero one
// would be, without clearing the writes no key uses.
func (o *outcome) reset(n int) {
	o.action, o.replyLen, o.err = actError, 0, ""
	o.reply[0], o.reply[1], o.reply[2], o.reply[3], o.reply[4], o.reply[5] = 0, 0, 0, 0, 0, 0
	for i := range min(n, maxKeys) {
		o.writes[i] = keyWrite{}
	}
}

func (o *outcome) fail(msg string) {
	o.action = actError
	o.err = msg
}

// failErr replies an error from an algorithm package, which names the
// arguments at fault.
func (o *outcome) failErr(err error) { o.fail("ERR " + err.Error()) }

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
func (w *keyWrite) setInt(v, at int64) {
	w.action = writeSet
	w.valueLen = len(strconv.AppendInt(w.value[:0], v, 10))
	w.expireMs = ceilMs(at)
}

// ceilMs converts an instant in Unix ns to ms, rounded up: a key never
// expires before its state is full again.
func ceilMs(ns int64) int64 { return checked.CeilDiv(ns, int64(time.Millisecond)) }

// replyTime rounds d for the reply: with ms, milliseconds rounded up;
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

// The commands of one key: their family, and whether they only peek.
var (
	opFamily = [opCount]int{
		opGCRAThrottle: famGCRA, opGCRAPeek: famGCRA, opTBTake: famTB, opTBPeek: famTB,
		opLBEnqueue: famLB, opLBPeek: famLB, opSWHit: famSW, opSWPeek: famSW,
		opFWHit: famFW, opFWPeek: famFW, opSLHit: famSL, opSLPeek: famSL,
	}
	opPeek = [opCount]bool{
		opGCRAPeek: true, opTBPeek: true, opLBPeek: true, opSWPeek: true, opFWPeek: true, opSLPeek: true,
		opRLPeek: true, opConcPeek: true,
	}
)

// execute runs one command: parse every argument, run each limit on its
// key, and decide what to write and reply. Nothing is written unless the
// whole command parsed and computed. Dispatch is by switch, not a table of
// functions, so that nothing here escapes to the heap.
func execute(op int, args []string, r reader, o *outcome) {
	switch {
	case op < 0 || op >= opCount:
		o.fail(fmt.Sprintf("ERR internal error: unknown operation %d", op))
	case op == opRLAll || op == opRLPeek:
		executeAll(args, r, o, opPeek[op])
	case op >= opConcAcquire:
		executeConc(op, args, r, o)
	default:
		executeOne(opFamily[op], args, r, o, opPeek[op])
	}
}

// executeOne runs a command of one key: key first, then the family's
// arguments and options.
func executeOne(family int, args []string, r reader, o *outcome, peek bool) {
	l := limit{family: family}
	var ms bool
	if !families[family].syntax.parse(args, &l, &ms, o) {
		return
	}
	if r.keys() != 1 {
		o.fail("ERR internal error: the key was not read")
		return
	}
	st := r.key(0)
	var rep [5]int64
	w := &o.writes[0]
	if !l.run(&st, r, 0, ms, o, &rep, w) {
		return
	}
	o.action = actReply
	o.replyLen = 5
	copy(o.reply[:5], rep[:])
	if peek {
		*w = keyWrite{}
		return
	}
	checkMemory(o, r, 1)
}

// checkMemory refuses, with the server's OOM error, writes that would take
// the server past maxmemory. deny-oom is checked before a command runs; one
// sliding-log write can add 100000 entries, so log writes are checked here
// against what the server has left.
func checkMemory(o *outcome, r reader, n int) {
	var entries int64
	for i := range n {
		entries += o.writes[i].zGrowth
	}
	if entries == 0 {
		return
	}
	if room := r.memoryRoom(); room >= 0 && entries > room/bytesPerLogEntry {
		o.fail(errOOM)
	}
}

// errOOM is the server's own reply to a command refused for memory.
const errOOM = "OOM command not allowed when used memory > 'maxmemory'."
