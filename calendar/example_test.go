package calendar_test

import (
	"fmt"
	"time"
	_ "time/tzdata"

	"github.com/seed-6b3823f5/ratelimit/calendar"
)

// A monthly quota from a customer's billing day, the 31st, in Berlin:
// February's window ends on its last day, and March's runs to the 31st,
// an hour short of 31 days for the change to summer time.
func ExamplePeriod_Bounds() {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	p := calendar.Period{Unit: calendar.Month, Anchor: calendar.Anchor{Day: 31}, Location: berlin}
	for _, at := range []time.Time{
		time.Date(2026, 2, 20, 10, 0, 0, 0, berlin),
		time.Date(2026, 3, 5, 10, 0, 0, 0, berlin),
	} {
		start, end := p.Bounds(at)
		fmt.Println(start.Format("Jan 2 15:04 MST"), "to", end.Format("Jan 2 15:04 MST"), end.Sub(start))
	}
	// Output:
	// Jan 31 00:00 CET to Feb 28 00:00 CET 672h0m0s
	// Feb 28 00:00 CET to Mar 31 00:00 CEST 743h0m0s
}

// A day on the night New York's clocks skip from 02:00 to 03:00, for a
// quota that resets at 02:30: that day's window starts at 03:30, and is
// 23 hours long.
func ExamplePeriod_Bounds_skipped() {
	ny, _ := time.LoadLocation("America/New_York")
	p := calendar.Period{Unit: calendar.Day, Anchor: calendar.Anchor{Hour: 2, Minute: 30}, Location: ny}
	start, end := p.Bounds(time.Date(2026, 3, 8, 12, 0, 0, 0, ny))
	fmt.Println(start.Format("Jan 2 15:04 MST"), "to", end.Format("Jan 2 15:04 MST"), end.Sub(start))
	// Output: Mar 8 03:30 EDT to Mar 9 02:30 EDT 23h0m0s
}
