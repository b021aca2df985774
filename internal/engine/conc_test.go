package engine

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/seed-6b3823f5/ratelimit/conc"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// fakeLeases is a concurrency key: id → when its lease ends (Unix ns).
type fakeLeases map[string]int64

// describe fills what C reads of the sorted set: its size, its oldest and
// newest entries (scores in µs), and, unless set, the expiry at the newest.
func (l fakeLeases) describe(st *KeyState) {
	st.ZLen = int64(len(l))
	first := true
	for id, end := range l {
		e := ZEntry{Score: float64(end / 1000), Member: id[:min(len(id), MaxMember)], Length: len(id)}
		if first || e.Score < st.Oldest.Score {
			st.Oldest = e
		}
		if first || e.Score > st.Newest.Score {
			st.Newest = e
		}
		first = false
	}
	if st.ExpireMs == 0 && len(l) > 0 {
		st.ExpireMs = leaseExpiry(int64(st.Newest.Score) * 1000)
	}
}

func (f *fakeKey) Holders(int) HolderSet { return fakeHolders(f.leases) }

type fakeHolders fakeLeases

func (h fakeHolders) Count(after int64) int64 {
	var n int64
	for _, end := range h {
		if end/1000*1000 > after {
			n++
		}
	}
	return n
}

func (h fakeHolders) Nth(after, k int64) int64 {
	var ends []int64
	for _, end := range h {
		if end/1000*1000 > after {
			ends = append(ends, end/1000*1000)
		}
	}
	slices.Sort(ends)
	if k < 1 || k > int64(len(ends)) {
		return math.MinInt64
	}
	return ends[k-1]
}

func (h fakeHolders) Holder(id string) conc.Holder {
	var c conc.Holder
	for other, end := range h {
		if other == id {
			c.Own = end / 1000 * 1000
		} else if e := end / 1000 * 1000; e > c.Latest {
			c.Latest = e
		}
	}
	return c
}

// concKeyAt is a concurrency key at now holding leases.
func concKeyAt(now int64, leases fakeLeases) *fakeKey {
	k := &fakeKey{st: KeyState{Now: now}, leases: leases}
	if len(leases) > 0 {
		k.st.Kind = KeyZSet
	}
	return k
}

// apply stores a concurrency write into the fake key, as zset.c does.
func (l fakeLeases) apply(t *testing.T, args []string, w KeyWrite, now int64) {
	t.Helper()
	switch w.Action {
	case WriteNone:
	case WriteDel:
		clear(l)
	case WriteConc:
		swept := 0
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range l {
				if !yield(id) {
					return
				}
			}
		})
		for _, id := range ids {
			if l[id]/1000 <= w.ZCutoff && id != args[w.ConcID] && swept < ConcSweep {
				delete(l, id)
				swept++
			}
		}
		if w.ConcRemove {
			delete(l, args[w.ConcID])
		}
		if w.ConcAdd {
			l[args[w.ConcID]] = w.ZScore * 1000
		}
		var newest int64
		for _, end := range l {
			newest = max(newest, end)
		}
		if w.ExpireMs != leaseExpiry(newest) || w.ExpireMs*1e6 <= now {
			t.Fatalf("expiry %d ms, newest lease %d", w.ExpireMs, newest)
		}
	default:
		t.Fatalf("write %d on a concurrency key", w.Action)
	}
}

