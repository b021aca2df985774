package engine_test

import (
	"testing"
	"time"
)

// TestSpread: SPREAD starts a key's windows at its offset (the first 13 hex
// digits of the key's SHA-1 modulo the window in ms: "user:42" is 55114 ms
// into a minute; "p2" 35799 ms, "a" 27834 ms, "b" 1842
// ms into 10 s, "h" 50215 ms), step by step from t0, 20 s into a minute.
func TestSpread(t *testing.T) {
	runSteps(t, []step{
		// The fixed window of "user:42" runs from hh:mm:55.114: at hh:mm:20
		// 35.114 s of it are left.
		{0, []any{"FW.HIT", "user:42", 2, 60, 1, "SPREAD", "MS"}, "[0 2 1 -1 35114]"},
		{0, []any{"PTTL", "user:42"}, "35114"},
		{0, []any{"FW.HIT", "user:42", 2, 60, "spread", "MS"}, "[0 2 0 -1 35114]"},
		{35113 * time.Millisecond, []any{"FW.HIT", "user:42", 2, 60, 1, "MS", "SPREAD"}, "[1 2 0 1 1]"},
		{35113 * time.Millisecond, []any{"FW.PEEK", "user:42", 2, 60, 0, "SPREAD", "MS"}, "[0 2 0 -1 1]"},
		{35114 * time.Millisecond, []any{"FW.HIT", "user:42", 2, 60, "SPREAD", "MS"}, "[0 2 1 -1 60000]"}, // the next window starts empty
		{35114 * time.Millisecond, []any{"PTTL", "user:42"}, "60000"},
		// Unspread, a minute ends at hh:(mm+1):00; spread, the minute of "p2"
		// ends at hh:mm:35.799.
		{0, []any{"FW.HIT", "p", 2, 60, "MS"}, "[0 2 1 -1 40000]"},
		{0, []any{"FW.HIT", "p2", 2, 60, "SPREAD", "MS"}, "[0 2 1 -1 15799]"},
		// The sliding window of "sw:user:42" over 10 s, offset 3022 ms:
		// index 169999999 (its window started 6.978 s before t0), the counts
		// kept until the next window's end, 13.022 s on.
		{0, []any{"SW.HIT", "sw:user:42", 3, 10, 1, "SPREAD", "MS"}, "[0 3 2 -1 13022]"},
		{0, []any{"GET", "sw:user:42"}, "169999999:1:0"},
		{3022 * time.Millisecond, []any{"SW.HIT", "sw:user:42", 3, 10, 2, "SPREAD", "MS"}, "[0 3 0 -1 20000]"},
		{3022 * time.Millisecond, []any{"GET", "sw:user:42"}, "170000000:2:1"},
		// RL.ALL: SPREAD follows the limiter it spreads.
		{0, []any{"RL.ALL", 2, "a", "b", "FW", 2, 60, 1, "SPREAD", "SW", 3, 10, 1, "spread", "MS", "EACH"},
			"[0 2 1 -1 7834 0 0 2 1 -1 7834 0 3 2 -1 11842]"},
		{0, []any{"RL.PEEK", 2, "a", "b", "FW", 2, 60, 1, "SPREAD", "SW", 3, 10, 1, "MS"}, "[0 2 0 -1 7834 0]"},
		// RL.HOLD and RL.SETTLE on a spread window: 30.215 s of the minute of
		// "h" are left.
		{0, []any{"RL.HOLD", "h", "h:hold", 60, "FW", 5, 60, 2, "SPREAD", "MS"}, "[0 5 3 -1 30215]"},
		{0, []any{"RL.SETTLE", "h", "h:hold", "FW", 5, 60, 1, "SPREAD", "MS"}, "[0 5 4 -1 30215 2]"},
	}, []bad{
		{[]any{"GCRA.THROTTLE", "g", 4, 5, 60, "SPREAD"}, `ERR unknown option "SPREAD": the options are MS, RESERVE n, UPTO n, DEBT and LIMITS key field`},
		{[]any{"SL.HIT", "l", 2, 60, "SPREAD"}, `ERR unknown option "SPREAD": the options are MS, RESERVE n, UPTO n, DEBT and LIMITS key field`},
		{[]any{"FW.PEEK", "f", 2, 60, "SPREAD", "UPTO", 2}, `ERR unknown option "UPTO": the options are MS, RESERVE n, SPREAD, SPAN start end next and LIMITS key field`},
		{[]any{"FW.HIT", "f", 2, 60, "SPREAD", "spread"}, `ERR the option SPREAD is given twice`},
		{[]any{"FW.HIT", "f", 2, 1000000001, "SPREAD"}, `ERR SPREAD shifts windows of 1 to 1000000000 seconds, not 1000000001`},
		{[]any{"SW.HIT", "f", 2, 60, "SPREAD", 1}, `ERR unknown option "1": the options are MS, RESERVE n, UPTO n, DEBT, SPREAD and LIMITS key field`},
		{[]any{"RL.ALL", 1, "g", "GCRA", 4, 5, 60, 1, "SPREAD"}, `ERR limiter 1 (GCRA): SPREAD follows a fixed or sliding window (FW, SW) only`},
		{[]any{"RL.ALL", 2, "a", "b", "FW", 2, 60, 1, "SPREAD", "SPREAD", "SW", 3, 10, 1}, `ERR the option SPREAD is given twice`},
		{[]any{"RL.ALL", 2, "a", "b", "FW", 2, 60, 1, "SW", 3, 1000000001, 1, "SPREAD"},
			`ERR limiter 2 (SW): SPREAD shifts windows of 1 to 1000000000 seconds, not 1000000001`},
		{[]any{"RL.HOLD", "h", "h:hold", 60, "TB", 5, 1, 60, 2, "SPREAD"}, `ERR limiter 1 (TB): SPREAD follows a fixed or sliding window (FW, SW) only`},
	})
}
