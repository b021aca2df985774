// Package spec is the command table: every limiter family, command and
// argument the module registers, the Lua engine implements and the client
// calls, with its bounds, declared once.
//
// The engine parses by it, and package lua writes the Lua engine's syntax,
// bounds and texts from it; `go generate ./...` (cmd/gen) writes from it the
// C registration (module/commands_gen.c: argument arrays, key specs, rows,
// handlers), the protocol's enums and sizes (module/protocol_gen.h), the
// engine's typed parameters (internal/engine/params_gen.go) and the FUNCTION
// library (lua/ratelimit.lua). cmd/gen's tests fail when a generated
// file is not what the table makes.
//
// Adding a family: a Family here and its commands in Commands, its
// algorithm package, its adapter in internal/engine (limit.run) and in
// lua/src, then go generate.
package spec

import (
	"strconv"
	"strings"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/bucket"
	"github.com/seed-6b3823f5/ratelimit/gcra"
	"github.com/seed-6b3823f5/ratelimit/window"
)

// Bounds, named once.
const (
	// MaxLimit bounds what a limiter admits at once (GCRA's max_burst + 1,
	// a bucket's capacity, a window's limit): 2^53 - 1, so that every
	// integer of a reply is exact as a double, as the Lua engine's must be.
	MaxLimit = 1<<53 - 1
	// MaxSeconds is the longest period, window or lease: whole seconds of
	// 64-bit nanoseconds (gcra.MaxPeriod, bucket.MaxPeriod,
	// window.MaxWindow).
	MaxSeconds = ratelimit.MaxSeconds
	// MaxLogLimit bounds the sliding log (one sorted-set entry per admitted
	// unit), and MaxLogAdd the entries one RL.ALL call adds to its logs.
	MaxLogLimit = 100000
	MaxLogAdd   = MaxLogLimit
	// MaxConcLimit bounds the concurrency limiter's holders (one entry
	// each), MaxID the length of a holder id in bytes.
	MaxConcLimit = 100000
	MaxID        = 128
	// MaxKeys is the most keys, and limiters, one RL.ALL names.
	MaxKeys = 16
	// MaxOneKeyArgs is the most arguments a command of one key takes,
	// command name included (options may repeat), MaxArgs the most any
	// command takes (RL.ALL of 16 keys of 5-word limiters, MS and RESERVE n
	// is 103).
	MaxOneKeyArgs = 16
	MaxArgs       = 128
	// ConcSweep is the most lapsed holders one concurrency write removes.
	// Each acquire adds at most one holder, so a call removing up to 64
	// clears any backlog (a crash of every worker at once) 63 times faster
	// than it can grow, while the work it adds to one call stays bounded.
	ConcSweep = 64
	// MaxHoldTTL is the longest RL.HOLD keeps a hold: a year, in seconds.
	// A hold outliving it is a leak, not a request still running.
	MaxHoldTTL = 365 * 24 * 3600
	// MaxSpreadWindow is the longest window SPREAD shifts
	// (window.MaxSpreadWindow).
	MaxSpreadWindow = window.MaxSpreadWindow

	minInt64 = -1 << 63
	maxInt64 = 1<<63 - 1
)

// Arg is one argument and what it accepts.
type Arg struct {
	Name string
	// Min and Max bound an integer, or a string's length in bytes.
	Min, Max int64
	Seconds  bool // an integer of whole seconds
	String   bool // a string, not an integer
	// Summary says what it means, without its range (Range says that).
	Summary string
}

// Range states what the argument accepts, as COMMAND DOCS shows it:
// "(1 to 9223372036)", "(0 or more)", "(1 to 128 bytes)"; "" when every
// 64-bit integer is accepted.
func (a Arg) Range() string {
	switch {
	case a.String:
		return "(" + itoa(a.Min) + " to " + itoa(a.Max) + " bytes)"
	case a.Min == minInt64 && a.Max == maxInt64:
		return ""
	case a.Max == maxInt64:
		return "(" + itoa(a.Min) + " or more)"
	}
	return "(" + itoa(a.Min) + " to " + itoa(a.Max) + ")"
}

