package engine

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/window"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// t0 is the virtual clock: 2023-11-14T22:13:20Z in Unix nanoseconds.
const t0 = int64(1_700_000_000) * int64(time.Second)

// fakeKey is a Reader with a virtual clock that counts its reads; a sorted
// set key holds entries, in Unix ns, sorted.
//
// A string or sorted set with no expiry set (0) gets one an hour after now,
// as limiter keys always expire; noExpiry keeps it without. A sorted set's
// oldest and newest entries are the sliding log's own members, made from
// entries, unless rawZSet is set.
type fakeKey struct {
	st       KeyState
	reads    int
	entries  fakeLog
	noExpiry bool
	rawZSet  bool
	room     int64 // memoryRoom: the bytes left before maxmemory; 0 for no maxmemory
	// leases makes a sorted set key a concurrency limiter's: id → when its
	// lease ends (Unix ns), expiring with the latest unless st.ExpireMs is set.
	leases fakeLeases
	// limits are the LIMITS fields found, by their key's argument.
	limits          map[int]string
	limitsWrongType bool
}

func (f *fakeKey) Keys() int { return 1 }

// Limits gives LIMITS's field from f.limits, by the key's argument: a
// value found, or absent; every hash's field on a key of another type with
// limitsWrongType.
func (f *fakeKey) Limits(arg int) (string, int) {
	if f.limitsWrongType {
		return "", LimitsWrongType
	}
	if v, ok := f.limits[arg]; ok {
		return v, LimitsFound
	}
	return "", LimitsAbsent
}

func (f *fakeKey) Key(int) KeyState {
	f.reads++
	st := f.st
	if st.Kind != KeyEmpty && st.ExpireMs == 0 {
		st.ExpireMs = st.Now/1e6 + 3600_000
		if f.noExpiry {
			st.ExpireMs = -1
		}
	}
	if st.Kind == KeyZSet && f.leases != nil && !f.rawZSet {
		f.leases.describe(&f.st)
		f.rawZSet = true
		st = f.st
	}
	if st.Kind == KeyZSet && !f.rawZSet { // once: the fake allocates nothing per read after
		f.st.ZLen = int64(len(f.entries))
		if len(f.entries) > 0 {
			f.st.Oldest = logMember(f.entries[0], 0)
			f.st.Newest = logMember(f.entries[len(f.entries)-1], int64(len(f.entries)-1))
		}
		f.rawZSet = true
		st.ZLen, st.Oldest, st.Newest = f.st.ZLen, f.st.Oldest, f.st.Newest
	}
	return st
}

// logMember is the entry the sliding log writes at ns, numbered n.
func logMember(ns, n int64) ZEntry {
	m := strconv.FormatInt(ns/1000, 10) + "-" + strconv.FormatInt(n, 10)
	return ZEntry{Score: float64(ns / 1000), Member: m, Length: len(m)}
}

func (f *fakeKey) Log(int) window.Log { return &f.entries }

func (f *fakeKey) MemoryRoom() int64 {
	if f.room == 0 {
		return -1
	}
	return f.room
}

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

// result is a command's Outcome on one key, as the tests read it: what was
// done to the key (resReply when nothing was written), the reply, the write.
type result struct {
	Action int
	Reply  [5]int64
	w      KeyWrite
	Err    string
}

// What a command did to its one key, for result.Action.
const (
	resError = iota
	resReply
	resWrongType
	resArity
	resSet
	resDel
	resZLog
)

func toResult(o *Outcome) result {
	r := result{Action: o.Action, w: o.Writes[0], Err: o.Err}
	copy(r.Reply[:], o.Reply[:5])
	if o.Action == ActReply {
		switch o.Writes[0].Action {
		case WriteSet:
			r.Action = resSet
		case WriteDel:
			r.Action = resDel
		case WriteZLog:
			r.Action = resZLog
		}
	}
	return r
}

