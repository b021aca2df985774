package engine

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// runAll runs RL.ALL (or RL.PEEK) over keys with args after numkeys and the
// key names k0, k1, ...
func runAll(peek bool, keys fakeKeys, args ...string) Outcome {
	all := []string{"rl.all", strconv.Itoa(len(keys))}
	for i := range keys {
		all = append(all, "k"+strconv.Itoa(i))
	}
	op := spec.OpRLAll
	if peek {
		op = spec.OpRLPeek
	}
	var o Outcome
	Execute(op, append(all, args...), keys, &o)
	return o
}

func fresh(n int) fakeKeys {
	keys := make(fakeKeys, n)
	for i := range keys {
		keys[i] = &fakeKey{st: KeyState{Now: t0}}
	}
	return keys
}

// state is a live instant state, ahead of t0 by d.
func instantKey(d time.Duration) *fakeKey {
	return &fakeKey{st: KeyState{Now: t0, Kind: KeyString, Value: strconv.FormatInt(t0+int64(d), 10)}}
}

// RL.ALL over one limiter is its family command at the same instant: the
// same five integers (and the position 0) and the same write.
func TestAllOfOneIsTheFamilyCommand(t *testing.T) {
	sec := int64(time.Second)
	cases := []struct {
		op    spec.Op
		all   []string
		one   []string
		state KeyState
	}{
		{spec.OpGCRAThrottle, []string{"GCRA", "15", "30", "60", "2"}, []string{"15", "30", "60", "2"}, instantKey(10 * time.Second).st},
		{spec.OpTBTake, []string{"TB", "10", "1", "1", "3"}, []string{"10", "1", "1", "3"}, instantKey(4 * time.Second).st},
		{spec.OpSWHit, []string{"SW", "10", "10", "2"}, []string{"10", "10", "2"},
			KeyState{Now: t0 + 5*sec, Kind: KeyString, Value: strconv.FormatInt(t0/(10*sec)-1, 10) + ":8:3"}},
		{spec.OpFWHit, []string{"FW", "10", "10", "2"}, []string{"10", "10", "2"},
			KeyState{Now: t0 + 5*sec, Kind: KeyString, Value: "5", ExpireMs: (t0 + 10*sec) / 1e6}},
		{spec.OpSLHit, []string{"SL", "3", "10", "1"}, []string{"3", "10", "1"}, KeyState{Now: t0, Kind: KeyZSet}},
	}
	for _, c := range cases {
		for _, ms := range [][]string{nil, {"MS"}} {
			log := fakeLog{t0 - 20*sec, t0 - 3*sec}
			one := run(c.op, &fakeKey{st: c.state, entries: log}, append(c.one, ms...)...)
			all := runAll(false, fakeKeys{{st: c.state, entries: log}}, append(c.all, ms...)...)
			if all.Action != ActReply || all.ReplyLen != 6 || [5]int64(all.Reply[:5]) != one.Reply || all.Reply[5] != 0 || all.Writes[0] != one.w {
				t.Errorf("%s %v: RL.ALL %+v, family command %+v", opNames[c.op], ms, all, one)
			}
		}
	}
}

// EACH appends every limit's own five integers: admitted, each as its
// family command replies; refused, the refusers' refusals and the others'
// state untouched (nothing was taken from them).
func TestAllEach(t *testing.T) {
	keys := fakeKeys{instantKey(24 * time.Second), instantKey(time.Second)}
	o := runAll(false, keys, "GCRA", "4", "5", "60", "1", "TB", "10", "1", "1", "1", "EACH")
	want := []int64{0, 5, 2, -1, 36, 0, 0, 5, 2, -1, 36, 0, 10, 8, -1, 2}
	if o.Action != ActReply || o.ReplyLen != 16 || fmt.Sprint(o.Reply[:16]) != fmt.Sprint(want) {
		t.Fatalf("admitted: %v (len %d), want %v", o.Reply[:o.ReplyLen], o.ReplyLen, want)
	}
	// Refused by the GCRA (full): the token bucket reports its 9 tokens, untaken.
	keys = fakeKeys{instantKey(60 * time.Second), instantKey(time.Second)}
	o = runAll(false, keys, "GCRA", "4", "5", "60", "1", "TB", "10", "1", "1", "1", "each", "MS")
	want = []int64{1, 5, 0, 12000, 60000, 0, 1, 5, 0, 12000, 60000, 0, 10, 9, -1, 1000}
	if fmt.Sprint(o.Reply[:o.ReplyLen]) != fmt.Sprint(want) || o.Writes[1].Action != WriteNone {
		t.Fatalf("refused: %v, want %v", o.Reply[:o.ReplyLen], want)
	}
	// RL.PEEK takes it too; without it the reply stays six integers.
	if p := runAll(true, fresh(2), "SW", "5", "60", "1", "FW", "3", "60", "1", "EACH"); p.ReplyLen != 16 || p.Reply[5] != 1 {
		t.Fatalf("peek: %v", p.Reply[:p.ReplyLen])
	}
	if p := runAll(true, fresh(2), "SW", "5", "60", "1", "FW", "3", "60", "1"); p.ReplyLen != 6 {
		t.Fatalf("without EACH: %d integers", p.ReplyLen)
	}
}

