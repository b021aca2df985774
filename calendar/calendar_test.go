package calendar

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// Bounds on a table worked by hand: daylight-saving changes in three
// zones (Berlin and New York in spring and autumn, Sydney in the southern
// autumn), month ends and a leap day under a billing day of 31, a billing
// time of day, weeks from Monday and from Sunday, the UK tax year.
func TestBounds(t *testing.T) {
	be, ny, sy, lo := zone(t, "Europe/Berlin"), zone(t, "America/New_York"), zone(t, "Australia/Sydney"), zone(t, "Europe/London")
	d := func(loc *time.Location, y int, m time.Month, day, h, mi int) time.Time {
		return time.Date(y, m, day, h, mi, 0, 0, loc)
	}
	for _, c := range []struct {
		name       string
		p          Period
		at         time.Time
		start, end time.Time
		hours      float64 // end − start
	}{
		{"Berlin's spring day is 23 h", Period{Unit: Day, Location: be}, d(be, 2026, 3, 29, 12, 0), d(be, 2026, 3, 29, 0, 0), d(be, 2026, 3, 30, 0, 0), 23},
		{"Berlin's autumn day is 25 h", Period{Unit: Day, Location: be}, d(be, 2026, 10, 25, 12, 0), d(be, 2026, 10, 25, 0, 0), d(be, 2026, 10, 26, 0, 0), 25},
		{"a skipped 02:30 moves to 03:30", Period{Unit: Day, Anchor: Anchor{Hour: 2, Minute: 30}, Location: ny}, d(ny, 2026, 3, 8, 12, 0),
			time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC), d(ny, 2026, 3, 9, 2, 30), 23},
		{"the day before it ends there", Period{Unit: Day, Anchor: Anchor{Hour: 2, Minute: 30}, Location: ny}, d(ny, 2026, 3, 8, 3, 0),
			d(ny, 2026, 3, 7, 2, 30), time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC), 24},
		{"a twice-read 01:30 is the first", Period{Unit: Day, Anchor: Anchor{Hour: 1, Minute: 30}, Location: ny}, d(ny, 2026, 11, 1, 12, 0),
			time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), d(ny, 2026, 11, 2, 1, 30), 25},
		{"Berlin's twice-read 02:30 is the first", Period{Unit: Day, Anchor: Anchor{Hour: 2, Minute: 30}, Location: be}, d(be, 2026, 10, 25, 12, 0),
			time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), d(be, 2026, 10, 26, 2, 30), 25},
		{"billing day 31 in February", Period{Unit: Month, Anchor: Anchor{Day: 31}, Location: be}, d(be, 2026, 2, 20, 10, 0),
			d(be, 2026, 1, 31, 0, 0), d(be, 2026, 2, 28, 0, 0), 28 * 24},
		{"from the 28th to the 31st, over the spring change", Period{Unit: Month, Anchor: Anchor{Day: 31}, Location: be}, d(be, 2026, 3, 5, 10, 0),
			d(be, 2026, 2, 28, 0, 0), d(be, 2026, 3, 31, 0, 0), 31*24 - 1},
		{"a leap year's 29 February", Period{Unit: Month, Anchor: Anchor{Day: 31}, Location: be}, d(be, 2028, 2, 29, 10, 0),
			d(be, 2028, 2, 29, 0, 0), d(be, 2028, 3, 31, 0, 0), 31*24 - 1},
		{"a calendar month's last second", Period{Unit: Month}, time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC),
			time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), 31 * 24},
		{"a billing time a minute before", Period{Unit: Month, Anchor: Anchor{Day: 15, Hour: 9}, Location: be}, d(be, 2026, 3, 15, 8, 59),
			d(be, 2026, 2, 15, 9, 0), d(be, 2026, 3, 15, 9, 0), 28 * 24},
		{"and at it", Period{Unit: Month, Anchor: Anchor{Day: 15, Hour: 9}, Location: be}, d(be, 2026, 3, 15, 9, 0),
			d(be, 2026, 3, 15, 9, 0), d(be, 2026, 4, 15, 9, 0), 31*24 - 1},
		{"Sydney's week over its autumn change", Period{Unit: Week, Location: sy}, d(sy, 2026, 4, 5, 12, 0),
			d(sy, 2026, 3, 30, 0, 0), d(sy, 2026, 4, 6, 0, 0), 7*24 + 1},
		{"a week from Sunday over New York's autumn change", Period{Unit: Week, Anchor: Anchor{Weekday: 7}, Location: ny}, d(ny, 2026, 11, 1, 0, 30),
			d(ny, 2026, 11, 1, 0, 0), d(ny, 2026, 11, 8, 0, 0), 7*24 + 1},
		{"the UK tax year's last minute", Period{Unit: Year, Anchor: Anchor{Month: time.April, Day: 6}, Location: lo}, d(lo, 2026, 4, 5, 23, 59),
			d(lo, 2025, 4, 6, 0, 0), d(lo, 2026, 4, 6, 0, 0), 365 * 24},
		{"Sydney's calendar year", Period{Unit: Year, Location: sy}, d(sy, 2026, 6, 1, 0, 0),
			d(sy, 2026, 1, 1, 0, 0), d(sy, 2027, 1, 1, 0, 0), 365 * 24},
	} {
		if err := c.p.Check(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		start, end := c.p.Bounds(c.at)
		if !start.Equal(c.start) || !end.Equal(c.end) || end.Sub(start).Hours() != c.hours {
			t.Errorf("%s: [%v, %v) (%v h); want [%v, %v) (%v h)", c.name, start, end, end.Sub(start).Hours(), c.start, c.end, c.hours)
		}
	}
}