func run(op spec.Op, key *fakeKey, args ...string) result {
	var o Outcome
	Execute(op, append([]string{"cmd", "k"}, args...), key, &o)
	return toResult(&o)
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

// parsed is what a command of one key parsed into.
type parsed struct {
	l  limit
	ms bool
}

func TestParse(t *testing.T) {
	ok := []struct {
		args []string
		want parsed
	}{
		{[]string{"15", "30", "60"}, parsed{l: limit{v: [4]int64{15, 30, 60, 1}}}},
		{[]string{"15", "30", "60", "3"}, parsed{l: limit{v: [4]int64{15, 30, 60, 3}}}},
		{[]string{"15", "30", "60", "-3", "ms"}, parsed{l: limit{v: [4]int64{15, 30, 60, -3}}, ms: true}},
		{[]string{"15", "30", "60", "MS"}, parsed{l: limit{v: [4]int64{15, 30, 60, 1}}, ms: true}},
		{[]string{"+15", "030", "60", "0", "Ms"}, parsed{l: limit{v: [4]int64{15, 30, 60, 0}}, ms: true}},
		{[]string{"0", "9223372036854775807", "9223372036", "-9223372036854775808"}, parsed{l: limit{v: [4]int64{0, math.MaxInt64, 9223372036, math.MinInt64}}}},
		{[]string{"15", "30", "60", "RESERVE", "16"}, parsed{l: limit{v: [4]int64{15, 30, 60, 1}, reserve: 16}}},
		{[]string{"15", "30", "60", "2", "reserve", "0", "MS"}, parsed{l: limit{v: [4]int64{15, 30, 60, 2}}, ms: true}},
		{[]string{"15", "30", "60", "ms", "Reserve", "3"}, parsed{l: limit{v: [4]int64{15, 30, 60, 1}, reserve: 3}, ms: true}},
	}
	for _, c := range ok {
		var got parsed
		var o Outcome
		args := append([]string{"gcra.throttle", "k"}, c.args...)
		if !parseOutcome(families[famGCRA].syntax, args, &got.l, &got.ms, &o) {
			t.Errorf("parse %q: %s", c.args, o.Err)
		} else if got != c.want {
			t.Errorf("parse %q = %+v, want %+v", c.args, got, c.want)
		}
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"15", "30"}, ""}, // arity
		{[]string{"-1", "30", "60"}, "ERR max_burst must be an integer from 0 to 9007199254740990"},
		{[]string{"1.5", "30", "60"}, "ERR max_burst must be an integer from 0 to 9007199254740990"},
		{[]string{"15", "0", "60"}, "ERR count must be an integer from 1 to 9223372036854775807"},
		{[]string{"15", "30", "0"}, "ERR period must be whole seconds from 1 to 9223372036"},
		{[]string{"15", "30", "9223372037"}, "ERR period must be whole seconds from 1 to 9223372036"},
		{[]string{"15", "30", "60", "1e3"}, "ERR quantity must be an integer from -9223372036854775808 to 9223372036854775807"},
		{[]string{"15", "30", "60", "1", "XX"}, `ERR unknown option "XX": the options are MS, RESERVE n and LIMITS key field`},
		{[]string{"15", "30", "60", "MS", "1"}, `ERR unknown option "1": the options are MS, RESERVE n and LIMITS key field`},
		{[]string{"15", "30", "60", "1", "\xff\r\n"}, `ERR unknown option "\xff\x0d\x0a": the options are MS, RESERVE n and LIMITS key field`},
		{[]string{"15", "30", "60", "RESERVE"}, "ERR RESERVE needs a number: RESERVE n, n from 0 to the limit"},
		{[]string{"15", "30", "60", "RESERVE", "17"}, "ERR RESERVE must be an integer from 0 to 16 (the limit)"},
		{[]string{"15", "30", "60", "RESERVE", "-1"}, "ERR RESERVE must be an integer from 0 to 16 (the limit)"},
		{[]string{"15", "30", "60", "RESERVE", "x"}, "ERR RESERVE must be an integer from 0 to 16 (the limit)"},
		{[]string{"15", "30", "60", "0", "Ms", "mS"}, "ERR the option MS is given twice"},
		{[]string{"15", "30", "60", "RESERVE", "5", "RESERVE", "0"}, "ERR the option RESERVE is given twice"},
		{[]string{"15", "30", "60", "RESERVE", "5", "MS", "reserve", "0"}, "ERR the option RESERVE is given twice"},
	}
	for _, c := range bad {
		var got parsed
		var o Outcome
		args := append([]string{"gcra.throttle", "k"}, c.args...)
		if parseOutcome(families[famGCRA].syntax, args, &got.l, &got.ms, &o) {
			t.Errorf("parse %q succeeded: %+v", c.args, got)
			continue
		}
		if c.want == "" {
			if o.Action != ActArity {
				t.Errorf("parse %q: action %d, want arity", c.args, o.Action)
			}
		} else if o.Action != ActError || o.Err != c.want {
			t.Errorf("parse %q: %q, want %q", c.args, o.Err, c.want)
		}
	}
	// The shaper takes no RESERVE.
	var got parsed
	var o Outcome
	if parseOutcome(families[famLB].syntax, []string{"lb.enqueue", "k", "2", "1", "1", "RESERVE", "1"}, &got.l, &got.ms, &o) ||
		o.Err != `ERR unknown option "RESERVE": the options are MS and LIMITS key field` {
		t.Errorf("LB.ENQUEUE with RESERVE: %q", o.Err)
	}
}

// parseOutcome parses a command of one key as Execute does, its error
// into o: whether it parsed.
func parseOutcome(s *syntax, args []string, l *limit, ms *bool, o *Outcome) bool {
	if err := s.parse(args, l, ms, nil, &fakeKey{}); err != nil {
		o.setErr(err)
		return false
	}
	return true
}

func TestGCRACommand(t *testing.T) {
	fresh := &fakeKey{st: KeyState{Now: t0}}
	o := run(spec.OpGCRAThrottle, fresh, "15", "30", "60")
	if o.Action != resSet || o.Reply != [5]int64{0, 16, 15, -1, 2} {
		t.Fatalf("fresh: %+v", o)
	}
	tat := t0 + 2*int64(time.Second)
	if string(o.w.Value[:o.w.ValueLen]) != strconv.FormatInt(tat, 10) || o.w.ExpireMs != tat/1e6 {
		t.Fatalf("state %q expiring %d, want %d at %d", o.w.Value[:o.w.ValueLen], o.w.ExpireMs, tat, tat/1e6)
	}

	// The stored TAT is read back; the expiry rounds up to the millisecond.
	live := &fakeKey{st: KeyState{Now: t0 + 1, Kind: KeyString, Value: strconv.FormatInt(tat, 10)}}
	o = run(spec.OpGCRAThrottle, live, "15", "30", "60", "1", "MS")
	if o.Action != resSet || o.Reply != [5]int64{0, 16, 14, -1, 4000} || o.w.ExpireMs != (tat+2e9)/1e6 {
		t.Fatalf("live: %+v", o)
	}
	live.st.Now = t0 + 2*int64(time.Second) + 1_500_000 // +1.5 ms: TAT = now + ...5 ms - 1 ns
	o = run(spec.OpGCRAThrottle, live, "0", "1", "1")
	if o.Action != resSet || o.w.ExpireMs != (t0+3*int64(time.Second)+1_500_000)/1e6+1 {
		t.Fatalf("expiry not rounded up: %+v", o)
	}

	// PEEK replies the same and writes nothing.
	peek := run(spec.OpGCRAPeek, &fakeKey{st: KeyState{Now: t0}}, "15", "30", "60")
	if peek.Action != ActReply || peek.Reply != [5]int64{0, 16, 15, -1, 2} {
		t.Fatalf("peek: %+v", peek)
	}

	// Refused: reply only.
	full := &fakeKey{st: KeyState{Now: t0, Kind: KeyString, Value: strconv.FormatInt(t0+32*int64(time.Second), 10)}}
	if o := run(spec.OpGCRAThrottle, full, "15", "30", "60"); o.Action != ActReply || o.Reply != [5]int64{1, 16, 0, 2, 32} {
		t.Fatalf("refused: %+v", o)
	}
	// A refund back to full deletes the key.
	if o := run(spec.OpGCRAThrottle, full, "15", "30", "60", "-100"); o.Action != resDel || o.Reply != [5]int64{0, 16, 16, -1, 0} {
		t.Fatalf("refund: %+v", o)
	}
}

