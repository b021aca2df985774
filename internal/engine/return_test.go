package engine_test

import (
	"testing"
	"time"
)

// TestReturn: a negative cost on a window gives units back to the current
// window only, never below zero, never refused, and leaves no key behind
// when it gives back everything; a return in RL.ALL is all or nothing with
// the call's other limits. t0 is 20 s into a minute.
func TestReturn(t *testing.T) {
	runSteps(t, []step{
		// The fixed window: 5 a minute, 40 s of it left.
		{0, []any{"FW.HIT", "f", 5, 60, 4}, "[0 5 1 -1 40]"},
		{0, []any{"FW.PEEK", "f", 5, 60, -3}, "[0 5 4 -1 40]"}, // what a return would leave
		{0, []any{"GET", "f"}, "4"},
		{1 * time.Second, []any{"FW.HIT", "f", 5, 60, -3}, "[0 5 4 -1 39]"},
		{1 * time.Second, []any{"GET", "f"}, "1"},
		{1 * time.Second, []any{"FW.HIT", "f", 5, 60, 4}, "[0 5 0 -1 39]"}, // what came back is taken again
		{2 * time.Second, []any{"FW.HIT", "f", 5, 60, -2, "DEBT"}, "[0 5 2 -1 38]"},
		{3 * time.Second, []any{"FW.HIT", "f", 5, 60, -9223372036854775808}, "[0 5 5 -1 0]"},
		{3 * time.Second, []any{"PTTL", "f"}, "-2"}, // gone, not a 0 left behind
		{3 * time.Second, []any{"FW.HIT", "f", 5, 60, -1}, "[0 5 5 -1 0]"},
		{3 * time.Second, []any{"PTTL", "f"}, "-2"}, // nothing created
		// In the next window the count is a new one: units taken in the
		// last window are not given back to this one.
		{30 * time.Second, []any{"FW.HIT", "f2", 5, 60, 5}, "[0 5 0 -1 10]"},
		{41 * time.Second, []any{"FW.HIT", "f2", 5, 60, -5}, "[0 5 5 -1 0]"},

		// The sliding window: 3 in any 10 s, from t0 + 120 s, a window's start.
		{120 * time.Second, []any{"SW.HIT", "s", 3, 10, 3}, "[0 3 0 -1 20]"},
		{125 * time.Second, []any{"SW.HIT", "s", 3, 10, -2, "RESERVE", 1}, "[0 3 2 -1 15]"},
		{125 * time.Second, []any{"GET", "s"}, "170000012:1:0"},
		// One second into the next window the current count is empty: the
		// previous one stays, weighing ⌊1 × 9/10⌋ = 0.
		{131 * time.Second, []any{"SW.HIT", "s", 3, 10, -1}, "[0 3 3 -1 9]"},
		{131 * time.Second, []any{"GET", "s"}, "170000012:1:0"},
		{132 * time.Second, []any{"SW.HIT", "s2", 3, 10, 1}, "[0 3 2 -1 18]"},
		{133 * time.Second, []any{"SW.HIT", "s2", 3, 10, -1}, "[0 3 3 -1 0]"},
		{133 * time.Second, []any{"PTTL", "s2"}, "-2"},

		// The sliding log: 3 in any 10 s; a return removes the newest entries.
		{120 * time.Second, []any{"SL.HIT", "l", 3, 10, 2}, "[0 3 1 -1 10]"},
		{125 * time.Second, []any{"SL.HIT", "l", 3, 10, 1}, "[0 3 0 -1 10]"},
		{126 * time.Second, []any{"SL.HIT", "l", 3, 10, -1}, "[0 3 1 -1 4]"}, // the two at 120 s leave at 130 s
		{126 * time.Second, []any{"ZCARD", "l"}, "2"},
		{126 * time.Second, []any{"PTTL", "l"}, "4000"},
		{127 * time.Second, []any{"SL.HIT", "l", 3, 10, -5}, "[0 3 3 -1 0]"},
		{127 * time.Second, []any{"ZCARD", "l"}, "0"},
		{127 * time.Second, []any{"PTTL", "l"}, "-2"},

		// RL.ALL: a return beside a hit the other limit refuses is not made.
		{200 * time.Second, []any{"FW.HIT", "a", 5, 60, 3}, "[0 5 2 -1 20]"},
		{200 * time.Second, []any{"RL.ALL", 2, "a", "b", "FW", 5, 60, -3, "FW", 1, 60, 2}, "[1 1 1 -1 0 1]"},
		{200 * time.Second, []any{"GET", "a"}, "3"},
		{200 * time.Second, []any{"RL.ALL", 2, "a", "b", "FW", 5, 60, -3, "FW", 1, 60, 1}, "[0 1 0 -1 20 1]"},
		{200 * time.Second, []any{"PTTL", "a"}, "-2"},
		// A return adds no entries: it does not make room for more.
		{200 * time.Second, []any{"RL.ALL", 2, "x", "y", "SL", 100000, 10, -100000, "SL", 100000, 10, 100000}, "[0 100000 0 -1 10 1]"},
	}, []bad{
		{[]any{"FW.HIT", "f", 5, 60, -1, "UPTO", 3}, "ERR UPTO asks for calls of a cost of 0 or more, not -1 (a refund takes no UPTO)"},
		{[]any{"SW.HIT", "s", 3, 10, "-1x"}, "ERR cost must be an integer from -9223372036854775808 to 9223372036854775807"},
		{[]any{"RL.ALL", 3, "x", "y", "z", "SL", 100000, 10, 60000, "SL", 100000, 10, -60000, "SL", 100000, 10, 50000},
			"ERR the sliding logs of one call may add at most 100000 entries, not 110000: split the call"},
	})
}
