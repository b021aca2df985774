package conc

import (
	"math"
	"slices"
	"strconv"
	"testing"
	"time"
)

// set is a key's leases as the module stores them: id → when it lapses.
type set map[string]int64

func (s set) Count(after int64) int64 {
	var n int64
	for _, end := range s {
		if end > after {
			n++
		}
	}
	return n
}

func (s set) Nth(after, k int64) int64 {
	var ends []int64
	for _, end := range s {
		if end > after {
			ends = append(ends, end)
		}
	}
	slices.Sort(ends)
	if k < 1 || k > int64(len(ends)) {
		return math.MinInt64
	}
	return ends[k-1]
}

// holder is what a call by id knows: its lease and the latest other.
func (s set) holder(id string) Holder {
	var h Holder
	for other, end := range s {
		if other == id {
			h.Own = end
		} else if end > h.Latest {
			h.Latest = end
		}
	}
	return h
}

// acquire runs Acquire and stores an admitted lease, as the module does.
func (s set) acquire(t *testing.T, l Limiter, id string, now int64, lease time.Duration, reserve int64) Decision {
	t.Helper()
	d, err := l.Acquire(s, s.holder(id), now, lease, reserve)
	if err != nil {
		t.Fatalf("acquire %s: %v", id, err)
	}
	if !d.Limited {
		s[id] = d.End
	}
	return d
}

// release runs Free and stores its outcome, as the module does.
func (s set) release(id string, now int64) bool {
	r := Free(s.holder(id), now)
	if r.Remove {
		delete(s, id)
	}
	if r.Expire == 0 {
		clear(s)
	}
	return r.Held
}

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixNano()

func at(d time.Duration) int64 { return t0 + int64(d) }

// The package comment's story, step by step: limit 3, leases of 30 s.
func TestAcquireReleaseLapse(t *testing.T) {
	l, _ := New(3)
	s := set{}
	const lease = 30 * time.Second
	steps := []struct {
		op        string // "acquire" or "release"
		id        string
		at        time.Duration
		limited   bool
		remaining int64
		retry     time.Duration
		reset     time.Duration
		held      bool // release: the reply
	}{
		{"acquire", "a", 0, false, 2, Never, 30 * time.Second, false},
		{"acquire", "b", time.Second, false, 1, Never, 30 * time.Second, false},
		{"acquire", "c", 2 * time.Second, false, 0, Never, 30 * time.Second, false},
		// Full: retry when a's lease lapses, at 30 s; reset when c's does.
		{"acquire", "d", 3 * time.Second, true, 0, 27 * time.Second, 29 * time.Second, false},
		// A retried acquire by a holder renews: no new slot, lease from now.
		{"acquire", "a", 4 * time.Second, false, 0, Never, 30 * time.Second, false},
		{"acquire", "d", 4 * time.Second, true, 0, 27 * time.Second, 30 * time.Second, false},
		{"release", "b", 5 * time.Second, false, 0, 0, 0, true},
		{"release", "b", 5 * time.Second, false, 0, 0, 0, false}, // idempotent
		{"acquire", "d", 5 * time.Second, false, 0, Never, 30 * time.Second, false},
		// c crashes: its slot lapses at 32 s, by itself.
		{"acquire", "e", 31 * time.Second, true, 0, time.Second, 4 * time.Second, false},
		{"acquire", "e", 32 * time.Second, false, 0, Never, 30 * time.Second, false},
		// A lapsed holder releasing gets 0: it held nothing any more.
		{"release", "c", 33 * time.Second, false, 0, 0, 0, false},
	}
	for i, st := range steps {
		now := at(st.at)
		if st.op == "release" {
			if held := s.release(st.id, now); held != st.held {
				t.Fatalf("step %d: release %s = %v, want %v", i, st.id, held, st.held)
			}
			continue
		}
		d := s.acquire(t, l, st.id, now, lease, 0)
		if d.Limited != st.limited || d.Remaining != st.remaining || d.RetryAfter != st.retry || d.ResetAfter != st.reset {
			t.Fatalf("step %d: acquire %s at %v = limited %v remaining %d retry %v reset %v, want %v %d %v %v",
				i, st.id, st.at, d.Limited, d.Remaining, d.RetryAfter, d.ResetAfter, st.limited, st.remaining, st.retry, st.reset)
		}
	}
	if _, ok := s["c"]; ok {
		t.Fatal("a lapsed lease was not removed by its release")
	}
}