// Family is a limiter: the arguments after the key, then an optional cost,
// then the options MS and (where Reserve) RESERVE n.
type Family struct {
	Name  string // as RL.ALL names it: "GCRA"
	Kind  string // the Lua engine's name: "gcra"
	Args  []Arg  // positional, after the key
	Cost  Arg    // the optional argument after them
	Def   int64  // the cost when it is absent
	Costs string // what the cost does beyond its range: "0 reports, negative gives back"
	// Refund: a negative cost undoes a take exactly (Refundable).
	Refund bool
	// Reserve: RESERVE n is an option; n runs from 0 to Args[0] + LimitPlus,
	// what the limiter admits at once from a full state (GCRA's max_burst
	// + 1, the shaper's queue and the one leaving, a capacity or a limit).
	Reserve   bool
	LimitPlus int64
	// UpTo: its consuming command (not its peek) takes UPTO n, asking for
	// up to n calls of its cost (ratelimit.Grant), n from 1 to MaxUpTo.
	UpTo bool
	// Debt: its consuming command takes DEBT, a charge taken even past the
	// limit (the limiter goes into debt).
	Debt bool
	// Spread: SPREAD starts each key's windows at an offset derived from
	// the key (window.SpreadOffset), in its commands of one key and after
	// its limiter in RL.ALL, RL.PEEK, RL.HOLD and RL.SETTLE.
	Spread bool
	// Span: SPAN start end next gives the window's bounds (a window on the
	// calendar), where SPREAD goes.
	Span  bool
	InAll bool // RL.ALL and RL.PEEK take it
	// Lease: a local tier (lease.Tier) may decide it from units granted
	// ahead. Its units, taken in advance with UPTO and spent one by one
	// elsewhere, admit what the key would have (GCRA and the token bucket
	// by time, the fixed window by count within its window). The sliding
	// window and log weigh a unit by when it was spent, and the shaper's
	// answer is a delay, so a unit held ahead would not mean the same.
	Lease bool
	// State names what the family keeps in its key, in the error a key of
	// other data gets; StateName is the Lua engine's name for that text.
	State, StateName string
	// Run is how the engines run a limit of the family; Part is the Lua
	// engine's source that does (lua/src/<Part>.lua: <Part>_limit and
	// <Part>_store for a family of one key's syntax, <Part>_command for
	// the concurrency limiter), Needs the parts it uses, Fast its fast
	// path's function.
	Run   Run
	Part  string
	Needs []string
	Fast  string
	// Errors are its algorithm package's errors, as the Lua engine names
	// them (in spec.lua, each once).
	Errors []Error
	// Go are the client's names for its Args (its Limit constructor's):
	// the two integers and the period, "" where it has none.
	Go [3]string
}

// Error is an algorithm package's error, named as the Lua engine names it.
type Error struct {
	Name string
	Err  error
}

// The algorithm packages' errors the engines reply.
var (
	gcraErrors   = []Error{{"GCRA_RATE", gcra.ErrRate}, {"GCRA_OVERFLOW", gcra.ErrOverflow}}
	bucketErrors = []Error{{"BUCKET_RATE", bucket.ErrRate}, {"BUCKET_OVERFLOW", bucket.ErrOverflow}}
	windowErrors = []Error{{"WINDOW_OVERFLOW", window.ErrOverflow}}
)

// Run is how the engines run a family's limit.
type Run int

const (
	RunInstant       Run = iota // a virtual schedule in one string: GCRA, the buckets
	RunSlidingWindow            // two counters in one string
	RunFixedWindow              // one counter
	RunLog                      // a sorted set of entries
	RunConcurrency              // a sorted set of holders
)

// spanned is f with Span set.
func (f Family) spanned() Family {
	f.Span = true
	return f
}

// leased is f with Lease set.
func (f Family) leased() Family {
	f.Lease = true
	return f
}

// Refundable reports a family whose negative cost undoes a take exactly,
// whenever it comes: GCRA and the token bucket, whose state is a time a
// refund moves back. A window takes a negative cost too (its Cost.Min is
// negative), but gives back only to the window still current, so a take
// it undoes late stays counted.
func (f *Family) Refundable() bool { return f.Refund }

// Refunds reports whether the family named name (client.Limit's Family)
// is Refundable; false for no family.
func Refunds(name string) bool {
	f := Named(name)
	return f != nil && f.Refundable()
}

// The families, indexed by their number.
const (
	GCRA = iota
	TB
	LB
	SW
	FW
	SL
	CONC
	NumFamilies
)

// Family is the number of the family s names in RL.ALL, in any case, or
// -1: "gcra" is GCRA.
func FamilyNamed(s string) int {
	for f := range NumFamilies {
		if Families[f].InAll && EqualFold(s, Families[f].Name) || f == LB && EqualFold(s, "LB") {
			return f
		}
	}
	return -1
}

