package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"ratelimit/window"
)

// t0 is the virtual clock: 2023-11-14T22:13:20Z in Unix nanoseconds.
const t0 = int64(1_700_000_000) * int64(time.Second)

func TestNumberingMatchesShim(t *testing.T) {
	if bad := numbering(); len(bad) > 0 {
		t.Fatalf("Go and shim.h disagree on %v", bad)
	}
}

// fakeKey is a reader with a virtual clock that counts its reads; a sorted
// set key holds entries, in Unix ns, sorted.
type fakeKey struct {
	st      keyState
	reads   int
	entries fakeLog
}

func (f *fakeKey) read(bool) keyState {
	f.reads++
	return f.st
}

func (f *fakeKey) log() window.Log { return &f.entries }

type fakeLog []int64

func (l *fakeLog) Count(after int64) int64 {
	n := int64(0)
	for _, e := range *l {
		if e > after {
			n++
		}
	}
	return n
}

func (l *fakeLog) Nth(after, k int64) int64 {
	for _, e := range *l {
		if e > after {
			if k--; k == 0 {
				return e
			}
		}
	}
	return math.MinInt64
}

func (l *fakeLog) Newest() int64 {
	if len(*l) == 0 {
		return math.MinInt64
	}
	return (*l)[len(*l)-1]
}

func run(op int, key *fakeKey, args ...string) outcome {
	var o outcome
	execute(op, append([]string{"cmd", "k"}, args...), key, &o)
	return o
}

func TestReplyTime(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		d      time.Duration
		s, ms_ int64
	}{
		{-1, -1, -1},
		{0, 0, 0},
		{1, 0, 1},       // 1 ns: no millisecond part, so 0 s; 1 ms rounded up
		{999_999, 0, 1}, // under 1 ms
		{ms, 1, 1},      // 1 ms: the millisecond part is above zero
		{time.Second, 1, 1000},
		{time.Second + 500_000, 1, 1001}, // 1.0005 s: 1 s (redis-cell), 1001 ms
		{time.Second + ms, 2, 1001},
		{2*time.Second - 1, 2, 2000},
		{time.Duration(math.MaxInt64), 9223372037, 9223372036855},
	} {
		if got := replyTime(c.d, false); got != c.s {
			t.Errorf("replyTime(%d, s) = %d, want %d", c.d, got, c.s)
		}
		if got := replyTime(c.d, true); got != c.ms_ {
			t.Errorf("replyTime(%d, ms) = %d, want %d", c.d, got, c.ms_)
		}
	}
}

