package client

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/seed-6b3823f5/ratelimit/calendar"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

// TestCalendar: a Calendar limit's calls carry SPAN with the bounds of the
// window holding the client's time, so each key expires at its window's
// end on the calendar (a month in Berlin from the 31st, a year in New
// York, a week in Tokyo from Sunday, a day in Berlin from 02:00), and
// counts within it; Take, All and Hold alike.
func TestCalendar(t *testing.T) {
	f := fakeredis.New()
	f.Clock = time.Now
	c := New(f.Client())
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	for i, p := range []calendar.Period{
		{Unit: calendar.Month, Anchor: calendar.Anchor{Day: 31}, Location: zone("Europe/Berlin")},
		{Unit: calendar.Year, Location: zone("America/New_York")},
		{Unit: calendar.Week, Anchor: calendar.Anchor{Weekday: 7}, Location: zone("Asia/Tokyo")},
		{Unit: calendar.Day, Anchor: calendar.Anchor{Hour: 2}, Location: zone("Europe/Berlin")},
	} {
		l := Calendar(3, p)
		key := "cal:" + p.Unit.String()
		before := time.Now()
		for n := int64(2); n >= 0; n-- {
			if r, err := c.Take(ctx, key, l, 1); err != nil || r.Limited || r.Remaining != n {
				t.Fatalf("%v: %+v %v, want %d left", l, r, err, n)
			}
		}
		if r, err := c.Take(ctx, key, l, 1); err != nil || !r.Limited {
			t.Fatalf("%v: the 4th: %+v %v, want refused", l, r, err)
		}
		ms, err := f.Client().Do(ctx, "PTTL", key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		at := after.Add(time.Duration(ms) * time.Millisecond) // within the time PTTL took of the key's expiry
		_, end1 := p.Bounds(before)
		_, end2 := p.Bounds(after)
		if d := at.Sub(end1); (d < -time.Second || d > time.Second) && at.Sub(end2).Abs() > time.Second {
			t.Fatalf("%v: the key expires at %v, want the window's end %v", l, at.In(p.Location), end1)
		}
		r, err := c.All(ctx, []Keyed{{Key: "{a}" + key, Limit: l, Cost: 2}, {Key: "{a}min", Limit: FixedWindow(10, time.Minute), Cost: 1}})
		if err != nil || r.Limited || r.Policy != 0 || r.Remaining != 1 {
			t.Fatalf("%v in All: %+v %v", l, r, err)
		}
		if r, err := c.Hold(ctx, "{h}"+key, "r1", l, 3, time.Minute); err != nil || r.Remaining != 0 {
			t.Fatalf("%v: Hold: %+v %v", l, r, err)
		}
		if i == 0 {
			if got := l.String(); got != "FW(limit 3, month in Europe/Berlin from day 31)" {
				t.Errorf("String() = %q", got)
			}
			if q, w := l.Quota(); q != 3 || w < 28*24*time.Hour || w > 31*24*time.Hour+time.Hour {
				t.Errorf("Quota() = %d, %v, want 3 per this month's length", q, w)
			}
		}
	}
	bad := []Limit{Calendar(3, calendar.Period{Unit: calendar.Month, Anchor: calendar.Anchor{Day: 32}}), Calendar(3, calendar.Period{Unit: calendar.Month}).Spread()}
	for _, l := range bad {
		if _, err := c.Take(ctx, "bad", l, 1); err == nil || !strings.HasPrefix(err.Error(), "ratelimit: FW(") {
			t.Errorf("%v: %v, want refused before the call", l, err)
		}
	}
}
