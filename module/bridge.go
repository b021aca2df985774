package main

// #include "shim.h"
import "C"

import (
	"math"
	"unsafe"

	"github.com/seed-6b3823f5/ratelimit/conc"
	"github.com/seed-6b3823f5/ratelimit/internal/engine"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
	"github.com/seed-6b3823f5/ratelimit/window"
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

// cReader gives Go the keys C read before the crossing.
type cReader struct{ c *C.rl_call }

func (r cReader) Keys() int { return int(r.c.nkeys) }

func (r cReader) Key(i int) engine.KeyState {
	k := &r.c.keys[i]
	st := engine.KeyState{Now: int64(r.c.now_ns), Kind: engine.KeyKind(k.kind), ExpireMs: int64(k.expire_at_ms)}
	if k.val != nil {
		st.Value = unsafe.String((*byte)(unsafe.Pointer(k.val)), int(k.val_len))
	}
	if st.Kind == engine.KeyZSet {
		st.ZLen = int64(k.z_len)
		st.Oldest = engine.ZEntry{Score: float64(k.z_oldest), Member: member(&k.z_oldest_member, k.z_oldest_len), Length: int(k.z_oldest_len)}
		st.Newest = engine.ZEntry{Score: float64(k.z_newest), Member: member(&k.z_newest_member, k.z_newest_len), Length: int(k.z_newest_len)}
	}
	return st
}

// member views a member C copied, cut at MaxMember bytes.
func member(buf *[C.RL_MEMBER_MAX]C.char, n C.size_t) string {
	return unsafe.String((*byte)(unsafe.Pointer(&buf[0])), min(int(n), engine.MaxMember))
}

func (r cReader) Log(i int) window.Log { return cLog{&r.c.keys[i]} }

func (r cReader) Holders(i int) engine.HolderSet { return cHolders{&r.c.keys[i]} }

func (r cReader) MemoryRoom() int64 { return int64(C.rl_memory_room(r.c)) }

// Limits reads the LIMITS key field whose key is argument arg, through
// rl_limits_field.
func (r cReader) Limits(arg int) (string, int) {
	l := C.rl_limits_field(r.c, C.int(arg))
	switch {
	case l == nil:
		return "", engine.LimitsUnread
	case l.kind != C.RL_LIMITS_FOUND:
		return "", int(l.kind)
	}
	return unsafe.String((*byte)(unsafe.Pointer(l.val)), int(l.len)), int(l.kind)
}

// cLog reads a sorted set as a sliding log through rl_zlog_count and
// rl_zlog_nth. Entries are scored in microseconds; window works in
// nanoseconds. Being one pointer, it converts to window.Log without
// allocating.
type cLog struct{ k *C.rl_key }

func (l cLog) Count(after int64) int64 {
	return int64(C.rl_zlog_count(l.k, C.longlong(engine.FloorDiv(after, 1000))))
}

func (l cLog) Nth(after, k int64) int64 {
	return engine.ScoreNs(float64(C.rl_zlog_nth(l.k, C.longlong(engine.FloorDiv(after, 1000)), C.longlong(k))))
}

func (l cLog) Newest() int64 {
	if l.k.z_len == 0 {
		return math.MinInt64
	}
	return engine.ScoreNs(float64(l.k.z_newest))
}

// cHolders reads a sorted set as a concurrency limiter's leases through
// rl_conc_count, rl_zlog_nth and rl_conc_holder: scores in microseconds,
// instants here in nanoseconds.
type cHolders struct{ k *C.rl_key }

func (h cHolders) Count(after int64) int64 {
	return int64(C.rl_conc_count(h.k, C.longlong(engine.FloorDiv(after, 1000))))
}

func (h cHolders) Nth(after, k int64) int64 {
	return engine.ScoreNs(float64(C.rl_zlog_nth(h.k, C.longlong(engine.FloorDiv(after, 1000)), C.longlong(k))))
}

func (h cHolders) Holder(id string) conc.Holder {
	r := C.rl_conc_holder(h.k, (*C.char)(unsafe.Pointer(unsafe.StringData(id))), C.size_t(len(id)))
	return conc.Holder{Own: leaseNs(float64(r.own)), Latest: leaseNs(float64(r.latest)), Slots: int64(r.slots)}
}

// leaseNs converts a lease's score to ns, -Inf (none) to 0.
func leaseNs(us float64) int64 {
	if math.IsInf(us, -1) {
		return 0
	}
	return engine.ScoreNs(us)
}

// store copies the outcome into the C struct.
func store(o *engine.Outcome, c *C.rl_call) {
	c.action = C.int(o.Action)
	switch o.Action {
	case engine.ActError, engine.ActWrongType:
		if o.Err != "" {
			setErr(c, o.Err)
		}
		return
	case engine.ActArity:
		return
	}
	c.reply_len = C.int(o.ReplyLen)
	for i := range min(o.ReplyLen, len(o.Reply)) {
		c.reply[i] = C.longlong(o.Reply[i])
	}
	for i := range min(int(c.nkeys), len(o.Writes)) {
		w, k := &o.Writes[i], &c.keys[i]
		k.write = C.int(w.Action)
		if w.Action == engine.WriteNone || w.Action == engine.WriteDel {
			continue
		}
		// Every other write has an expiry; the sorted sets' share the cutoff
		// and the score.
		k.expire_ms = C.longlong(w.ExpireMs)
		k.z_cutoff_us, k.z_score_us = C.longlong(w.ZCutoff), C.longlong(w.ZScore)
		switch w.Action {
		case engine.WriteSet:
			n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&k.set_val[0])), len(k.set_val)), w.Value[:w.ValueLen])
			k.set_len = C.size_t(n)
		case engine.WriteZLog:
			k.z_redate, k.z_add, k.z_remove = cBool(w.ZRedate), C.longlong(w.ZAdd), C.longlong(w.ZRemove)
		case engine.WriteConc:
			k.conc_id_arg = C.int(w.ConcID)
			k.conc_add, k.conc_remove = cBool(w.ConcAdd), cBool(w.ConcRemove)
			k.conc_from, k.conc_to = C.longlong(w.ConcFrom), C.longlong(w.ConcTo)
		}
	}
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// errCapacity is the longest error C holds, with its NUL.
var errCapacity = len(C.rl_call{}.err)