// Every limit must admit. Admitted: the reply is the limit with the fewest
// remaining (the first on a tie), and every key is written. Refused: the
// refusing limit with the latest retry (never counting as latest), and no
// key is written.
func TestAllDecides(t *testing.T) {
	// A GCRA of 5 per 60 s with 2 used, a token bucket of 10 with 9 left.
	keys := fakeKeys{instantKey(24 * time.Second), instantKey(time.Second)}
	o := runAll(false, keys, "GCRA", "4", "5", "60", "1", "TB", "10", "1", "1", "1")
	if o.Action != ActReply || [6]int64(o.Reply[:6]) != [6]int64{0, 5, 2, -1, 36, 0} || o.Writes[0].Action != WriteSet || o.Writes[1].Action != WriteSet {
		t.Fatalf("admitted: %+v", o)
	}
	// A tie on remaining: the first.
	o = runAll(false, fresh(2), "SW", "5", "60", "1", "FW", "5", "60", "1")
	if o.Reply[5] != 0 || o.Reply[2] != 4 {
		t.Fatalf("tie: %v", o.Reply)
	}
	// Two refuse: the one whose retry is later decides, nothing is written.
	keys = fakeKeys{instantKey(60 * time.Second), instantKey(10 * time.Second), instantKey(0)}
	o = runAll(false, keys, "GCRA", "4", "5", "60", "1", "TB", "10", "1", "1", "1", "GCRA", "0", "1", "1", "1")
	if o.Action != ActReply || [6]int64(o.Reply[:6]) != [6]int64{1, 5, 0, 12, 60, 0} {
		t.Fatalf("refused: %+v", o.Reply)
	}
	for i := range 3 {
		if o.Writes[i].Action != WriteNone {
			t.Fatalf("a refused call writes key %d: %+v", i, o.Writes[i])
		}
	}
	// A cost that can never pass (-1) decides over any finite retry.
	o = runAll(false, fresh(2), "GCRA", "0", "1", "60", "1", "SW", "5", "60", "6")
	if [6]int64(o.Reply[:6]) != [6]int64{1, 5, 5, -1, 0, 1} {
		t.Fatalf("never: %v", o.Reply)
	}
	o = runAll(false, fresh(2), "SW", "5", "60", "6", "GCRA", "0", "1", "60", "2")
	if o.Reply[5] != 0 || o.Reply[3] != -1 {
		t.Fatalf("never first: %v", o.Reply)
	}
	// RL.PEEK replies what RL.ALL would and writes nothing.
	keys = fakeKeys{instantKey(24 * time.Second), instantKey(time.Second)}
	p := runAll(true, keys, "GCRA", "4", "5", "60", "1", "TB", "10", "1", "1", "1")
	if [6]int64(p.Reply[:6]) != [6]int64{0, 5, 2, -1, 36, 0} || p.Writes[0].Action != WriteNone || p.Writes[1].Action != WriteNone {
		t.Fatalf("peek: %+v", p)
	}
}

