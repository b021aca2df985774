package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// captionCases are the scenarios the caption and compare tests run: pairs
// of algorithms under the traffic where they differ (the boundary attack,
// the herd, the noisy client, the shaper's queue, a lease shorter than the
// hold, a burst), and all seven under the default, the herd and the noisy
// client.
var captionCases = []Scenario{
	{Pattern: "boundary", Rate: 2, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Compare: "fw,gcra"},
	{Pattern: "steady", Rate: 3, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Retry: "nojitter", Compare: "gcra,fw"},
	{Pattern: "random", Rate: 0.5, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Clients: 5, Compare: "gcra,conc"},
	{Pattern: "random", Rate: 1.5, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 7, Retry: "full", Clients: 4, Keys: "per-client", Compare: "sw,conc"},
	{Pattern: "bursts", Rate: 2, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Compare: "lb,gcra"},
	{Pattern: "steady", Rate: 3, Duration: 30, Limit: 10, Window: 10, Hold: 3, Seed: 1, Compare: "sl,lb"},
	{Pattern: "steady", Rate: 2, Duration: 20, Limit: 3, Window: 10, Hold: 3, Seed: 1, Lease: 1, Compare: "conc,sl"},
	{Pattern: "bursts", Rate: 20, Duration: 4, Limit: 5, Window: 1, Hold: 3, Seed: 1, Burst: 10, Compare: "tb,fw"},
	DefaultScenario("steady"),
	{Pattern: "steady", Rate: 3, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Retry: "nojitter"},
	{Pattern: "random", Rate: 0.5, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Clients: 5},
}

// nameRE matches any algorithm's name.
var nameRE = func() string {
	var n []string
	for _, a := range Algorithms {
		n = append(n, regexp.QuoteMeta(a.Name))
	}
	return "(" + strings.Join(n, "|") + ")"
}()

func sentence(pattern string) *regexp.Regexp {
	return regexp.MustCompile(strings.ReplaceAll(pattern, "NAME", nameRE))
}

var (
	tieRE     = sentence(`^NAME and NAME each admitted at most (\d+) in any (\d+) s( \(the shaper counted at departure\))?\.`)
	mostRE    = sentence(`^NAME admitted (\d+) (?:between ([\d.]+) s and ([\d.]+) s|at once at ([\d.]+) s)( \(counted at departure\))?, the most in any (\d+) s; NAME at most (\d+)( \(counted at departure\))?\.`)
	passRE    = sentence(`Pass rate: NAME ([\d.]+) % \((\d+) of (\d+) sent\), NAME ([\d.]+) % \((\d+) of (\d+) sent\)\.`)
	peakRE2   = sentence(`Sent per s, peak/mean: NAME ([\d.]+) with (\d+) retries, NAME ([\d.]+) with (\d+) retries\.`)
	jainRE2   = sentence(`Jain's index: NAME ([\d.]+) \(the noisy client ([\d.]+) % of admitted\), NAME ([\d.]+) \(([\d.]+) %\)\.`)
	shaperRE  = sentence(`The shaper's last departure is at ([\d.]+) s(?:, ([\d.]+) s after the traffic ends)?\.`)
	concRE    = sentence(`Concurrency's replies report at most (\d+) holders of (\d+) at once(?:( on a key)|; by the hold of ([\d.]+) s, (\d+) were at work at once \(the lease of (\d+) s lapses first\))?\.`)
	allRE     = regexp.MustCompile(`^Most admitted in any (\d+) s: (.+?); pass rate: (.+?)\.(?: (.+)\.)?$`)
	rangeRE   = regexp.MustCompile(`^from (.+?) \((.+?)\) to (.+?) \((.+)\)$`)
	everyRE   = regexp.MustCompile(`^(.+) for every algorithm$`)
	captionMs = func(t *testing.T, s string) int64 {
		t.Helper()
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%q is not a number of seconds", s)
		}
		return int64(math.Round(f * 1000))
	}
)

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a whole number", s)
	}
	return n
}

