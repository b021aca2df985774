package engine_test

import (
	"testing"
	"time"
)

// TestUpTo: UPTO n on each consuming command, step by step on a virtual
// clock (the shared fake Redis runs the engine and keeps the keys), at
// t0 20 s into a minute. The reply gains the grant g, last: the most calls in
// 0..n every limit admits now; with g = 0 it is the refusal of one call;
// remaining and reset are those after taking g calls.
func TestUpTo(t *testing.T) {
	runSteps(t, []step{
		// GCRA: 5 at once, one back every 12 s.
		{0, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 1, "UPTO", 3}, "[0 5 2 -1 36 3]"},
		{0, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 1, "UPTO", 3}, "[0 5 0 -1 60 2]"},
		{0, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 1, "upto", 3}, "[1 5 0 12 60 0]"},
		{12 * time.Second, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 1, "UPTO", 3}, "[0 5 0 -1 60 1]"},
		{72 * time.Second, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 2, "RESERVE", 1, "UPTO", 5}, "[0 5 1 -1 48 2]"},
		{72 * time.Second, []any{"GCRA.THROTTLE", "g2", 4, 5, 60, 6, "UPTO", 2}, "[1 5 5 -1 0 0]"},
		{72 * time.Second, []any{"GCRA.THROTTLE", "g2", 4, 5, 60, 0, "UPTO", 4}, "[0 5 5 -1 0 4]"},
		{72 * time.Second, []any{"CL.THROTTLE", "g3", 4, 5, 60, 1, "UPTO", 1, "MS"}, "[0 5 4 -1 12000 1]"},
		// The token bucket: 4 tokens, one a second.
		{72 * time.Second, []any{"TB.TAKE", "b", 4, 1, 1, 3, "UPTO", 2}, "[0 4 1 -1 3 1]"},
		{72 * time.Second, []any{"TB.TAKE", "b", 4, 1, 1, 1, "UPTO", 9}, "[0 4 0 -1 4 1]"},
		{74 * time.Second, []any{"TB.TAKE", "b", 4, 1, 1, 1, "UPTO", 9}, "[0 4 0 -1 4 2]"},
		// The fixed window: 5 a minute, 40 s of it left.
		{120 * time.Second, []any{"FW.HIT", "f", 5, 60, 2, "UPTO", 9}, "[0 5 1 -1 40 2]"},
		{120 * time.Second, []any{"FW.HIT", "f", 5, 60, 2, "UPTO", 9}, "[1 5 1 40 40 0]"},
		{120 * time.Second, []any{"FW.HIT", "f", 5, 60, 1, "UPTO", 9}, "[0 5 0 -1 40 1]"},
		{160 * time.Second, []any{"FW.HIT", "f", 5, 60, 1, "UPTO", 2}, "[0 5 3 -1 60 2]"},
		// The sliding window and the sliding log: 3 in any 10 s.
		{120 * time.Second, []any{"SW.HIT", "s", 3, 10, 1, "UPTO", 5}, "[0 3 0 -1 20 3]"},
		{120 * time.Second, []any{"SW.HIT", "s", 3, 10, 1, "UPTO", 5}, "[1 3 0 10 20 0]"},
		{120 * time.Second, []any{"SL.HIT", "l", 3, 10, 1, "UPTO", 2}, "[0 3 1 -1 10 2]"},
		{125 * time.Second, []any{"SL.HIT", "l", 3, 10, 1, "UPTO", 5}, "[0 3 0 -1 10 1]"},
		{130 * time.Second, []any{"SL.HIT", "l", 3, 10, 1, "UPTO", 5}, "[0 3 0 -1 10 2]"}, // the two of 120 s left at 130 s,
		// RL.ALL: g × each cost, the most every limit admits: the GCRA's 5
		// and the window's 3 grant 3; the window, with none left, decides.
		{200 * time.Second, []any{"RL.ALL", 2, "a1", "a2", "GCRA", 4, 5, 60, 1, "FW", 3, 60, 1, "UPTO", 10}, "[0 3 0 -1 20 1 3]"},
		{200 * time.Second, []any{"RL.ALL", 2, "a1", "a2", "GCRA", 4, 5, 60, 1, "FW", 3, 60, 1, "UPTO", 10, "EACH"}, "[1 3 0 20 20 1 0 5 2 -1 36 1 3 0 20 20 0]"},
		{200 * time.Second, []any{"RL.ALL", 1, "a3", "TB", 10, 1, 1, 2, "RESERVE", 3, "UPTO", 10}, "[0 10 4 -1 6 0 3]"},
		// A refusal grants none, even of a cost of 0: refused by its reserve,
		// or by a window over a limit since lowered.
		{200 * time.Second, []any{"TB.TAKE", "b2", 10, 1, 60, 5}, "[0 10 5 -1 300]"},
		{200 * time.Second, []any{"TB.TAKE", "b2", 10, 1, 60, 0, "RESERVE", 8, "UPTO", 5}, "[1 10 5 180 300 0]"},
		{200 * time.Second, []any{"FW.HIT", "o", 20, 60, 15}, "[0 20 5 -1 20]"},
		{200 * time.Second, []any{"FW.HIT", "o", 10, 60, 0, "UPTO", 5}, "[1 10 0 20 20 0]"},
		{200 * time.Second, []any{"RL.ALL", 2, "o", "o2", "FW", 10, 60, 0, "FW", 100, 60, 1, "UPTO", 50}, "[1 10 0 20 20 0 0]"},
		{200 * time.Second, []any{"FW.PEEK", "o2", 100, 60, 0}, "[0 100 100 -1 0]"},
		// Two logs of 100000 grant what one call may add: 50000 each.
		{200 * time.Second, []any{"RL.ALL", 2, "l1", "l2", "SL", 100000, 60, 1, "SL", 100000, 60, 1, "UPTO", 1000000}, "[0 100000 50000 -1 60 0 50000]"},
	}, []bad{
		{[]any{"GCRA.PEEK", "g", 4, 5, 60, 1, "UPTO", 3}, `ERR unknown option "UPTO": the options are MS, RESERVE n and LIMITS key field`},
		{[]any{"RL.PEEK", 1, "a", "FW", 3, 60, 1, "UPTO", 3}, `ERR unknown option "UPTO": the options are MS, RESERVE n and EACH`},
		{[]any{"LB.ENQUEUE", "q", 4, 1, 1, 1, "UPTO", 3}, `ERR unknown option "UPTO": the options are MS and LIMITS key field`},
		{[]any{"GCRA.THROTTLE", "g", 4, 5, 60, -1, "UPTO", 3}, "ERR UPTO asks for calls of a cost of 0 or more, not -1 (a refund takes no UPTO)"},
		{[]any{"TB.TAKE", "b", 4, 1, 1, 1, "UPTO", "x"}, "ERR UPTO must be an integer from 1 to 1000000"},
		{[]any{"FW.HIT", "f", 5, 60, "UPTO"}, "ERR UPTO needs a number: UPTO n, n from 1 to 1000000"},
		{[]any{"SL.HIT", "l", 3, 10, "XX"}, `ERR cost must be an integer from -9223372036854775808 to 9223372036854775807`},
		{[]any{"SW.HIT", "s", 3, 10, 1, "NX"}, `ERR unknown option "NX": the options are MS, RESERVE n, UPTO n, DEBT, SPREAD and LIMITS key field`},
	})
}
