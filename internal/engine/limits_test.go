package engine_test

import "testing"

// TestLimits: LIMITS key field replaces a limit's parameters with those
// the hash holds in field, in every command that takes it, and leaves the
// call's when the hash or the field is absent; its errors name the hash and
// the field, and change nothing (a limiter's key, a string, is no hash).
// t0 is 20 s into a minute.
func TestLimits(t *testing.T) {
	runSteps(t, []step{
		{0, []any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:plan", "api"}, "[0 100 99 -1 40]"}, // no hash: the call's
		{0, []any{"HSET", "{a}:plan", "api", "3 60", "g", "1 2 60", "tb", " 10  1 60 ", "sl", "2 60", "sw", "5 10", "bad", "3", "huge", "9223372036854775808 60"}, "7"},
		{0, []any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:plan", "api"}, "[0 3 1 -1 40]"},  // 2 counted of 3
		{0, []any{"FW.PEEK", "{a}:k", 100, 60, "limits", "{a}:plan", "api"}, "[0 3 0 -1 40]"}, // what a hit of 1 would leave
		{0, []any{"FW.HIT", "{a}:k", 100, 60, 2, "LIMITS", "{a}:plan", "api", "MS"}, "[1 3 1 40000 40000]"},
		{0, []any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:plan", "none"}, "[0 100 97 -1 40]"}, // no such field
		{0, []any{"FW.HIT", "{a}:k", 100, 60, "RESERVE", 1, "LIMITS", "{a}:plan", "api"}, "[1 3 0 40 40]"},
		// GCRA 1 2 60: two at once, then one every 30 s.
		{0, []any{"GCRA.THROTTLE", "{a}:g", 9, 10, 60, "LIMITS", "{a}:plan", "g"}, "[0 2 1 -1 30]"},
		{0, []any{"GCRA.THROTTLE", "{a}:g", 9, 10, 60, "LIMITS", "{a}:plan", "g"}, "[0 2 0 -1 60]"},
		{0, []any{"GCRA.THROTTLE", "{a}:g", 9, 10, 60, "LIMITS", "{a}:plan", "g"}, "[1 2 0 30 60]"},
		{0, []any{"TB.TAKE", "{a}:tb", 100, 100, 60, 4, "LIMITS", "{a}:plan", "tb"}, "[0 10 6 -1 240]"}, // spaces around
		{0, []any{"SL.HIT", "{a}:sl", 100, 60, 2, "LIMITS", "{a}:plan", "sl"}, "[0 2 0 -1 60]"},
		// RL.ALL: LIMITS follows the limiter it overrides.
		{0, []any{"RL.ALL", 2, "{a}:x", "{a}:y", "FW", 100, 60, 1, "LIMITS", "{a}:plan", "api", "SW", 100, 10, 1, "LIMITS", "{a}:plan", "sw", "EACH"},
			"[0 3 2 -1 40 0 0 3 2 -1 40 0 5 4 -1 20]"},
		{0, []any{"RL.PEEK", 2, "{a}:x", "{a}:y", "FW", 100, 60, 3, "LIMITS", "{a}:plan", "api", "SW", 100, 10, 1}, "[1 3 2 40 40 0]"},
		// RL.HOLD and RL.SETTLE.
		{0, []any{"RL.HOLD", "{a}:h", "{a}:h:hold", 60, "FW", 100, 60, 2, "LIMITS", "{a}:plan", "api"}, "[0 3 1 -1 40]"},
		{0, []any{"RL.SETTLE", "{a}:h", "{a}:h:hold", "FW", 100, 60, 3, "LIMITS", "{a}:plan", "api"}, "[0 3 0 -1 40 2]"},
		// Cleared, the call's parameters decide again.
		{0, []any{"HDEL", "{a}:plan", "api"}, "1"},
		{0, []any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:plan", "api"}, "[0 100 96 -1 40]"},
	}, []bad{
		{[]any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:plan", "bad"},
			`ERR LIMITS "{a}:plan" field "bad" must hold 2 integers separated by spaces (limit window), not "3"; nothing changed`},
		{[]any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:plan", "g"},
			`ERR LIMITS "{a}:plan" field "g" must hold 2 integers separated by spaces (limit window), not "1 2 60"; nothing changed`},
		{[]any{"GCRA.THROTTLE", "{a}:g2", 1, 2, 60, "LIMITS", "{a}:plan", "sl"},
			`ERR LIMITS "{a}:plan" field "sl" must hold 3 integers separated by spaces (max_burst count period), not "2 60"; nothing changed`},
		{[]any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:plan", "huge"},
			`ERR LIMITS "{a}:plan" field "huge": limit must be an integer from 1 to 9007199254740991`},
		{[]any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:k", "api"}, `WRONGTYPE LIMITS "{a}:k" holds the wrong kind of value, not a hash of limits`},
		{[]any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:plan"}, `ERR LIMITS needs a hash's key and a field: LIMITS key field`},
		{[]any{"FW.HIT", "{a}:k", 100, 60, "LIMITS", "{a}:plan", "x", "LIMITS", "{a}:plan", "y"}, `ERR the option LIMITS is given twice`},
		{[]any{"FW.HIT", "{a}:k", 100, 60, "RESERVE", 6, "LIMITS", "{a}:plan", "sw"}, `ERR RESERVE must be an integer from 0 to 5 (the limit)`},
		{[]any{"CONC.ACQUIRE", "{a}:c", 2, 60, "id", "LIMITS", "{a}:plan", "api"},
			`ERR unknown option "LIMITS": the options are MS, RESERVE n and UPTO n`},
		{[]any{"RL.ALL", 2, "{a}:x", "{a}:y", "FW", 100, 60, 1, "GCRA", 1, 2, 60, 1, "LIMITS", "{a}:plan", "bad"},
			`ERR limiter 2 (GCRA): LIMITS "{a}:plan" field "bad" must hold 3 integers separated by spaces (max_burst count period), not "3"; nothing changed`},
		{[]any{"RL.ALL", 1, "{a}:x", "FW", 100, 60, 1, "LIMITS", "{a}:plan"}, `ERR limiter 1 (FW): LIMITS needs a hash's key and a field: LIMITS key field`},
		{[]any{"RL.ALL", 1, "{a}:x", "FW", 100, 60, 1, "LIMITS", "{a}:g", "sw"},
			`WRONGTYPE limiter 1 (FW): LIMITS "{a}:g" holds the wrong kind of value, not a hash of limits`},
		{[]any{"RL.HOLD", "{a}:h", "{a}:h:hold", 60, "FW", 100, 60, 2, "LIMITS", "{a}:plan", "huge"},
			`ERR LIMITS "{a}:plan" field "huge": limit must be an integer from 1 to 9007199254740991`},
	})
}
