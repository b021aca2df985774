package engine

import (
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
	"github.com/seed-6b3823f5/ratelimit/window"
)

// arg is one integer argument and its accepted range.
type arg struct {
	name     string
	min, max int64
	seconds  bool // a time in whole seconds
}

// parse reads s as this argument: an integer within its range. On false
// the caller replies rangeError (built only then: it allocates).
func (a arg) parse(s string) (int64, bool) {
	v, ok := parseInt(s)
	return v, ok && v >= a.min && v <= a.max
}

// rangeError names the argument and its accepted range; prefix, when set,
// names the limiter it belongs to.
func (a arg) rangeError(prefix string) string {
	if a.seconds {
		return spec.Fill(spec.TSeconds, prefix, a.name, a.min, a.max)
	}
	return spec.Fill(spec.TRange, prefix, a.name, a.min, a.max)
}

// argOf is the table's argument a.
func argOf(a spec.Arg) arg { return arg{name: a.Name, min: a.Min, max: a.Max, seconds: a.Seconds} }

// maxOneKeyArgs is the most arguments a command of one key takes, command
// name included (options may repeat).
const maxOneKeyArgs = spec.MaxOneKeyArgs

// syntax is a limiter's arguments after the key: positional integers,
// then one optional integer (the cost), then options in any order: MS,
// RESERVE n where reserve is set, and UPTO n where upto is (its consuming
// command's).
type syntax struct {
	positional []arg
	optional   arg
	def        int64 // the optional argument's default
	reserve    bool  // RESERVE n is an option
	upto       bool  // UPTO n is an option of the consuming command
	debt       bool  // DEBT is an option of the consuming command
	spread     bool  // SPREAD is an option
	span       bool  // SPAN start end next is an option
	// the options' names, for errors: the peek's, the consuming command's
	options, uptoOptions string
}

// syntaxOf is family f's syntax.
func syntaxOf(f *spec.Family) *syntax {
	s := &syntax{optional: argOf(f.Cost), def: f.Def, reserve: f.Reserve, upto: f.UpTo, debt: f.Debt, spread: f.Spread, span: f.Span, options: f.Options(), uptoOptions: f.UpToOptions()}
	for _, a := range f.Args {
		s.positional = append(s.positional, argOf(a))
	}
	return s
}

// parse fills l and ms from a command of one key: args are the command
// name, the key, the arguments; upto, where not nil (a consuming command),
// receives UPTO's n (0 when absent), and l.debt is DEBT; r gives LIMITS's
// field. The error is the reply.
func (s *syntax) parse(args []string, l *limit, ms *bool, upto *int64, r Reader) error {
	i := 2 + len(s.positional)
	if len(args) < i || len(args) > maxOneKeyArgs {
		return errArity
	}
	if err := s.parseNumbers(args[2:i], l, -1); err != nil {
		return err
	}
	l.v[len(s.positional)] = s.def
	if i < len(args) && !isWord(args[i]) {
		v, ok := s.optional.parse(args[i])
		if !ok {
			return fail(s.optional.rangeError(""))
		}
		l.v[len(s.positional)] = v
		i++
	}
	reserveAt, uptoAt, names := 0, 0, s.options
	var at *int
	var debt *bool
	if upto != nil && s.upto {
		at, names = &uptoAt, s.uptoOptions
	}
	if upto != nil && s.debt {
		debt = &l.debt
	}
	var spread *bool
	if s.spread {
		spread = new(bool)
	}
	spanAt := 0
	var span *int
	if s.span {
		span = &spanAt
	}
	limitsAt := 0
	if err := parseOptions(args, i, s.reserve, names, ms, &reserveAt, nil, at, debt, spread, span, &limitsAt); err != nil {
		return err
	}
	if err := debtWith(l.debt, reserveAt, uptoAt); err != nil {
		return err
	}
	if limitsAt > 0 {
		if err := l.override(args, limitsAt, r, -1); err != nil {
			return err
		}
	}
	if spread != nil && *spread || spanAt > 0 {
		if err := l.setBounds(args, spread != nil && *spread, spanAt, args[1], -1); err != nil {
			return err
		}
	}
	if l.debt && l.family == famSL && *l.cost() > maxLogAdd {
		return fail(spec.Fill(spec.TLogAdd, maxLogAdd, *l.cost()))
	}
	if uptoAt > 0 {
		n, err := parseUpTo(args[uptoAt], *l.cost(), "")
		if err != nil {
			return err
		}
		*upto = n
	}
	if reserveAt == 0 {
		return nil
	}
	return l.setReserve(args[reserveAt], -1)
}

