package main

// #include "shim.h"
import "C"

import (
	"math"
	"unsafe"

	"ratelimit/window"
)

// callArgs views the command's arguments in place, without copying. The
// strings are valid only during the call: nothing may keep them.
func callArgs(c *C.rl_call, buf *[C.RL_MAX_ARGS]string) []string {
	n := min(int(c.argc), len(buf))
	args := buf[:n]
	for i := range n {
		a := c.argv[i]
		args[i] = unsafe.String((*byte)(unsafe.Pointer(a.ptr)), int(a.len))
	}
	return args
}

// cReader reads the key through the C side, once, after the arguments parsed.
type cReader struct{ c *C.rl_call }

func (r cReader) read() keyState {
	c := r.c
	C.rl_read(c)
	st := keyState{now: int64(c.now_ns), kind: keyKind(c.kind), expireMs: int64(c.expire_at_ms)}
	if c.val != nil {
		st.value = unsafe.String((*byte)(unsafe.Pointer(c.val)), int(c.val_len))
	}
	if st.kind == keyZSet {
		st.zLen = int64(c.z_len)
		st.oldest = zEntry{score: float64(c.z_oldest), member: member(&c.z_oldest_member, c.z_oldest_len), length: int(c.z_oldest_len)}
		st.newest = zEntry{score: float64(c.z_newest), member: member(&c.z_newest_member, c.z_newest_len), length: int(c.z_newest_len)}
	}
	return st
}

// member views a member rl_read copied, cut at maxMember bytes.
func member(buf *[C.RL_MEMBER_MAX]C.char, n C.size_t) string {
	return unsafe.String((*byte)(unsafe.Pointer(&buf[0])), min(int(n), maxMember))
}

func (r cReader) log() window.Log { return cLog(r) }

func (r cReader) memoryRoom() int64 { return int64(C.rl_memory_room(r.c)) }

// cLog reads the sorted set as a sliding log through rl_zlog_scan and
// rl_zlog_nth. Entries are scored in microseconds; window works in
// nanoseconds. Being one pointer, it converts to window.Log without
// allocating.
type cLog struct{ c *C.rl_call }

func (l cLog) Count(after int64) int64 {
	C.rl_zlog_scan(l.c, C.longlong(floorDiv(after, 1000)))
	return int64(l.c.z_live)
}

func (l cLog) Nth(after, k int64) int64 {
	return scoreNs(float64(C.rl_zlog_nth(l.c, C.longlong(floorDiv(after, 1000)), C.longlong(k))))
}

func (l cLog) Newest() int64 {
	if l.c.z_len == 0 {
		return math.MinInt64
	}
	return scoreNs(float64(l.c.z_newest))
}

// store copies the outcome into the C struct.
func (o *outcome) store(c *C.rl_call) {
	c.action = C.int(o.action)
	switch o.action {
	case actError:
		setErr(c, o.err)
		return
	case actWrongType, actArity:
		return
	}
	for i, v := range o.reply {
		c.reply[i] = C.longlong(v)
	}
	switch o.action {
	case actSet:
		n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&c.set_val[0])), len(c.set_val)), o.value[:o.valueLen])
		c.set_len = C.size_t(n)
		c.expire_ms = C.longlong(o.expireMs)
	case actZLog:
		c.z_redate = 0
		if o.zRedate {
			c.z_redate = 1
		}
		c.z_cutoff_us = C.longlong(o.zCutoff)
		c.z_add = C.longlong(o.zAdd)
		c.z_score_us = C.longlong(o.zScore)
		c.expire_ms = C.longlong(o.expireMs)
	}
}

func setErr(c *C.rl_call, msg string) {
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&c.err[0])), len(c.err))
	n := copy(buf[:len(buf)-1], msg)
	buf[n] = 0
}

// numbering lists where the Go constants disagree with shim.h's.
func numbering() []string {
	var bad []string
	check := func(name string, c C.int, g int) {
		if int(c) != g {
			bad = append(bad, name)
		}
	}
	check("RL_OP_COUNT", C.RL_OP_COUNT, opCount)
	check("RL_ACT_ERROR", C.RL_ACT_ERROR, actError)
	check("RL_ACT_REPLY", C.RL_ACT_REPLY, actReply)
	check("RL_ACT_SET", C.RL_ACT_SET, actSet)
	check("RL_ACT_DEL", C.RL_ACT_DEL, actDel)
	check("RL_ACT_WRONGTYPE", C.RL_ACT_WRONGTYPE, actWrongType)
	check("RL_ACT_ARITY", C.RL_ACT_ARITY, actArity)
	check("RL_ACT_ZLOG", C.RL_ACT_ZLOG, actZLog)
	check("RL_KEY_ZSET", C.RL_KEY_ZSET, int(keyZSet))
	check("RL_KEY_EMPTY", C.RL_KEY_EMPTY, int(keyEmpty))
	check("RL_KEY_STRING", C.RL_KEY_STRING, int(keyString))
	check("RL_KEY_OTHER", C.RL_KEY_OTHER, int(keyOther))
	check("RL_MAX_ARGS", C.RL_MAX_ARGS, maxArgs)
	check("RL_MEMBER_MAX", C.RL_MEMBER_MAX-1, maxMember)
	check("set_val", C.int(len(rlCall{}.set_val)), len(outcome{}.value))
	return bad
}

type rlCall = C.rl_call
