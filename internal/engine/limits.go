package engine

// maxLimit bounds what a limiter admits at once (GCRA's max_burst + 1, a
// bucket's capacity, a window's limit): 2^53 - 1, so that every integer of
// a reply is exact as a double, as the Lua engine's replies must be.
const maxLimit = 1<<53 - 1

// The limiter families, as RL.ALL names them (LB is not part of RL.ALL).
const (
	famGCRA = iota
	famTB
	famLB
	famSW
	famFW
	famSL
	famCount
)

// family is one limiter family: its name in RL.ALL and its arguments.
type family struct {
	name   string
	syntax *syntax
}

var families = [famCount]family{
	famGCRA: {"GCRA", &gcraSyntax},
	famTB:   {"TB", &tbSyntax},
	famLB:   {"LB", &lbSyntax},
	famSW:   {"SW", &windowSyntax},
	famFW:   {"FW", &windowSyntax},
	famSL:   {"SL", &logSyntax},
}

// familyNamed is the family whose name is s, in any case, or -1.
func familyNamed(s string) int {
	for f := range famCount {
		if equalFold(s, families[f].name) {
			return f
		}
	}
	return -1
}

// limit is one limit of a command, parsed: its family, the family's
// positional arguments and then the cost in v, and the reserve.
type limit struct {
	family  int
	v       [4]int64
	reserve int64
}

// limit is what the limiter admits at once from a full state, the bound
// of RESERVE: max_burst + 1 for GCRA, the capacity or the limit otherwise.
func (l *limit) limit() int64 {
	if l.family == famGCRA {
		return l.v[0] + 1 // max_burst < maxLimit
	}
	return l.v[0]
}

// cost is the limit's cost: the argument after the positional ones.
func (l *limit) cost() *int64 { return &l.v[len(families[l.family].syntax.positional)] }

// run computes the limit on its key, the i-th of the command: the five
// integers into rep and what to store into w. On a key that is not this
// limiter's, or arguments the arithmetic cannot take, it sets the error in
// o and returns false.
func (l *limit) run(st *KeyState, r Reader, i int, ms bool, o *Outcome, rep *[5]int64, w *KeyWrite) bool {
	switch l.family {
	case famGCRA, famTB, famLB:
		return runInstant(l, st, ms, o, rep, w)
	case famSW:
		return runSlidingWindow(l, st, ms, o, rep, w)
	case famFW:
		return runFixedWindow(l, st, ms, o, rep, w)
	case famSL:
		return runSlidingLog(l, st, r, i, ms, o, rep, w)
	}
	o.fail("ERR internal error: unknown limiter")
	return false
}