// debtWith refuses DEBT beside RESERVE or UPTO: a charge takes its whole
// cost whatever remains, so it keeps no reserve and asks for no grant.
func debtWith(debt bool, reserveAt, uptoAt int) error {
	switch {
	case !debt:
	case reserveAt > 0:
		return fail(spec.Fill(spec.TDebtWith, "RESERVE"))
	case uptoAt > 0:
		return fail(spec.Fill(spec.TDebtWith, "UPTO"))
	}
	return nil
}

// parseUpTo reads UPTO's n, 1 to MaxUpTo, for a call of cost (a refund
// takes none); errors start with prefix.
func parseUpTo(s string, cost int64, prefix string) (int64, error) {
	n, ok := parseInt(s)
	switch {
	case !ok || n < 1 || n > ratelimit.MaxUpTo:
		return 0, fail(spec.Fill(spec.TUpToRange, ratelimit.MaxUpTo))
	case cost < 0:
		return 0, fail(spec.Fill(spec.TUpToRefund, prefix, cost))
	}
	return n, nil
}

// parseNumbers reads the positional arguments into l.v; errors name the
// limiter when it is RL.ALL's n-th (n ≥ 0).
func (s *syntax) parseNumbers(args []string, l *limit, n int) error {
	for j, a := range s.positional {
		v, ok := a.parse(args[j])
		if !ok {
			return fail(a.rangeError(l.prefix(n)))
		}
		l.v[j] = v
	}
	return nil
}

// prefix names RL.ALL's n-th limiter in errors ("" for a command of one
// key, n < 0).
func (l *limit) prefix(n int) string {
	if n < 0 {
		return ""
	}
	return spec.Fill(spec.TLimiterPrefix, n+1, families[l.family].name)
}

// parseOptions reads the options from args[i:]: MS, RESERVE n when
// allowed, EACH when each is not nil, UPTO n when uptoAt is not nil, DEBT
// when debt is not nil, SPREAD when spread is not nil and SPAN start end
// next when spanAt is not nil, LIMITS key field when limitsAt is not nil.
// reserveAt and uptoAt are set to the index of their n (0 when absent),
// spanAt to SPAN's start's, limitsAt to LIMITS's key's.
func parseOptions(args []string, i int, allowed bool, names string, ms *bool, reserveAt *int, each *bool, uptoAt *int, debt, spread *bool, spanAt, limitsAt *int) error {
	for ; i < len(args); i++ {
		switch {
		case limitsAt != nil && isLimits(args[i]):
			if *limitsAt > 0 {
				return twice("LIMITS")
			}
			if i+2 >= len(args) {
				return fail(spec.Fill(spec.TLimits, ""))
			}
			*limitsAt = i + 1
			i += 2
		case spanAt != nil && isSpan(args[i]):
			if *spanAt > 0 {
				return twice("SPAN")
			}
			if i+3 >= len(args) {
				return fail(spec.Fill(spec.TSpan, "", maxSpanMs))
			}
			*spanAt = i + 1
			i += 3
		case spread != nil && isSpread(args[i]):
			if *spread {
				return twice("SPREAD")
			}
			*spread = true
		case isOption(args[i]):
			if *ms {
				return twice("MS")
			}
			*ms = true
		case each != nil && spec.EqualFold(args[i], "EACH"):
			if *each {
				return twice("EACH")
			}
			*each = true
		case debt != nil && spec.EqualFold(args[i], "DEBT"):
			if *debt {
				return twice("DEBT")
			}
			*debt = true
		case allowed && isReserve(args[i]):
			if *reserveAt > 0 {
				return twice("RESERVE")
			}
			if i+1 >= len(args) {
				return fail(spec.Fill(spec.TReserveWord))
			}
			i++
			*reserveAt = i
		case uptoAt != nil && isUpTo(args[i]):
			if *uptoAt > 0 {
				return twice("UPTO")
			}
			if i+1 >= len(args) {
				return fail(spec.Fill(spec.TUpToWord, ratelimit.MaxUpTo))
			}
			i++
			*uptoAt = i
		default:
			return fail(spec.Fill(spec.TUnknownOption, quote(args[i]), names))
		}
	}
	return nil
}