func TestParse(t *testing.T) {
	ok := []struct {
		args []string
		want params
	}{
		{[]string{"15", "30", "60"}, params{v: [4]int64{15, 30, 60, 1}}},
		{[]string{"15", "30", "60", "3"}, params{v: [4]int64{15, 30, 60, 3}}},
		{[]string{"15", "30", "60", "-3", "ms"}, params{v: [4]int64{15, 30, 60, -3}, ms: true}},
		{[]string{"15", "30", "60", "MS"}, params{v: [4]int64{15, 30, 60, 1}, ms: true}},
		{[]string{"+15", "030", "60", "0", "Ms", "mS"}, params{v: [4]int64{15, 30, 60, 0}, ms: true}},
		{[]string{"0", "9223372036854775807", "9223372036", "-9223372036854775808"}, params{v: [4]int64{0, math.MaxInt64, 9223372036, math.MinInt64}}},
	}
	for _, c := range ok {
		var p params
		var o outcome
		args := append([]string{"gcra.throttle", "k"}, c.args...)
		if !gcraSyntax.parse(args, &p, &o) {
			t.Errorf("parse %q: %s", c.args, o.err)
		} else if p != c.want {
			t.Errorf("parse %q = %+v, want %+v", c.args, p, c.want)
		}
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"15", "30"}, ""}, // arity
		{[]string{"-1", "30", "60"}, "ERR max_burst must be an integer from 0 to 9223372036854775806"},
		{[]string{"1.5", "30", "60"}, "ERR max_burst must be an integer from 0 to 9223372036854775806"},
		{[]string{"15", "0", "60"}, "ERR count must be an integer from 1 to 9223372036854775807"},
		{[]string{"15", "30", "0"}, "ERR period must be whole seconds from 1 to 9223372036"},
		{[]string{"15", "30", "9223372037"}, "ERR period must be whole seconds from 1 to 9223372036"},
		{[]string{"15", "30", "60", "1e3"}, "ERR quantity must be an integer from -9223372036854775808 to 9223372036854775807"},
		{[]string{"15", "30", "60", "1", "XX"}, `ERR unknown option "XX": the options are MS`},
		{[]string{"15", "30", "60", "MS", "1"}, `ERR unknown option "1": the options are MS`},
		{[]string{"15", "30", "60", "1", "\xff\r\n"}, `ERR unknown option "\xff\r\n": the options are MS`},
	}
	for _, c := range bad {
		var p params
		var o outcome
		args := append([]string{"gcra.throttle", "k"}, c.args...)
		if gcraSyntax.parse(args, &p, &o) {
			t.Errorf("parse %q succeeded: %+v", c.args, p)
			continue
		}
		if c.want == "" {
			if o.action != actArity {
				t.Errorf("parse %q: action %d, want arity", c.args, o.action)
			}
		} else if o.action != actError || o.err != c.want {
			t.Errorf("parse %q: %q, want %q", c.args, o.err, c.want)
		}
	}
}

func TestGCRACommand(t *testing.T) {
	fresh := &fakeKey{st: keyState{now: t0}}
	o := run(opGCRAThrottle, fresh, "15", "30", "60")
	if o.action != actSet || o.reply != [5]int64{0, 16, 15, -1, 2} {
		t.Fatalf("fresh: %+v", o)
	}
	tat := t0 + 2*int64(time.Second)
	if string(o.value[:o.valueLen]) != strconv.FormatInt(tat, 10) || o.expireMs != tat/1e6 {
		t.Fatalf("state %q expiring %d, want %d at %d", o.value[:o.valueLen], o.expireMs, tat, tat/1e6)
	}

	// The stored TAT is read back; the expiry rounds up to the millisecond.
	live := &fakeKey{st: keyState{now: t0 + 1, kind: keyString, value: strconv.FormatInt(tat, 10)}}
	o = run(opGCRAThrottle, live, "15", "30", "60", "1", "MS")
	if o.action != actSet || o.reply != [5]int64{0, 16, 14, -1, 4000} || o.expireMs != (tat+2e9)/1e6 {
		t.Fatalf("live: %+v", o)
	}
	live.st.now = t0 + 2*int64(time.Second) + 1_500_000 // +1.5 ms: TAT = now + ...5 ms - 1 ns
	o = run(opGCRAThrottle, live, "0", "1", "1")
	if o.action != actSet || o.expireMs != (t0+3*int64(time.Second)+1_500_000)/1e6+1 {
		t.Fatalf("expiry not rounded up: %+v", o)
	}

	// PEEK replies the same and writes nothing.
	peek := run(opGCRAPeek, &fakeKey{st: keyState{now: t0}}, "15", "30", "60")
	if peek.action != actReply || peek.reply != [5]int64{0, 16, 15, -1, 2} {
		t.Fatalf("peek: %+v", peek)
	}

	// Refused: reply only.
	full := &fakeKey{st: keyState{now: t0, kind: keyString, value: strconv.FormatInt(t0+32*int64(time.Second), 10)}}
	if o := run(opGCRAThrottle, full, "15", "30", "60"); o.action != actReply || o.reply != [5]int64{1, 16, 0, 2, 32} {
		t.Fatalf("refused: %+v", o)
	}
	// A refund back to full deletes the key.
	if o := run(opGCRAThrottle, full, "15", "30", "60", "-100"); o.action != actDel || o.reply != [5]int64{0, 16, 16, -1, 0} {
		t.Fatalf("refund: %+v", o)
	}
}

