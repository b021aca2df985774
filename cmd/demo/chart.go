package main

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
)

// The chart: one row per algorithm on one time axis, each bucket's
// admitted requests as a green bar up and refused ones as a red bar down,
// the requests sent to it (retries included) as a grey outline, its own
// state at the end of each second as a thin purple line below, and each
// row's totals, pass rate and the most admitted in any window; when the
// clients retry, the peak-to-mean ratio of what they sent, the retries and
// the share served; with several clients, Jain's index and the noisy
// client's share. The shaper's admitted requests are
// drawn at their departure (arrival + the delay of the module's reply), so
// the axis runs on past the traffic while its queue drains. The page shows
// it and make charts writes it; the numbers are in data- attributes as
// well, for the browser test.
const (
	chartWidth = 960
	labelWidth = 190
	rowHeight  = 84
	axisHeight = 34
	headHeight = 40
	// stateHeight is the strip under each row's bars where its state is
	// drawn.
	stateHeight = 26
)

// stateNames are what the chart calls each kind of state.
var stateNames = map[string]string{"remaining": "remaining", "queue": "queue depth", "count": "count in window",
	"log": "log size", "holders": "holders"}

// writeState draws a row's state (Series.State) as a thin line in the
// strip from y0 to y1: each second's value at its end, from 0 at y1 to the
// most of the limit and the values at y0, with the state's name and range
// at the left. The values are in data-values as well, -1 before the first
// reply, which the line leaves out.
func writeState(b *strings.Builder, res *Result, se Series, y0, y1 float64, plot int) {
	top := res.Scenario.Limit
	var vals []string
	for _, v := range se.State {
		top = max(top, v)
		vals = append(vals, fmt.Sprint(v))
	}
	y := func(v int64) float64 { return y1 - (y1-y0)*float64(v)/float64(top) }
	fmt.Fprintf(b, `<text x="10" y="%.1f" fill="#6a3d9a" font-size="11">%s, 0 to %d (per s)</text>`, y1-1, stateNames[se.StateOf], top)
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/>`, labelWidth, labelWidth+plot, y1, y1)
	var pts []string
	for k, v := range se.State {
		if v >= 0 {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", float64(labelWidth)+float64(plot)*float64(k+1)*1000/float64(res.SpanMs), y(v)))
		}
	}
	fmt.Fprintf(b, `<polyline class="state" data-state="%s" data-values="%s" points="%s" fill="none" stroke="#6a3d9a" stroke-width="1"><title>%s at the end of each second</title></polyline>`,
		se.StateOf, strings.Join(vals, ","), strings.Join(pts, " "), stateNames[se.StateOf])
}

// WriteSVG draws the result as an SVG document.
func WriteSVG(w io.Writer, res *Result) error {
	var b strings.Builder
	s := res.Scenario
	plot := chartWidth - labelWidth - 20
	retrying, several := s.Retry != "" && s.Retry != "none", s.Clients > 1
	rowH := rowHeight
	for _, extra := range []bool{retrying, several} {
		if extra {
			rowH += 16
		}
	}
	half := float64(rowH-30) / 2 // the bars' height each way
	rowH += stateHeight
	height := headHeight + rowH*len(res.Series) + axisHeight
	peak := 1
	for _, se := range res.Series { // retries differ per algorithm, and the shaper's departures may bunch more than arrivals
		for i := range se.Admitted {
			peak = max(peak, se.Offered[i], se.Admitted[i])
		}
	}
	bw := float64(plot) / float64(res.Buckets)
	x := func(i int) float64 { return float64(labelWidth) + bw*float64(i) }
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12" role="img" data-requests="%d">`+"\n",
		chartWidth, height, chartWidth, height, res.Requests)
	fmt.Fprintf(&b, `<title>%s traffic, %.4g requests/s for %d s, limit %d per %d s</title>`+"\n", s.Pattern, s.Rate, s.Duration, s.Limit, s.Window)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	if s.Burst == 0 && s.Lease == 0 {
		fmt.Fprintf(&b, `<text x="10" y="18" font-size="14" font-weight="bold">%s: %d requests over %d s, every algorithm limited to %d per %d s (concurrency: %d at once, each held %.4g s)</text>`+"\n",
			html.EscapeString(s.Pattern), res.Requests, s.Duration, s.Limit, s.Window, s.Limit, s.Hold)
	} else { // the settings that differ from the default, shorter
		fmt.Fprintf(&b, `<text x="10" y="18" font-size="14" font-weight="bold">%s: %d requests over %d s, limit %d per %d s, burst %d (concurrency: %d at once, held %.4g s, lease %d s)</text>`+"\n",
			html.EscapeString(s.Pattern), res.Requests, s.Duration, s.Limit, s.Window, s.burst(), s.Limit, s.Hold, s.lease())
	}
	if !retrying && !several {
		fmt.Fprintf(&b, `<text x="10" y="33" fill="#555">bars per %.4g s: admitted up (green), refused down (red), offered traffic outlined; from the module's replies on a virtual clock</text>`+"\n",
			float64(res.BucketMs)/1000)
	} else {
		var who []string
		if several {
			who = append(who, fmt.Sprintf("%d clients, one noisy at %d× the rate, %s", s.Clients, NoisyFactor, map[string]string{"shared": "on one key", "per-client": "a key each"}[s.Keys]))
		}
		if retrying {
			who = append(who, "retrying refusals: "+html.EscapeString(s.Retry))
		}
		fmt.Fprintf(&b, `<text x="10" y="33" fill="#555">%s; bars per %.4g s: admitted up (green), refused down (red), sent (retries included) outlined</text>`+"\n",
			strings.Join(who, "; "), float64(res.BucketMs)/1000)
	}
	end := float64(labelWidth) + float64(plot)*float64(s.Duration)*1000/float64(res.SpanMs)
	for r, se := range res.Series {
		top := float64(headHeight + r*rowH)
		mid := top + 8 + half
		fmt.Fprintf(&b, `<g class="algorithm" data-algorithm="%s" data-admitted="%d" data-refused="%d" data-most="%d" data-pass="%.1f" data-drawn="%s"`,
			html.EscapeString(se.Name), se.Total[0], se.Total[1], se.MostIn, se.PassRate, se.Drawn)
		if retrying {
			fmt.Fprintf(&b, ` data-peak-mean="%.2f" data-retries="%d" data-served="%.1f"`, se.PeakMean, se.Retries, se.Served)
		}
		if several {
			fmt.Fprintf(&b, ` data-jain="%.3f"`, se.Jain)
		}
		b.WriteString(">\n")
		fmt.Fprintf(&b, `<text x="10" y="%.1f" font-weight="bold">%s</text>`+"\n", top+22, html.EscapeString(se.Name))
		fmt.Fprintf(&b, `<text x="10" y="%.1f" fill="#333">admitted %d (%.1f%%), refused %d</text>`+"\n", top+38, se.Total[0], se.PassRate, se.Total[1])
		fmt.Fprintf(&b, `<text x="10" y="%.1f" fill="#333">most in any %d s: %d</text>`+"\n", top+54, s.Window, se.MostIn)
		line := top + 70
		if se.Drawn == "departure" {
			fmt.Fprintf(&b, `<text x="10" y="%.1f" fill="#555" font-style="italic">green at departure (arrival + delay)</text>`+"\n", line)
			line += 16
		}
		if retrying {
			fmt.Fprintf(&b, `<text x="10" y="%.1f" fill="#333">sent peak/mean %.2f, %d retries, %.1f%% served</text>`+"\n", line, se.PeakMean, se.Retries, se.Served)
			line += 16
		}
		if several && len(se.Clients) > 0 {
			fmt.Fprintf(&b, `<text x="10" y="%.1f" fill="#333">Jain %.3f, noisy %.1f%% of admitted</text>`+"\n", line, se.Jain, se.Clients[0].Share)
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#bbb"/>`+"\n", labelWidth, labelWidth+plot, mid, mid)
		for i := range res.Buckets {
			off := half * float64(se.Offered[i]) / float64(peak)
			up := half * float64(se.Admitted[i]) / float64(peak)
			down := half * float64(se.Refused[i]) / float64(peak)
			if se.Offered[i] > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999" stroke-width="0.6"/>`,
					x(i), mid-off, bw, off)
			}
			if se.Admitted[i] > 0 {
				fmt.Fprintf(&b, `<rect class="admitted" data-bucket="%d" data-n="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#2e9d57"><title>%d admitted</title></rect>`,
					i, se.Admitted[i], x(i), mid-up, max(bw-0.5, 0.5), up, se.Admitted[i])
			}
			if se.Refused[i] > 0 {
				fmt.Fprintf(&b, `<rect class="refused" data-bucket="%d" data-n="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#d0453f"><title>%d refused</title></rect>`,
					i, se.Refused[i], x(i), mid, max(bw-0.5, 0.5), down, se.Refused[i])
			}
		}
		writeState(&b, res, se, top+8+2*half+10, top+8+2*half+stateHeight, plot)
		b.WriteString("\n</g>\n")
	}
	axis := float64(headHeight + rowH*len(res.Series))
	draining := false // the shaper's queue drains after the traffic
	for _, se := range res.Series {
		draining = draining || len(se.Departures) > 0 && slices.Max(se.Departures) >= int64(s.Duration)*1000
	}
	if draining {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#777" stroke-dasharray="4 3"/><text x="%.1f" y="%d" fill="#555" text-anchor="end">traffic ends</text>`+"\n",
			end, end, headHeight, axis, end-3, headHeight+10)
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#333"/>`+"\n", labelWidth, labelWidth+plot, axis, axis)
	span := float64(res.SpanMs) / 1000
	step := tickStep(span)
	for t := 0.0; t <= span+1e-9; t += step {
		px := float64(labelWidth) + float64(plot)*t/span
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#333"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`+"\n",
			px, px, axis, axis+5, px, axis+18, t)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// tickStep is the time axis' step, in s: a round number giving at most 12
// ticks over span seconds.
func tickStep(span float64) float64 {
	for _, step := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600} {
		if span/step <= 12 {
			return step
		}
	}
	return 7200
}
