package main

import (
	"fmt"
	"strconv"
	"time"

	"ratelimit/internal/checked"
	"ratelimit/window"
)

// The algorithms, numbered as enum rl_op in shim.h.
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
	opCount
)

// What shim.c does once execute returns, numbered as enum rl_action.
const (
	actError = iota
	actReply
	actSet
	actDel
	actWrongType
	actArity
	actZLog
)

// maxArgs is RL_MAX_ARGS: the most arguments, command name included.
const maxArgs = 16

// keyKind is what the key holds, numbered as enum rl_keykind.
type keyKind int

const (
	keyEmpty keyKind = iota
	keyString
	keyZSet
	keyOther
)

// keyState is what rl_read reports: the clock, read once, and the key.
type keyState struct {
	now      int64 // Unix nanoseconds
	kind     keyKind
	value    string // the string value; valid only during the call
	expireMs int64  // the key's absolute expiry in Unix ms, -1 for none
	// A sorted set: its size, and its oldest and newest entries.
	zLen           int64
	oldest, newest zEntry
}

// zEntry is a sorted-set entry as rl_read copies it.
type zEntry struct {
	score  float64
	member string // valid only during the call; cut at maxMember bytes
	length int    // the member's whole length
}

// maxMember is RL_MEMBER_MAX - 1: members are copied up to it.
const maxMember = 63

// reader reads the key's state. read is called at most once, after the
// arguments parsed, so that bad input never touches the key; log reads a
// sorted set key as a sliding log, after read; memoryRoom is how many bytes
// the server may still allocate before maxmemory (-1: no maxmemory).
type reader interface {
	read() keyState
	log() window.Log
	memoryRoom() int64
}

// outcome is what a command decided: the reply, and the write if any.
type outcome struct {
	action   int
	reply    [5]int64
	expireMs int64 // absolute Unix milliseconds, for actSet and actZLog
	valueLen int
	value    [64]byte
	err      string
	// actZLog: remove the entries scored at or below zCutoff, move those
	// scored after zScore to zScore when zRedate, add zAdd entries scored
	// zScore (Unix microseconds).
	zCutoff, zAdd, zScore int64
	zRedate               bool
}

func (o *outcome) fail(msg string) {
	o.action = actError
	o.err = msg
}

// failErr replies an error from an algorithm package, which names the
// arguments at fault.
func (o *outcome) failErr(err error) { o.fail("ERR " + err.Error()) }

// setReply fills the five integers. Times are whole seconds rounded as
// redis-cell rounds them, or milliseconds rounded up with MS; a negative
// time is the sentinel -1.
func (o *outcome) setReply(limited bool, limit, remaining int64, retry, reset time.Duration, ms bool) {
	o.action = actReply
	o.reply[0] = 0
	if limited {
		o.reply[0] = 1
	}
	o.reply[1] = limit
	o.reply[2] = remaining
	o.reply[3] = replyTime(retry, ms)
	o.reply[4] = replyTime(reset, ms)
}

// setInt asks for the key to be set to v, expiring at the absolute instant
// at (Unix ns), rounded up to the millisecond.
func (o *outcome) setInt(v, at int64) {
	o.action = actSet
	o.valueLen = len(strconv.AppendInt(o.value[:0], v, 10))
	o.expireMs = ceilMs(at)
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

// syntaxes are the commands' arguments, by operation.
var syntaxes = [opCount]*syntax{
	opGCRAThrottle: &gcraSyntax,
	opGCRAPeek:     &gcraSyntax,
	opTBTake:       &tbSyntax,
	opTBPeek:       &tbSyntax,
	opLBEnqueue:    &lbSyntax,
	opLBPeek:       &lbSyntax,
	opSWHit:        &windowSyntax,
	opSWPeek:       &windowSyntax,
	opFWHit:        &windowSyntax,
	opFWPeek:       &windowSyntax,
	opSLHit:        &logSyntax,
	opSLPeek:       &logSyntax,
}

// execute runs one command: parse every argument (failing before any side
// effect), then run the algorithm, which reads the key once and decides.
// Dispatch is a switch, not a table of functions, so that nothing here
// escapes to the heap.
func execute(op int, args []string, r reader, o *outcome) {
	if op < 0 || op >= opCount {
		o.fail(fmt.Sprintf("ERR internal error: unknown operation %d", op))
		return
	}
	var p params
	if !syntaxes[op].parse(args, &p, o) {
		return
	}
	switch op {
	case opGCRAThrottle:
		runGCRA(&p, r, o, false)
	case opGCRAPeek:
		runGCRA(&p, r, o, true)
	case opTBTake:
		runTokenBucket(&p, r, o, false)
	case opTBPeek:
		runTokenBucket(&p, r, o, true)
	case opLBEnqueue:
		runShaper(&p, r, o, false)
	case opLBPeek:
		runShaper(&p, r, o, true)
	case opSWHit:
		runSlidingWindow(&p, r, o, false)
	case opSWPeek:
		runSlidingWindow(&p, r, o, true)
	case opFWHit:
		runFixedWindow(&p, r, o, false)
	case opFWPeek:
		runFixedWindow(&p, r, o, true)
	case opSLHit:
		runSlidingLog(&p, r, o, false)
	case opSLPeek:
		runSlidingLog(&p, r, o, true)
	}
}
