// Package calendar computes the bounds of quota windows on the calendar:
// a day, a week, a month or a year in a time zone, optionally from a
// billing anchor (a day of the month, a time of day). "1,000,000 a month"
// means the customer's calendar month, or the month from their billing
// day, not 30 days counted since 1970.
//
// A Period is a rule; Bounds gives the window holding an instant, with
// time passed in:
//
//	p := calendar.Period{Unit: calendar.Month, Anchor: calendar.Anchor{Day: 15}, Location: berlin}
//	start, end := p.Bounds(time.Date(2026, 3, 3, 10, 0, 0, 0, berlin))
//	// start 2026-02-15 00:00 CET, end 2026-03-15 00:00 CET: 28 days
//
// Windows follow the wall clock of Location, so their length in seconds
// varies: a day is 23 or 25 hours across a daylight-saving change, a
// month 28 to 31 days, a year 365 or 366. A billing day past a month's
// last day falls on its last day (the 31st is the 28th or 29th in
// February, the 30th in April), and comes back in the next month that has
// it. A start whose local time the clock skips (02:30 on the night it
// jumps from 02:00 to 03:00) moves forward by the gap, to 03:30; one the
// clock passes twice (02:30 on the night it falls back) is the first of
// the two. Each window's end is the next one's start, to the nanosecond:
// consecutive windows meet.
//
// The bounds are what a fixed window needs to count a quota on the
// calendar: the count lives from start to end, and a hit at end belongs to
// the next window.
package calendar

import (
	"fmt"
	"time"
)

// Unit is a Period's calendar unit.
type Unit int

const (
	Day Unit = iota + 1
	Week
	Month
	Year
)

func (u Unit) String() string {
	switch u {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return fmt.Sprintf("Unit(%d)", int(u))
}

// Anchor is where a Period's windows start. The zero Anchor is midnight,
// Monday for weeks, the 1st for months, January the 1st for years.
type Anchor struct {
	Hour, Minute int        // the time of day each window starts, 0–23 and 0–59
	Weekday      int        // a week's first day as ISO 8601 numbers it, 1 Monday to 7 Sunday (0: Monday)
	Day          int        // a month's or year's first day, 1–31 (0: the 1st)
	Month        time.Month // a year's first month (0: January)
}

// Period is a calendar window rule: windows of Unit in Location (nil:
// UTC), starting at Anchor.
type Period struct {
	Unit     Unit
	Anchor   Anchor
	Location *time.Location
}

// Check says what is wrong with p, naming the field and its range.
func (p Period) Check() error {
	a := p.Anchor
	switch {
	case p.Unit < Day || p.Unit > Year:
		return fmt.Errorf("calendar: unit must be day, week, month or year")
	case a.Hour < 0 || a.Hour > 23:
		return fmt.Errorf("calendar: anchor hour must be 0 to 23")
	case a.Minute < 0 || a.Minute > 59:
		return fmt.Errorf("calendar: anchor minute must be 0 to 59")
	case a.Day < 0 || a.Day > 31:
		return fmt.Errorf("calendar: anchor day must be 1 to 31 (0: the 1st)")
	case a.Month < 0 || a.Month > 12:
		return fmt.Errorf("calendar: anchor month must be 1 to 12 (0: January)")
	case a.Weekday < 0 || a.Weekday > 7:
		return fmt.Errorf("calendar: anchor weekday must be 1 (Monday) to 7 (Sunday); 0: Monday")
	case p.Unit == Year && a.Day > daysIn(orJanuary(a.Month), 2000): // 2000 is a leap year: Feb 29 is allowed
		return fmt.Errorf("calendar: anchor day %d is not in %v", a.Day, orJanuary(a.Month))
	}
	return nil
}

// Bounds is the window of p holding t: start ≤ t < end. p must pass Check.
func (p Period) Bounds(t time.Time) (start, end time.Time) {
	loc := p.Location
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc)
	// k-th window's start from the one holding t's wall-clock date: step
	// back until it is at or before t, then the next is the end.
	k := 0
	for p.start(t, k).After(t) {
		k--
	}
	for !p.start(t, k+1).After(t) {
		k++
	}
	return p.start(t, k), p.start(t, k+1)
}

// start is the start of the window k windows after the one that starts
// in t's day, week, month or year (by the wall clock).
func (p Period) start(t time.Time, k int) time.Time {
	a, loc := p.Anchor, t.Location()
	y, m, d := t.Date()
	switch p.Unit {
	case Day:
		return at(y, m, d+k, a.Hour, a.Minute, loc)
	case Week:
		first := max(a.Weekday, 1) % 7 // as time.Weekday: Sunday 0
		back := (int(t.Weekday()) - first + 7) % 7
		return at(y, m, d-back+7*k, a.Hour, a.Minute, loc)
	case Month:
		mm := time.Month(int(m) + k)
		yy := y
		for mm > 12 {
			mm -= 12
			yy++
		}
		for mm < 1 {
			mm += 12
			yy--
		}
		return at(yy, mm, min(orFirst(a.Day), daysIn(mm, yy)), a.Hour, a.Minute, loc)
	}
	// Year.
	mm := orJanuary(a.Month)
	yy := y + k
	return at(yy, mm, min(orFirst(a.Day), daysIn(mm, yy)), a.Hour, a.Minute, loc)
}

// at is the instant loc's clocks read y-m-d h:mi (the date normalized as
// time.Date does): the first of two when they read it twice, and, when
// they skip it, the instant it would be at the offset before the skip
// (so later by the gap).
func at(y int, m time.Month, d, h, mi int, loc *time.Location) time.Time {
	wall := time.Date(y, m, d, h, mi, 0, 0, time.UTC).Unix() // the reading, as if at UTC
	// The offsets a day either side: real zones change at most once in two
	// days.
	_, before := time.Unix(wall-86400, 0).In(loc).Zone()
	_, after := time.Unix(wall+86400, 0).In(loc).Zone()
	best := int64(0)
	found := false
	for _, off := range []int{before, after} {
		u := wall - int64(off)
		if _, o := time.Unix(u, 0).In(loc).Zone(); o == off && (!found || u < best) {
			best, found = u, true
		}
	}
	if !found { // skipped: read at the offset before the change
		best = wall - int64(before)
	}
	return time.Unix(best, 0).In(loc)
}

func orFirst(d int) int {
	if d == 0 {
		return 1
	}
	return d
}

func orJanuary(m time.Month) time.Month {
	if m == 0 {
		return time.January
	}
	return m
}

// daysIn is the number of days in month m of year y.
func daysIn(m time.Month, y int) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