func TestGCRAForeignState(t *testing.T) {
	for _, v := range []string{"", "abc", "-5", "+5", " 5", "5 ", "1.5", "99999999999999999999", "\x00"} {
		k := &fakeKey{st: keyState{now: t0, kind: keyString, value: v}}
		for _, op := range []int{opGCRAThrottle, opGCRAPeek} {
			if o := run(op, k, "1", "1", "1"); o.action != actError || o.err != errNotGCRAState {
				t.Errorf("state %q: %+v", v, o)
			}
		}
	}
	k := &fakeKey{st: keyState{now: t0, kind: keyOther}}
	if o := run(opGCRAThrottle, k, "1", "1", "1"); o.action != actWrongType {
		t.Errorf("other type: %+v", o)
	}
}

// Bad arguments fail before the key is read, for every command.
func TestErrorsBeforeRead(t *testing.T) {
	for op := range opCount {
		valid, _, _ := validCall(op)
		n := len(syntaxes[op].positional)
		cases := [][]string{
			append([]string{"cmd", "k", "x"}, valid[3:]...), // the first argument
			valid[:1+n], // one too few
			append(append([]string{}, valid[:2+n]...), "1", "no"), // an unknown option
		}
		if n == 3 {
			cases = append(cases,
				[]string{"cmd", "k", "1", "2000000000", "1"},          // interval under 1 ns
				[]string{"cmd", "k", "9223372036854775806", "1", "1"}, // the tolerance overflows
			)
		}
		for _, args := range cases {
			k := &fakeKey{st: keyState{now: t0}}
			var o outcome
			execute(op, args, k, &o)
			if (o.action != actError && o.action != actArity) || k.reads != 0 {
				t.Errorf("op %d %q: %+v after %d reads", op, args, o, k.reads)
			}
		}
	}
}

func TestBucketCommands(t *testing.T) {
	fresh := &fakeKey{st: keyState{now: t0}}
	if o := run(opTBTake, fresh, "10", "1", "1", "3"); o.action != actSet || o.reply != [5]int64{0, 10, 7, -1, 3} || o.expireMs != (t0+3e9)/1e6 {
		t.Fatalf("TB.TAKE: %+v", o)
	}
	if o := run(opTBPeek, fresh, "10", "1", "1", "3"); o.action != actReply || o.reply != [5]int64{0, 10, 7, -1, 3} {
		t.Fatalf("TB.PEEK: %+v", o)
	}
	// Three requests at once into a shaper of 2 places at 1 per second.
	k := &fakeKey{st: keyState{now: t0}}
	for i, want := range [][5]int64{{0, 2, 2, -1, 0}, {0, 2, 1, -1, 1000}, {0, 2, 0, -1, 2000}, {1, 2, 0, 1000, 0}} {
		o := run(opLBEnqueue, k, "2", "1", "1", "1", "MS")
		if o.reply != want {
			t.Fatalf("LB.ENQUEUE %d: %v, want %v", i, o.reply, want)
		}
		if o.action == actSet {
			k.st.kind, k.st.value = keyString, string(o.value[:o.valueLen])
		}
	}
	if o := run(opLBEnqueue, k, "2", "1", "1", "-1"); o.action != actError || !strings.Contains(o.err, "quantity must be an integer from 0") {
		t.Fatalf("negative quantity: %+v", o)
	}
	k.st.value = "x"
	for op, msg := range map[int]string{opTBTake: errNotBucketState, opLBEnqueue: errNotShaperState, opGCRAThrottle: errNotGCRAState} {
		if o := run(op, k, "2", "1", "1"); o.err != msg {
			t.Errorf("op %d on %q: %+v", op, k.st.value, o)
		}
	}
}

