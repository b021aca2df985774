package engine

import (
	"strings"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/internal/checked"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// RL.ALL / RL.PEEK numkeys key [key ...] limiter [limiter ...] [MS] [RESERVE n] [EACH]
//
// One limiter per key, in order, each a family's name and its arguments
// after the key with the cost written out: GCRA max_burst count period
// quantity, TB capacity refill_tokens refill_period tokens, SW / FW / SL
// limit window cost. Every limit must admit, or nothing is written; the
// reply is the deciding limit's five integers and its position, and with
// EACH every limit's own five after them: as the call leaves it (a limit
// that would have admitted a refused call reports its state untouched).

// executeAll runs RL.ALL (or, with peek, RL.PEEK).
func executeAll(args []string, r Reader, o *Outcome, peek bool) error {
	var lims [MaxKeys]limit
	var ms, each bool
	var upto int64
	at := &upto
	if peek {
		at = nil
	}
	n, err := parseAll(args, &lims, &ms, &each, at, r)
	if err != nil {
		return err
	}
	if r.Keys() != n {
		return fail("ERR internal error: the keys were not read")
	}
	var granted int64
	if upto > 0 {
		if granted, err = grantAll(args, r, lims[:n], upto); err != nil {
			return err
		}
	}
	var reps [MaxKeys][5]int64
	for i := range n {
		st := r.Key(i)
		if err := lims[i].run(&st, r, i, ms, &reps[i], &o.Writes[i]); err != nil {
			return nameLimiter(err, i, &lims[i], args[2+i])
		}
	}

	// Refused: the refusing limit with the largest retry_after (-1, never,
	// counts as largest), the first on a tie. Admitted: the limit with the
	// fewest remaining, the first on a tie.
	deciding := -1
	for i := range n {
		if reps[i][0] == 1 && (deciding < 0 || later(reps[i][3], reps[deciding][3])) {
			deciding = i
		}
	}
	if deciding >= 0 && !lims[0].debt {
		// Nothing is taken. A limit that admitted may still hold a state a
		// stepped-back clock left too far ahead, which the key must store
		// as it counts (as its family command would): run it at cost 0.
		for i := range n {
			if reps[i][0] == 0 {
				o.Writes[i] = KeyWrite{}
				l := lims[i]
				*l.cost(), l.reserve = 0, 0
				st := r.Key(i)
				if err := l.run(&st, r, i, ms, &reps[i], &o.Writes[i]); err != nil { // nothing taken: its state as it stands
					return nameLimiter(err, i, &lims[i], args[2+i])
				}
			}
		}
	} else if deciding < 0 {
		deciding = 0
		for i := 1; i < n; i++ {
			if reps[i][2] < reps[deciding][2] {
				deciding = i
			}
		}
	}
	o.Action = ActReply
	o.ReplyLen = 6
	copy(o.Reply[:5], reps[deciding][:])
	o.Reply[5] = int64(deciding)
	if each {
		for i := range n {
			copy(o.Reply[6+5*i:], reps[i][:])
		}
		o.ReplyLen = 6 + 5*n
	}
	if upto > 0 {
		if o.Reply[0] == 1 { // a refusal grants none
			granted = 0
		}
		o.Reply[o.ReplyLen] = granted
		o.ReplyLen++
	}
	if peek {
		for i := range n {
			o.Writes[i] = KeyWrite{}
		}
		return nil
	}
	return checkMemory(o, r, n)
}

// grantAll decides RL.ALL's UPTO n: the most calls g ≤ n every limit
// admits at once (ratelimit.Grant on each), and no more than the sliding
// logs may add in one call; with g > 0 each limit's cost becomes g times
// its own.
func grantAll(args []string, r Reader, lims []limit, n int64) (int64, error) {
	g, logs := n, int64(0)
	for i := range lims {
		l := &lims[i]
		rem, err := l.remaining(r.Key(i), r, i)
		if err != nil {
			return 0, nameLimiter(err, i, l, args[2+i])
		}
		g = min(g, ratelimit.Grant(rem, *l.cost(), l.reserve, n))
		if l.family == famSL && l.sl().cost <= l.sl().limit { // a log over its limit grants none
			logs += l.sl().cost // each ≤ spec.MaxLogLimit: no overflow
		}
	}
	if logs > 0 {
		g = min(g, maxLogAdd/logs)
	}
	if g > 0 {
		for i := range lims {
			*lims[i].cost() *= g // ≤ what remains: no overflow
		}
	}
	return g, nil
}

// later reports whether retry a is later than b: -1 (never) is the latest.
func later(a, b int64) bool {
	if b == -1 {
		return false
	}
	return a == -1 || a > b
}

// parseAll reads RL.ALL's arguments into lims and ms and returns how many
// keys and limiters there are, or the error naming the problem.
//
// upto, where not nil (RL.ALL), receives UPTO's n (0 when absent), and
// DEBT sets every limit's debt.
func parseAll(args []string, lims *[MaxKeys]limit, ms, each *bool, upto *int64, r Reader) (n int, err error) {
	if len(args) < 2 || len(args) > MaxArgs {
		return 0, errArity
	}
	n64, ok := parseInt(args[1])
	if !ok || n64 < 1 || n64 > MaxKeys {
		return 0, fail(spec.Fill(spec.TNumKeys, MaxKeys))
	}
	n = int(n64)
	if 2+n > len(args) {
		return 0, fail(spec.Fill(spec.TNumKeysArgs, n, len(args)-2))
	}
	for a := range n {
		for b := a + 1; b < n; b++ {
			if args[2+a] == args[2+b] {
				return 0, fail(spec.Fill(spec.TKeyTwice, quote(args[2+a])))
			}
		}
	}
	i := 2 + n
	for j := range n {
		if i >= len(args) || isWord(args[i]) {
			return 0, fail(spec.Fill(spec.TFewLimiters, n, j))
		}
		if i, err = parseLimiter(args, i, j, j, &lims[j], args[2+j], r); err != nil {
			return 0, err
		}
	}
	if i < len(args) && spec.FamilyNamed(args[i]) >= 0 {
		return 0, fail(spec.Fill(spec.TManyLimiters, n))
	}
	reserveAt, uptoAt, names := 0, 0, spec.PeekOptions
	var at *int
	var debt bool
	var charge *bool // RL.PEEK takes no DEBT
	if upto != nil {
		at, names, charge = &uptoAt, spec.AllOptions, &debt
	}
	if err := parseOptions(args, i, true, names, ms, &reserveAt, each, at, charge, nil, nil, nil); err != nil {
		return 0, err
	}
	if err := debtWith(debt, reserveAt, uptoAt); err != nil {
		return 0, err
	}
	for j := range n {
		lims[j].debt = debt
	}
	if uptoAt > 0 {
		for j := range n {
			if c := *lims[j].cost(); c < 0 {
				_, err := parseUpTo(args[uptoAt], c, lims[j].prefix(j))
				return 0, err
			}
		}
		var err error
		if *upto, err = parseUpTo(args[uptoAt], 0, ""); err != nil {
			return 0, err
		}
	}
	if reserveAt > 0 {
		for j := range n {
			if err := lims[j].setReserve(args[reserveAt], j); err != nil {
				return 0, err
			}
		}
	}
	// One call adds at most maxLogAdd sliding-log entries: 16 logs of
	// 100000 each would stall the server for seconds. A log adds its cost
	// when it can admit it, and with DEBT whatever it is; a return adds
	// none.
	var entries int64
	for j := range n {
		if l := &lims[j]; l.family == famSL && l.sl().cost > 0 && (l.debt || l.sl().cost <= l.sl().limit) {
			entries = checked.SatAdd(entries, l.sl().cost)
		}
	}
	if entries > maxLogAdd {
		return 0, fail(spec.Fill(spec.TLogAdd, maxLogAdd, entries))
	}
	return n, nil
}

// parseLimiter reads the j-th limiter, written out at args[i] (its
// family's name, its arguments, its cost, then LIMITS key field, and
// SPREAD or SPAN start end next for a window on key), into l, and returns
// the index after it; errors name it as limiter j + 1, its numbers' errors
// only when n ≥ 0 (RL.ALL's n-th). r gives LIMITS's field.
func parseLimiter(args []string, i, j, n int, l *limit, key string, r Reader) (int, error) {
	f := spec.FamilyNamed(args[i])
	switch f {
	case -1:
		return 0, fail(spec.Fill(spec.TUnknownLimiter, quote(args[i]), j+1, limiters))
	case famLB:
		return 0, fail(spec.Fill(spec.TShaperNotInAll, j+1))
	}
	syn := families[f].syntax
	words := len(syn.positional) + 1 // the cost is written out
	if i+1+words > len(args) {
		return 0, fail(spec.Fill(spec.TLimiterWords, j+1, families[f].name, words, argNames(syn)))
	}
	l.family = f
	if err := syn.parseNumbers(args[i+1:i+words], l, n); err != nil {
		return 0, err
	}
	c, ok := syn.optional.parse(args[i+words])
	if !ok {
		return 0, fail(syn.optional.rangeError(l.prefix(n)))
	}
	*l.cost() = c
	next := i + 1 + words
	spread, spanAt, limitsAt := false, 0, 0
	for ; next < len(args); next++ {
		sp, sn := isSpread(args[next]), isSpan(args[next])
		switch {
		case !sp && !sn && isLimits(args[next]):
			if limitsAt > 0 {
				return 0, twice("LIMITS")
			}
			if next+2 >= len(args) {
				return 0, fail(spec.Fill(spec.TLimits, l.prefix(n)))
			}
			limitsAt = next + 1
			next += 2
		case !sp && !sn:
			if !spread && spanAt == 0 && limitsAt == 0 {
				return next, nil // the common limiter: none
			}
			return next, l.place(args, spread, spanAt, limitsAt, key, n, r)
		case sp && !spec.Families[f].Spread:
			return 0, fail(spec.Fill(spec.TSpreadFamily, j+1, families[f].name))
		case sn && !spec.Families[f].Span:
			return 0, fail(spec.Fill(spec.TSpanFamily, j+1, families[f].name))
		case sp && spread, sn && spanAt > 0:
			return 0, twice(strings.ToUpper(args[next]))
		case sp:
			spread = true
		default:
			if next+3 >= len(args) {
				return 0, fail(spec.Fill(spec.TSpan, l.prefix(n), maxSpanMs))
			}
			spanAt = next + 1
			next += 3
		}
	}
	return next, l.place(args, spread, spanAt, limitsAt, key, n, r)
}

// place applies a limiter's words after its cost: LIMITS's parameters
// (limitsAt > 0), then where its windows lie (setBounds), which depends on
// them.
func (l *limit) place(args []string, spread bool, spanAt, limitsAt int, key string, n int, r Reader) error {
	if limitsAt > 0 {
		if err := l.override(args, limitsAt, r, n); err != nil {
			return err
		}
	}
	return l.setBounds(args, spread, spanAt, key, n)
}

// maxLogAdd bounds the sliding-log entries one RL.ALL call adds (the
// costs of its logs that do not exceed their limits), as one SL.HIT is
// bounded by its limit: about 80 ms of the server's time at most.
const maxLogAdd = spec.MaxLogAdd

// limiters names the families RL.ALL takes, for its error.
var limiters = spec.Limiters()

// argNames lists a limiter's arguments in RL.ALL, for errors.
func argNames(s *syntax) string {
	return positionalNames(s) + " " + s.optional.name
}

// positionalNames lists a limiter's positional arguments, for errors.
func positionalNames(s *syntax) string {
	names := make([]string, 0, len(s.positional))
	for _, a := range s.positional {
		names = append(names, a.name)
	}
	return strings.Join(names, " ")
}

// nameLimiter puts the limiter, and its key, in an error that came from
// running it: RL.ALL has several, and the user must know which failed.
func nameLimiter(err error, i int, l *limit, key string) error {
	f, ok := err.(*failure)
	if !ok {
		return err
	}
	where := spec.Fill(spec.TLimiterWhere, i+1, families[l.family].name, quote(key))
	switch {
	case f.action == ActWrongType:
		return &failure{ActWrongType, spec.Fill(spec.TWrongTypeWhere, where)}
	case strings.HasPrefix(f.msg, "ERR "):
		return &failure{f.action, "ERR " + where + ": " + f.msg[len("ERR "):]}
	}
	return err
}