// Named is the family whose Name is name, exactly (client.Limit's
// Family), or nil.
func Named(name string) *Family {
	for f := range Families {
		if Families[f].Name == name {
			return &Families[f]
		}
	}
	return nil
}

// Options names the options a command of the family takes, for errors:
// its peek's (and, without UpTo, its consuming command's).
func (f *Family) Options() string {
	return f.options(false)
}

// UpToOptions names the options its consuming command takes, UPTO n
// and DEBT among them where UpTo and Debt.
func (f *Family) UpToOptions() string {
	return f.options(true)
}

// options names the options of the family's peek, or with upto its
// consuming command's.
func (f *Family) options(upto bool) string {
	names := []string{"MS"}
	for _, o := range []struct {
		on   bool
		name string
	}{{f.Reserve, "RESERVE n"}, {upto && f.UpTo, "UPTO n"}, {upto && f.Debt, "DEBT"}, {f.Spread, "SPREAD"}, {f.Span, "SPAN start end next"}, {f.Cost.Name != "", "LIMITS key field"}} {
		if o.on {
			names = append(names, o.name)
		}
	}
	last := len(names) - 1
	if last == 0 {
		return names[0]
	}
	return strings.Join(names[:last], ", ") + " and " + names[last]
}

// The options RL.ALL and RL.PEEK take, for errors.
const (
	AllOptions  = "MS, RESERVE n, UPTO n, DEBT and EACH"
	PeekOptions = "MS, RESERVE n and EACH"
)

func period(name, what string) Arg {
	return Arg{Name: name, Min: 1, Max: MaxSeconds, Seconds: true, Summary: what}
}

func windowFamily(name, kind string, limit int64, spread bool, state, stateName string, run Run, part, fast string) Family {
	return Family{
		Spread: spread,
		Run:    run, Part: part, Fast: fast,
		Name: name, Kind: kind,
		Args: []Arg{
			{Name: "limit", Min: 1, Max: limit, Summary: "hits admitted per window"},
			period("window", "the window in whole seconds, aligned to the Unix epoch (with SPREAD, to the key's offset)"),
		},
		Cost:    Arg{Name: "cost", Min: minInt64, Max: maxInt64, Summary: "the cost of this hit"},
		Def:     1,
		Costs:   "0 reports, negative gives back to the current window",
		Reserve: true, UpTo: true, Debt: true, InAll: true,
		State: state, StateName: stateName,
		Errors: windowErrors, Go: [3]string{"limit", "", "window"},
	}
}

