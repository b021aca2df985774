package rls

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/seed-6b3823f5/ratelimit/calendar"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
)

const calendarConfig = `
domain: d
descriptors:
  - key: plan
    rate_limit:
      unit: month
      requests_per_unit: 2
      calendar: {time_zone: Europe/Berlin, day: 15}
  - key: daily
    rate_limit: {unit: day, requests_per_unit: 1, calendar: {time_zone: America/New_York, hour: 6}}
`

// TestCalendar: calendar: makes a rate_limit's unit one of the calendar
// (the module's SPAN, with bounds the service computes): a month in
// Berlin from the 15th, a day in New York from 06:00. The fake's clock is
// moved to the real time, which the service's client places the windows
// by; the reset counts to the calendar window's end, in the status and
// the peer's X-RateLimit-Reset.
func TestCalendar(t *testing.T) {
	f := fakeredis.New()
	now := time.Now()
	f.Clock = func() time.Time { return now }
	rdb := f.Client()
	t.Cleanup(func() { rdb.Close() })
	s := onClient(t, rdb, calendarConfig, Options{LimitHeaders: LimitHeaders{"X-Limit", "X-Remaining", "X-Reset"}}, f.Now)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	_, end := calendar.Period{Unit: calendar.Month, Anchor: calendar.Anchor{Day: 15}, Location: berlin}.Bounds(now)
	// The status's reset is rounded up to the second, as the peer's.
	left := fmt.Sprintf("%ds", int64(ceilSecond(end.Sub(now))/time.Second))
	for i, want := range []string{"OK OK/2:1:", "OK OK/2:0:", "OVER_LIMIT OVER_LIMIT/2:0:"} {
		r := ask(t, s, []*rlv3.RateLimitDescriptor{descriptor("plan", "acme")})
		if got := line(r); got != want+left {
			t.Fatalf("call %d: %s, want %s (the month from the 15th ends %v)", i+1, got, want+left, end)
		}
		reset := ""
		for _, h := range r.ResponseHeadersToAdd {
			if h.Key == "X-Reset" {
				reset = h.Value
			}
		}
		if want := fmt.Sprint(int64(ceilSecond(end.Sub(now)) / time.Second)); reset != want {
			t.Errorf("call %d: X-Reset %q, want %s", i+1, reset, want)
		}
	}
	ms, err := rdb.Do(context.Background(), "PTTL", "d_plan_acme_fw2592000_cal").Int64()
	if err != nil || (time.Duration(ms)*time.Millisecond-end.Sub(now)).Abs() > time.Millisecond { // whole ms of the clock and the expiry
		t.Fatalf("the key's PTTL %d ms (%v), want until %v", ms, err, end)
	}
	for _, bad := range []struct{ cfg, want string }{
		{"{unit: minute, requests_per_unit: 1, calendar: {time_zone: UTC}}", "needs unit day, week, month or year"},
		{"{unit: day, requests_per_unit: 1, algorithm: gcra, calendar: {time_zone: UTC}}", "its algorithm must be fixed_window"},
		{"{unit: day, requests_per_unit: 1, spread: true, calendar: {time_zone: UTC}}", "does not go with spread"},
		{"{unit: day, requests_per_unit: 1, calendar: {time_zone: Mars/Olympus}}", `unknown time_zone "Mars/Olympus"`},
		{"{unit: month, requests_per_unit: 1, calendar: {day: 32}}", "anchor day must be 1 to 31"},
		{"{unit: month, requests_per_unit: 1, calendar: {hour: -1}}", "'hour' of 'd.k': cannot read \"-1\""},
		{"{unit: month, requests_per_unit: 1, calendar: {zone: UTC}}", "unknown key 'zone'"},
		{"{unit: month, requests_per_unit: 1, calendar: UTC}", "must be a mapping"},
	} {
		cfg := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + bad.cfg + "\n"
		if _, err := Parse(map[string][]byte{"d.yaml": []byte(cfg)}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error saying %s", bad.cfg, err, bad.want)
		}
	}
}