// FuzzParse throws arbitrary arguments at every command's parser: it never
// panics, values it accepts are in range and exactly what was written, and
// what it refuses gets an ERR that names an argument or the option, on one
// line.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"15 30 60", "15 30 60 1 MS", "0 1 1 -5 ms", "1.5 1 1", "1 1 1 MS 5", "9223372036854775807 1 1", "1 1 9223372036", "  1 1 1", "1 1 1 \xff"} {
		for op := range opCount {
			f.Add(uint8(op), s)
		}
	}
	f.Fuzz(func(t *testing.T, op uint8, line string) {
		syn := syntaxes[int(op)%opCount]
		args := append([]string{"cmd", "k"}, strings.Split(line, " ")...)
		var p params
		var o outcome
		if syn.parse(args, &p, &o) {
			for i, a := range syn.positional {
				if p.v[i] < a.min || p.v[i] > a.max {
					t.Fatalf("%s = %d accepted out of range", a.name, p.v[i])
				}
				if v, _ := strconv.ParseInt(args[2+i], 10, 64); v != p.v[i] {
					t.Fatalf("%s: %q parsed as %d", a.name, args[2+i], p.v[i])
				}
			}
			if c := p.v[len(syn.positional)]; c < syn.optional.min || c > syn.optional.max {
				t.Fatalf("%s = %d accepted out of range", syn.optional.name, c)
			}
			return
		}
		switch o.action {
		case actArity:
			if len(args) >= 2+len(syn.positional) && len(args) <= maxArgs {
				t.Fatalf("arity error for %d arguments", len(args))
			}
		case actError:
			if !strings.HasPrefix(o.err, "ERR ") || strings.ContainsAny(o.err, "\r\n") || !utf8.ValidString(o.err) {
				t.Fatalf("bad error text %q", o.err)
			}
			named := strings.Contains(o.err, "unknown option")
			for _, a := range append(syn.positional, syn.optional) {
				named = named || strings.HasPrefix(o.err, "ERR "+a.name+" must be")
			}
			if !named {
				t.Fatalf("error names no argument: %q", o.err)
			}
		default:
			t.Fatalf("parse failed with action %d", o.action)
		}
	})
}

// FuzzCommand runs whole commands on arbitrary arguments and stored
// values: the key is read at most once and only after the arguments
// parsed, a write happens only for an admitted consuming call, its expiry
// is the new state rounded up to the millisecond, and the reply is in range.
func FuzzCommand(f *testing.F) {
	for op := range opCount {
		f.Add(uint8(op), "15 30 60", "", t0)
		f.Add(uint8(op), "4 1 1 6", "1700000002000000000", t0)
		f.Add(uint8(op), "4 1 1 -2 MS", "1700000002000000000", t0)
		f.Add(uint8(op), "0 3 10 0", "garbage", t0)
	}
	f.Fuzz(func(t *testing.T, op8 uint8, line, stored string, now int64) {
		if now <= 0 {
			return
		}
		op := int(op8) % opCount
		st := keyState{now: now}
		if stored != "" {
			st.kind, st.value = keyString, stored
		}
		k := &fakeKey{st: st}
		args := append([]string{"cmd", "k"}, strings.Split(line, " ")...)
		var o outcome
		execute(op, args, k, &o)
		if k.reads > 1 {
			t.Fatalf("%d reads", k.reads)
		}
		var p params
		var po outcome
		if !syntaxes[op].parse(args, &p, &po) && k.reads != 0 {
			t.Fatal("the key was read although the arguments did not parse")
		}
		peek := op == opGCRAPeek || op == opTBPeek || op == opLBPeek || op == opSWPeek || op == opFWPeek || op == opSLPeek
		switch o.action {
		case actSet:
			v := string(o.value[:o.valueLen])
			if o.expireMs*1e6 <= now {
				t.Fatalf("wrote %q expiring at %d ms, not after now %d", v, o.expireMs, now)
			}
			switch op {
			case opSWHit:
				if c, ok := parseCounts(v); !ok || c.Current < 1 {
					t.Fatalf("wrote counts %q", v)
				}
			case opFWHit:
				if n, ok := parseInstant(v); !ok || n < 1 {
					t.Fatalf("wrote count %q", v)
				}
			default: // an instant, expiring at itself rounded up to the ms
				state, ok := parseInstant(v)
				if !ok || state <= now || o.expireMs*1e6 < state || o.expireMs*1e6-state >= 1e6 {
					t.Fatalf("wrote %q expiring at %d ms at now %d", v, o.expireMs, now)
				}
			}
			fallthrough
		case actReply, actDel, actZLog:
			if o.action == actZLog && (op != opSLHit || o.zAdd < 1 || o.zScore*1000 > now || o.expireMs*1e6 <= now || o.zCutoff >= o.zScore) {
				t.Fatalf("sliding log write %+v at now %d", o, now)
			}
			r := o.reply
			if r[0] != 0 && r[0] != 1 || r[2] < 0 || r[2] > r[1] || r[3] < -1 || r[4] < 0 {
				t.Fatalf("reply %v", r)
			}
			if (r[0] == 1 || peek) && o.action != actReply {
				t.Fatalf("refused call or peek writes: %+v", o)
			}
			if o.action == actDel && stored == "" {
				t.Fatal("DEL of a missing key")
			}
		case actError:
			if !strings.HasPrefix(o.err, "ERR ") {
				t.Fatalf("error %q", o.err)
			}
		case actArity, actWrongType:
		default:
			t.Fatalf("action %d", o.action)
		}
	})
}