// checkCompareCaption parses a two-algorithm caption back into numbers and
// compares each with the result's figures, and that nothing else is said.
func checkCompareCaption(t *testing.T, r SimulateResponse) {
	t.Helper()
	s, c := r.Scenario, r.Caption
	byName := map[string]Series{}
	for _, se := range r.Series {
		byName[se.Name] = se
	}
	a, b := r.Series[0], r.Series[1]
	rest := c
	take := func(re *regexp.Regexp, want bool) []string {
		t.Helper()
		m := re.FindStringSubmatch(rest)
		if (m != nil) != want {
			t.Fatalf("%s: the caption %s %s:\n%s", s.Compare, map[bool]string{true: "lacks", false: "has"}[want], re, c)
		}
		if m != nil {
			rest = strings.Replace(rest, m[0], "", 1)
		}
		return m
	}
	departs := func(se Series, note string) {
		t.Helper()
		if (note != "") != (se.Drawn == "departure") {
			t.Fatalf("%s: %q after %s, drawn at %s", c, note, se.Name, se.Drawn)
		}
	}
	if a.MostIn == b.MostIn {
		m := take(tieRE, true)
		if m[1] != a.Name || m[2] != b.Name || atoi(t, m[3]) != a.MostIn || atoi(t, m[4]) != s.Window {
			t.Fatalf("%s: %q, but %s and %s admitted at most %d and %d in any %d s", s.Compare, m[0], a.Name, b.Name, a.MostIn, b.MostIn, s.Window)
		}
		if (m[5] != "") != (a.Drawn == "departure" || b.Drawn == "departure") {
			t.Fatalf("%s: %q: the shaper's note wrong", s.Compare, m[0])
		}
	} else {
		m := take(mostRE, true)
		hi, lo := byName[m[1]], byName[m[8]]
		n := atoi(t, m[2])
		from, to := m[3], m[4]
		if m[5] != "" {
			from, to = m[5], m[5]
		}
		f, e := captionMs(t, from), captionMs(t, to)
		in, times := 0, hi.admittedTimes()
		if !slices.Contains(times, f) || !slices.Contains(times, e) {
			t.Fatalf("%s: %q: %d ms and %d ms are not both instants %s admitted a request at", s.Compare, m[0], f, e, hi.Name)
		}
		for _, at := range times {
			if at >= f && at <= e {
				in++
			}
		}
		if hi.Name == lo.Name || n != hi.MostIn || atoi(t, m[9]) != lo.MostIn || hi.MostIn <= lo.MostIn || atoi(t, m[7]) != s.Window ||
			in != n || e-f >= int64(s.Window)*1000 {
			t.Fatalf("%s: %q; %s admitted %d in [%d, %d] ms, at most %d in any %d s; %s at most %d", s.Compare, m[0], hi.Name, in, f, e, hi.MostIn, s.Window, lo.Name, lo.MostIn)
		}
		departs(hi, m[6])
		departs(lo, m[10])
	}
	m := take(passRE, true)
	for k, se := range []Series{a, b} {
		g := m[1+4*k : 5+4*k]
		if g[0] != se.Name || g[1] != fmt.Sprintf("%.1f", se.PassRate) || atoi(t, g[2]) != se.Total[0] || atoi(t, g[3]) != len(se.Replies) {
			t.Fatalf("%s: %q; %s passed %.1f %%, %d of %d", s.Compare, m[0], se.Name, se.PassRate, se.Total[0], len(se.Replies))
		}
	}
	if m := take(peakRE2, s.Retry != "none"); m != nil {
		for k, se := range []Series{a, b} {
			g := m[1+3*k : 4+3*k]
			if g[0] != se.Name || g[1] != fmt.Sprintf("%.2f", se.PeakMean) || atoi(t, g[2]) != se.Retries {
				t.Fatalf("%s: %q; %s: peak/mean %.2f, %d retries", s.Compare, m[0], se.Name, se.PeakMean, se.Retries)
			}
		}
	}
	if m := take(jainRE2, s.Clients > 1); m != nil {
		for k, se := range []Series{a, b} {
			g := m[1+3*k : 4+3*k]
			if g[0] != se.Name || g[1] != fmt.Sprintf("%.3f", se.Jain) || g[2] != fmt.Sprintf("%.1f", se.Clients[0].Share) {
				t.Fatalf("%s: %q; %s: Jain %.3f, the noisy client %.1f %%", s.Compare, m[0], se.Name, se.Jain, se.Clients[0].Share)
			}
		}
	}
	var lb, conc *Series
	for i := range r.Series {
		switch r.Series[i].Command {
		case "LB.ENQUEUE":
			lb = &r.Series[i]
		case "CONC.ACQUIRE":
			conc = &r.Series[i]
		}
	}
	if m := take(shaperRE, lb != nil); m != nil {
		last, end := slices.Max(lb.Departures), int64(s.Duration)*1000
		if captionMs(t, m[1]) != last || (m[2] != "") != (last >= end) || m[2] != "" && captionMs(t, m[2]) != last-end {
			t.Fatalf("%s: %q; the last departure at %d ms, the traffic ends at %d", s.Compare, m[0], last, end)
		}
	}
	if m := take(concRE, conc != nil); m != nil {
		held := int64(0)
		for _, rep := range conc.Replies {
			held = max(held, rep.Limit-rep.Remaining)
		}
		work := holdersByHold(*conc, int64(s.Hold*1000))
		perKey := s.Clients > 1 && s.Keys == "per-client"
		if int64(atoi(t, m[1])) != held || int64(atoi(t, m[2])) != s.Limit || (m[3] != "") != perKey ||
			(m[5] != "") != (!perKey && int64(work) > held) || m[5] != "" && (atoi(t, m[5]) != work || int64(atoi(t, m[6])) != s.lease()) {
			t.Fatalf("%s: %q; the replies: at most %d holders of %d; %d at work by the hold of %g s", s.Compare, m[0], held, s.Limit, work, s.Hold)
		}
	}
	if strings.TrimSpace(rest) != "" {
		t.Fatalf("%s: the caption says more than its figures: %q", s.Compare, rest)
	}
}