// A refused RL.ALL takes nothing, but a key whose state a stepped-back
// clock left too far ahead is stored as it counts, as its family command
// would (an admitting limit is run again at cost 0 for it).
func TestAllRefusedStoresClampedState(t *testing.T) {
	far := instantKey(time.Hour) // an hour ahead: the clock stepped back
	far.st.ExpireMs = (t0 + int64(time.Hour)) / 1e6
	keys := fakeKeys{far, {st: KeyState{Now: t0}}}
	// GCRA: τ = 5 × 60 s; the clamped state leaves 0: refused. SW admits.
	o := runAll(false, keys, "GCRA", "4", "1", "60", "1", "SW", "5", "60", "1")
	if o.Reply[0] != 1 || o.Reply[5] != 0 || o.Writes[0].Action != WriteSet || o.Writes[1].Action != WriteNone {
		t.Fatalf("refused by the clamped limit: %+v", o)
	}
	// The other way round: GCRA refuses (cost 2 > limit 1); the sliding
	// window admits, but its counts are from a window 5 minutes ahead: the
	// counts are stored under now's window, and nothing is added to them.
	idx := t0 / (60 * int64(time.Second))
	future := &fakeKey{st: KeyState{Now: t0, Kind: KeyString, Value: strconv.FormatInt(idx+5, 10) + ":1:0"}}
	keys = fakeKeys{{st: KeyState{Now: t0}}, future}
	o = runAll(false, keys, "GCRA", "0", "1", "60", "2", "SW", "5", "60", "1")
	want := strconv.FormatInt(idx, 10) + ":1:0"
	if o.Reply[0] != 1 || o.Reply[5] != 0 || o.Writes[0].Action != WriteNone || o.Writes[1].Action != WriteSet ||
		string(o.Writes[1].Value[:o.Writes[1].ValueLen]) != want {
		t.Fatalf("refused, an admitting limit's state from the future: %+v, want %q written", o, want)
	}
}

// RESERVE applies to every limit: the decision is that of cost + n,
// only the cost is taken, and n must fit every limit.
func TestAllReserve(t *testing.T) {
	o := runAll(false, fresh(2), "GCRA", "5", "1", "60", "4", "SW", "10", "60", "4", "RESERVE", "2")
	if [6]int64(o.Reply[:6]) != [6]int64{0, 6, 2, -1, 240, 0} {
		t.Fatalf("4 of 6 with 2 in reserve: %v", o.Reply)
	}
	o = runAll(false, fresh(2), "GCRA", "5", "1", "60", "5", "SW", "10", "60", "4", "RESERVE", "2")
	if o.Reply[0] != 1 || o.Reply[3] != -1 || o.Reply[5] != 0 {
		t.Fatalf("5 of 6 with 2 in reserve: %v", o.Reply)
	}
	o = runAll(false, fresh(2), "GCRA", "5", "1", "60", "1", "SW", "10", "60", "1", "RESERVE", "7")
	if o.Action != ActError || o.Err != "ERR limiter 1 (GCRA): RESERVE must be an integer from 0 to 6 (the limit)" {
		t.Fatalf("reserve above a limit: %+v", o)
	}
}

