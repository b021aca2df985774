package conc

import (
	"math"
	"slices"
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
		{Holder{Own: at(5 * time.Second), Latest: at(9 * time.Second)}, at(0), Release{true, true, at(9 * time.Second)}, "held, others live"},
		{Holder{Own: at(5 * time.Second), Latest: at(-time.Second)}, at(0), Release{true, true, 0}, "held, the others lapsed: the state goes"},
		{Holder{Own: at(-5 * time.Second), Latest: at(9 * time.Second)}, at(0), Release{false, true, at(9 * time.Second)}, "lapsed: removed, reply 0"},
		{Holder{Latest: at(9 * time.Second)}, at(0), Release{false, false, at(9 * time.Second)}, "not a holder"},
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