func TestConcCommands(t *testing.T) {
	sec := int64(time.Second)
	leases := fakeLeases{}
	call := func(op spec.Op, now int64, args ...string) Outcome {
		t.Helper()
		k := concKeyAt(now, leases)
		full := append([]string{"cmd", "k"}, args...)
		var o Outcome
		Execute(op, full, k, &o)
		if o.Action == ActReply {
			leases.apply(t, full, o.Writes[0], now)
		}
		return o
	}
	steps := []struct {
		op    spec.Op
		at    int64
		args  []string
		Reply [5]int64
		write int
	}{
		{spec.OpConcAcquire, 0, []string{"2", "30", "a"}, [5]int64{0, 2, 1, -1, 30}, WriteConc},
		{spec.OpConcAcquire, sec, []string{"2", "30", "b", "MS"}, [5]int64{0, 2, 0, -1, 30000}, WriteConc},
		{spec.OpConcPeek, 2 * sec, []string{"2"}, [5]int64{1, 2, 0, 28, 29}, WriteNone},
		{spec.OpConcAcquire, 2 * sec, []string{"2", "30", "c"}, [5]int64{1, 2, 0, 28, 29}, WriteNone},
		{spec.OpConcAcquire, 3 * sec, []string{"2", "10", "a"}, [5]int64{0, 2, 0, -1, 28}, WriteConc}, // renewal, shorter
		{spec.OpConcRelease, 4 * sec, []string{"b"}, [5]int64{1}, WriteConc},
		{spec.OpConcRelease, 4 * sec, []string{"b"}, [5]int64{0}, WriteNone},
		{spec.OpConcAcquire, 5 * sec, []string{"2", "30", "c", "RESERVE", "1"}, [5]int64{1, 2, 1, 8, 8}, WriteNone},
		{spec.OpConcAcquire, 5 * sec, []string{"2", "30", "c"}, [5]int64{0, 2, 0, -1, 30}, WriteConc},
		// the same renewal at the same instant changes nothing: no write
		{spec.OpConcAcquire, 5 * sec, []string{"2", "30", "c"}, [5]int64{0, 2, 0, -1, 30}, WriteNone},
		// a millisecond later the lease moves: a write
		{spec.OpConcAcquire, 5*sec + int64(time.Millisecond), []string{"2", "30", "c", "MS"}, [5]int64{0, 2, 0, -1, 30000}, WriteConc},
		// a's lease lapsed at 13 s; releasing it replies 0 and removes it.
		{spec.OpConcRelease, 14 * sec, []string{"a"}, [5]int64{0}, WriteConc},
		{spec.OpConcRelease, 15 * sec, []string{"c"}, [5]int64{1}, WriteDel},
	}
	for i, st := range steps {
		o := call(st.op, t0+st.at, st.args...)
		var got [5]int64
		copy(got[:], o.Reply[:o.ReplyLen])
		if o.Action != ActReply || got != st.Reply || o.Writes[0].Action != st.write {
			t.Fatalf("step %d: %s %v: %+v, want %v write %d", i, opNames[st.op], st.args, o, st.Reply, st.write)
		}
	}
	if len(leases) != 0 {
		t.Fatalf("leases left: %v", leases)
	}
}

// A refused acquire and every peek write nothing; a renewal never takes
// a second slot; an acquire sweeps at most 64 lapsed holders.
func TestConcSweepAndRefusal(t *testing.T) {
	leases := fakeLeases{}
	for i := range 1000 {
		leases["old-"+strconv.Itoa(i)] = t0 - int64(i+1)*int64(time.Millisecond)
	}
	leases["live"] = t0 + 60e9
	k := concKeyAt(t0, leases)
	args := []string{"cmd", "k", "1", "30", "new"}
	var o Outcome
	Execute(spec.OpConcAcquire, args, k, &o)
	if o.Action != ActReply || o.Reply[0] != 1 || o.Writes[0].Action != WriteNone {
		t.Fatalf("a full set: %+v", o)
	}
	args[2] = "2"
	o = Outcome{}
	Execute(spec.OpConcAcquire, args, concKeyAt(t0, leases), &o)
	if o.Reply[0] != 0 || o.Writes[0].Action != WriteConc {
		t.Fatalf("a free slot: %+v", o)
	}
	leases.apply(t, args, o.Writes[0], t0)
	if len(leases) != 1000+2-ConcSweep {
		t.Fatalf("%d leases after one sweep, want %d", len(leases), 1000+2-ConcSweep)
	}
}