// Bad input names the problem, and nothing is written.
func TestAllErrors(t *testing.T) {
	g := []string{"GCRA", "5", "1", "60", "1"}
	cases := []struct {
		numkeys string
		keys    []string
		rest    []string
		want    string
	}{
		{"0", nil, g, "ERR numkeys must be an integer from 1 to 16"},
		{"17", nil, g, "ERR numkeys must be an integer from 1 to 16"},
		{"x", nil, g, "ERR numkeys must be an integer from 1 to 16"},
		{"3", []string{"a"}, nil, "ERR numkeys is 3 but 1 arguments follow it"},
		{"2", []string{"a", "b"}, g, "ERR numkeys is 2 but 1 limiters follow the keys"},
		{"2", []string{"a", "b"}, append(append([]string{}, g...), "MS"), "ERR numkeys is 2 but 1 limiters follow the keys"},
		{"1", []string{"a"}, append(append([]string{}, g...), g...), "ERR numkeys is 1 but more limiters follow"},
		{"2", []string{"a", "a"}, append(append([]string{}, g...), g...), `ERR key "a" is named twice: each limiter needs a key of its own`},
		{"1", []string{"a"}, []string{"XX", "1", "1", "1"}, `ERR unknown limiter "XX" for key 1: the limiters are GCRA, TB, SW, FW and SL`},
		{"1", []string{"a"}, []string{"lb", "1", "1", "1", "1"}, "ERR limiter 1: LB is a shaper (it answers with a delay) and is not part of RL.ALL"},
		{"1", []string{"a"}, []string{"GCRA", "5", "1", "60"}, "ERR limiter 1 (GCRA) takes 4 arguments: max_burst count period quantity"},
		{"1", []string{"a"}, []string{"sw", "5", "60"}, "ERR limiter 1 (SW) takes 3 arguments: limit window cost"},
		{"1", []string{"a"}, []string{"GCRA", "5", "0", "60", "1"}, "ERR limiter 1 (GCRA): count must be an integer from 1 to 9223372036854775807"},
		{"1", []string{"a"}, []string{"SL", "100001", "60", "1"}, "ERR limiter 1 (SL): limit must be an integer from 1 to 100000"},
		{"1", []string{"a"}, []string{"FW", "5", "60", "1e3"}, "ERR limiter 1 (FW): cost must be an integer from -9223372036854775808 to 9223372036854775807"},
		{"1", []string{"a"}, append(append([]string{}, g...), "NX"), `ERR unknown option "NX": the options are MS, RESERVE n, UPTO n, DEBT and EACH`},
		{"1", []string{"a"}, append(append([]string{}, g...), "UPTO"), "ERR UPTO needs a number: UPTO n, n from 1 to 1000000"},
		{"1", []string{"a"}, append(append([]string{}, g...), "UPTO", "0"), "ERR UPTO must be an integer from 1 to 1000000"},
		{"1", []string{"a"}, append(append([]string{}, g...), "upto", "1000001"), "ERR UPTO must be an integer from 1 to 1000000"},
		{"1", []string{"a"}, append(append([]string{}, g...), "UPTO", "2", "UPTO", "3"), "ERR the option UPTO is given twice"},
		{"2", []string{"a", "b"}, []string{"FW", "5", "60", "1", "GCRA", "5", "1", "60", "-2", "UPTO", "3"},
			"ERR limiter 2 (GCRA): UPTO asks for calls of a cost of 0 or more, not -2 (a refund takes no UPTO)"},
		{"1", []string{"a"}, []string{"UPTO", "3"}, "ERR numkeys is 1 but 0 limiters follow the keys"},
		{"1", []string{"a"}, []string{"GCRA", "1", "2000000000", "1", "1"}, "ERR limiter 1 (GCRA, key \"a\"): count must be at most period x 1000000000"},
		// What Redis's arity check answered before (RL.ALL's arity is now -2).
		{"99", []string{"a"}, nil, "ERR numkeys must be an integer from 1 to 16"},
		{"2", []string{"a", "b"}, nil, "ERR numkeys is 2 but 0 limiters follow the keys"},
		{"1", nil, nil, "ERR numkeys is 1 but 0 arguments follow it"},
		{"1", []string{"a"}, append(append([]string{}, g...), "MS", "ms"), "ERR the option MS is given twice"},
		{"1", []string{"a"}, append(append([]string{}, g...), "EACH", "each"), "ERR the option EACH is given twice"},
		{"1", []string{"a"}, append(append([]string{}, g...), "RESERVE", "1", "RESERVE", "0"), "ERR the option RESERVE is given twice"},
		// One call adds at most 100000 sliding-log entries.
		{"2", []string{"a", "b"}, []string{"SL", "100000", "60", "60000", "SL", "100000", "60", "40001"},
			"ERR the sliding logs of one call may add at most 100000 entries, not 100001: split the call"},
	}
	for _, c := range cases {
		args := append(append([]string{"rl.all", c.numkeys}, c.keys...), c.rest...)
		var o Outcome
		Execute(spec.OpRLAll, args, fresh(len(c.keys)), &o)
		if o.Action != ActError || !strings.HasPrefix(o.Err, c.want) {
			t.Errorf("%q: %q, want %q", args, o.Err, c.want)
		}
	}

	// A key of another type, or holding other data, names the limiter and
	// its key.
	keys := fakeKeys{{st: KeyState{Now: t0}}, {st: KeyState{Now: t0, Kind: KeyOther}}}
	o := runAll(false, keys, "GCRA", "5", "1", "60", "1", "SL", "5", "60", "1")
	if o.Action != ActWrongType || o.Err != `WRONGTYPE limiter 2 (SL, key "k1"): the key holds the wrong kind of value` {
		t.Fatalf("wrong type: %+v", o)
	}
	keys = fakeKeys{{st: KeyState{Now: t0}}, {st: KeyState{Now: t0, Kind: KeyString, Value: "42"}, noExpiry: true}}
	o = runAll(false, keys, "GCRA", "5", "1", "60", "1", "TB", "5", "1", "60", "1")
	if o.Action != ActError || !strings.HasPrefix(o.Err, `ERR limiter 2 (TB, key "k1"): the key holds other data`) {
		t.Fatalf("other data: %+v", o)
	}
}

