package spec

import (
	"fmt"
	"strings"
)

// TextID names one of the error texts both engines reply.
type TextID int

// The texts, by what they refuse.
const (
	TRange          TextID = iota // an integer argument outside its range
	TSeconds                      // a time argument outside its range
	TReserveRange                 // RESERVE's n outside 0 to the limit
	TReserveWord                  // RESERVE without its n
	TUpToRange                    // UPTO's n outside 1 to MaxUpTo
	TUpToWord                     // UPTO without its n
	TUpToRefund                   // UPTO with a negative cost
	TDebtWith                     // DEBT with RESERVE or UPTO
	TDebtRange                    // a charge past what the state holds
	TUnknownOption                // an option the command does not take
	TTwice                        // an option given twice
	TNumKeys                      // numkeys outside its range
	TNumKeysArgs                  // numkeys past the arguments (the module's; FCALL checks its own)
	TKeyTwice                     // one key named twice in RL.ALL
	TFewLimiters                  // fewer limiters than keys
	TManyLimiters                 // more limiters than keys
	TUnknownLimiter               // a limiter of no family RL.ALL takes
	TShaperNotInAll               // LB in RL.ALL
	TLimiterWords                 // a limiter short of its arguments
	TLogAdd                       // sliding logs adding too many entries in one call
	TLimiterPrefix                // what names RL.ALL's limiter in an argument's error
	TLimiterWhere                 // what names RL.ALL's limiter and key in its key's error
	TWrongTypeWhere               // a limiter's key of another type, in RL.ALL
	TID                           // a holder id too long or empty
	TLease                        // a lease ending past what a sorted-set score holds
	TOtherData                    // a key holding something else than the limiter's state
	THold                         // a hold key holding something else than a hold
	THoldFull                     // holds under one key adding up past MaxLimit
	TSpreadWindow                 // SPREAD on a window too long to shift
	TSpreadFamily                 // SPREAD after a limiter that has no windows
	TSpan                         // SPAN's instants out of order or range
	TSpanFamily                   // SPAN after a limiter other than FW
	TSpanSpread                   // SPAN with SPREAD
	TSpanPast                     // SPAN's windows over by the server's clock
	TLimits                       // LIMITS without its key and field
	TLimitsPrefix                 // what names a LIMITS field in its value's error
	TLimitsWords                  // a LIMITS field not holding the family's arguments
	TLimitsType                   // a LIMITS key that is not a hash
	NumTexts
)