// checkRange parses "from X (names) to Y (names)" or "X for every
// algorithm" and compares it with the least and the most of a figure over
// the series, and the algorithms that have them.
func checkRange(t *testing.T, what, got string, series []Series, figure func(Series) string) {
	t.Helper()
	vals := make([]float64, len(series))
	for i, se := range series {
		vals[i], _ = strconv.ParseFloat(strings.TrimSuffix(figure(se), " %"), 64)
	}
	lo, hi := slices.Min(vals), slices.Max(vals)
	named := func(v float64) string {
		var n []string
		for i, se := range series {
			if vals[i] == v {
				n = append(n, se.Name)
			}
		}
		return strings.Join(n, ", ")
	}
	fig := func(v float64) string {
		for i := range series {
			if vals[i] == v {
				return figure(series[i])
			}
		}
		return ""
	}
	if m := everyRE.FindStringSubmatch(got); m != nil {
		if lo != hi || m[1] != fig(lo) {
			t.Fatalf("%s: %q, but it runs from %v to %v", what, got, lo, hi)
		}
		return
	}
	m := rangeRE.FindStringSubmatch(got)
	if m == nil || m[1] != fig(lo) || m[2] != named(lo) || m[3] != fig(hi) || m[4] != named(hi) {
		t.Fatalf("%s: %q; the figures run from %s (%s) to %s (%s)", what, got, fig(lo), named(lo), fig(hi), named(hi))
	}
}

func checkAllCaption(t *testing.T, r SimulateResponse) {
	t.Helper()
	s := r.Scenario
	m := allRE.FindStringSubmatch(r.Caption)
	if m == nil || atoi(t, m[1]) != s.Window {
		t.Fatalf("the caption of all seven: %q", r.Caption)
	}
	checkRange(t, "most in any W", m[2], r.Series, func(se Series) string { return strconv.Itoa(se.MostIn) })
	checkRange(t, "pass rate", m[3], r.Series, func(se Series) string { return fmt.Sprintf("%.1f %%", se.PassRate) })
	var more []string
	if m[4] != "" {
		more = strings.Split(m[4], "; ")
	}
	want := 0
	if s.Retry != "none" {
		if len(more) <= want || !strings.HasPrefix(more[want], "Peak/mean sent per s: ") {
			t.Fatalf("retrying: no peak/mean in %q", r.Caption)
		}
		checkRange(t, "peak/mean", strings.TrimPrefix(more[want], "Peak/mean sent per s: "), r.Series, func(se Series) string { return fmt.Sprintf("%.2f", se.PeakMean) })
		want++
	}
	if s.Clients > 1 {
		if len(more) <= want || !strings.HasPrefix(strings.ToLower(more[want][:1])+more[want][1:], "jain's index: ") {
			t.Fatalf("several clients: no Jain's index in %q", r.Caption)
		}
		checkRange(t, "Jain's index", more[want][len("Jain's index: "):], r.Series, func(se Series) string { return fmt.Sprintf("%.3f", se.Jain) })
		want++
	}
	if len(more) != want {
		t.Fatalf("the caption of all seven says more than its figures: %q", r.Caption)
	}
}

