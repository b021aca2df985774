package window

import (
	"fmt"
	"testing"
	"time"
	_ "time/tzdata" // the zones, whatever the machine has
)

func TestSpreadOffset(t *testing.T) {
	for _, c := range []struct {
		key    string
		window int64
		want   int64
	}{
		{"user:42", 60, 55114}, // sha1 adf14d23d3caa…: 0xadf14d23d3caa mod 60000
		{"user:42", 1, 114},
		{"user:42", MaxSpreadWindow, 0xadf14d23d3caa % (MaxSpreadWindow * 1000)},
		{"", 3600, 0xda39a3ee5e6b4 % 3600000}, // the SHA-1 of nothing
		{"user:42", 0, -1},
		{"user:42", MaxSpreadWindow + 1, -1},
	} {
		if got := SpreadOffset(c.key, c.window); got != c.want {
			t.Errorf("SpreadOffset(%q, %d) = %d, want %d", c.key, c.window, got, c.want)
		}
	}
}

// The offsets of many keys fall evenly over the window: 60000 keys over 60
// one-second slots, each slot's count within 5 standard deviations of
// 1000 (σ ≈ 31.4), and the chi-square statistic below its 99.9% point
// for 59 degrees of freedom (98.3).
func TestSpreadUniform(t *testing.T) {
	var slots [60]int
	const keys = 60000
	for i := range keys {
		off := SpreadOffset(fmt.Sprintf("tenant:%d:api", i), 60)
		if off < 0 || off >= 60000 {
			t.Fatalf("offset %d outside 0 to 59999", off)
		}
		slots[off/1000]++
	}
	chi := 0.0
	for s, n := range slots {
		if n < 1000-157 || n > 1000+157 {
			t.Errorf("slot %d holds %d offsets, want 1000 ± 157", s, n)
		}
		d := float64(n - 1000)
		chi += d * d / 1000
	}
	if chi > 98.3 {
		t.Errorf("chi-square %.1f over 60 slots, want below 98.3", chi)
	}
	t.Logf("chi-square %.1f", chi)
}

// A spread fixed window is the fixed window on a shifted clock: with an
// offset of 55.114 s and a window of 60 s, its windows run from
// hh:mm:55.114 to hh:(mm+1):55.114. Step by step on a virtual clock.
func TestSpreadFixedWindowSteps(t *testing.T) {
	off := SpreadOffset("user:42", 60) * int64(time.Millisecond)
	f, _ := NewFixedWindow(3, 60)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	var count, expires int64
	for i, s := range []struct {
		at          time.Duration // after 12:00:00
		limited     bool
		remaining   int64
		retry, left time.Duration // RetryAfter (Never when admitted), ResetAfter
	}{
		{0, false, 2, Never, 55114 * time.Millisecond},                                                 // window 11:59:55.114–12:00:55.114
		{50 * time.Second, false, 1, Never, 5114 * time.Millisecond},                                   //
		{55 * time.Second, false, 0, Never, 114 * time.Millisecond},                                    //
		{55*time.Second + 100*time.Millisecond, true, 0, 14 * time.Millisecond, 14 * time.Millisecond}, // full until 12:00:55.114
		{55*time.Second + 114*time.Millisecond, false, 2, Never, 60 * time.Second},                     // the next window starts empty
		{115*time.Second + 113*time.Millisecond, false, 1, Never, time.Millisecond},                    // its last millisecond
		{115*time.Second + 114*time.Millisecond, false, 2, Never, 60 * time.Second},                    // and the next
	} {
		now := base + int64(s.at)
		d, n, end, err := f.Hit(count, expires-off, now-off, 1)
		if err != nil {
			t.Fatal(err)
		}
		end += off
		if d.Limited != s.limited || d.Remaining != s.remaining || d.RetryAfter != s.retry || d.ResetAfter != s.left {
			t.Errorf("step %d at +%v: limited %v remaining %d retry %v reset %v, want %v %d %v %v",
				i, s.at, d.Limited, d.Remaining, d.RetryAfter, d.ResetAfter, s.limited, s.remaining, s.retry, s.left)
		}
		if (end-off)%int64(time.Minute) != 0 || end <= now || end-now > int64(time.Minute) {
			t.Errorf("step %d: window end %v is not the spread window's", i, time.Unix(0, end).UTC())
		}
		count, expires = n, end
	}
}

// A span window counts over its given bounds whatever the time: March 2026
// in Berlin (31 days less the hour the clock skips on the 29th).
func TestSpanWindowSteps(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, berlin).UnixNano()
	end := time.Date(2026, 4, 1, 0, 0, 0, 0, berlin).UnixNano()
	if end-start != int64(31*24*time.Hour-time.Hour) {
		t.Fatalf("March in Berlin is %v", time.Duration(end-start))
	}
	f, err := NewSpanWindow(1000, start, end)
	if err != nil {
		t.Fatal(err)
	}
	var count, expires int64
	for i, s := range []struct {
		now       int64
		cost      int64
		limited   bool
		remaining int64
		reset     time.Duration
	}{
		{start - int64(time.Second), 1, false, 999, time.Duration(end-start) + time.Second}, // a clock a second behind: counted in March
		{start + int64(24*time.Hour), 998, false, 1, time.Duration(end-start) - 24*time.Hour},
		{end - 1, 1, false, 0, 1},
		{end - 1, 1, true, 0, 1},
	} {
		d, n, e, err := f.Hit(count, expires, s.now, s.cost)
		if err != nil || d.Limited != s.limited || d.Remaining != s.remaining || d.ResetAfter != s.reset || e != end {
			t.Fatalf("step %d: %+v count %d end %d %v", i, d, n, e, err)
		}
		count, expires = n, e
	}
	if _, _, _, err := f.Hit(count, expires, end, 1); err != ErrRange {
		t.Fatalf("a hit at the span's end: %v, want ErrRange", err)
	}
	if _, err := NewSpanWindow(1, end, end); err != ErrRange {
		t.Fatalf("an empty span: %v", err)
	}
}
