package engine_test

import (
	"testing"
	"time"
)

// Calendar months in Berlin, in Unix ms: 1 November 2023, 1 December, 1
// January 2024, 1 February, 1 March. t0 (1,700,000,000 s) is 14 November
// 22:13:20 UTC, 1,385,200 s before December.
const (
	nov, dec, jan, feb, mar = "1698793200000", "1701385200000", "1704063600000", "1706742000000", "1709247600000"
	toDec                   = 1385200 * time.Second
	month                   = 2678400 // 31 days, the longest span the calls accept
)

// TestSpan: SPAN start end next counts a fixed window over the bounds the
// caller gives (a month on the calendar), and the next one when the
// server's clock has passed end (a client whose clock lags).
func TestSpan(t *testing.T) {
	runSteps(t, []step{
		{0, []any{"FW.HIT", "m", 3, month, 1, "SPAN", nov, dec, jan, "MS"}, "[0 3 2 -1 1385200000]"}, // until 1 December
		{0, []any{"PTTL", "m"}, "1385200000"},
		{0, []any{"FW.HIT", "m", 3, month, 2, "span", nov, dec, jan, "MS"}, "[0 3 0 -1 1385200000]"},
		{0, []any{"FW.HIT", "m", 3, month, "MS", "SPAN", nov, dec, jan}, "[1 3 0 1385200000 1385200000]"},
		{0, []any{"FW.PEEK", "m", 3, month, 0, "SPAN", nov, dec, jan, "MS"}, "[0 3 0 -1 1385200000]"},
		// 1 December 00:00: a client still sending November's bounds counts
		// in December, the window its next names.
		{toDec, []any{"FW.HIT", "m", 3, month, "SPAN", nov, dec, jan, "MS"}, "[0 3 2 -1 2678400000]"},
		{toDec, []any{"FW.HIT", "m", 3, month, "SPAN", dec, jan, feb, "MS"}, "[0 3 1 -1 2678400000]"},
		{toDec, []any{"PTTL", "m"}, "2678400000"},
		// One ahead sends January's: counted in January, early.
		{toDec, []any{"FW.HIT", "early", 3, month, "SPAN", jan, feb, mar, "MS"}, "[0 3 2 -1 5356800000]"},
		// RL.ALL and RL.HOLD: SPAN follows its limiter.
		{toDec, []any{"RL.ALL", 2, "{q}:min", "{q}:mon", "FW", 10, 60, 1, "FW", 3, month, 1, "SPAN", dec, jan, feb, "MS"}, "[0 3 2 -1 2678400000 1]"},
		{toDec, []any{"RL.HOLD", "{q}:mon", "{q}:h", 60, "FW", 3, month, 2, "SPAN", dec, jan, feb, "MS"}, "[0 3 0 -1 2678400000]"},
		{toDec, []any{"RL.SETTLE", "{q}:mon", "{q}:h", "FW", 3, month, 1, "SPAN", dec, jan, feb, "MS"}, "[0 3 1 -1 2678400000 2]"},
	}, []bad{
		{[]any{"FW.HIT", "m", 3, month, "SPAN", nov, dec}, "ERR SPAN needs start end next: Unix ms with 0 <= start < end < next <= 9223372036000, each span (end - start, next - end) at most window seconds"},
		{[]any{"FW.HIT", "m", 3, month, "SPAN", dec, nov, jan}, "ERR SPAN needs start end next: Unix ms with 0 <= start < end < next <= 9223372036000, each span (end - start, next - end) at most window seconds"},
		{[]any{"FW.HIT", "m", 3, 86400, "SPAN", nov, dec, jan}, "ERR SPAN needs start end next: Unix ms with 0 <= start < end < next <= 9223372036000, each span (end - start, next - end) at most window seconds"},
		{[]any{"FW.HIT", "m", 3, month, "SPAN", nov, dec, "x"}, "ERR SPAN needs start end next: Unix ms with 0 <= start < end < next <= 9223372036000, each span (end - start, next - end) at most window seconds"},
		{[]any{"FW.HIT", "m", 3, month, "SPAN", nov, dec, jan, "SPAN", nov, dec, jan}, "ERR the option SPAN is given twice"},
		{[]any{"FW.HIT", "m", 3, month, "SPREAD", "SPAN", nov, dec, jan}, "ERR SPAN gives the window's bounds, so it does not go with SPREAD"},
		{[]any{"FW.HIT", "m", 3, month, "SPAN", "1698000000000", "1699000000000", "1699500000000"},
			"ERR SPAN's windows ended at 1699500000000 ms, before the server's time 1701385200000 ms: compute them from a clock nearer the server's"},
		{[]any{"SW.HIT", "m", 3, month, "SPAN", nov, dec, jan}, `ERR unknown option "SPAN": the options are MS, RESERVE n, UPTO n, DEBT, SPREAD and LIMITS key field`},
		{[]any{"RL.ALL", 1, "m", "SW", 3, month, 1, "SPAN", nov, dec, jan}, "ERR limiter 1 (SW): SPAN follows a fixed window (FW) only"},
		{[]any{"RL.ALL", 1, "m", "FW", 3, 86400, 1, "SPAN", nov, dec, jan},
			"ERR limiter 1 (FW): SPAN needs start end next: Unix ms with 0 <= start < end < next <= 9223372036000, each span (end - start, next - end) at most window seconds"},
		{[]any{"RL.ALL", 1, "m", "FW", 3, month, 1, "SPAN", "1698000000000", "1699000000000", "1699500000000"},
			`ERR limiter 1 (FW, key "m"): SPAN's windows ended at 1699500000000 ms, before the server's time 1701385200000 ms: compute them from a clock nearer the server's`},
	})
}
