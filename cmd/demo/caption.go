package main

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Caption is what a run shows, in words, from its own figures only (no
// canned text about the algorithms):
//
// With two algorithms compared (Scenario.Compare), the one that admitted
// more in some interval of the window's length, how many and between which
// instants (the first such interval, from its first admission to its
// last), and the other's most; each one's pass rate with its admitted and
// sent; when the clients retry, each one's peak-to-mean ratio of requests
// sent and its retries; with several clients, each one's Jain's index and
// the noisy client's share; the shaper's last departure when it is one of
// the two; the concurrency limiter's most holders at once as its replies
// report them, and, when its lease lapses before the hold ends, the most
// at work at once by the hold.
//
// With all seven, the extremes: the least and the most admitted in any
// window and pass rate, and when the clients retry the peak-to-mean ratio,
// with several clients Jain's index, each naming the algorithms that have
// it.
func Caption(res *Result) string {
	if res.Scenario.Compare != "" && len(res.Series) == 2 {
		return compareCaption(res)
	}
	return allCaption(res)
}

// secs is ms as seconds, with no more decimals than it needs.
func secs(ms int64) string { return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) }

// densest is the most instants of at (ms, ascending) in any interval
// [t, t+w), and the first and last instant of the first such group.
func densest(at []int64, w int64) (most int, from, to int64) {
	lo := 0
	for hi := range at {
		for at[hi]-at[lo] >= w {
			lo++
		}
		if n := hi - lo + 1; n > most {
			most, from, to = n, at[lo], at[hi]
		}
	}
	return most, from, to
}

// atDeparture is what follows a figure of the shaper's: it counts
// departures.
func atDeparture(se Series) string {
	if se.Drawn == "departure" {
		return " (counted at departure)"
	}
	return ""
}

// atWork is the most of an algorithm's admitted requests at work at one
// instant, each from its arrival for hold ms: the concurrency limiter's
// holders by the hold, whatever its lease.
func atWork(se Series, hold int64) int {
	type step struct {
		at int64
		d  int
	}
	var steps []step
	for _, r := range se.Replies {
		if !r.Limited {
			steps = append(steps, step{r.At, 1}, step{r.At + hold, -1})
		}
	}
	slices.SortFunc(steps, func(a, b step) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.d, b.d)) })
	most, n := 0, 0
	for _, s := range steps {
		n += s.d
		most = max(most, n)
	}
	return most
}

func compareCaption(res *Result) string {
	s := res.Scenario
	a, b := res.Series[0], res.Series[1]
	var out []string
	if a.MostIn == b.MostIn {
		note := ""
		if a.Drawn == "departure" || b.Drawn == "departure" {
			note = " (the shaper counted at departure)"
		}
		out = append(out, fmt.Sprintf("%s and %s each admitted at most %d in any %d s%s.", a.Name, b.Name, a.MostIn, s.Window, note))
	} else {
		hi, lo := a, b
		if b.MostIn > a.MostIn {
			hi, lo = b, a
		}
		n, from, to := densest(hi.admittedTimes(), int64(s.Window)*1000)
		where := fmt.Sprintf("between %s s and %s s", secs(from), secs(to))
		if from == to {
			where = fmt.Sprintf("at once at %s s", secs(from))
		}
		out = append(out, fmt.Sprintf("%s admitted %d %s%s, the most in any %d s; %s at most %d%s.",
			hi.Name, n, where, atDeparture(hi), s.Window, lo.Name, lo.MostIn, atDeparture(lo)))
	}
	out = append(out, fmt.Sprintf("Pass rate: %s %.1f %% (%d of %d sent), %s %.1f %% (%d of %d sent).",
		a.Name, a.PassRate, a.Total[0], len(a.Replies), b.Name, b.PassRate, b.Total[0], len(b.Replies)))
	if s.Retry != "none" {
		out = append(out, fmt.Sprintf("Sent per s, peak/mean: %s %.2f with %d retries, %s %.2f with %d retries.",
			a.Name, a.PeakMean, a.Retries, b.Name, b.PeakMean, b.Retries))
	}
	if s.Clients > 1 && len(a.Clients) > 0 && len(b.Clients) > 0 {
		out = append(out, fmt.Sprintf("Jain's index: %s %.3f (the noisy client %.1f %% of admitted), %s %.3f (%.1f %%).",
			a.Name, a.Jain, a.Clients[0].Share, b.Name, b.Jain, b.Clients[0].Share))
	}
	for _, se := range []Series{a, b} {
		switch {
		case se.Drawn == "departure" && len(se.Departures) > 0:
			last := slices.Max(se.Departures)
			after := ""
			if end := int64(s.Duration) * 1000; last >= end {
				after = fmt.Sprintf(", %s s after the traffic ends", secs(last-end))
			}
			out = append(out, fmt.Sprintf("The shaper's last departure is at %s s%s.", secs(last), after))
		case se.Command == "CONC.ACQUIRE" && len(se.Replies) > 0:
			held := int64(0)
			for _, r := range se.Replies {
				held = max(held, r.Limit-r.Remaining)
			}
			line := fmt.Sprintf("%s's replies report at most %d holders of %d at once", se.Name, held, s.Limit)
			if s.Clients > 1 && s.Keys == "per-client" {
				line += " on a key"
			} else if w := atWork(se, int64(s.Hold*1000)); int64(w) > held {
				line += fmt.Sprintf("; by the hold of %g s, %d were at work at once (the lease of %d s lapses first)", s.Hold, w, s.lease())
			}
			out = append(out, line+".")
		}
	}
	return strings.Join(out, " ")
}

// extremes names the least and the most of a figure over the series, and
// the algorithms that have each: "from 10 (GCRA, Sliding log) to 20 (Fixed
// window)", or "10 for every algorithm".
func extremes(series []Series, value func(Series) float64, format string) string {
	lo, hi := value(series[0]), value(series[0])
	for _, se := range series {
		lo, hi = min(lo, value(se)), max(hi, value(se))
	}
	if lo == hi {
		return fmt.Sprintf(format+" for every algorithm", lo)
	}
	names := func(v float64) string {
		var n []string
		for _, se := range series {
			if value(se) == v {
				n = append(n, se.Name)
			}
		}
		return strings.Join(n, ", ")
	}
	return fmt.Sprintf("from "+format+" (%s) to "+format+" (%s)", lo, names(lo), hi, names(hi))
}

func allCaption(res *Result) string {
	s := res.Scenario
	if len(res.Series) == 0 {
		return ""
	}
	out := fmt.Sprintf("Most admitted in any %d s: %s; pass rate: %s.", s.Window,
		extremes(res.Series, func(se Series) float64 { return float64(se.MostIn) }, "%.0f"),
		extremes(res.Series, func(se Series) float64 { return se.PassRate }, "%.1f %%"))
	var more []string
	if s.Retry != "none" {
		more = append(more, "peak/mean sent per s: "+extremes(res.Series, func(se Series) float64 { return se.PeakMean }, "%.2f"))
	}
	if s.Clients > 1 {
		more = append(more, "Jain's index: "+extremes(res.Series, func(se Series) float64 { return se.Jain }, "%.3f"))
	}
	if len(more) > 0 {
		m := strings.Join(more, "; ")
		out += " " + strings.ToUpper(m[:1]) + m[1:] + "."
	}
	return out
}