// Keys that hold something else than the limiter's state are refused with
// the error that they hold other data, and nothing is written: a string
// without an expiry, a value that is not the state's shape, an instant
// before 2015, an instant far ahead that outlives its key's expiry.
func TestForeignState(t *testing.T) {
	sec := int64(time.Second)
	type foreign struct {
		what string
		key  fakeKey
	}
	str := func(v string, expireMs int64) fakeKey {
		return fakeKey{st: KeyState{Now: t0, Kind: KeyString, Value: v, ExpireMs: expireMs}}
	}
	instant := []foreign{
		{"no expiry", fakeKey{st: KeyState{Now: t0, Kind: KeyString, Value: "1700000001000000000"}, noExpiry: true}},
		{"42 with a TTL", str("42", t0/1e6+60_000)},
		{"an instant in 2014", str("1400000000000000000", t0/1e6+60_000)},
		{"an instant far ahead, expiring in a minute", str("9000000000000000000", t0/1e6+60_000)},
	}
	for _, v := range []string{"", "abc", "-5", "+5", " 5", "5 ", "1.5", "99999999999999999999", "\x00"} {
		instant = append(instant, foreign{"string " + strconv.Quote(v), str(v, t0/1e6+60_000)})
	}
	for _, f := range instant {
		for op, state := range map[spec.Op]string{spec.OpGCRAThrottle: gcraState, spec.OpGCRAPeek: gcraState, spec.OpTBTake: bucketState,
			spec.OpTBPeek: bucketState, spec.OpLBEnqueue: shaperState, spec.OpLBPeek: shaperState} {
			k := f.key
			o := run(op, &k, "5", "1", "60")
			if o.Action != ActError || !strings.HasPrefix(o.Err, "ERR the key holds other data, not "+state) {
				t.Errorf("%s, %s: %+v", opNames[op], f.what, o)
			}
		}
	}
	// The same far instant in a key that expires with it is a clock that
	// stepped back: accepted, clamped, and the clamp written.
	k := str("1700003600000000000", 1700003600000)
	if o := run(spec.OpGCRAThrottle, &k, "5", "1", "60"); o.Action != resSet || o.Reply != [5]int64{1, 6, 0, 60, 360} ||
		string(o.w.Value[:o.w.ValueLen]) != strconv.FormatInt(t0+360*sec, 10) {
		t.Errorf("clock step: %+v", o)
	}
	// The largest instant, 2^63 − 1 ns, marked owed and expiring at
	// 9223372036855 ms, is what a debt past 2262 leaves (issue 44): state,
	// read as it stands (7,523,372,036.854775807 s ahead of t0) and
	// refusing; a further charge leaves it as it is. The same instant in a
	// key that expires in a minute is not state.
	for _, c := range []struct {
		op   spec.Op
		args []string
		want [5]int64
	}{
		{spec.OpGCRAThrottle, []string{"4", "5", "60", "0"}, [5]int64{1, 5, 0, 7523371977, 7523372037}},
		{spec.OpGCRAPeek, []string{"4", "5", "60"}, [5]int64{1, 5, 0, 7523371989, 7523372037}},
		{spec.OpTBTake, []string{"4", "1", "1", "0", "MS"}, [5]int64{1, 4, 0, 7523372032855, 7523372036855}},
		{spec.OpGCRAThrottle, []string{"4", "5", "60", "7", "DEBT"}, [5]int64{1, 5, 0, 7523371989, 7523372037}},
	} {
		k := str("9223372036854775807:debt", 9223372036855)
		o := run(c.op, &k, c.args...)
		if o.Reply != c.want || (o.Action != resReply && (o.Action != resSet || string(o.w.Value[:o.w.ValueLen]) != "9223372036854775807:debt" || o.w.ExpireMs != 9223372036855)) {
			t.Errorf("%s %v on the largest instant: %+v", opNames[c.op], c.args, o)
		}
		k = str("9223372036854775807:debt", t0/1e6+60_000)
		if o := run(c.op, &k, c.args...); o.Action != ActError || !strings.HasPrefix(o.Err, "ERR the key holds other data") {
			t.Errorf("%s %v on the largest instant expiring in a minute: %+v", opNames[c.op], c.args, o)
		}
	}

	windows := []foreign{
		{"no expiry", fakeKey{st: KeyState{Now: t0, Kind: KeyString, Value: "3"}, noExpiry: true}},
		{"not a number", str("hello", t0/1e6+60_000)},
		{"a negative number", str("-3", t0/1e6+60_000)},
	}
	for _, f := range windows {
		for op, state := range map[spec.Op]string{spec.OpFWHit: fixedState, spec.OpFWPeek: fixedState, spec.OpSWHit: counterState, spec.OpSWPeek: counterState} {
			k := f.key
			if o := run(op, &k, "5", "60"); o.Action != ActError || !strings.HasPrefix(o.Err, "ERR the key holds other data, not "+state) {
				t.Errorf("%s, %s: %+v", opNames[op], f.what, o)
			}
		}
	}

	member := func(score float64, m string) ZEntry { return ZEntry{Score: score, Member: m, Length: len(m)} }
	good := member(float64(t0/1000), strconv.FormatInt(t0/1000, 10)+"-0")
	zsets := []struct {
		what           string
		Oldest, Newest ZEntry
		noExpiry       bool
	}{
		{"a leaderboard", member(100, "alice"), member(200, "bob"), true},
		{"a leaderboard with a TTL", member(100, "alice"), member(200, "bob"), false},
		{"a log without expiry", good, good, true},
		{"a member with another score", good, member(float64(t0/1000+1), strconv.FormatInt(t0/1000, 10)+"-1"), false},
		{"scores of 1e300", member(1e300, "a"), member(1e300, "e"), false},
		{"a score of +inf", good, member(math.Inf(1), "x"), false},
		{"a score of -inf", member(math.Inf(-1), "x"), good, false},
		{"a fractional score", member(float64(t0/1000)+0.5, strconv.FormatInt(t0/1000, 10)+"-0"), good, false},
		{"a member without its number", good, member(float64(t0/1000), strconv.FormatInt(t0/1000, 10)+"-"), false},
		{"a long member", good, member(float64(t0/1000), strconv.FormatInt(t0/1000, 10)+"-"+strings.Repeat("1", 60)), false},
	}
	for _, z := range zsets {
		for _, op := range []spec.Op{spec.OpSLHit, spec.OpSLPeek} {
			k := fakeKey{st: KeyState{Now: t0, Kind: KeyZSet, ZLen: 2, Oldest: z.Oldest, Newest: z.Newest}, rawZSet: true, noExpiry: z.noExpiry}
			if o := run(op, &k, "5", "60"); o.Action != ActError || !strings.HasPrefix(o.Err, "ERR the key holds other data, not "+logState) {
				t.Errorf("%s, %s: %+v", opNames[op], z.what, o)
			}
		}
	}
	other := &fakeKey{st: KeyState{Now: t0, Kind: KeyOther}}
	if o := run(spec.OpGCRAThrottle, other, "1", "1", "1"); o.Action != ActWrongType {
		t.Errorf("other type: %+v", o)
	}
}