func TestRenewalNeverTakesASecondSlot(t *testing.T) {
	l, _ := New(2)
	s := set{}
	for i := range 10 {
		d := s.acquire(t, l, "same", at(time.Duration(i)*time.Second), time.Minute, 0)
		if d.Limited || d.Remaining != 1 || (i > 0) != d.Renewed {
			t.Fatalf("renewal %d: %+v", i, d)
		}
	}
	if d := s.acquire(t, l, "other", at(10*time.Second), time.Minute, 0); d.Limited || d.Remaining != 0 {
		t.Fatalf("a second holder: %+v", d)
	}
	// A renewal is admitted even when the caller's limit is now lower than
	// the live leases (a limit lowered by configuration).
	one, _ := New(1)
	if d := s.acquire(t, one, "same", at(11*time.Second), time.Minute, 0); d.Limited || d.Remaining != 0 || !d.Renewed {
		t.Fatalf("renewal over a lowered limit: %+v", d)
	}
	if d := s.acquire(t, one, "third", at(11*time.Second), time.Minute, 0); !d.Limited || d.Remaining != 0 {
		t.Fatalf("a new holder over a lowered limit: %+v", d)
	}
}

// A renewal with a shorter lease moves the state's expiry back to the
// latest other lease, never before it.
func TestShorterRenewalKeepsLatestOther(t *testing.T) {
	l, _ := New(5)
	s := set{}
	s.acquire(t, l, "long", at(0), time.Minute, 0)
	s.acquire(t, l, "other", at(0), 20*time.Second, 0)
	d := s.acquire(t, l, "long", at(time.Second), 5*time.Second, 0)
	if d.End != at(6*time.Second) || d.Expire != at(20*time.Second) || d.ResetAfter != 19*time.Second {
		t.Fatalf("shorter renewal: end %v expire %v reset %v", d.End-t0, d.Expire-t0, d.ResetAfter)
	}
}

func TestReserve(t *testing.T) {
	l, _ := New(4)
	s := set{}
	for i, id := range []string{"a", "b", "c"} {
		s.acquire(t, l, id, at(time.Duration(i)*time.Second), 10*time.Second, 0)
	}
	// 3 live of 4: a new holder with RESERVE 1 would leave no slot: refused
	// until a's lease lapses (k = 3 + 1 + 1 − 4 = 1).
	d := s.acquire(t, l, "low", at(3*time.Second), 10*time.Second, 1)
	if !d.Limited || d.Remaining != 1 || d.RetryAfter != 7*time.Second {
		t.Fatalf("reserve 1: %+v", d)
	}
	// RESERVE 2 waits for the second earliest (b's, at 11 s).
	if d = s.acquire(t, l, "low", at(3*time.Second), 10*time.Second, 2); !d.Limited || d.RetryAfter != 8*time.Second {
		t.Fatalf("reserve 2: %+v", d)
	}
	// RESERVE 4 (the whole limit): no lapse can admit a new holder.
	if d = s.acquire(t, l, "low", at(3*time.Second), 10*time.Second, 4); !d.Limited || d.RetryAfter != Never {
		t.Fatalf("reserve 4: %+v", d)
	}
	// ... but a holder renews whatever its reserve.
	if d = s.acquire(t, l, "a", at(3*time.Second), 10*time.Second, 4); d.Limited || !d.Renewed {
		t.Fatalf("renewal with reserve 4: %+v", d)
	}
	// Without a reserve the last slot goes.
	if d = s.acquire(t, l, "high", at(3*time.Second), 10*time.Second, 0); d.Limited || d.Remaining != 0 {
		t.Fatalf("no reserve: %+v", d)
	}
}