// Over three years in three zones, every period's windows hold the
// instant asked about, meet the next (the end's window starts there),
// are found again from their own start, and last what their unit lasts
// give or take the hour of a change.
func TestBoundsMeet(t *testing.T) {
	day := 24 * time.Hour
	periods := []struct {
		p        Period
		min, max time.Duration
	}{
		{Period{Unit: Day}, 23 * time.Hour, 25 * time.Hour},
		{Period{Unit: Day, Anchor: Anchor{Hour: 2, Minute: 30}}, 23 * time.Hour, 25 * time.Hour},
		{Period{Unit: Week, Anchor: Anchor{Weekday: 3, Hour: 1, Minute: 30}}, 7*day - time.Hour, 7*day + time.Hour},
		{Period{Unit: Month, Anchor: Anchor{Day: 30, Hour: 2, Minute: 15}}, 28*day - time.Hour, 31*day + time.Hour},
		{Period{Unit: Year, Anchor: Anchor{Month: time.February, Day: 29}}, 365*day - time.Hour, 366*day + time.Hour},
	}
	for _, name := range []string{"Europe/Berlin", "America/New_York", "Australia/Sydney"} {
		loc := zone(t, name)
		for _, pp := range periods {
			p := pp.p
			p.Location = loc
			if err := p.Check(); err != nil {
				t.Fatal(err)
			}
			for at := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); at.Year() < 2029; at = at.Add(7*time.Hour + 13*time.Minute) {
				start, end := p.Bounds(at)
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%s %v: %v not in [%v, %v)", name, p.Unit, at, start, end)
				}
				if s2, e2 := p.Bounds(start); !s2.Equal(start) || !e2.Equal(end) {
					t.Fatalf("%s %v: from its start %v: [%v, %v)", name, p.Unit, start, s2, e2)
				}
				if s3, _ := p.Bounds(end); !s3.Equal(end) {
					t.Fatalf("%s %v: the window after [%v, %v) starts at %v", name, p.Unit, start, end, s3)
				}
				if l := end.Sub(start); l < pp.min || l > pp.max {
					t.Fatalf("%s %v: [%v, %v) lasts %v", name, p.Unit, start, end, l)
				}
			}
		}
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		p    Period
		want string // "" when it passes
	}{
		{Period{Unit: Month}, ""},
		{Period{}, "unit must be day, week, month or year"},
		{Period{Unit: Day, Anchor: Anchor{Hour: 24}}, "hour must be 0 to 23"},
		{Period{Unit: Day, Anchor: Anchor{Minute: -1}}, "minute must be 0 to 59"},
		{Period{Unit: Month, Anchor: Anchor{Day: 32}}, "day must be 1 to 31"},
		{Period{Unit: Year, Anchor: Anchor{Month: 13}}, "month must be 1 to 12"},
		{Period{Unit: Week, Anchor: Anchor{Weekday: 8}}, "weekday must be 1 (Monday) to 7 (Sunday)"},
		{Period{Unit: Year, Anchor: Anchor{Month: time.April, Day: 31}}, "day 31 is not in April"},
		{Period{Unit: Year, Anchor: Anchor{Month: time.February, Day: 29}}, ""}, // 28 February in other years
	} {
		err := c.p.Check()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v; want %q", c.p, err, c.want)
		}
	}
}