// A sliding-log write that would take the server past maxmemory is the
// server's OOM error; one that fits goes ahead.
func TestSlidingLogMemory(t *testing.T) {
	k := &fakeKey{st: KeyState{Now: t0}, room: 100 * bytesPerLogEntry}
	if o := run(spec.OpSLHit, k, "100000", "60", "100"); o.Action != resZLog {
		t.Fatalf("100 entries in room for 100: %+v", o)
	}
	if o := run(spec.OpSLHit, k, "100000", "60", "101"); o.Action != ActError || o.Err != errOOM {
		t.Fatalf("101 entries in room for 100: %+v", o)
	}
	if o := run(spec.OpSLPeek, k, "100000", "60", "101"); o.Action != ActReply {
		t.Fatalf("a peek is not a write: %+v", o)
	}
}

// Bad arguments are an error for every command of one key, and nothing is
// written: C writes only what a reply carries.
func TestBadArgumentsWriteNothing(t *testing.T) {
	for op := range spec.OpRLAll {
		valid, _, _ := validCall(op)
		n := len(families[opFamily[op]].syntax.positional)
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
			k := &fakeKey{st: KeyState{Now: t0}}
			var o Outcome
			Execute(op, args, k, &o)
			if o.Action != ActError && o.Action != ActArity {
				t.Errorf("op %d %q: %+v", op, args, o)
			}
		}
	}
}

func TestBucketCommands(t *testing.T) {
	fresh := &fakeKey{st: KeyState{Now: t0}}
	if o := run(spec.OpTBTake, fresh, "10", "1", "1", "3"); o.Action != resSet || o.Reply != [5]int64{0, 10, 7, -1, 3} || o.w.ExpireMs != (t0+3e9)/1e6 {
		t.Fatalf("TB.TAKE: %+v", o)
	}
	if o := run(spec.OpTBPeek, fresh, "10", "1", "1", "3"); o.Action != ActReply || o.Reply != [5]int64{0, 10, 7, -1, 3} {
		t.Fatalf("TB.PEEK: %+v", o)
	}
	// Three requests at once into a shaper of 2 places at 1 per second.
	k := &fakeKey{st: KeyState{Now: t0}}
	for i, want := range [][5]int64{{0, 2, 2, -1, 0}, {0, 2, 1, -1, 1000}, {0, 2, 0, -1, 2000}, {1, 2, 0, 1000, 0}} {
		o := run(spec.OpLBEnqueue, k, "2", "1", "1", "1", "MS")
		if o.Reply != want {
			t.Fatalf("LB.ENQUEUE %d: %v, want %v", i, o.Reply, want)
		}
		if o.Action == resSet {
			k.st.Kind, k.st.Value = KeyString, string(o.w.Value[:o.w.ValueLen])
		}
	}
	if o := run(spec.OpLBEnqueue, k, "2", "1", "1", "-1"); o.Action != ActError || !strings.Contains(o.Err, "quantity must be an integer from 0") {
		t.Fatalf("negative quantity: %+v", o)
	}
	k.st.Value = "x"
	for op, state := range map[spec.Op]string{spec.OpTBTake: bucketState, spec.OpLBEnqueue: shaperState, spec.OpGCRAThrottle: gcraState} {
		if o := run(op, k, "2", "1", "1"); !strings.HasPrefix(o.Err, "ERR the key holds other data, not "+state) {
			t.Errorf("op %d on %q: %+v", op, k.st.Value, o)
		}
	}
}