func TestPeek(t *testing.T) {
	l, _ := New(2)
	s := set{}
	d, _ := l.Peek(s, 0, at(0), 0)
	if d.Limited || d.Remaining != 1 || d.RetryAfter != Never || d.ResetAfter != 0 {
		t.Fatalf("peek on nothing: %+v", d)
	}
	s.acquire(t, l, "a", at(0), 10*time.Second, 0)
	s.acquire(t, l, "b", at(time.Second), 10*time.Second, 0)
	d, _ = l.Peek(s, s.holder("").Latest, at(2*time.Second), 0)
	if !d.Limited || d.Remaining != 0 || d.RetryAfter != 8*time.Second || d.ResetAfter != 9*time.Second {
		t.Fatalf("peek on a full set: %+v", d)
	}
	if len(s) != 2 {
		t.Fatal("peek changed the set")
	}
}

func TestFreeExpiry(t *testing.T) {
	cases := []struct {
		h      Holder
		now    int64
		want   Release
		reason string
	}{
		{Holder{}, at(0), Release{}, "nothing held, nothing else"},
		{Holder{Own: at(5 * time.Second), Latest: at(9 * time.Second)}, at(0), Release{Held: true, Remove: true, Released: 1, Expire: at(9 * time.Second)}, "held, others live"},
		{Holder{Own: at(5 * time.Second), Latest: at(-time.Second)}, at(0), Release{Held: true, Remove: true, Released: 1}, "held, the others lapsed: the state goes"},
		{Holder{Own: at(-5 * time.Second), Latest: at(9 * time.Second)}, at(0), Release{Remove: true, Expire: at(9 * time.Second)}, "lapsed: removed, reply 0"},
		{Holder{Latest: at(9 * time.Second)}, at(0), Release{Expire: at(9 * time.Second)}, "not a holder"},
	}
	for _, c := range cases {
		if got := Free(c.h, c.now); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.reason, got, c.want)
		}
	}
}

func TestErrors(t *testing.T) {
	if _, err := New(0); err != ErrRange {
		t.Fatalf("limit 0: %v", err)
	}
	l, _ := New(3)
	for _, c := range []struct {
		lease   time.Duration
		reserve int64
		now     int64
		err     error
	}{
		{0, 0, t0, ErrRange},
		{time.Second, -1, t0, ErrRange},
		{time.Second, 4, t0, ErrRange},
		{time.Duration(math.MaxInt64), 0, t0, ErrOverflow},
	} {
		if _, err := l.Acquire(set{}, Holder{}, c.now, c.lease, c.reserve); err != c.err {
			t.Errorf("lease %v reserve %d: %v, want %v", c.lease, c.reserve, err, c.err)
		}
	}
	if _, err := l.Peek(set{}, 0, t0, 4); err != ErrRange {
		t.Errorf("peek reserve 4: %v", err)
	}
}