// twice refuses an option given twice: which of the two was meant?
func twice(name string) error { return fail(spec.Fill(spec.TTwice, name)) }

// setReserve reads RESERVE's n, 0 to the limit; errors name the limiter
// when it is RL.ALL's j-th (j ≥ 0).
func (l *limit) setReserve(s string, j int) error {
	n, err := parseReserve(s, l.limit(), l.prefix(j))
	l.reserve = n
	return err
}

// parseReserve reads RESERVE's n, 0 to max (the limit); errors start with
// prefix.
func parseReserve(s string, max int64, prefix string) (int64, error) {
	n, ok := parseInt(s)
	if !ok || n < 0 || n > max {
		return 0, fail(spec.Fill(spec.TReserveRange, prefix, max))
	}
	return n, nil
}

// parseInt accepts base-10 signed 64-bit integers: an optional sign, then
// digits. Spaces, decimals, exponents, hex, underscores, empty strings and
// out-of-range values are refused.
func parseInt(s string) (int64, bool) {
	neg := false
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	for len(s) > 1 && s[0] == '0' {
		s = s[1:] // leading zeros, as strconv accepts them
	}
	if len(s) > 19 {
		return 0, false
	}
	var u uint64
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return 0, false
		}
		u = u*10 + uint64(d) // 19 digits fit a uint64
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// isOption reports whether s is the MS option, in any case.
func isOption(s string) bool { return spec.EqualFold(s, "MS") }

// isReserve reports whether s is the RESERVE option, in any case.
func isReserve(s string) bool { return spec.EqualFold(s, "RESERVE") }

// isUpTo reports whether s is the UPTO option, in any case.
func isUpTo(s string) bool { return spec.EqualFold(s, "UPTO") }

// isSpread reports whether s is the SPREAD option, in any case.
func isSpread(s string) bool { return spec.EqualFold(s, "SPREAD") }

// isSpan reports whether s is the SPAN option, in any case.
func isSpan(s string) bool { return spec.EqualFold(s, "SPAN") }

// isLimits reports whether s is the LIMITS option, in any case.
func isLimits(s string) bool { return spec.EqualFold(s, "LIMITS") }