// FuzzParse throws arbitrary arguments at every command's parser: it never
// panics, values it accepts are in range and exactly what was written, and
// what it refuses gets an ERR that names an argument or the option, on one
// line.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"15 30 60", "15 30 60 1 MS", "0 1 1 -5 ms", "1.5 1 1", "1 1 1 MS 5", "9223372036854775807 1 1", "1 1 9223372036", "  1 1 1", "1 1 1 \xff",
		"15 30 60 2 UPTO 3", "15 30 60 UPTO 1000000 RESERVE 1", "1 1 1 -1 UPTO 2", "1 1 1 1 UPTO 0 MS", "1 1 1 UPTO",
		"15 30 60 99 DEBT", "1 1 1 DEBT MS", "1 1 1 1 DEBT RESERVE 1", "1 1 1 debt UPTO 2", "3 10 100001 DEBT",
		"5 60 1 SPREAD", "5 60 SPREAD MS", "5 1000000001 SPREAD", "5 60 spread SPREAD", "5 60 2 DEBT SPREAD UPTO 2",
		"5 60 LIMITS h 10,60", "5 60 1 LIMITS h 10,0", "5 60 LIMITS h none RESERVE 5", "5 60 LIMITS wrong f", "1 2 3 LIMITS h 4,,5,6 MS",
		"5 60 LIMITS h 1,2,3", "5 60 LIMITS h", "5 60 LIMITS h 9,60 RESERVE 9 SPREAD", "5 60 limits h x,1 LIMITS h 1,1"} {
		for op := range spec.NumOps {
			f.Add(uint8(op), s)
		}
	}
	f.Fuzz(func(t *testing.T, op uint8, line string) {
		syn := families[opFamily[spec.Op(op)%spec.OpRLAll]].syntax
		args := append([]string{"cmd", "k"}, strings.Split(line, " ")...)
		p := limit{family: opFamily[spec.Op(op)%spec.OpRLAll]}
		var ms bool
		var o Outcome
		var upto int64
		// LIMITS key field: the field's value is the field with its
		// commas as spaces, absent for a field "none", of another type
		// for a key "wrong".
		lim, over := &fakeKey{limits: map[int]string{}}, -1
		for i := 2; i+2 < len(args); i++ {
			if strings.EqualFold(args[i], "LIMITS") {
				lim.limitsWrongType = lim.limitsWrongType || args[i+1] == "wrong"
				if args[i+2] != "none" {
					lim.limits[i+1], over = strings.ReplaceAll(args[i+2], ",", " "), i+2
				}
			}
		}
		if err := syn.parse(args, &p, &ms, &upto, lim); err != nil {
			o.setErr(err)
		} else {
			if upto < 0 || upto > ratelimit.MaxUpTo || (upto > 0 && (!syn.upto || p.v[len(syn.positional)] < 0)) {
				t.Fatalf("UPTO %d accepted", upto)
			}
			if p.debt && (!syn.debt || upto > 0 || p.reserve > 0 || (p.family == famSL && p.v[len(syn.positional)] > maxLogAdd)) {
				t.Fatalf("DEBT accepted with UPTO %d, RESERVE %d, cost %d", upto, p.reserve, p.v[len(syn.positional)])
			}
			for i, a := range syn.positional {
				if p.v[i] < a.min || p.v[i] > a.max {
					t.Fatalf("%s = %d accepted out of range", a.name, p.v[i])
				}
				given := args[2+i]
				if over > 0 { // overridden: the field's words
					given = strings.Fields(strings.ReplaceAll(args[over], ",", " "))[i]
				}
				if v, _ := strconv.ParseInt(given, 10, 64); v != p.v[i] {
					t.Fatalf("%s: %q parsed as %d", a.name, given, p.v[i])
				}
			}
			if c := p.v[len(syn.positional)]; c < syn.optional.min || c > syn.optional.max {
				t.Fatalf("%s = %d accepted out of range", syn.optional.name, c)
			}
			if p.reserve < 0 || p.reserve > p.limit() || (p.reserve > 0 && !syn.reserve) {
				t.Fatalf("RESERVE %d accepted", p.reserve)
			}
			if p.offset() != 0 && (!syn.spread || !strings.Contains(strings.ToUpper(line), "SPREAD") || p.offset() < 0 ||
				p.offset() >= p.fw().window*int64(time.Second)) {
				t.Fatalf("SPREAD's offset %d accepted", p.offset())
			}
			return
		}
		switch o.Action {
		case ActArity:
			if len(args) >= 2+len(syn.positional) && len(args) <= maxOneKeyArgs {
				t.Fatalf("arity error for %d arguments", len(args))
			}
		case ActError:
			if !strings.HasPrefix(o.Err, "ERR ") || strings.ContainsAny(o.Err, "\r\n") || !utf8.ValidString(o.Err) {
				t.Fatalf("bad error text %q", o.Err)
			}
			named := strings.Contains(o.Err, "unknown option") || strings.Contains(o.Err, "RESERVE") || strings.Contains(o.Err, "UPTO") ||
				strings.Contains(o.Err, "DEBT") || strings.Contains(o.Err, "SPREAD") || strings.Contains(o.Err, "sliding logs") ||
				strings.HasPrefix(o.Err, "ERR the option MS is given twice") || strings.Contains(o.Err, "LIMITS")
			for _, a := range append(syn.positional, syn.optional) {
				named = named || strings.HasPrefix(o.Err, "ERR "+a.name+" must be")
			}
			if !named {
				t.Fatalf("error names no argument: %q", o.Err)
			}
		case ActWrongType:
			if !lim.limitsWrongType || !strings.HasPrefix(o.Err, "WRONGTYPE LIMITS ") {
				t.Fatalf("WRONGTYPE %q without a LIMITS key of another type", o.Err)
			}
		default:
			t.Fatalf("parse failed with action %d", o.Action)
		}
	})
}

// FuzzCommand runs whole commands of one key on arbitrary arguments and
// stored values (expiring an hour from now): the key is read at most once,
// and the Outcome keeps checkOutcome's rules.
func FuzzCommand(f *testing.F) {
	for op := range spec.NumOps {
		f.Add(uint8(op), "15 30 60", "", t0)
		f.Add(uint8(op), "4 1 1 6", "1700000002000000000", t0)
		f.Add(uint8(op), "4 1 1 -2 MS", "1700000002000000000", t0)
		f.Add(uint8(op), "0 3 10 0", "garbage", t0)
		f.Add(uint8(op), "4 1 1 2 UPTO 3", "1700000002000000000", t0)
		f.Add(uint8(op), "4 1 1 9 DEBT", "1700000002000000000", t0)
		f.Add(uint8(op), "4 1 1 -1", "1700000009000000000:debt", t0)
		f.Add(uint8(op), "5 60 -3", "4", t0) // a window's return
		f.Add(uint8(op), "5 60 -9223372036854775808 RESERVE 2", "28333333:4:2", t0)
		f.Add(uint8(op), "5 60 2 SPREAD", "28333333:4:2", t0)
		f.Add(uint8(op), "5 1000000000 1 SPREAD", "3", int64(1))
	}
	f.Fuzz(func(t *testing.T, op8 uint8, line, stored string, now int64) {
		if now <= 0 {
			return
		}
		op := spec.Op(op8) % spec.OpRLAll
		st := KeyState{Now: now}
		if stored != "" {
			st.Kind, st.Value = KeyString, stored
		}
		k := &fakeKey{st: st}
		args := append([]string{"cmd", "k"}, strings.Split(line, " ")...)
		var o Outcome
		Execute(op, args, k, &o)
		if k.reads > 1 {
			t.Fatalf("%d reads", k.reads)
		}
		checkOutcome(t, op, k, &o, strings.Contains(strings.ToUpper(line), "DEBT"))
	})
}