var opNames = [opCount]string{
	opGCRAThrottle: "gcra.throttle", opGCRAPeek: "gcra.peek", opTBTake: "tb.take", opTBPeek: "tb.peek",
	opLBEnqueue: "lb.enqueue", opLBPeek: "lb.peek", opSWHit: "sw.hit", opSWPeek: "sw.peek",
	opFWHit: "fw.hit", opFWPeek: "fw.peek", opSLHit: "sl.hit", opSLPeek: "sl.peek",
}

// BenchmarkCommands runs the Go side of each command — parse, compute,
// decide — on a live key, without the server. make bench reports it.
func BenchmarkCommands(b *testing.B) {
	for op := range opCount {
		b.Run(opNames[op], func(b *testing.B) {
			args, st, log := validCall(op)
			k := &fakeKey{st: st, entries: log}
			b.ReportAllocs()
			for b.Loop() {
				var o outcome
				execute(op, args, k, &o)
			}
		})
	}
}

// validArgs are arguments every command accepts, and a stored state each
// reads, for the tests that need a valid call of each.
func validCall(op int) (args []string, st keyState, log fakeLog) {
	st = keyState{now: t0, kind: keyString, value: "1700000010000000000", expireMs: -1}
	args = []string{"cmd", "user123", "15", "30", "60", "1", "MS"}
	switch op {
	case opSWHit, opSWPeek:
		st.value = strconv.FormatInt(t0/(30*int64(time.Second)), 10) + ":3:4"
		args = []string{"cmd", "user123", "15", "30", "1", "MS"}
	case opFWHit, opFWPeek:
		st.value = "3"
		args = []string{"cmd", "user123", "15", "30", "1", "MS"}
	case opSLHit, opSLPeek:
		st.kind, st.value = keyZSet, ""
		log = fakeLog{t0 - 40*int64(time.Second), t0 - 2*int64(time.Second), t0 - int64(time.Second)}
		args = []string{"cmd", "user123", "15", "30", "1", "MS"}
	}
	return args, st, log
}