// FuzzAll throws arbitrary argument lists at RL.ALL and RL.PEEK over keys
// holding arbitrary values: no panic, an error writes nothing, a reply has
// six fields with the deciding position in range, a peek never writes, and
// a refusal writes only states a stepped-back clock left (never adding).
func FuzzAll(f *testing.F) {
	f.Add(false, "2 a b GCRA 5 1 60 1 SW 10 60 2 MS", "1700000010000000000", "17000000:1:2")
	f.Add(true, "2 a b TB 5 1 60 6 FW 3 60 1 RESERVE 1", "", "2")
	f.Add(false, "3 a b c SL 5 60 1 GCRA 0 1 1 1 FW 5 60 5", "", "")
	f.Add(false, "1 a gcra 1 1 1 -5", "1700000000000000001", "")
	f.Add(false, "2 a b GCRA 5 1 60 9 TB 5 1 60 1 EACH MS", "1700000010000000000", "1700000000500000000")
	f.Add(false, "2 a b GCRA 5 1 60 1 FW 3 60 1 UPTO 10 EACH", "1700000010000000000", "1")
	f.Add(false, "2 a b GCRA 5 1 60 9 FW 3 60 4 DEBT EACH", "1700000010000000000:debt", "1")
	f.Fuzz(func(t *testing.T, peek bool, line, v0, v1 string) {
		args := append([]string{"rl.all"}, strings.Split(line, " ")...)
		n := 0
		if len(args) > 1 {
			n, _ = strconv.Atoi(args[1])
		}
		n = max(0, min(n, MaxKeys, len(args)-2))
		keys := make(fakeKeys, n)
		for i := range keys {
			v := []string{v0, v1}[i%2]
			keys[i] = &fakeKey{st: KeyState{Now: t0}}
			if v != "" {
				keys[i].st.Kind, keys[i].st.Value = KeyString, v
			}
		}
		op := spec.OpRLAll
		if peek {
			op = spec.OpRLPeek
		}
		var o Outcome
		Execute(op, args, keys, &o)
		switch o.Action {
		case ActError, ActWrongType, ActArity:
			return // C writes nothing without a reply
		case ActReply:
		default:
			t.Fatalf("action %d", o.Action)
		}
		r := o.Reply
		if o.ReplyLen == 7 || o.ReplyLen == 7+5*n { // UPTO's grant, last: 0 exactly when refused
			g := r[o.ReplyLen-1]
			if peek || !strings.Contains(strings.ToUpper(line), "UPTO") || g < 0 || g > ratelimit.MaxUpTo || (g == 0) != (r[0] == 1) {
				t.Fatalf("reply %v over %d keys: a grant of %d", r[:o.ReplyLen], n, g)
			}
			o.ReplyLen--
		}
		if (o.ReplyLen != 6 && o.ReplyLen != 6+5*n) || r[5] < 0 || int(r[5]) >= n || r[0] < 0 || r[0] > 1 || r[2] < 0 || r[2] > r[1] || r[3] < -1 || r[4] < 0 {
			t.Fatalf("reply %v over %d keys", r, n)
		}
		if d := r[5]; o.ReplyLen > 6 && [5]int64(r[6+5*d:11+5*d]) != [5]int64(r[:5]) {
			t.Fatalf("EACH: the deciding limit's own five %v differ from the reply's %v", r[6+5*d:11+5*d], r[:5])
		}
		for i := range n {
			w := o.Writes[i]
			if peek && w.Action != WriteNone {
				t.Fatalf("RL.PEEK writes key %d: %+v", i, w)
			}
			if strings.Contains(strings.ToUpper(line), "DEBT") {
				continue // a charge is taken past the limit
			}
			if r[0] == 1 && (w.Action == WriteDel || w.ZAdd != 0) {
				t.Fatalf("a refused RL.ALL takes from key %d: %+v", i, w)
			}
			if r[0] == 1 && w.Action == WriteSet {
				old, _ := parseInstant(keys[i].st.Value)
				if v, ok := parseInstant(string(w.Value[:w.ValueLen])); ok && v > old && !strings.Contains(keys[i].st.Value, ":") {
					t.Fatalf("a refused RL.ALL moved key %d from %q to %d", i, keys[i].st.Value, v)
				}
			}
		}
	})
}

// The bound on sliding-log entries counts only the costs a log could
// admit: exactly 100000 is accepted, and a cost above its limit (a
// refusal, which adds nothing) does not count.
func TestAllLogEntriesBound(t *testing.T) {
	for _, rest := range [][]string{
		{"SL", "100000", "60", "60000", "SL", "100000", "60", "40000"},
		{"SL", "10", "60", "50000", "SL", "100000", "60", "60000", "SL", "100000", "60", "40000"},
	} {
		o := runAll(false, fresh(len(rest)/4), rest...)
		if o.Action != ActReply {
			t.Fatalf("%v: %+v", rest, o)
		}
	}
}
