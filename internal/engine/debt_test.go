package engine_test

import (
	"testing"
	"time"
)

// TestDebt: DEBT on each consuming command, step by step on a virtual clock
// (the shared fake Redis runs the engine and keeps the keys), at t0 20 s
// into a minute. A charge is taken whatever remains: past the limit the
// reply is limited 1, remaining 0, retry_after the time until one unit
// passes again, and every call is refused until the debt is paid off.
func TestDebt(t *testing.T) {
	runSteps(t, []step{
		// GCRA: 5 at once, one back every 12 s (τ = 60 s).
		{0, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 3, "DEBT"}, "[0 5 2 -1 36]"},                   // within the limit: as without DEBT
		{0, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 4, "debt"}, "[1 5 0 36 84]"},                   // 84 s ahead: 24 s of debt
		{0, []any{"GET", "g"}, "1700000084000000000:debt"},                                       // stored marked
		{0, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 0}, "[1 5 0 24 84]"},                           // a check of cost 0 waits out the debt
		{0, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 1}, "[1 5 0 36 84]"},                           // one unit, one interval more
		{35 * time.Second, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 1, "MS"}, "[1 5 0 1000 49000]"}, // a second early
		{36 * time.Second, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 1}, "[0 5 0 -1 60]"},            // paid off: admitted
		{36 * time.Second, []any{"GET", "g"}, "1700000096000000000"},                             // and stored unmarked
		{36 * time.Second, []any{"GCRA.THROTTLE", "g", 4, 5, 60, -2}, "[0 5 2 -1 36]"},
		// A charge above the limit, refused without DEBT, is taken with it;
		// a refund pays some of a debt back.
		{0, []any{"GCRA.THROTTLE", "g2", 4, 5, 60, 7}, "[1 5 5 -1 0]"},
		{0, []any{"GCRA.THROTTLE", "g2", 4, 5, 60, 10, "DEBT"}, "[1 5 0 72 120]"},
		{0, []any{"GCRA.THROTTLE", "g2", 4, 5, 60, -3}, "[0 5 0 -1 84]"},
		{0, []any{"GCRA.THROTTLE", "g2", 4, 5, 60, 0, "DEBT"}, "[1 5 0 24 84]"},
		{0, []any{"CL.THROTTLE", "g2", 4, 5, 60, 0}, "[1 5 0 24 84]"},
		// The token bucket: 4 tokens, one a second; 6 take it to -2.
		{0, []any{"TB.TAKE", "b", 4, 1, 1, 6, "DEBT"}, "[1 4 0 3 6]"},
		{2 * time.Second, []any{"TB.TAKE", "b", 4, 1, 1}, "[1 4 0 1 4]"},
		{3 * time.Second, []any{"TB.TAKE", "b", 4, 1, 1}, "[0 4 0 -1 4]"},
		// The fixed window: 5 a minute, 40 s of it left; the count passes
		// the limit and the next window starts empty.
		{120 * time.Second, []any{"FW.HIT", "f", 5, 60, 4}, "[0 5 1 -1 40]"},
		{120 * time.Second, []any{"FW.HIT", "f", 5, 60, 3, "DEBT"}, "[1 5 0 40 40]"},
		{120 * time.Second, []any{"GET", "f"}, "7"},
		{130 * time.Second, []any{"FW.HIT", "f", 5, 60, 0}, "[1 5 0 30 30]"},
		{160 * time.Second, []any{"FW.HIT", "f", 5, 60}, "[0 5 4 -1 60]"},
		{160 * time.Second, []any{"FW.HIT", "f2", 5, 60, 7, "DEBT"}, "[1 5 0 60 60]"},
		// The sliding window: 3 in any 10 s. 5 at a window's start weigh
		// in the next one until ⌊5 × (10 s − e)/10 s⌋ ≤ 2: just after 4 s.
		{120 * time.Second, []any{"SW.HIT", "s", 3, 10, 5, "DEBT"}, "[1 3 0 14 20]"},
		{120 * time.Second, []any{"GET", "s"}, "170000012:5:0"},
		{134 * time.Second, []any{"SW.HIT", "s", 3, 10, 1, "MS"}, "[1 3 0 1 6000]"},
		{135 * time.Second, []any{"SW.HIT", "s", 3, 10, 1}, "[0 3 0 -1 15]"},
		// The sliding log: 3 in any 10 s. A charge waits for the entries
		// over the limit to leave: the old ones, or its own.
		{120 * time.Second, []any{"SL.HIT", "l", 3, 10, 2}, "[0 3 1 -1 10]"},
		{125 * time.Second, []any{"SL.HIT", "l", 3, 10, 3, "DEBT"}, "[1 3 0 10 10]"},
		{125 * time.Second, []any{"SL.HIT", "l", 3, 10, 0}, "[1 3 0 5 10]"},
		{130 * time.Second, []any{"SL.HIT", "l", 3, 10, 1}, "[1 3 0 5 5]"},
		{135 * time.Second, []any{"SL.HIT", "l", 3, 10, 1}, "[0 3 2 -1 10]"},
		{120 * time.Second, []any{"SL.HIT", "l2", 3, 10, 2}, "[0 3 1 -1 10]"},
		{125 * time.Second, []any{"SL.HIT", "l2", 3, 10, 2, "DEBT"}, "[1 3 0 5 10]"},
		{130 * time.Second, []any{"SL.HIT", "l2", 3, 10, 1}, "[0 3 0 -1 10]"},
		// RL.ALL: every limit takes its charge; the one with the longest
		// wait decides.
		{200 * time.Second, []any{"RL.ALL", 2, "a1", "a2", "GCRA", 4, 5, 60, 3, "FW", 5, 60, 3, "DEBT"}, "[0 5 2 -1 36 0]"},
		{200 * time.Second, []any{"RL.ALL", 2, "a1", "a2", "GCRA", 4, 5, 60, 3, "FW", 5, 60, 3, "DEBT"}, "[1 5 0 24 72 0]"},
		{200 * time.Second, []any{"RL.ALL", 2, "a1", "a2", "GCRA", 4, 5, 60, 0, "FW", 5, 60, 0, "EACH"}, "[1 5 0 20 20 1 1 5 0 12 72 1 5 0 20 20]"},
		{200 * time.Second, []any{"GET", "a2"}, "6"},
		// A log holds at most its limit and 100000 entries: the first
		// charge of 100000 over a limit of 1 is taken, the second refused.
		{200 * time.Second, []any{"SL.HIT", "big", 1, 60, 100000, "DEBT"}, "[1 1 0 60 60]"},
	}, []bad{
		{[]any{"GCRA.THROTTLE", "g", 4, 5, 60, 1, "DEBT", "RESERVE", 1}, "ERR DEBT takes the whole cost whatever remains, so it does not go with RESERVE"},
		{[]any{"TB.TAKE", "b", 4, 1, 1, "UPTO", 2, "DEBT"}, "ERR DEBT takes the whole cost whatever remains, so it does not go with UPTO"},
		{[]any{"RL.ALL", 1, "a1", "GCRA", 4, 5, 60, 1, "RESERVE", 1, "DEBT"}, "ERR DEBT takes the whole cost whatever remains, so it does not go with RESERVE"},
		{[]any{"FW.HIT", "f", 5, 60, "DEBT", "DEBT"}, "ERR the option DEBT is given twice"},
		{[]any{"GCRA.PEEK", "g", 4, 5, 60, 1, "DEBT"}, `ERR unknown option "DEBT": the options are MS, RESERVE n and LIMITS key field`},
		{[]any{"GCRA.PEEK", "g", 4, 5, 60, "DEBT"}, `ERR unknown option "DEBT": the options are MS, RESERVE n and LIMITS key field`},
		{[]any{"RL.PEEK", 1, "a", "FW", 3, 60, 1, "DEBT"}, `ERR unknown option "DEBT": the options are MS, RESERVE n and EACH`},
		{[]any{"LB.ENQUEUE", "q", 4, 1, 1, 1, "DEBT"}, `ERR unknown option "DEBT": the options are MS and LIMITS key field`},
		{[]any{"SL.HIT", "new", 3, 10, 100001, "DEBT"}, "ERR the sliding logs of one call may add at most 100000 entries, not 100001: split the call"},
		{[]any{"SL.HIT", "big", 1, 60, 100000, "DEBT"}, "ERR DEBT cannot take a charge of 100000: the limiter's state would pass the most it holds (the year 2262, 2^63 - 1 units, or a sliding log's limit plus 100000 entries); nothing was taken"},
		{[]any{"RL.ALL", 2, "n1", "n2", "SL", 3, 10, 60000, "SL", 3, 10, 60000, "DEBT"}, "ERR the sliding logs of one call may add at most 100000 entries, not 120000: split the call"},
	})
}