func setErr(c *C.rl_call, msg string) {
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&c.err[0])), len(c.err))
	n := copy(buf[:len(buf)-1], msg)
	buf[n] = 0
}

// numbering lists where the Go constants disagree with the C headers'
// (protocol_gen.h, which go generate writes from them: a stale one).
func numbering() []string {
	var bad []string
	check := func(name string, c C.int, g int) {
		if int(c) != g {
			bad = append(bad, name)
		}
	}
	check("RL_NCOMMANDS", C.RL_NCOMMANDS, len(spec.Commands))
	check("RL_ACT_ERROR", C.RL_ACT_ERROR, engine.ActError)
	check("RL_ACT_REPLY", C.RL_ACT_REPLY, engine.ActReply)
	check("RL_ACT_WRONGTYPE", C.RL_ACT_WRONGTYPE, engine.ActWrongType)
	check("RL_ACT_ARITY", C.RL_ACT_ARITY, engine.ActArity)
	check("RL_WRITE_NONE", C.RL_WRITE_NONE, engine.WriteNone)
	check("RL_WRITE_SET", C.RL_WRITE_SET, engine.WriteSet)
	check("RL_WRITE_DEL", C.RL_WRITE_DEL, engine.WriteDel)
	check("RL_WRITE_ZLOG", C.RL_WRITE_ZLOG, engine.WriteZLog)
	check("RL_WRITE_CONC", C.RL_WRITE_CONC, engine.WriteConc)
	check("RL_CONC_SWEEP", C.RL_CONC_SWEEP, engine.ConcSweep)
	check("RL_MAX_ID", C.RL_MAX_ID, spec.MaxID)
	check("RL_KEY_ZSET", C.RL_KEY_ZSET, int(engine.KeyZSet))
	check("RL_KEY_EMPTY", C.RL_KEY_EMPTY, int(engine.KeyEmpty))
	check("RL_KEY_STRING", C.RL_KEY_STRING, int(engine.KeyString))
	check("RL_KEY_OTHER", C.RL_KEY_OTHER, int(engine.KeyOther))
	check("RL_LIMITS_ABSENT", C.RL_LIMITS_ABSENT, engine.LimitsAbsent)
	check("RL_LIMITS_FOUND", C.RL_LIMITS_FOUND, engine.LimitsFound)
	check("RL_LIMITS_WRONGTYPE", C.RL_LIMITS_WRONGTYPE, engine.LimitsWrongType)
	check("RL_LIMITS_UNREAD", C.RL_LIMITS_UNREAD, engine.LimitsUnread)
	check("RL_MAX_ARGS", C.RL_MAX_ARGS, engine.MaxArgs)
	check("RL_MAX_KEYS", C.RL_MAX_KEYS, engine.MaxKeys)
	check("RL_MAX_REPLY", C.RL_MAX_REPLY, engine.MaxReply)
	check("RL_MEMBER_MAX", C.RL_MEMBER_MAX-1, engine.MaxMember)
	check("set_val", C.int(len(rlKey{}.set_val)), len(engine.KeyWrite{}.Value))
	check("err", C.int(errCapacity), engine.ErrCapacity)
	return bad
}

type rlKey = C.rl_key