// Texts are the error texts both engines reply, declared once: each {} is
// filled, in order, with one argument (Fill; the Lua engine's text(), whose
// templates package lua writes from these as T_<Lua>).
var Texts = [NumTexts]struct{ Lua, Template string }{
	TRange:        {"RANGE", "ERR {}{} must be an integer from {} to {}"},
	TSeconds:      {"SECONDS", "ERR {}{} must be whole seconds from {} to {}"},
	TReserveRange: {"RESERVE_RANGE", "ERR {}RESERVE must be an integer from 0 to {} (the limit)"},
	TReserveWord:  {"RESERVE_WORD", "ERR RESERVE needs a number: RESERVE n, n from 0 to the limit"},
	TUpToRange:    {"UPTO_RANGE", "ERR UPTO must be an integer from 1 to {}"},
	TUpToWord:     {"UPTO_WORD", "ERR UPTO needs a number: UPTO n, n from 1 to {}"},
	TUpToRefund:   {"UPTO_REFUND", "ERR {}UPTO asks for calls of a cost of 0 or more, not {} (a refund takes no UPTO)"},
	TDebtWith:     {"DEBT_WITH", "ERR DEBT takes the whole cost whatever remains, so it does not go with {}"},
	TDebtRange: {"DEBT_RANGE", "ERR DEBT cannot take a charge of {}: the limiter's state would pass the most it holds " +
		"(the year 2262, 2^63 - 1 units, or a sliding log's limit plus 100000 entries); nothing was taken"},
	TUnknownOption:  {"UNKNOWN_OPTION", "ERR unknown option {}: the options are {}"},
	TTwice:          {"TWICE", "ERR the option {} is given twice"},
	TNumKeys:        {"NUMKEYS", "ERR numkeys must be an integer from 1 to {}"},
	TNumKeysArgs:    {"NUMKEYS_ARGS", "ERR numkeys is {} but {} arguments follow it"},
	TKeyTwice:       {"KEY_TWICE", "ERR key {} is named twice: each limiter needs a key of its own"},
	TFewLimiters:    {"FEW_LIMITERS", "ERR numkeys is {} but {} limiters follow the keys"},
	TManyLimiters:   {"MANY_LIMITERS", "ERR numkeys is {} but more limiters follow"},
	TUnknownLimiter: {"UNKNOWN_LIMITER", "ERR unknown limiter {} for key {}: the limiters are {}"},
	TShaperNotInAll: {"SHAPER_NOT_IN_ALL", "ERR limiter {}: LB is a shaper (it answers with a delay) and is not part of RL.ALL"},
	TLimiterWords:   {"LIMITER_WORDS", "ERR limiter {} ({}) takes {} arguments: {}"},
	TLogAdd:         {"LOG_ADD", "ERR the sliding logs of one call may add at most {} entries, not {}: split the call"},
	TLimiterPrefix:  {"LIMITER_PREFIX", "limiter {} ({}): "},
	TLimiterWhere:   {"LIMITER_WHERE", "limiter {} ({}, key {})"},
	TWrongTypeWhere: {"WRONGTYPE_WHERE", "WRONGTYPE {}: the key holds the wrong kind of value"},
	TID:             {"ID", "ERR id must be 1 to {} bytes (a request id), not {}"},
	TLease: {"LEASE", "ERR lease must end before the year 2255 (2^53 microseconds, the largest sorted-set score " +
		"held exactly): at most {} seconds from now"},
	TOtherData:    {"OTHER_DATA", "ERR the key holds other data, not {}: {}; the limiter changed nothing (use a key prefix per limiter)"},
	THold:         {"HOLD", "ERR the hold key {} holds other data, not a hold (an estimate from 0 to {}); nothing changed"},
	THoldFull:     {"HOLD_FULL", "ERR the hold key {} holds {}: {} more would pass {}; nothing was taken"},
	TSpreadWindow: {"SPREAD_WINDOW", "ERR {}SPREAD shifts windows of 1 to {} seconds, not {}"},
	TSpreadFamily: {"SPREAD_FAMILY", "ERR limiter {} ({}): SPREAD follows a fixed or sliding window (FW, SW) only"},
	TSpan: {"SPAN", "ERR {}SPAN needs start end next: Unix ms with 0 <= start < end < next <= {}, " +
		"each span (end - start, next - end) at most window seconds"},
	TSpanFamily:   {"SPAN_FAMILY", "ERR limiter {} ({}): SPAN follows a fixed window (FW) only"},
	TSpanSpread:   {"SPAN_SPREAD", "ERR {}SPAN gives the window's bounds, so it does not go with SPREAD"},
	TSpanPast:     {"SPAN_PAST", "ERR SPAN's windows ended at {} ms, before the server's time {} ms: compute them from a clock nearer the server's"},
	TLimits:       {"LIMITS", "ERR {}LIMITS needs a hash's key and a field: LIMITS key field"},
	TLimitsPrefix: {"LIMITS_PREFIX", "LIMITS {} field {}: "},
	TLimitsWords: {"LIMITS_WORDS", "ERR {}LIMITS {} field {} must hold {} integers separated by spaces ({}), " +
		"not {}; nothing changed"},
	TLimitsType: {"LIMITS_TYPE", "WRONGTYPE {}LIMITS {} holds the wrong kind of value, not a hash of limits"},
}

// Fill is text t with its holes filled by args, in order (fmt.Sprint of
// each): Fill(TNumKeys, 16) is "ERR numkeys must be an integer from 1 to 16".
func Fill(t TextID, args ...any) string {
	tpl := Texts[t].Template
	var b strings.Builder
	for _, a := range args {
		i := strings.Index(tpl, "{}")
		if i < 0 {
			break
		}
		b.WriteString(tpl[:i])
		fmt.Fprint(&b, a)
		tpl = tpl[i+2:]
	}
	b.WriteString(tpl)
	return b.String()
}