// The caption, on real results: every number it names is the result's
// (the most in any window, and where: that many admitted between the two
// instants it names, less than a window apart; the pass rates with the
// admitted and sent; the peak-to-mean ratios and retries when retrying;
// Jain's index and the noisy client's share with several clients; the
// shaper's last departure; the concurrency limiter's holders, and those at
// work by the hold when its lease lapses first), it names the algorithms
// that hold the extremes among all seven, and it says nothing else.
func TestCaption(t *testing.T) {
	needServer(t)
	for _, s := range captionCases {
		r := simulate(t, s)
		if r.Caption == "" || r.Caption != Caption(r.Result) {
			t.Fatalf("%+v: the JSON's caption %q", s, r.Caption)
		}
		if s.Compare != "" {
			checkCompareCaption(t, r)
		} else {
			checkAllCaption(t, r)
		}
		t.Logf("%s %s%s: %s", s.Pattern, s.Compare, map[bool]string{true: " (all seven)"}[s.Compare == ""], r.Caption)
	}
}

// Comparing two algorithms runs just those two, in the order asked, on the
// same traffic and keys as all seven: their replies and figures are those
// of the run of all seven, and the chart and the downloads have their two
// rows only. A compare naming anything but two different algorithms is a
// 400.
func TestCompare(t *testing.T) {
	needServer(t)
	for _, s := range captionCases {
		if s.Compare == "" {
			continue
		}
		pair := simulate(t, s)
		all := s
		all.Compare = ""
		full := simulate(t, all)
		ids := strings.Split(s.Compare, ",")
		if len(pair.Series) != 2 || pair.Scenario.Compare != s.Compare {
			t.Fatalf("%s: %d series, compare %q", s.Compare, len(pair.Series), pair.Scenario.Compare)
		}
		for k, se := range pair.Series {
			i := slices.IndexFunc(Algorithms, func(a Algorithm) bool { return a.ID == ids[k] })
			want := full.Series[i]
			if se.Name != Algorithms[i].Name {
				t.Fatalf("%s: row %d is %s, want %s", s.Compare, k, se.Name, Algorithms[i].Name)
			}
			type figures struct {
				Replies                       []Reply
				Total                         [2]int
				Retries, MostIn               int
				PassRate, Served, PeakMean, J float64
				Clients                       []ClientShare
				Departures                    []int64
			}
			g, _ := json.Marshal(figures{se.Replies, se.Total, se.Retries, se.MostIn, se.PassRate, se.Served, se.PeakMean, se.Jain, se.Clients, se.Departures})
			w, _ := json.Marshal(figures{want.Replies, want.Total, want.Retries, want.MostIn, want.PassRate, want.Served, want.PeakMean, want.Jain, want.Clients, want.Departures})
			if string(g) != string(w) {
				t.Fatalf("%s: %s compared differs from %s among all seven", s.Compare, se.Name, want.Name)
			}
		}
		if n := len(groupRE.FindAllString(pair.SVG, -1)); n != 2 {
			t.Fatalf("%s: the chart has %d rows", s.Compare, n)
		}
	}
	rec := httptest.NewRecorder()
	demo.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/result.csv?pattern=boundary&compare=fw,gcra", nil))
	names := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n")[1:] {
		names[strings.Split(line, ",")[0]] = true
	}
	if rec.Code != http.StatusOK || fmt.Sprint(names) != "map[Fixed window:true GCRA:true]" {
		t.Fatalf("csv with compare=fw,gcra: %d, the algorithms %v", rec.Code, names)
	}
	for _, bad := range []string{"gcra", "gcra,gcra", "gcra,fw,sl", "gcra,bucket", "gcra,", "GCRA,fw"} {
		code, m, _ := post(t, demo.Handler(), "/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 10, Limit: 10, Window: 10, Hold: 1, Compare: bad})
		if e, _ := m["error"].(string); code != http.StatusBadRequest || !strings.Contains(e, "compare must be two different algorithms of [gcra tb lb sw fw sl conc]") {
			t.Fatalf("compare=%s: %d %v", bad, code, m)
		}
		rec := httptest.NewRecorder()
		demo.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/chart.svg?compare="+bad, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "compare must be") {
			t.Fatalf("chart with compare=%s: %d %s", bad, rec.Code, rec.Body)
		}
	}
}