// TestDebtPast2262 (issue 44): a charge whose state would pass what it
// holds is taken up to it, not refused. A schedule (GCRA, the token
// bucket) stops at the largest instant an int64 holds, 2^63 − 1 ns
// (2262-04-11T23:47:16.854775807Z), stored marked and expiring at
// 9223372036855 ms; a window's count stops at 2^63 − 1. Each refuses until
// then, more charges leave it there, and the key is read back as state.
// These charges were refused with DEBT's error before. The clock is t0 +
// 200 s, 7,523,371,836.854775807 s before 2^63 − 1 ns.
func TestDebtPast2262(t *testing.T) {
	const most = "9223372036854775807"
	s := 200 * time.Second
	runSteps(t, []step{
		// GCRA, 5 at once, one back every 12 s (τ = 60 s).
		{s, []any{"GCRA.THROTTLE", "g", 4, 5, 60, most, "DEBT"}, "[1 5 0 7523371789 7523371837]"}, // one unit 48 s before 2262
		{s, []any{"GET", "g"}, most + ":debt"},
		{s, []any{"PTTL", "g"}, "7523371836855"}, // the key expires at 9223372036855 ms
		{s, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 0}, "[1 5 0 7523371777 7523371837]"},
		{s, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 1, "DEBT", "MS"}, "[1 5 0 7523371788855 7523371836855]"}, // still there
		{s, []any{"GET", "g"}, most + ":debt"},
		{s, []any{"CL.THROTTLE", "g", 4, 5, 60, -3}, "[0 5 0 -1 7523371801]"}, // a refund pays 36 s back
		{s, []any{"GET", "g"}, "9223372000854775807:debt"},
		{s, []any{"GCRA.PEEK", "g", 4, 5, 60}, "[1 5 0 7523371753 7523371801]"},
		{s, []any{"GCRA.THROTTLE", "g", 4, 5, 60, 1000000000, "DEBT"}, "[1 5 0 7523371789 7523371837]"}, // back to 2262
		// The token bucket: 4 tokens, one a second.
		{s, []any{"TB.TAKE", "b", 4, 1, 1, most, "DEBT"}, "[1 4 0 7523371834 7523371837]"},
		{s, []any{"TB.TAKE", "b", 4, 1, 1, 5, "DEBT"}, "[1 4 0 7523371834 7523371837]"},
		{s, []any{"GET", "b"}, most + ":debt"},
		{s, []any{"TB.PEEK", "b", 4, 1, 1, 0, "MS"}, "[1 4 0 7523371832855 7523371836855]"},
		// The fixed window: 5 a minute, 20 s of it left.
		{s, []any{"FW.HIT", "f", 5, 60, 3}, "[0 5 2 -1 20]"},
		{s, []any{"FW.HIT", "f", 5, 60, most, "DEBT"}, "[1 5 0 20 20]"},
		{s, []any{"GET", "f"}, most},
		{s, []any{"FW.HIT", "f", 5, 60, 1, "DEBT"}, "[1 5 0 20 20]"},
		{s, []any{"GET", "f"}, most},
		{s + 20*time.Second, []any{"FW.HIT", "f", 5, 60}, "[0 5 4 -1 60]"}, // the next window starts empty
		// The sliding window: 5 a minute, 20 s of this window left; the
		// count weighs on the next window until it ends.
		{s, []any{"SW.HIT", "w", 5, 60, most, "DEBT"}, "[1 5 0 80 80]"},
		{s, []any{"SW.HIT", "w", 5, 60, 1, "DEBT"}, "[1 5 0 80 80]"},
		{s, []any{"GET", "w"}, "28333336:" + most + ":0"},
		{s + 79*time.Second, []any{"SW.HIT", "w", 5, 60, 0}, "[1 5 0 1 1]"},
		{s + 80*time.Second, []any{"SW.HIT", "w", 5, 60}, "[0 5 4 -1 120]"},
		// RL.ALL: the GCRA's debt decides; the window's unit is counted.
		{s, []any{"RL.ALL", 2, "a1", "n2", "GCRA", 4, 5, 60, most, "FW", 5, 60, 1, "DEBT"}, "[1 5 0 7523371789 7523371837 0]"},
		{s, []any{"GET", "n2"}, "1"},
		{s, []any{"GET", "a1"}, most + ":debt"},
	}, []bad{
		// τ from now past 2262 (292 years): the arguments cannot be
		// computed, whether the call is admitted or a debt.
		{[]any{"GCRA.THROTTLE", "slow", 0, 1, 9223372036, 1, "DEBT"}, "ERR arguments overflow 64-bit nanoseconds: (max_burst + 1) x period / count is too long (the limiter's state would lie beyond the year 2262)"},
		{[]any{"GCRA.THROTTLE", "slow", 0, 1, 9223372036, 2, "DEBT"}, "ERR arguments overflow 64-bit nanoseconds: (max_burst + 1) x period / count is too long (the limiter's state would lie beyond the year 2262)"},
		{[]any{"TB.TAKE", "slow", 2, 1, 4611686018, 3, "DEBT"}, "ERR arguments overflow 64-bit nanoseconds: capacity x period / count is too long (the state would lie beyond the year 2262)"},
	})
}