// FuzzForeignState runs every command with valid arguments on arbitrary
// stored values, expiries (or none), sorted-set entries and clocks, as a
// key shared with application data or stepped clocks leave them: a key
// without an expiry is always refused as other data, and every Outcome
// keeps checkOutcome's rules.
func FuzzForeignState(f *testing.F) {
	sec := int64(time.Second)
	for op := range spec.NumOps {
		f.Add(uint8(op), "42", float64(100), t0, int64(0), "5 1 60")                                    // no expiry
		f.Add(uint8(op), "1700000002000000000", float64(t0/1000), t0, t0/1e6+2000, "5 1 60")            // live state
		f.Add(uint8(op), "1700003600000000000", float64(t0/1000+3600e6), t0, t0/1e6+3600_000, "5 1 60") // an hour ahead
		f.Add(uint8(op), "9000000000000000000", 1e300, t0, t0/1e6+60_000, "5 60 3")                     // far, short expiry
		f.Add(uint8(op), strconv.FormatInt(t0/(60*sec)+60, 10)+":4:2", float64(t0/1000-1), t0, t0/1e6+1, "5 60")
		f.Add(uint8(op), "9223372036854775807:debt", float64(0), t0, int64(9223372036855), "4 5 60 7 DEBT") // a debt past 2262 (issue 44)
		f.Add(uint8(op), "9223372036854775807", float64(0), t0, int64(9223372036855), "5 60 9223372036854775807 DEBT")
	}
	f.Fuzz(func(t *testing.T, op8 uint8, stored string, score float64, now, expireMs int64, line string) {
		if now <= 0 {
			return
		}
		op := spec.Op(op8) % spec.OpRLAll
		k := &fakeKey{st: KeyState{Now: now, Kind: KeyString, Value: stored, ExpireMs: expireMs}}
		if expireMs <= 0 {
			k.st.ExpireMs, k.noExpiry = 0, true
		}
		if op == spec.OpSLHit || op == spec.OpSLPeek {
			m := ZEntry{Score: score, Member: stored[:min(len(stored), MaxMember)], Length: len(stored)}
			k.st.Kind, k.st.ZLen, k.st.Oldest, k.st.Newest, k.rawZSet = KeyZSet, 1, m, m, true
			k.entries = fakeLog{ScoreNs(score)}
		}
		args := append([]string{"cmd", "k"}, strings.Split(line, " ")...)
		var o Outcome
		Execute(op, args, k, &o)
		if k.noExpiry && o.Action == ActReply {
			t.Fatalf("a key without an expiry was taken for state: %+v", o)
		}
		checkOutcome(t, op, k, &o, strings.Contains(strings.ToUpper(line), "DEBT"))
	})
}

// checkOutcome holds for every command on every key: a write happens only
// for a consuming call, and expires after now; an instant is written
// expiring at itself rounded up to the millisecond; the reply is in range; a
// refused call writes only to store a state from a stepped-back clock as
// it counts (never later than the stored one, never adding to a log).
//
// With charge (DEBT), a call refused as over its limit is taken: its
// write is an admission's, and a schedule's instant may be stored owed.
func checkOutcome(t *testing.T, op spec.Op, k *fakeKey, out *Outcome, charge bool) {
	t.Helper()
	o := toResult(out)
	now, stored := k.st.Now, k.st
	peek := op == spec.OpGCRAPeek || op == spec.OpTBPeek || op == spec.OpLBPeek || op == spec.OpSWPeek || op == spec.OpFWPeek || op == spec.OpSLPeek
	switch o.Action {
	case ActError:
		if !strings.HasPrefix(o.Err, "ERR ") && o.Err != errOOM {
			t.Fatalf("error %q", o.Err)
		}
		return
	case ActArity, ActWrongType:
		return
	case ActReply, resSet, resDel, resZLog:
	default:
		t.Fatalf("action %d", o.Action)
	}
	r := o.Reply
	refused := r[0] == 1
	if r[0] != 0 && r[0] != 1 || r[2] < 0 || r[2] > r[1] || r[3] < -1 || r[4] < 0 {
		t.Fatalf("reply %v", r)
	}
	if refused && r[2] == r[1] && op != spec.OpLBEnqueue && op != spec.OpLBPeek && r[3] != -1 {
		t.Fatalf("refused with the whole limit remaining: %v", r)
	}
	if peek && o.Action != ActReply {
		t.Fatalf("a peek writes: %+v", o)
	}
	if charge && refused && o.Action != ActReply { // taken past the limit
		refused = false
	}
	switch o.Action {
	case resDel:
		if stored.Kind == KeyEmpty || refused {
			t.Fatalf("DEL of a missing key, or by a refusal: %+v", o)
		}
	case resZLog:
		// A return (ZRemove) adds nothing, and one that empties the log
		// leaves no key to expire.
		if op != spec.OpSLHit || o.w.ZScore*1000 > now || (o.w.ExpireMs*1e6 <= now && o.w.ZRemove == 0) || o.w.ZCutoff >= o.w.ZScore ||
			(!refused && !charge && o.w.ZAdd < 1 && o.w.ZRemove < 1) || (refused && (o.w.ZAdd != 0 || o.w.ZRemove != 0 || !o.w.ZRedate)) ||
			(o.w.ZAdd > 0 && o.w.ZRemove > 0) {
			t.Fatalf("sliding log write %+v at now %d", o, now)
		}
	case resSet:
		v := string(o.w.Value[:o.w.ValueLen])
		if expiryNs(o.w.ExpireMs) <= now { // saturating: 2^63 − 1 ns expires at 9223372036855 ms
			t.Fatalf("wrote %q expiring at %d ms, not after now %d", v, o.w.ExpireMs, now)
		}
		switch op {
		case spec.OpSWHit:
			c, ok := parseCounts(v)
			old, _ := parseCounts(stored.Value)
			repair := old.Index > c.Index                               // a window from a stepped-back clock, stored as now's
			returned := old.Index == c.Index && c.Current < old.Current // a return: the current count lowered
			if !ok || (!repair && (refused || (c.Current < 1 && !returned))) {
				t.Fatalf("wrote counts %q over %q", v, stored.Value)
			}
		case spec.OpFWHit:
			n, ok := parseInstant(v)
			if old, _ := parseInstant(stored.Value); !ok || n < 1 || (refused && n != old) {
				t.Fatalf("wrote count %q over %q", v, stored.Value)
			}
		default: // an instant, expiring at itself rounded up to the ms; owed when a charge left it past the limit
			v, owed := strings.CutSuffix(v, ":debt")
			if owed && !charge && !strings.HasSuffix(stored.Value, ":debt") {
				t.Fatalf("wrote %q owed, without DEBT, over %q", v, stored.Value)
			}
			state, ok := parseInstant(v)
			ceil := state / 1e6 // the expiry: state rounded up to the ms, compared in ms (2^63 − 1 ns rounds up past int64 ns)
			if state%1e6 != 0 {
				ceil++
			}
			if !ok || state <= now || o.w.ExpireMs != ceil {
				t.Fatalf("wrote %q expiring at %d ms at now %d", v, o.w.ExpireMs, now)
			}
			if old, _ := parseInstant(stored.Value); refused && state > old {
				t.Fatalf("a refusal wrote %d over %q", state, stored.Value)
			}
		}
	}
}