// Families are the limiter families.
var Families = [NumFamilies]Family{
	GCRA: {
		Name: "GCRA", Kind: "gcra",
		Args: []Arg{
			{Name: "max_burst", Min: 0, Max: MaxLimit - 1, Summary: "extra requests allowed at once: the limit is max_burst + 1"},
			{Name: "count", Min: 1, Max: maxInt64, Summary: "requests admitted per period"},
			period("period", "the period in whole seconds"),
		},
		Cost:  Arg{Name: "quantity", Min: minInt64, Max: maxInt64, Summary: "the cost of this call"},
		Def:   1,
		Costs: "0 reports, negative gives back", Refund: true,
		Reserve: true, LimitPlus: 1, UpTo: true, Debt: true, InAll: true, Lease: true,
		State: "GCRA state (a Unix time in nanoseconds)", StateName: "GCRA_STATE",
		Run: RunInstant, Part: "instant", Fast: "fast_instant",
		Errors: gcraErrors, Go: [3]string{"burst", "rate", "period"},
	},
	TB: {
		Name: "TB", Kind: "tb",
		Args: []Arg{
			{Name: "capacity", Min: 1, Max: MaxLimit, Summary: "the most tokens the bucket holds; it starts full"},
			{Name: "refill_tokens", Min: 1, Max: maxInt64, Summary: "tokens added per refill_period, continuously"},
			period("refill_period", "the refill period in whole seconds"),
		},
		Cost:  Arg{Name: "tokens", Min: minInt64, Max: maxInt64, Summary: "tokens to take"},
		Def:   1,
		Costs: "0 reports, negative puts back", Refund: true,
		Reserve: true, UpTo: true, Debt: true, InAll: true, Lease: true,
		State: "token bucket state (a Unix time in nanoseconds)", StateName: "BUCKET_STATE",
		Run: RunInstant, Part: "instant", Fast: "fast_instant",
		Errors: bucketErrors, Go: [3]string{"capacity", "refill", "period"},
	},
	LB: {
		Name: "LB", Kind: "lb",
		Args: []Arg{
			{Name: "capacity", Min: 0, Max: MaxLimit, Summary: "the most requests that may wait"},
			{Name: "leak_count", Min: 1, Max: maxInt64, Summary: "requests that leave per leak_period"},
			period("leak_period", "the leak period in whole seconds"),
		},
		Cost:      Arg{Name: "quantity", Min: 0, Max: maxInt64, Summary: "the cost of this request"},
		Def:       1,
		Costs:     "0 reports",
		LimitPlus: 1,
		State:     "shaper state (a Unix time in nanoseconds)", StateName: "SHAPER_STATE",
		Run: RunInstant, Part: "instant", Fast: "fast_instant",
		Errors: bucketErrors, Go: [3]string{"capacity", "leak", "period"},
	},
	SW: windowFamily("SW", "sw", MaxLimit, true, "sliding window state (index:current:previous)", "COUNTER_STATE", RunSlidingWindow, "window", "fast_sliding"),
	FW: windowFamily("FW", "fw", MaxLimit, true, "fixed window state (a count)", "FIXED_STATE", RunFixedWindow, "window", "fast_fixed").leased().spanned(),
	SL: windowFamily("SL", "sl", MaxLogLimit, false, "a sliding log (members <score>-<n>, scored in Unix microseconds)", "LOG_STATE", RunLog, "log", "fast_log"),
	CONC: {
		Name: "CONC", Kind: "conc",
		Args: []Arg{
			{Name: "limit", Min: 1, Max: MaxConcLimit, Summary: "the most holders at once"},
			period("lease", "whole seconds a slot stays held after the last acquire, unless released"),
			{Name: "id", Min: 1, Max: MaxID, String: true, Summary: "the holder (a request id); acquiring again renews its lease"},
		},
		Reserve: true, UpTo: true,
		State: "concurrency state (holder ids scored with their lease's end in Unix microseconds)", StateName: "CONC_STATE",
		Run: RunConcurrency, Part: "conc", Needs: []string{"log.lua"},
	},
}

// NumKeysArg is RL.ALL's and RL.PEEK's first argument.
var NumKeysArg = Arg{Name: "numkeys", Min: 1, Max: MaxKeys, Summary: "how many keys, and limiters, follow"}

// Op numbers a command as the engine dispatches it.
type Op int

// The commands' operations. An alias (CL.THROTTLE) shares its command's.
const (
	OpGCRAThrottle Op = iota
	OpGCRAPeek
	OpTBTake
	OpTBPeek
	OpLBEnqueue
	OpLBPeek
	OpSWHit
	OpSWPeek
	OpFWHit
	OpFWPeek
	OpSLHit
	OpSLPeek
	OpRLAll
	OpRLPeek
	OpConcAcquire
	OpConcRelease
	OpConcPeek
	OpRLHold
	OpRLSettle
	NumOps
)

// Exec is what a command runs.
type Exec int

const (
	ExecOne      Exec = iota // its family's limit on its key
	ExecAll                  // a limit per key, all or nothing (RL.ALL, RL.PEEK)
	ExecAcquire              // the concurrency limiter: take or renew a slot
	ExecRelease              // free a slot
	ExecConcPeek             // what an acquire would answer
	ExecHold                 // take an estimate and keep it in a hold (RL.HOLD)
	ExecSettle               // settle a hold at the actual cost (RL.SETTLE)
)

// Command is one command the module registers.
type Command struct {
	Name   string // as registered, in upper case: "GCRA.THROTTLE"
	Op     Op
	Exec   Exec // what it runs: its operation's number means nothing more
	Family int  // its family, or -1 for RL.ALL and RL.PEEK
	Peek   bool // changes nothing: readonly, no-writes, FCALL_RO
	Alias  bool // registered only while the CL.THROTTLE alias is on
	// NumKeys: numkeys, its keys, then a limiter per key (RL.ALL).
	NumKeys bool
	// Hold: a second key, the hold, follows the key; then Args, then one
	// limiter written out as RL.ALL writes it, then MS (RL.HOLD,
	// RL.SETTLE).
	Hold bool
	// Args are the arguments after the key; Cost whether the family's cost
	// follows them; Options whether MS and RESERVE may follow.
	Args    []Arg
	Cost    bool
	Options bool
	// Then is an optional integer after Args (CONC.RELEASE's n), or nil.
	Then *Arg
	// Frees: it only frees memory, so it runs past maxmemory (no deny-oom).
	Frees      bool
	Summary    string
	Complexity string
}