func TestConcArguments(t *testing.T) {
	long := strings.Repeat("x", 129)
	for _, c := range []struct {
		op   spec.Op
		args []string
		Err  string
	}{
		{spec.OpConcAcquire, []string{"0", "30", "a"}, "ERR limit must be an integer from 1 to 100000"},
		{spec.OpConcAcquire, []string{"100001", "30", "a"}, "ERR limit must be an integer from 1 to 100000"},
		{spec.OpConcAcquire, []string{"1.5", "30", "a"}, "ERR limit must be an integer from 1 to 100000"},
		{spec.OpConcAcquire, []string{"5", "0", "a"}, "ERR lease must be whole seconds from 1 to 9223372036"},
		{spec.OpConcAcquire, []string{"5", "9223372036", "a"}, "ERR lease must end before the year 2255"},
		{spec.OpConcAcquire, []string{"5", "30", ""}, "ERR id must be 1 to 128 bytes (a request id), not 0"},
		{spec.OpConcAcquire, []string{"5", "30", long}, "ERR id must be 1 to 128 bytes (a request id), not 129"},
		{spec.OpConcAcquire, []string{"5", "30", "a", "extra"}, `ERR unknown option "extra": the options are MS, RESERVE n and UPTO n`},
		{spec.OpConcAcquire, []string{"5", "30", "a", "UPTO", "0"}, "ERR UPTO must be an integer from 1 to 1000000"},
		{spec.OpConcAcquire, []string{"5", "30", "a", "UPTO", "1000001"}, "ERR UPTO must be an integer from 1 to 1000000"},
		{spec.OpConcAcquire, []string{"5", "30", "a", "UPTO"}, "ERR UPTO needs a number: UPTO n, n from 1 to 1000000"},
		{spec.OpConcAcquire, []string{"5", "30", "a", "UPTO", "2", "UPTO", "2"}, "ERR the option UPTO is given twice"},
		{spec.OpConcAcquire, []string{"5", "30", "a", "DEBT"}, `ERR unknown option "DEBT": the options are MS, RESERVE n and UPTO n`},
		{spec.OpConcPeek, []string{"5", "UPTO", "2"}, `ERR unknown option "UPTO": the options are MS and RESERVE n`},
		{spec.OpConcRelease, []string{"h", "0"}, "ERR n must be an integer from 1 to 1000000"},
		{spec.OpConcRelease, []string{"h", "-1"}, "ERR n must be an integer from 1 to 1000000"},
		{spec.OpConcRelease, []string{"h", "x"}, "ERR n must be an integer from 1 to 1000000"},
		{spec.OpConcAcquire, []string{"5", "30", "a", "RESERVE", "6"}, "ERR RESERVE must be an integer from 0 to 5 (the limit)"},
		{spec.OpConcAcquire, []string{"5", "30", "a", "RESERVE"}, "ERR RESERVE needs a number"},
		{spec.OpConcPeek, []string{"0"}, "ERR limit must be an integer from 1 to 100000"},
		{spec.OpConcPeek, []string{"5", "30"}, `ERR unknown option "30"`},
		{spec.OpConcRelease, []string{""}, "ERR id must be 1 to 128 bytes"},
		{spec.OpConcRelease, []string{long}, "ERR id must be 1 to 128 bytes"},
	} {
		leases := fakeLeases{"h": t0 + 5e9}
		k := concKeyAt(t0, leases)
		var o Outcome
		Execute(c.op, append([]string{"cmd", "k"}, c.args...), k, &o)
		if o.Action != ActError || !strings.HasPrefix(o.Err, c.Err) || o.Writes[0].Action != WriteNone {
			t.Errorf("%s %q: %+v, want %q", opNames[c.op], c.args, o.Err, c.Err)
		}
	}
	for _, c := range []struct {
		op   spec.Op
		args []string
	}{
		{spec.OpConcAcquire, []string{"5", "30"}},
		{spec.OpConcPeek, nil},
		{spec.OpConcRelease, nil},
		{spec.OpConcRelease, []string{"a", "1", "b"}},
	} {
		var o Outcome
		Execute(c.op, append([]string{"cmd", "k"}, c.args...), concKeyAt(t0, fakeLeases{}), &o)
		if o.Action != ActArity {
			t.Errorf("%s %q: %+v, want an arity error", opNames[c.op], c.args, o)
		}
	}
}

// Keys that hold something else than a concurrency limiter's state are
// refused, and nothing is written.
func TestConcForeignState(t *testing.T) {
	entry := func(score float64, m string) ZEntry { return ZEntry{Score: score, Member: m, Length: len(m)} }
	live := float64(t0/1000 + 5e6)
	for _, z := range []struct {
		what           string
		Oldest, Newest ZEntry
		ExpireMs       int64 // 0: no expiry
	}{
		{"a leaderboard", entry(100, "alice"), entry(200, "bob"), 0},
		{"a leaderboard with a TTL", entry(100, "alice"), entry(200, "bob"), t0/1e6 + 60_000},
		{"timestamps without an expiry", entry(live, "a"), entry(live, "b"), 0},
		{"timestamps expiring later than the newest", entry(live, "a"), entry(live, "b"), t0/1e6 + 60_000},
		{"timestamps expiring at the newest, to the millisecond", entry(live, "a"), entry(live+123_000, "b"), ceilMs(int64(live+123_000) * 1000)},
		{"a fractional score", entry(live+0.5, "a"), entry(live+0.5, "b"), leaseExpiry(int64(live) * 1000)},
		{"an empty member", entry(live, ""), entry(live, "b"), leaseExpiry(int64(live) * 1000)},
		{"a long member", entry(live, strings.Repeat("m", 129)), entry(live, "b"), leaseExpiry(int64(live) * 1000)},
		{"scores of 1e300", entry(1e300, "a"), entry(1e300, "b"), math.MaxInt64 / int64(time.Millisecond)},
		{"a sliding log", entry(live-60e6, strconv.FormatInt(int64(live-60e6), 10)+"-0"),
			entry(live, strconv.FormatInt(int64(live), 10)+"-1"), leaseExpiry(int64(live)*1000 + 60e9)},
	} {
		for _, c := range []struct {
			op   spec.Op
			args []string
		}{{spec.OpConcAcquire, []string{"5", "30", "x"}}, {spec.OpConcPeek, []string{"5"}}, {spec.OpConcRelease, []string{"x"}}} {
			k := &fakeKey{st: KeyState{Now: t0, Kind: KeyZSet, ZLen: 2, Oldest: z.Oldest, Newest: z.Newest, ExpireMs: z.ExpireMs},
				rawZSet: true, noExpiry: z.ExpireMs == 0, leases: fakeLeases{}}
			var o Outcome
			Execute(c.op, append([]string{"cmd", "k"}, c.args...), k, &o)
			if o.Action != ActError || !strings.HasPrefix(o.Err, "ERR the key holds other data, not "+concState) {
				t.Errorf("%s, %s: %+v", opNames[c.op], z.what, o)
			}
		}
	}
	for _, kind := range []KeyKind{KeyString, KeyOther} {
		k := &fakeKey{st: KeyState{Now: t0, Kind: kind, Value: "1"}}
		var o Outcome
		Execute(spec.OpConcRelease, []string{"cmd", "k", "x"}, k, &o)
		if o.Action != ActWrongType {
			t.Errorf("kind %d: %+v", kind, o)
		}
	}
}