// FuzzHolders runs random acquires, releases and clock steps forward
// against the limiter and checks what it promises: never more than limit
// live leases (one limit, no reserve), a renewal never refused nor taking a
// slot, a refusal's RetryAfter exactly when enough leases have lapsed.
func FuzzHolders(f *testing.F) {
	f.Add(uint8(3), []byte{0, 1, 2, 3, 4, 0x81, 5, 0x42, 6})
	f.Add(uint8(1), []byte{0, 0, 0x40, 1, 0x90, 1})
	f.Fuzz(func(t *testing.T, limit uint8, ops []byte) {
		L := int64(limit%8) + 1
		l, _ := New(L)
		s := set{}
		now := t0
		for _, op := range ops {
			id := string(rune('a' + op%8))
			lease := time.Duration(op>>3&3+1) * time.Second
			switch op >> 5 {
			case 0, 1, 2: // acquire
				h := s.holder(id)
				before := s.Count(now)
				d := s.acquire(t, l, id, now, lease, 0)
				if h.Own > now && (d.Limited || s.Count(now) != before) {
					t.Fatalf("renewal of %s refused or took a slot: %+v", id, d)
				}
				if d.Limited {
					if before < L || d.RetryAfter <= 0 {
						t.Fatalf("refused with %d live of %d: %+v", before, L, d)
					}
					if s.Count(now+int64(d.RetryAfter)) > L-1 || s.Count(now+int64(d.RetryAfter)-1) <= L-1 {
						t.Fatalf("retry after %v is not when a slot frees", d.RetryAfter)
					}
				}
				if got := s.Count(now); got > L {
					t.Fatalf("%d live leases, limit %d", got, L)
				}
				if d.Remaining != max(0, L-s.Count(now)) {
					t.Fatalf("remaining %d with %d live of %d", d.Remaining, s.Count(now), L)
				}
			case 3, 4:
				held := s.Count(now)
				own := s.holder(id).Own
				if s.release(id, now) != (own > now) || s.Count(now) != held-btoi(own > now) {
					t.Fatalf("release of %s: lease %v", id, own-now)
				}
			default:
				now += int64(op&0x1f) * int64(100*time.Millisecond)
			}
		}
	})
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// slotted is a key's leases with several slots per id: id → its lease's
// end and how many slots it holds.
type slotted map[string]struct{ end, slots int64 }

func (s slotted) Count(after int64) int64 {
	var n int64
	for _, h := range s {
		if h.end > after {
			n += h.slots
		}
	}
	return n
}

// Nth is the set's of one lease per slot.
func (s slotted) Nth(after, k int64) int64 {
	flat := set{}
	for id, h := range s {
		for j := range h.slots {
			flat[id+"/"+strconv.FormatInt(j, 10)] = h.end
		}
	}
	return flat.Nth(after, k)
}

func (s slotted) holder(id string) Holder {
	var h Holder
	for other, l := range s {
		if other == id {
			h.Own, h.Slots = l.end, l.slots
		} else if l.end > h.Latest {
			h.Latest = l.end
		}
	}
	return h
}

// Several slots under one id, step by step: limit 10, reserve 2 where a
// step says so, leases of 10 s.
func TestAcquireN(t *testing.T) {
	l, _ := New(10)
	s := slotted{}
	steps := []struct {
		at      time.Duration
		id      string
		n       int64 // > 0: AcquireN of n; < 0: FreeN of −n; 0: Free
		reserve int64
		// acquire: limited, remaining, granted, added, retry, reset
		limited                  bool
		remaining, granted, add  int64
		retry, reset             time.Duration
		released, keep, expireAt time.Duration // release: Released, Keep, Expire (−1: 0)
	}{
		{at: 0, id: "a", n: 5, remaining: 5, granted: 5, add: 5, retry: Never, reset: 10 * time.Second},
		{at: 0, id: "b", n: 4, reserve: 2, remaining: 2, granted: 3, add: 3, retry: Never, reset: 10 * time.Second},
		// a asks for 5 again: renews its 5, none more (it holds n).
		{at: time.Second, id: "a", n: 5, remaining: 2, granted: 5, retry: Never, reset: 10 * time.Second},
		// c gets what the reserve leaves: none, refused as a single acquire
		// is, until the 3rd earliest lease lapses (b's 3 end at 10 s).
		{at: time.Second, id: "c", n: 3, reserve: 2, limited: true, remaining: 2, retry: 9 * time.Second, reset: 10 * time.Second},
		{at: time.Second, id: "c", n: 3, remaining: 0, granted: 2, add: 2, retry: Never, reset: 10 * time.Second},
		// b asks for 6: renews its 3, nothing free to add.
		{at: 2 * time.Second, id: "b", n: 6, remaining: 0, granted: 3, retry: Never, reset: 10 * time.Second},
		// a gives back 2 of its 5, then asks for 1: it holds 3 and keeps them.
		{at: 3 * time.Second, id: "a", n: -2, released: 2, keep: 3, expireAt: 12 * time.Second},
		{at: 3 * time.Second, id: "a", n: 1, remaining: 2, granted: 3, retry: Never, reset: 10 * time.Second},
		// b releases all (more than it holds): 3.
		{at: 4 * time.Second, id: "b", n: -9, released: 3, expireAt: 13 * time.Second},
		{at: 4 * time.Second, id: "b", n: 1, remaining: 4, granted: 1, add: 1, retry: Never, reset: 10 * time.Second},
		// c's 2 lapse at 11 s: a new id then finds them free.
		{at: 12 * time.Second, id: "d", n: 9, remaining: 0, granted: 6, add: 6, retry: Never, reset: 10 * time.Second},
		{at: 12 * time.Second, id: "c", n: 0, expireAt: 22 * time.Second},
		{at: 12 * time.Second, id: "d", n: 0, released: 6, expireAt: 14 * time.Second},
	}
	for i, st := range steps {
		now := at(st.at)
		h := s.holder(st.id)
		if st.n <= 0 {
			r := FreeN(h, now, -st.n)
			if st.n == 0 {
				r = Free(h, now)
			}
			if r.Released != int64(st.released) || r.Keep != int64(st.keep) || r.Expire != at(st.expireAt) || r.Held != (st.released > 0) {
				t.Fatalf("step %d: release %s: %+v", i, st.id, r)
			}
			if r.Keep > 0 {
				s[st.id] = struct{ end, slots int64 }{h.Own, r.Keep}
			} else {
				delete(s, st.id)
			}
			continue
		}
		d, err := l.AcquireN(s, h, now, 10*time.Second, st.reserve, st.n)
		if err != nil {
			t.Fatal(err)
		}
		if d.Limited != st.limited || d.Remaining != st.remaining || d.Granted != st.granted || d.Added != st.add ||
			d.RetryAfter != st.retry || d.ResetAfter != st.reset {
			t.Fatalf("step %d: %s asks %d: %+v", i, st.id, st.n, d)
		}
		if !d.Limited {
			s[st.id] = struct{ end, slots int64 }{d.End, d.Granted}
		}
	}
}

// AcquireN of 1 is Acquire, on every state of a small model.
func TestAcquireNOfOne(t *testing.T) {
	l, _ := New(3)
	s := set{}
	for i := range 40 {
		id := string(rune('a' + i%5))
		now := at(time.Duration(i) * 700 * time.Millisecond)
		h := s.holder(id)
		a, err1 := l.Acquire(s, h, now, 2*time.Second, int64(i%2))
		b, err2 := l.AcquireN(s, h, now, 2*time.Second, int64(i%2), 1)
		if err1 != nil || err2 != nil || a != b {
			t.Fatalf("step %d: %+v %v, %+v %v", i, a, err1, b, err2)
		}
		if !a.Limited {
			s[id] = a.End
		}
	}
}

// Several slots per id, fuzzed: live slots never pass the limit, a grant
// is what the limit left (up to n), Remaining is what is free, and a
// release gives back exactly what it reports.
func FuzzSlots(f *testing.F) {
	f.Add(uint8(7), []byte{0x03, 0x0b, 0x13, 0x61, 0x02, 0x88, 0x1f, 0x43})
	f.Add(uint8(2), []byte{0x07, 0x07, 0x61, 0x67, 0xe0, 0x07})
	f.Fuzz(func(t *testing.T, limit uint8, ops []byte) {
		L := int64(limit%12) + 1
		l, _ := New(L)
		s := slotted{}
		now := t0
		for _, op := range ops {
			id := string(rune('a' + op%4))
			n := int64(op>>2&7) + 1
			h := s.holder(id)
			live := s.Count(now)
			switch op >> 5 {
			case 0, 1, 2: // acquire up to n
				d, err := l.AcquireN(s, h, now, time.Duration(op>>2&3+1)*time.Second, 0, n)
				if err != nil {
					t.Fatal(err)
				}
				held := int64(0)
				if h.Own > now {
					held = h.Slots
				}
				if !d.Limited {
					s[id] = struct{ end, slots int64 }{d.End, d.Granted}
				}
				switch got := s.Count(now); {
				case d.Limited && (held > 0 || live < L || d.Granted != 0):
					t.Fatalf("%s refused with %d live of %d, holding %d: %+v", id, live, L, held, d)
				case !d.Limited && (d.Granted != held+d.Added || d.Added != max(0, min(n-held, L-live))):
					t.Fatalf("%s holding %d asks %d with %d live of %d: %+v", id, held, n, live, L, d)
				case got > max(L, live) || d.Remaining != max(0, L-got):
					t.Fatalf("%d live of %d after %+v", got, L, d)
				}
			case 3, 4: // release n, or all
				r := FreeN(h, now, n)
				if op>>5 == 4 {
					r = Free(h, now)
				}
				switch {
				case r.Keep > 0:
					s[id] = struct{ end, slots int64 }{h.Own, r.Keep}
				case r.Remove:
					delete(s, id)
				}
				if s.Count(now) != live-r.Released || r.Held != (r.Released > 0) {
					t.Fatalf("release of %s holding %+v: %+v", id, h, r)
				}
			default:
				now += int64(op&0x1f) * int64(100*time.Millisecond)
			}
		}
	})
}
