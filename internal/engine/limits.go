package engine

import "github.com/seed-6b3823f5/ratelimit/internal/spec"

// The limiter families of one key, numbered as spec numbers them.
const (
	famGCRA  = spec.GCRA
	famTB    = spec.TB
	famLB    = spec.LB
	famSW    = spec.SW
	famFW    = spec.FW
	famSL    = spec.SL
	famCount = spec.CONC // the concurrency limiter is not one of them
)

// family is one limiter family: its name in RL.ALL and its arguments.
type family struct {
	name   string
	syntax *syntax
	plus   int64 // what it admits at once is its first argument plus this
}

// families are the table's, with each family's syntax made once.
var families = func() (fs [famCount]family) {
	for f := range famCount {
		sf := &spec.Families[f]
		fs[f] = family{sf.Name, syntaxOf(sf), sf.LimitPlus}
	}
	return fs
}()

// limit is one limit of a command, parsed: its family, the family's
// positional arguments and then the cost in v, in the table's order (read
// them by name through the family's view: l.gcra().maxBurst, l.sw().cost;
// params_gen.go), and the reserve.
type limit struct {
	family  int
	v       [maxWords]int64
	reserve int64
}

// limit is what the limiter admits at once from a full state, the bound
// of RESERVE: max_burst + 1 for GCRA, the capacity or the limit otherwise.
func (l *limit) limit() int64 {
	return l.v[0] + families[l.family].plus // the first argument; max_burst < spec.MaxLimit
}

// cost is the limit's cost: the argument after the positional ones.
func (l *limit) cost() *int64 { return &l.v[len(families[l.family].syntax.positional)] }

// run computes the limit on its key, the i-th of the command: the five
// integers into rep and what to store into w. On a key that is not this
// limiter's, or arguments the arithmetic cannot take, it returns the error.
func (l *limit) run(st *KeyState, r Reader, i int, ms bool, rep *[5]int64, w *KeyWrite) error {
	switch l.family {
	case famGCRA, famTB, famLB:
		return runInstant(l, st, ms, rep, w)
	case famSW:
		return runSlidingWindow(l, st, ms, rep, w)
	case famFW:
		return runFixedWindow(l, st, ms, rep, w)
	case famSL:
		return runSlidingLog(l, st, r, i, ms, rep, w)
	}
	return fail("ERR internal error: unknown limiter")
}