// FuzzConc runs the concurrency commands on arbitrary arguments and
// leases: a refusal and a peek write nothing, a renewal is never refused,
// the reply is in range, errors are one line of valid text starting ERR,
// and a write leaves the key expiring with its latest lease, after now.
func FuzzConc(f *testing.F) {
	f.Add(uint8(0), "3 30 a", []byte{1, 2, 3}, int64(0))
	f.Add(uint8(0), "1 30 a RESERVE 1", []byte{200, 100}, int64(1e9))
	f.Add(uint8(1), "a", []byte{0, 50}, int64(5e9))
	f.Add(uint8(2), "2 MS", []byte{10, 20, 30}, int64(0))
	f.Add(uint8(0), "5 30 a0 UPTO 3", []byte{200, 100}, int64(0))
	f.Add(uint8(1), "a0 2", []byte{200, 100}, int64(0))
	f.Fuzz(func(t *testing.T, op8 uint8, line string, ends []byte, step int64) {
		op := spec.OpConcAcquire + spec.Op(op8)%3
		now := t0 + step%int64(time.Hour)
		leases := fakeLeases{}
		for i, e := range ends {
			leases[string(rune('a'+i%26))+strconv.Itoa(i/26)] = t0 + int64(e)*int64(100*time.Millisecond) - 5e9
		}
		args := append([]string{"cmd", "k"}, strings.Split(line, " ")...)
		before := len(leases)
		k := concKeyAt(now, leases)
		var o Outcome
		Execute(op, args, k, &o)
		switch o.Action {
		case ActError:
			if !strings.HasPrefix(o.Err, "ERR ") || strings.ContainsAny(o.Err, "\r\n") || !utf8.ValidString(o.Err) {
				t.Fatalf("bad error %q", o.Err)
			}
			return
		case ActArity, ActWrongType:
			return
		}
		r := o.Reply
		w := o.Writes[0]
		if op == spec.OpConcRelease {
			if o.ReplyLen != 1 || (r[0] != 0 && r[0] != 1) || (r[0] == 1 && w.Action == WriteNone) {
				t.Fatalf("release: %+v", o)
			}
			leases.apply(t, args, w, now)
			return
		}
		if r[0] != 0 && r[0] != 1 || r[2] < 0 || r[2] > r[1] || r[3] < -1 || r[4] < 0 || (r[0] == 0 && r[3] != -1) {
			t.Fatalf("reply %v", r)
		}
		if o.ReplyLen == 6 && (r[5] < 0 || (r[0] == 0) != (r[5] > 0) || r[5] > r[1]) {
			t.Fatalf("granted %d: %v", r[5], r)
		}
		if (r[0] == 1 || op == spec.OpConcPeek) && w.Action != WriteNone {
			t.Fatalf("a refusal or a peek writes: %+v", o)
		}
		if op == spec.OpConcAcquire {
			held := fakeHolders(leases).Holder(args[4]).Own > now
			if held && r[0] == 1 {
				t.Fatalf("a renewal refused: %+v", o)
			}
		}
		leases.apply(t, args, w, now)
		if len(leases) > before+1 {
			t.Fatalf("%d leases after one acquire of %d", len(leases), before)
		}
	})
}
