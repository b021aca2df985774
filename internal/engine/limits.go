package engine

import "github.com/seed-6b3823f5/ratelimit/internal/spec"

// The limiter families whose adapters tell them apart, numbered as spec
// numbers them.
const (
	famGCRA = spec.GCRA
	famTB   = spec.TB
	famLB   = spec.LB
	famSL   = spec.SL
)

// family is one limiter family: its name in RL.ALL, its arguments (nil
// for a family without commands of one key's syntax: the concurrency
// limiter parses its own) and how it runs.
type family struct {
	name   string
	syntax *syntax
	plus   int64 // what it admits at once is its first argument plus this
	run    spec.Run
}

// families are the table's, with each family's syntax made once.
var families = func() (fs [spec.NumFamilies]family) {
	for f := range spec.NumFamilies {
		sf := &spec.Families[f]
		fs[f] = family{name: sf.Name, plus: sf.LimitPlus, run: sf.Run}
		if sf.Cost.Name != "" {
			fs[f].syntax = syntaxOf(sf)
		}
	}
	return fs
}()

// limit is one limit of a command, parsed: its family, the family's
// positional arguments and then the cost in v, in the table's order (read
// them by name through the family's view: l.gcra().maxBurst, l.sw().cost;
// params_gen.go), the reserve, and DEBT.
type limit struct {
	family  int
	v       [maxWords]int64
	reserve int64
	debt    bool // DEBT: the cost is taken whatever remains
	// Where a window lies: with spread (SPREAD), bounds[0] is the ns its
	// key's windows start after the epoch's alignment; without, bounds are
	// SPAN's start, end and the next window's end in Unix ms (bounds[1] is
	// 0 without SPAN). One array for both keeps the limit, which RL.ALL
	// zeroes 16 of per call, small.
	spread bool
	bounds [3]int64
}

// offset is where the limit's windows start after the epoch's alignment,
// in ns: its key's offset with SPREAD, else 0.
func (l *limit) offset() int64 {
	if l.spread {
		return l.bounds[0]
	}
	return 0
}

// limit is what the limiter admits at once from a full state, the bound
// of RESERVE: max_burst + 1 for GCRA, the capacity or the limit otherwise.
func (l *limit) limit() int64 {
	return l.v[0] + families[l.family].plus // the first argument; max_burst < spec.MaxLimit
}

// cost is the limit's cost: the argument after the positional ones.
func (l *limit) cost() *int64 { return &l.v[len(families[l.family].syntax.positional)] }

// remaining is what the limit on its key (the i-th, st as read) admits
// now: the Remaining of a call of cost 0 without the reserve, whose write
// is dropped (UPTO's grant is decided on it: ratelimit.Grant).
func (l *limit) remaining(st KeyState, r Reader, i int) (int64, error) {
	z := *l
	*z.cost(), z.reserve = 0, 0
	var rep [5]int64
	var w KeyWrite
	err := z.run(&st, r, i, false, &rep, &w)
	return rep[2], err
}

// run computes the limit on its key, the i-th of the command: the five
// integers into rep and what to store into w. On a key that is not this
// limiter's, or arguments the arithmetic cannot take, it returns the error.
func (l *limit) run(st *KeyState, r Reader, i int, ms bool, rep *[5]int64, w *KeyWrite) error {
	switch families[l.family].run {
	case spec.RunInstant:
		return runInstant(l, st, ms, rep, w)
	case spec.RunSlidingWindow:
		return runSlidingWindow(l, st, ms, rep, w)
	case spec.RunFixedWindow:
		return runFixedWindow(l, st, ms, rep, w)
	case spec.RunLog:
		return runSlidingLog(l, st, r, i, ms, rep, w)
	}
	return fail("ERR internal error: unknown limiter")
}