// override replaces l's parameters by those the LIMITS key field at
// args[at], args[at+1] holds (r reads it, in the call's atomic step), when the hash holds
// the field: the family's positional arguments as integers separated by
// spaces, each within its range ("100 60" for FW's limit window). Without
// the key or the field, the call's stand. Errors name the hash and the
// field, and RL.ALL's n-th limiter (n ≥ 0).
func (l *limit) override(args []string, at int, r Reader, n int) error {
	v, kind := r.Limits(at)
	switch kind {
	case LimitsAbsent:
		return nil
	case LimitsWrongType:
		return &failure{ActWrongType, spec.Fill(spec.TLimitsType, l.prefix(n), quote(args[at]))}
	case LimitsFound:
	default:
		return fail("ERR internal error: the LIMITS key was not read")
	}
	syn := families[l.family].syntax
	var words [maxWords]string
	k := 0
	for i := 0; i < len(v); {
		if v[i] == ' ' {
			i++
			continue
		}
		j := i
		for j < len(v) && v[j] != ' ' {
			j++
		}
		if k < len(words) {
			words[k] = v[i:j]
		}
		k++
		i = j
	}
	if k != len(syn.positional) {
		return fail(spec.Fill(spec.TLimitsWords, l.prefix(n), quote(args[at]), quote(args[at+1]), len(syn.positional), positionalNames(syn), quote(v)))
	}
	for j, a := range syn.positional {
		x, ok := a.parse(words[j])
		if !ok {
			return fail(a.rangeError(l.prefix(n) + spec.Fill(spec.TLimitsPrefix, quote(args[at]), quote(args[at+1]))))
		}
		l.v[j] = x
	}
	return nil
}

// maxSpanMs is the latest instant SPAN names: 2^63 − 1 ns, in whole ms.
const maxSpanMs = spec.MaxSeconds * 1000

// setBounds sets where l's windows lie, for a limit on key: spread (SPREAD)
// at key's offset, or SPAN's three instants at args[spanAt] (spanAt > 0);
// errors name RL.ALL's n-th limiter (n ≥ 0).
func (l *limit) setBounds(args []string, spread bool, spanAt int, key string, n int) error {
	switch {
	case spread && spanAt > 0:
		return fail(spec.Fill(spec.TSpanSpread, l.prefix(n)))
	case spread:
		return l.setSpread(key, n)
	case spanAt > 0:
		return l.setSpan(args[spanAt:spanAt+3], n)
	}
	return nil
}

// setSpan reads SPAN's start end next: Unix ms, 0 ≤ start < end < next ≤
// maxSpanMs, each span at most the window.
func (l *limit) setSpan(a []string, n int) error {
	var v [3]int64
	ok := true
	for i := range v {
		var okI bool
		v[i], okI = parseInt(a[i])
		ok = ok && okI
	}
	w := l.fw().window * 1000 // ≤ maxSpanMs
	if !ok || v[0] < 0 || v[0] >= v[1] || v[1] >= v[2] || v[2] > maxSpanMs || v[1]-v[0] > w || v[2]-v[1] > w {
		return fail(spec.Fill(spec.TSpan, l.prefix(n), maxSpanMs))
	}
	l.bounds = v
	return nil
}

// isWord reports an option's word where a number may stand (MS, RESERVE,
// UPTO, DEBT, SPREAD, SPAN, LIMITS): never read as a cost or a limiter.
func isWord(s string) bool {
	return isOption(s) || isReserve(s) || isUpTo(s) || spec.EqualFold(s, "DEBT") || isSpread(s) || isSpan(s) || isLimits(s)
}

// setSpread starts the windows of l, a window limit on key, at key's
// offset (window.SpreadOffset); errors name RL.ALL's n-th limiter (n ≥ 0).
func (l *limit) setSpread(key string, n int) error {
	w := l.fw().window // SW's arguments are FW's
	if w > spec.MaxSpreadWindow {
		return fail(spec.Fill(spec.TSpreadWindow, l.prefix(n), spec.MaxSpreadWindow, w))
	}
	l.spread, l.bounds[0] = true, window.SpreadOffset(key, w)*int64(time.Millisecond)
	return nil
}

// quote shows untrusted input in an error: at most 32 bytes between double
// quotes, printable ASCII as it is (with " and \\ escaped by a backslash),
// every other byte as \\xNN, so that no control character or invalid UTF-8
// reaches the reply, and the Lua engine, which sees bytes, quotes alike.
func quote(s string) string {
	more := ""
	if len(s) > 32 {
		s, more = s[:32], "..."
	}
	b := make([]byte, 0, len(s)+8)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < ' ' || c > '~':
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"')) + more
}

const hexDigits = "0123456789abcdef"