func TestCommandsAllocateNothing(t *testing.T) {
	for op := range opCount {
		args, st, log := validCall(op)
		k := &fakeKey{st: st, entries: log}
		var o outcome
		execute(op, args, k, &o)
		if o.action == actError || o.action == actArity || o.action == actWrongType {
			t.Fatalf("op %d: %+v", op, o)
		}
		if n := testing.AllocsPerRun(100, func() {
			var o outcome
			execute(op, args, k, &o)
		}); n != 0 {
			t.Errorf("op %d: %v allocations per command", op, n)
		}
	}
}

func TestWindowCommands(t *testing.T) {
	sec := int64(time.Second)
	idx := t0 / (10 * sec)
	// Sliding window: the state is "index:current:previous", expiring
	// when the estimate is zero (two windows after this one starts).
	k := &fakeKey{st: keyState{now: t0 + 5*sec, kind: keyString, value: strconv.FormatInt(idx-1, 10) + ":8:3"}}
	o := run(opSWHit, k, "10", "10", "2")
	if o.action != actSet || string(o.value[:o.valueLen]) != strconv.FormatInt(idx, 10)+":2:8" ||
		o.reply != [5]int64{0, 10, 4, -1, 15} || o.expireMs != (t0+20*sec)/1e6 {
		t.Fatalf("SW.HIT: %+v %q", o, o.value[:o.valueLen])
	}
	for _, bad := range []string{"1:2", "1:2:3:4", "a:1:2", "1::2", "-1:2:3", ""} {
		k.st.value = bad
		if o := run(opSWHit, k, "10", "10"); o.err != errNotCounterState {
			t.Errorf("SW state %q: %+v", bad, o)
		}
	}

	// Fixed window: the count, expiring at the window's end; a count whose
	// expiry is not after this window's start is stale.
	k = &fakeKey{st: keyState{now: t0 + 5*sec, kind: keyString, value: "9", expireMs: (t0 + 10*sec) / 1e6}}
	if o := run(opFWHit, k, "10", "10", "2"); o.action != actReply || o.reply != [5]int64{1, 10, 1, 5, 5} {
		t.Fatalf("FW.HIT on 9: %+v", o)
	}
	k.st.expireMs = t0 / 1e6 // the previous window's
	if o := run(opFWHit, k, "10", "10", "2"); o.action != actSet || o.reply != [5]int64{0, 10, 8, -1, 5} || o.expireMs != (t0+10*sec)/1e6 {
		t.Fatalf("FW.HIT on a stale count: %+v", o)
	}

	// Sliding log: trim what left, add cost entries at now, in µs.
	k = &fakeKey{st: keyState{now: t0, kind: keyZSet}, entries: fakeLog{t0 - 20*sec, t0 - 3*sec}}
	o = run(opSLHit, k, "3", "10", "2", "MS")
	if o.action != actZLog || o.zAdd != 2 || o.zScore != t0/1000 || o.zCutoff != (t0-10*sec)/1000 ||
		o.expireMs != (t0+10*sec)/1e6 || o.reply != [5]int64{0, 3, 0, -1, 10000} {
		t.Fatalf("SL.HIT: %+v", o)
	}
	if o := run(opSLHit, k, "3", "10", "3", "MS"); o.action != actReply || o.reply != [5]int64{1, 3, 2, 7000, 7000} {
		t.Fatalf("SL.HIT refused: %+v", o)
	}
	k.st.kind = keyString
	if o := run(opSLHit, k, "3", "10"); o.action != actWrongType {
		t.Fatalf("SL.HIT on a string: %+v", o)
	}
}

// parseInt is strconv.ParseInt(s, 10, 64), written out for speed: the
// two agree on every input.
func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"0", "-0", "+0", "007", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
		"-9223372036854775809", "99999999999999999999", "", "+", "-", " 1", "1 ", "1.5", "1e3", "0x10", "1_000", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := parseInt(s)
		w, err := strconv.ParseInt(s, 10, 64)
		if ok != (err == nil) || (ok && v != w) {
			t.Fatalf("parseInt(%q) = %d, %v; strconv: %d, %v", s, v, ok, w, err)
		}
	})
}