var opNames = [spec.NumOps]string{
	spec.OpGCRAThrottle: "gcra.throttle", spec.OpGCRAPeek: "gcra.peek", spec.OpTBTake: "tb.take", spec.OpTBPeek: "tb.peek",
	spec.OpLBEnqueue: "lb.enqueue", spec.OpLBPeek: "lb.peek", spec.OpSWHit: "sw.hit", spec.OpSWPeek: "sw.peek",
	spec.OpFWHit: "fw.hit", spec.OpFWPeek: "fw.peek", spec.OpSLHit: "sl.hit", spec.OpSLPeek: "sl.peek",
	spec.OpRLAll: "rl.all", spec.OpRLPeek: "rl.peek", spec.OpConcAcquire: "conc.acquire", spec.OpConcRelease: "conc.release",
	spec.OpConcPeek: "conc.peek", spec.OpRLHold: "rl.hold", spec.OpRLSettle: "rl.settle",
}

// fakeKeys is a Reader of several keys, each a fakeKey.
type fakeKeys []*fakeKey

func (f fakeKeys) Keys() int                    { return len(f) }
func (f fakeKeys) Key(i int) KeyState           { return f[i].Key(0) }
func (f fakeKeys) Log(i int) window.Log         { return f[i].Log(0) }
func (f fakeKeys) MemoryRoom() int64            { return f[0].MemoryRoom() }
func (f fakeKeys) Holders(i int) HolderSet      { return f[i].Holders(0) }
func (f fakeKeys) Limits(arg int) (string, int) { return f[0].Limits(arg) }

// BenchmarkCommands runs the Go side of each command — parse, compute,
// decide — on live keys, without the server. make bench reports it.
func BenchmarkCommands(b *testing.B) {
	for op := range spec.NumOps {
		b.Run(opNames[op], func(b *testing.B) {
			args, r := validReader(op)
			b.ReportAllocs()
			for b.Loop() {
				var o Outcome
				Execute(op, args, r, &o)
			}
		})
	}
}

// validCall is arguments a command of one key accepts, and a stored state
// it reads, for the tests that need a valid call of each.
func validCall(op spec.Op) (args []string, st KeyState, log fakeLog) {
	st = KeyState{Now: t0, Kind: KeyString, Value: "1700000010000000000", ExpireMs: 1700000010000}
	args = []string{"cmd", "user123", "15", "30", "60", "1", "MS"}
	switch op {
	case spec.OpSWHit, spec.OpSWPeek:
		st.Value = strconv.FormatInt(t0/(30*int64(time.Second)), 10) + ":3:4"
		args = []string{"cmd", "user123", "15", "30", "1", "MS"}
	case spec.OpFWHit, spec.OpFWPeek:
		st.Value = "3"
		args = []string{"cmd", "user123", "15", "30", "1", "MS"}
	case spec.OpSLHit, spec.OpSLPeek:
		st.Kind, st.Value = KeyZSet, ""
		log = fakeLog{t0 - 40*int64(time.Second), t0 - 2*int64(time.Second), t0 - int64(time.Second)}
		args = []string{"cmd", "user123", "15", "30", "1", "MS"}
	case spec.OpConcAcquire, spec.OpConcRelease, spec.OpConcPeek:
		st.Kind, st.Value, st.ExpireMs = KeyZSet, "", 0
		args = map[spec.Op][]string{
			spec.OpConcAcquire: {"cmd", "export", "10", "30", "req-2", "MS"},
			spec.OpConcRelease: {"cmd", "export", "req-2"},
			spec.OpConcPeek:    {"cmd", "export", "10", "MS"},
		}[op]
	}
	return args, st, log
}