// Limits reports whether the command takes LIMITS key field (a limit's
// parameters held in a hash): the commands of one limiter's key, RL.ALL,
// RL.PEEK, RL.HOLD and RL.SETTLE, not the concurrency limiter's.
func (c *Command) Limits() bool {
	switch c.Exec {
	case ExecOne, ExecAll, ExecHold, ExecSettle:
		return true
	}
	return false
}

// Arity is the command's arity as the server checks it: negative for "at
// least", command name included.
func (c *Command) Arity() int {
	switch {
	case c.NumKeys:
		return -2
	case c.Hold: // at least the limiter's family
		return -(4 + len(c.Args))
	case !c.Options && !c.Cost && c.Then == nil:
		return 2 + len(c.Args)
	}
	return -(2 + len(c.Args))
}

// File is the command's name in lower case with its dot an underscore, as
// its script, INFO field and FUNCTION are named: "gcra_throttle".
func (c *Command) File() string {
	b := []byte(c.Name)
	for i, ch := range b {
		switch {
		case ch == '.':
			b[i] = '_'
		case ch >= 'A' && ch <= 'Z':
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}

const oneKey = "O(1)"

// family makes a command of one key on family f: the family's arguments,
// its cost and options.
func family(name string, op Op, f int, peek bool, summary, complexity string) Command {
	return Command{Name: name, Op: op, Family: f, Peek: peek, Args: Families[f].Args, Cost: true, Options: true,
		Summary: summary, Complexity: complexity}
}

// peekOf is the peek of command c.
func peekOf(name string, op Op, f int, c, complexity string) Command {
	return family(name, op, f, true, "What "+c+" would reply now, changing nothing", complexity)
}

const logComplexity = "O(log N + M)"
const allComplexity = "O(N) for N keys, O(log N + M) per sliding log"

// Commands are the commands, in the order the module registers them and
// reports them in INFO ratelimit. The module's C passes Go a row's index.
var Commands = []Command{
	family("GCRA.THROTTLE", OpGCRAThrottle, GCRA, false,
		"GCRA rate limit: admit or refuse a request of the given cost, redis-cell's CL.THROTTLE reply", oneKey),
	func() Command {
		c := family("CL.THROTTLE", OpGCRAThrottle, GCRA, false, "redis-cell compatible alias of GCRA.THROTTLE", oneKey)
		c.Alias = true
		return c
	}(),
	peekOf("GCRA.PEEK", OpGCRAPeek, GCRA, "GCRA.THROTTLE", oneKey),
	family("TB.TAKE", OpTBTake, TB, false,
		"Token bucket: take tokens when all are available; reply limited, capacity, tokens left, retry, full in", oneKey),
	peekOf("TB.PEEK", OpTBPeek, TB, "TB.TAKE", oneKey),
	family("LB.ENQUEUE", OpLBEnqueue, LB, false,
		"Leaky-bucket shaper: queue a request; reply limited, capacity, free places, retry, delay before it goes", oneKey),
	peekOf("LB.PEEK", OpLBPeek, LB, "LB.ENQUEUE", oneKey),
	family("SW.HIT", OpSWHit, SW, false,
		"Sliding window counter: the previous window weighted by its overlap plus the current one", oneKey),
	peekOf("SW.PEEK", OpSWPeek, SW, "SW.HIT", oneKey),
	family("FW.HIT", OpFWHit, FW, false,
		"Fixed window aligned to the epoch: the cheapest, admits up to twice the limit across a boundary", oneKey),
	peekOf("FW.PEEK", OpFWPeek, FW, "FW.HIT", oneKey),
	family("SL.HIT", OpSLHit, SL, false,
		"Sliding log: the exact count of hits in the trailing window, in a sorted set", logComplexity),
	peekOf("SL.PEEK", OpSLPeek, SL, "SL.HIT", logComplexity),
	{Name: "RL.ALL", Op: OpRLAll, Exec: ExecAll, Family: -1, NumKeys: true, Options: true,
		Summary: "Several limits in one atomic decision: every limit admits or nothing is written; replies the " +
			"deciding limit's five integers and its position",
		Complexity: allComplexity},
	{Name: "RL.PEEK", Op: OpRLPeek, Exec: ExecAll, Family: -1, Peek: true, NumKeys: true, Options: true,
		Summary: "What RL.ALL would reply now, changing nothing", Complexity: allComplexity},
	{Name: "CONC.ACQUIRE", Op: OpConcAcquire, Exec: ExecAcquire, Family: CONC, Args: Families[CONC].Args, Options: true,
		Summary: "Concurrency limit: take a slot for id (up to n with UPTO n), or renew its lease; reply limited, limit, free slots, retry, reset",
		Complexity: "O(log N), plus up to 64 lapsed holders removed; O(log N + K) when refused, K the leases that must lapse; " +
			"O(S log N) when the id holds or takes S slots (UPTO), each written"},
	{Name: "CONC.RELEASE", Op: OpConcRelease, Exec: ExecRelease, Family: CONC, Frees: true,
		Args:       []Arg{{Name: "id", Min: 1, Max: MaxID, String: true, Summary: "the holder whose slots are freed"}},
		Then:       &Arg{Name: "n", Min: 1, Max: ratelimit.MaxUpTo, Summary: "how many of its slots to free, default all"},
		Summary:    "Free id's slots at once (n of them, default all): reply how many live slots it released",
		Complexity: "O(log N), plus up to 64 lapsed holders removed; O(S log N) for S slots released"},
	{Name: "CONC.PEEK", Op: OpConcPeek, Exec: ExecConcPeek, Family: CONC, Peek: true, Args: Families[CONC].Args[:1], Options: true,
		Summary: "What CONC.ACQUIRE by a new id would reply now, changing nothing", Complexity: "O(log N + K)"},
	{Name: "RL.HOLD", Op: OpRLHold, Exec: ExecHold, Family: -1, Hold: true, Options: true, Args: []Arg{HoldTTLArg},
		Summary: "Take an estimate from a limiter (written as in RL.ALL) and keep it in a hold key until RL.SETTLE " +
			"charges the actual cost: reply the limiter's five integers",
		Complexity: holdComplexity},
	{Name: "RL.SETTLE", Op: OpRLSettle, Exec: ExecSettle, Family: -1, Hold: true, Options: true,
		Summary: "Settle a hold at the actual cost: take what the estimate missed (past the limit, as DEBT) or give " +
			"back what it did not use, and delete the hold; reply the five integers and the estimate settled, -1 for none",
		Complexity: holdComplexity},
}

// HoldTTLArg is RL.HOLD's ttl.
var HoldTTLArg = Arg{Name: "ttl", Min: 1, Max: MaxHoldTTL, Seconds: true,
	Summary: "whole seconds the hold waits for RL.SETTLE; unsettled by then, the estimate stands as taken"}

// HoldCosts are the names RL.HOLD and RL.SETTLE give their limiter's cost
// in errors: the estimate held, the actual cost settled. Both run from 0
// to MaxLimit.
var HoldCosts = [2]string{"estimate", "actual"}

const holdComplexity = "O(1), O(log N + M) for a sliding log"

// Of is the first command of op (not an alias): its name and family.
func Of(op Op) *Command {
	for i := range Commands {
		if Commands[i].Op == op && !Commands[i].Alias {
			return &Commands[i]
		}
	}
	panic("spec: no command for op " + itoa(int64(op)))
}

// CommandOf is family f's command of one key that consumes (peek false)
// or its peek, not an alias; nil when it has none (the concurrency
// limiter's are its own).
func CommandOf(f int, peek bool) *Command {
	for i := range Commands {
		if c := &Commands[i]; c.Exec == ExecOne && c.Family == f && c.Peek == peek && !c.Alias {
			return c
		}
	}
	return nil
}

// Limiters lists the families RL.ALL takes, for its error: "GCRA, TB, SW,
// FW and SL".
func Limiters() string {
	var names []string
	for _, f := range Families {
		if f.InAll {
			names = append(names, f.Name)
		}
	}
	s := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			s += " and "
		default:
			s += ", "
		}
		s += n
	}
	return s
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// EqualFold reports whether s is word, a word of ASCII letters, in any
// case, as commands and options are matched.
func EqualFold(s, word string) bool {
	if len(s) != len(word) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i]|0x20 != word[i]|0x20 {
			return false
		}
	}
	return true
}