// validReader is a valid call of every command with the keys it reads:
// RL.ALL and RL.PEEK over a GCRA limit and a sliding window, both live.
func validReader(op spec.Op) ([]string, Reader) {
	_, g, _ := validCall(spec.OpGCRAThrottle)
	switch op {
	case spec.OpRLHold:
		return []string{"cmd", "{u}:tpm", "{u}:tpm:req-1", "30", "GCRA", "15", "30", "60", "1", "MS"}, fakeKeys{{st: g}, {st: KeyState{Now: t0}}}
	case spec.OpRLSettle:
		return []string{"cmd", "{u}:tpm", "{u}:tpm:req-1", "GCRA", "15", "30", "60", "3", "MS"},
			fakeKeys{{st: g}, {st: KeyState{Now: t0, Kind: KeyString, Value: "1"}}}
	}
	if op >= spec.OpConcAcquire {
		args, st, _ := validCall(op)
		return args, &fakeKey{st: st, leases: fakeLeases{"req-1": t0 + 9e9, "req-2": t0 + 20e9, "req-3": t0 - 1e9}}
	}
	if op != spec.OpRLAll && op != spec.OpRLPeek {
		args, st, log := validCall(op)
		return args, &fakeKey{st: st, entries: log}
	}
	_, w, _ := validCall(spec.OpSWHit)
	args := []string{"cmd", "2", "{u}:rpm", "{u}:tpm", "GCRA", "15", "30", "60", "1", "SW", "1000", "30", "40", "MS"}
	return args, fakeKeys{{st: g}, {st: w}}
}

func TestCommandsAllocateNothing(t *testing.T) {
	for op := range spec.NumOps {
		args, r := validReader(op)
		var o Outcome
		Execute(op, args, r, &o)
		if o.Action != ActReply {
			t.Fatalf("op %d: %+v", op, o)
		}
		if n := testing.AllocsPerRun(100, func() {
			var o Outcome
			Execute(op, args, r, &o)
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
	k := &fakeKey{st: KeyState{Now: t0 + 5*sec, Kind: KeyString, Value: strconv.FormatInt(idx-1, 10) + ":8:3"}}
	o := run(spec.OpSWHit, k, "10", "10", "2")
	if o.Action != resSet || string(o.w.Value[:o.w.ValueLen]) != strconv.FormatInt(idx, 10)+":2:8" ||
		o.Reply != [5]int64{0, 10, 4, -1, 15} || o.w.ExpireMs != (t0+20*sec)/1e6 {
		t.Fatalf("SW.HIT: %+v %q", o, o.w.Value[:o.w.ValueLen])
	}
	for _, bad := range []string{"1:2", "1:2:3:4", "a:1:2", "1::2", "-1:2:3", ""} {
		k.st.Value = bad
		if o := run(spec.OpSWHit, k, "10", "10"); !strings.HasPrefix(o.Err, "ERR the key holds other data, not "+counterState) {
			t.Errorf("SW state %q: %+v", bad, o)
		}
	}

	// Fixed window: the count, expiring at the window's end; a count whose
	// expiry is not after this window's start is stale.
	k = &fakeKey{st: KeyState{Now: t0 + 5*sec, Kind: KeyString, Value: "9", ExpireMs: (t0 + 10*sec) / 1e6}}
	if o := run(spec.OpFWHit, k, "10", "10", "2"); o.Action != ActReply || o.Reply != [5]int64{1, 10, 1, 5, 5} {
		t.Fatalf("FW.HIT on 9: %+v", o)
	}
	k.st.ExpireMs = t0 / 1e6 // the previous window's
	if o := run(spec.OpFWHit, k, "10", "10", "2"); o.Action != resSet || o.Reply != [5]int64{0, 10, 8, -1, 5} || o.w.ExpireMs != (t0+10*sec)/1e6 {
		t.Fatalf("FW.HIT on a stale count: %+v", o)
	}

	// Sliding log: trim what left, add cost entries at now, in µs.
	k = &fakeKey{st: KeyState{Now: t0, Kind: KeyZSet}, entries: fakeLog{t0 - 20*sec, t0 - 3*sec}}
	o = run(spec.OpSLHit, k, "3", "10", "2", "MS")
	if o.Action != resZLog || o.w.ZAdd != 2 || o.w.ZScore != t0/1000 || o.w.ZCutoff != (t0-10*sec)/1000 ||
		o.w.ExpireMs != (t0+10*sec)/1e6 || o.Reply != [5]int64{0, 3, 0, -1, 10000} {
		t.Fatalf("SL.HIT: %+v", o)
	}
	if o := run(spec.OpSLHit, k, "3", "10", "3", "MS"); o.Action != ActReply || o.Reply != [5]int64{1, 3, 2, 7000, 7000} {
		t.Fatalf("SL.HIT refused: %+v", o)
	}
	k.st.Kind = KeyString
	if o := run(spec.OpSLHit, k, "3", "10"); o.Action != ActWrongType {
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

// The longest error a command can reply, RL.ALL's naming its sixteenth
// limiter and its key (32 bytes shown, each escaped as \xNN) around the
// sliding log's "other data" error, fits C's buffer whole: a cut error
// would also differ from the Lua engine's.
func TestErrorsFit(t *testing.T) {
	args := []string{"rl.all", "16"}
	keys := make(fakeKeys, 16)
	for i := range keys {
		args = append(args, strings.Repeat("\xff", 39)+string(rune('a'+i)))
		keys[i] = &fakeKey{st: KeyState{Now: t0}}
	}
	keys[15] = &fakeKey{st: KeyState{Now: t0, Kind: KeyZSet, ZLen: 1,
		Oldest: ZEntry{Score: 1, Member: "x", Length: 1}, Newest: ZEntry{Score: 1, Member: "x", Length: 1}}, rawZSet: true}
	for range 15 {
		args = append(args, "FW", "1", "1", "1")
	}
	args = append(args, "SL", "1", "1", "1")
	var o Outcome
	Execute(spec.OpRLAll, args, keys, &o)
	if !strings.Contains(o.Err, "limiter 16 (SL") || !strings.HasSuffix(o.Err, "(use a key prefix per limiter)") {
		t.Fatalf("got %q", o.Err)
	}
	if len(o.Err) >= ErrCapacity {
		t.Fatalf("the error is %d bytes, C holds %d: %q", len(o.Err), ErrCapacity-1, o.Err)
	}
	t.Logf("the longest error: %d bytes of %d", len(o.Err), ErrCapacity-1)
}
