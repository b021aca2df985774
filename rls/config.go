package rls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/seed-6b3823f5/ratelimit/calendar"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
	"github.com/seed-6b3823f5/ratelimit/lease"
)

// Algorithm is how a descriptor's limit counts: the config's
// `algorithm:` inside `rate_limit`, the one key this service adds to
// envoyproxy/ratelimit's format.
type Algorithm string

// The algorithms a config can name. FixedWindow is the default: the peer's
// counter, windows ending on multiples of the unit since the Unix epoch.
const (
	FixedWindow   Algorithm = "fixed_window"   // requests_per_unit per window of one unit; up to 2x across an edge
	SlidingWindow Algorithm = "sliding_window" // the previous window weighted by its overlap: close to exact, two counters
	SlidingLog    Algorithm = "sliding_log"    // exact: one entry per admitted request (requests_per_unit at most 100000)
	GCRA          Algorithm = "gcra"           // requests_per_unit at once, then one every unit/requests_per_unit
	TokenBucket   Algorithm = "token_bucket"   // a bucket of requests_per_unit refilled requests_per_unit per unit
	// Concurrency holds a slot per request: limit holders at once, each
	// named by the request's value of the descriptor marked holder: true,
	// held until released (the stream-done call, is_negative_hits) or
	// until hold_ttl lapses (CONC.ACQUIRE, CONC.RELEASE).
	Concurrency Algorithm = "concurrency"
)

// algorithms are those that count requests per unit; Concurrency counts
// holders, and is named apart.
var algorithms = []Algorithm{FixedWindow, SlidingWindow, SlidingLog, GCRA, TokenBucket}

// maxLogLimit is the sliding log's largest limit, maxHolders the
// concurrency limiter's: the command table's bounds.
const (
	maxLogLimit = spec.MaxLogLimit
	maxHolders  = spec.MaxConcLimit
)

// units are the peer's units and their lengths.
var units = map[string]pb.RateLimitResponse_RateLimit_Unit{
	"SECOND": pb.RateLimitResponse_RateLimit_SECOND,
	"MINUTE": pb.RateLimitResponse_RateLimit_MINUTE,
	"HOUR":   pb.RateLimitResponse_RateLimit_HOUR,
	"DAY":    pb.RateLimitResponse_RateLimit_DAY,
	"WEEK":   pb.RateLimitResponse_RateLimit_WEEK,
	"MONTH":  pb.RateLimitResponse_RateLimit_MONTH,
	"YEAR":   pb.RateLimitResponse_RateLimit_YEAR,
}

// lowerUnits are the units by the names a config usually gives them.
var lowerUnits = map[string]pb.RateLimitResponse_RateLimit_Unit{
	"second": pb.RateLimitResponse_RateLimit_SECOND,
	"minute": pb.RateLimitResponse_RateLimit_MINUTE,
	"hour":   pb.RateLimitResponse_RateLimit_HOUR,
	"day":    pb.RateLimitResponse_RateLimit_DAY,
	"week":   pb.RateLimitResponse_RateLimit_WEEK,
	"month":  pb.RateLimitResponse_RateLimit_MONTH,
	"year":   pb.RateLimitResponse_RateLimit_YEAR,
}

// unitNamed is the unit of a name, in any case (as strings.ToUpper reads
// it); lower case, the usual, is looked up without making an upper-case
// copy.
func unitNamed(name string) (pb.RateLimitResponse_RateLimit_Unit, bool) {
	if u, ok := lowerUnits[name]; ok {
		return u, true
	}
	u, ok := units[strings.ToUpper(name)]
	return u, ok
}

// unitLength is a unit's length as the peer counts it (a month 30 days, a
// year 365).
func unitLength(u pb.RateLimitResponse_RateLimit_Unit) time.Duration {
	switch u {
	case pb.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case pb.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case pb.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case pb.RateLimitResponse_RateLimit_DAY:
		return 24 * time.Hour
	case pb.RateLimitResponse_RateLimit_WEEK:
		return 7 * 24 * time.Hour
	case pb.RateLimitResponse_RateLimit_MONTH:
		return 30 * 24 * time.Hour
	case pb.RateLimitResponse_RateLimit_YEAR:
		return 365 * 24 * time.Hour
	}
	return 0
}

// rule is one descriptor's rate_limit, as loaded.
type rule struct {
	proto     *pb.RateLimitResponse_RateLimit // current_limit in responses (shared, never modified)
	perUnit   int64
	unit      time.Duration
	algorithm Algorithm
	limit     client.Limit // the module's limit (unset when perUnit is 0 or unlimited)
	unlimited bool
	shadow    bool
	detailed  bool
	debt      bool // hits are counted even past the limit (the module's DEBT)
	spread    bool // each key's windows start at its own offset (the module's SPREAD)
	// overrides: each key's limit may be held in Redis, in the field
	// "limit" of the hash overridesKey(key) (the module's LIMITS).
	overrides bool
	// calendar, where set, makes a fixed window's unit one of the calendar
	// (a month in a time zone, from a billing day: the module's SPAN).
	calendar *calendar.Period
	lease    bool // decided through the local tier where the service has one (Options.Lease)
	// reserve: the request phase holds its hits as an estimate for
	// holdTTL, the stream-done call (is_negative_hits) settles the hold at
	// its hits, the actual cost (RL.HOLD, RL.SETTLE).
	reserve bool
	holdTTL time.Duration
	// conc is a Concurrency rule's limit (Limit 0 for the others), holder
	// the position of the request's entry that names the hold, left out of
	// the key.
	conc     client.Concurrency
	holder   int
	name     string
	replaces []string
	statKey  string // domain.key_value.key: the peer's stat key
	// levels are the descriptors from the domain to this one, when one of
	// them says value_to_metric or share_threshold (nil otherwise).
	levels []level
	// quota: quota_mode, the descriptor is one of the request's quotas, of
	// which one admitting is enough; metadata: the descriptor's, sent back
	// in dynamic_metadata when it passes (Options.DynamicMetadata).
	quota    bool
	metadata *structpb.Struct
}

// level is one descriptor on a rule's path, as share_threshold and
// value_to_metric read it.
type level struct {
	value    string // the config's ("" for a key alone), '*'s and all
	wildcard bool   // its key_value holds a '*'
	toMetric bool   // value_to_metric: the stat key takes the request's value
	share    bool   // share_threshold: every value the wildcard matches counts at one key
}

// field is a key of a config's mapping and where its scalar goes, read
// in the order of a list so that, of several bad keys, the same one is
// always named.
type field struct {
	name string
	dst  any
}

// node is one level of a domain's descriptor tree.
type node struct {
	children map[string]*node // by "key" or "key_value"
	wild     []wildcard       // the children whose value holds a '*', in file order
	rule     *rule
}

// wildcard is a child whose "key_value" holds '*': parts is it split there.
type wildcard struct {
	key   string
	parts []string
}

// Config is a loaded set of config files: domains and their descriptor
// trees. It is never modified once loaded, so a reload swaps it whole.
type Config struct {
	domains map[string]*node
	files   []string
}

// Files is the names of the files the config was loaded from.
func (c *Config) Files() []string { return slices.Clone(c.files) }

// Domains is the config's domains, sorted.
func (c *Config) Domains() []string {
	var d []string
	for k := range c.domains {
		d = append(d, k)
	}
	slices.Sort(d)
	return d
}

// ConfigError is a config that cannot be loaded; its text names the file
// and, where one is at fault, the key and its line.
type ConfigError struct {
	File string
	Line int // 0 when no one line is at fault
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// LoadDir loads every *.yaml and *.yml file directly in dir (names starting
// with '.' are skipped, as are directories), in name order.
func LoadDir(dir string) (*Config, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		name := e.Name()
		if !configFile(name) {
			continue
		}
		p := filepath.Join(dir, name)
		st, err := os.Stat(p) // follows symlinks (a ConfigMap's files are links)
		if err != nil {
			return nil, err
		}
		if st.IsDir() {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files[name] = b
	}
	return Parse(files)
}

// configFile reports whether LoadDir reads a file of this name.
func configFile(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// Parse loads config files given by name, in name order. A domain may be
// in one file only.
func Parse(files map[string][]byte) (*Config, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	return assemble(names, func(name string) *fileForm { return decodeFile(name, files[name]) })
}

// assemble makes a config of the files named, in that order, each read
// by form when its turn comes: files and xDS resources alike (see
// fileForm). A domain may be in one file only.
func assemble(names []string, form func(name string) *fileForm) (*Config, error) {
	c := &Config{domains: make(map[string]*node, len(names)), files: names}
	domainFile := make(map[string]string, len(names))
	for _, name := range names {
		domain, root, err := build(form(name))
		if err != nil {
			return nil, err
		}
		if prev, ok := domainFile[domain]; ok {
			return nil, &ConfigError{File: name, Msg: fmt.Sprintf("duplicate domain '%s' in config file (also in %s)", domain, prev)}
		}
		domainFile[domain] = name
		c.domains[domain] = root
	}
	return c, nil
}

// fileForm is one config file, or one xDS resource, as read and not yet
// checked: a YAML file is decoded into it (decodeFile), an xDS resource
// read into it (resourceForm), and build checks it and makes its domain's
// tree, whichever it came from, so that both are held to the same rules
// and a fault is named in the same words.
//
// Where a part could not be read (a key this service does not take, a value
// of the wrong kind), the part holds the error (err) and reading stopped
// there; build returns it when it comes to that part, having checked all
// that comes before it, so that of several faults the first is named, in
// the order build checks them. Lines are where each value was found in a
// file, 0 where there is no line (a resource, or a key not given).
type fileForm struct {
	name        string
	err         error // the file could not be read: named before its domain
	domain      string
	domainLine  int
	descriptors []descriptorForm
}

// descriptorForm is a descriptor as read. One whose err is set stands for
// the first part of the list that could not be read, itself included.
type descriptorForm struct {
	err              error // named before anything of the descriptor is checked
	line             int   // where it starts
	key, value       string
	shadow, detailed bool
	toMetric, share  bool // value_to_metric, share_threshold
	holder           bool // its value names a hold, not a limit's key (Concurrency)
	quota            bool // quota_mode
	metadata         *structpb.Struct
	rateLimit        *rateLimitForm // nil: none
	descriptors      []descriptorForm
}

// rateLimitForm is a descriptor's rate_limit as read.
type rateLimitForm struct {
	err                                                       error  // named before any of it is checked
	line                                                      int    // where the mapping starts
	perUnit, limit                                            uint32 // limit: Concurrency's holders
	unit, name, algorithm, holdTTL                            string
	unlimited, debt, lease, reserve, spread, overrides        bool
	perUnitLine, unitLine, algorithmLine, debtLine, leaseLine int
	limitLine, holdTTLLine, reserveLine, spreadLine           int
	overridesLine                                             int
	replaces                                                  []replaceForm
	calendar                                                  *calendarForm
}

// calendarForm is a rate_limit's calendar as read: a time zone and where
// windows start (calendar.Anchor's fields).
type calendarForm struct {
	line                              int
	zone                              string
	day, hour, minute, weekday, month uint32
}

// replaceForm is an entry of replaces as read. One whose err is set stands
// for the first part of the list that could not be read.
type replaceForm struct {
	err  error
	line int
	name string
}

// build checks a file's form and makes its domain's descriptor tree: the
// one place where a config's rules are held, for files and xDS resources
// alike.
func build(f *fileForm) (string, *node, error) {
	if f.err != nil {
		return "", nil, f.err
	}
	b := builder{name: f.name}
	if f.domain == "" {
		return "", nil, b.errAt(f.domainLine, "config file cannot have empty domain")
	}
	root := &node{children: make(map[string]*node, len(f.descriptors))}
	if err := b.descriptors(root, f.descriptors, f.domain, 0, -1, nil); err != nil {
		return "", nil, err
	}
	return f.domain, root, nil
}

// builder builds one file's tree.
type builder struct{ name string }

func (b builder) errAt(line int, format string, args ...any) error {
	return &ConfigError{File: b.name, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// descriptors adds a list of descriptors under parent, whose stat key is
// parentKey, at depth (a request's entry of that position matches them);
// holder is the depth of the descriptor above marked holder: true, or -1;
// path the descriptors above.
func (b builder) descriptors(parent *node, list []descriptorForm, parentKey string, depth, holder int, path []level) error {
	for i := range list {
		d := &list[i]
		if d.err != nil {
			return d.err
		}
		if d.key == "" {
			return b.errAt(d.line, "descriptor has empty key")
		}
		// The stat key is the parent's, a dot and the descriptor's own key:
		// its key, or its key and value; the own key, which the tree is
		// looked up by, is the stat key's tail.
		var statKey string
		if d.value != "" {
			statKey = parentKey + "." + d.key + "_" + d.value
		} else {
			statKey = parentKey + "." + d.key
		}
		final := statKey[len(parentKey)+1:]
		if _, dup := parent.children[final]; dup {
			return b.errAt(d.line, "duplicate descriptor composite key '%s'", statKey)
		}
		if d.share && !strings.Contains(final, "*") {
			return b.errAt(d.line, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", final)
		}
		here := append(slices.Clip(path), level{value: d.value, wildcard: strings.Contains(final, "*"), toMetric: d.toMetric, share: d.share})
		child := &node{}
		if len(d.descriptors) > 0 {
			child.children = make(map[string]*node, len(d.descriptors))
		}
		holds := holder
		if d.holder {
			if holder >= 0 {
				return b.errAt(d.line, "holder: true on '%s' under another holder: one entry of a request names its hold", statKey)
			}
			if d.value != "" {
				return b.errAt(d.line, "holder: true on '%s' with a value: the holder's value is the request's own (e.g. x-request-id)", statKey)
			}
			holds = depth
		}
		if d.rateLimit != nil {
			r, err := b.rateLimit(d.rateLimit, statKey)
			if err != nil {
				return err
			}
			switch conc := r.algorithm == Concurrency; {
			case conc && holds < 0:
				return b.errAt(d.rateLimit.line, "algorithm: concurrency for '%s' needs a descriptor marked holder: true, itself or above it, whose value (e.g. x-request-id) names each request's hold", statKey)
			case r.reserve && holds < 0:
				return b.errAt(d.rateLimit.line, "reserve: true for '%s' needs a descriptor marked holder: true, itself or above it, whose value (e.g. x-request-id) names each request's hold", statKey)
			case !conc && !r.reserve && holds >= 0:
				return b.errAt(d.rateLimit.line, "'%s' is under holder: true, which names holds: its algorithm must be concurrency, or its rate_limit say reserve: true", statKey)
			}
			r.shadow, r.detailed, r.holder, r.quota, r.metadata = d.shadow, d.detailed, holds, d.quota, d.metadata
			if slices.ContainsFunc(here, func(l level) bool { return l.toMetric || l.share }) {
				r.levels = here
			}
			child.rule = r
		} else if d.quota || d.metadata != nil {
			return b.errAt(d.line, "quota_mode and metadata on '%s', which has no rate_limit: they say something of its limit", statKey)
		} else if d.holder && len(d.descriptors) == 0 {
			return b.errAt(d.line, "holder: true on '%s', which has no rate_limit of algorithm: concurrency or reserve: true below it", statKey)
		}
		if strings.Contains(final, "*") {
			parent.wild = append(parent.wild, wildcard{key: final, parts: strings.Split(final, "*")})
		}
		parent.children[final] = child
		if err := b.descriptors(child, d.descriptors, statKey, depth+1, holds, here); err != nil {
			return err
		}
	}
	return nil
}

func (b builder) rateLimit(f *rateLimitForm, statKey string) (*rule, error) {
	if f.err != nil {
		return nil, f.err
	}
	if f.overrides && (f.algorithm == string(Concurrency) || f.lease || f.unlimited) {
		return nil, b.errAt(f.overridesLine, "overrides: true for '%s' needs a rate limit decided in Redis: not concurrency, unlimited nor lease: true", statKey)
	}
	if f.algorithm == string(Concurrency) {
		return b.concurrency(f, statKey)
	}
	// A misspelt algorithm is named before what it would have allowed.
	if f.algorithm != "" && !slices.Contains(algorithms, Algorithm(f.algorithm)) {
		return nil, b.errAt(f.algorithmLine, "unknown algorithm '%s' for '%s' (fixed_window, sliding_window, sliding_log, gcra, token_bucket or concurrency)", f.algorithm, statKey)
	}
	if f.limit > 0 || f.holdTTL != "" && !f.reserve {
		line := max(f.limitLine, f.holdTTLLine)
		return nil, b.errAt(line, "limit and hold_ttl are algorithm: concurrency's (hold_ttl also reserve: true's); '%s' counts requests_per_unit per unit", statKey)
	}
	unit, validUnit := unitNamed(f.unit)
	if f.unlimited {
		if validUnit {
			return nil, b.errAt(f.unitLine, "should not specify rate limit unit when unlimited ('%s')", statKey)
		}
	} else if !validUnit {
		line := f.unitLine
		if line == 0 {
			line = f.line
		}
		return nil, b.errAt(line, "invalid rate limit unit '%s' for '%s' (second, minute, hour, day, week, month or year)", f.unit, statKey)
	}
	r := &rule{
		proto:     &pb.RateLimitResponse_RateLimit{Name: f.name, RequestsPerUnit: f.perUnit, Unit: unit},
		perUnit:   int64(f.perUnit),
		unit:      unitLength(unit),
		algorithm: FixedWindow,
		unlimited: f.unlimited,
		debt:      f.debt,
		spread:    f.spread,
		overrides: f.overrides,
		lease:     f.lease,
		name:      f.name,
		statKey:   statKey,
	}
	if f.algorithm != "" {
		r.algorithm = Algorithm(f.algorithm)
	}
	if f.lease && (!leases(r.algorithm) || f.debt) {
		return nil, b.errAt(f.leaseLine, "lease: true for '%s' needs algorithm %s (whose units are spent as they would be one by one) and no debt", statKey, leasing)
	}
	if f.calendar != nil {
		if err := b.calendar(f, r, unit, statKey); err != nil {
			return nil, err
		}
	}
	if f.spread && r.algorithm != FixedWindow && r.algorithm != SlidingWindow {
		return nil, b.errAt(f.spreadLine, "spread: true for '%s' needs algorithm fixed_window or sliding_window (it starts each key's windows at an offset of its own)", statKey)
	}
	if r.algorithm == SlidingLog && f.debt {
		return nil, b.errAt(f.debtLine, "debt: true does not go with sliding_log for '%s' (one entry per hit, at most 100000 in one charge): take sliding_window", statKey)
	}
	if r.algorithm == SlidingLog && f.perUnit > maxLogLimit {
		return nil, b.errAt(f.perUnitLine, "requests_per_unit %d for '%s' is past the sliding log's %d (one entry per request): take sliding_window", f.perUnit, statKey, maxLogLimit)
	}
	for _, rp := range f.replaces {
		if rp.err != nil {
			return nil, rp.err
		}
		if rp.name == "" {
			return nil, b.errAt(rp.line, "should not have an empty replaces entry ('%s')", statKey)
		}
		if rp.name == f.name {
			return nil, b.errAt(rp.line, "replaces should not contain name of same descriptor ('%s')", statKey)
		}
		r.replaces = append(r.replaces, rp.name)
	}
	if !f.unlimited && f.perUnit > 0 {
		r.limit = limitOf(r.algorithm, r.perUnit, r.unit)
		if f.spread {
			r.limit = r.limit.Spread()
		}
		if r.calendar != nil {
			r.limit = client.Calendar(r.perUnit, *r.calendar)
		}
	}
	if f.reserve {
		if err := b.reserve(f, r, statKey); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// calendarUnits are the units a calendar takes.
var calendarUnits = map[pb.RateLimitResponse_RateLimit_Unit]calendar.Unit{
	pb.RateLimitResponse_RateLimit_DAY: calendar.Day, pb.RateLimitResponse_RateLimit_WEEK: calendar.Week,
	pb.RateLimitResponse_RateLimit_MONTH: calendar.Month, pb.RateLimitResponse_RateLimit_YEAR: calendar.Year,
}

// calendar makes r's unit one of the calendar: a fixed window over the
// day, week, month or year of f.calendar's time zone, from its anchor.
func (b builder) calendar(f *rateLimitForm, r *rule, unit pb.RateLimitResponse_RateLimit_Unit, statKey string) error {
	c := f.calendar
	cu, ok := calendarUnits[unit]
	switch {
	case !ok:
		return b.errAt(c.line, "calendar for '%s' needs unit day, week, month or year", statKey)
	case r.algorithm != FixedWindow:
		return b.errAt(c.line, "calendar for '%s' counts a fixed window: its algorithm must be fixed_window", statKey)
	case f.spread:
		return b.errAt(c.line, "calendar for '%s' gives the windows' bounds, so it does not go with spread: true", statKey)
	}
	loc, err := time.LoadLocation(c.zone)
	if err != nil || c.zone == "Local" {
		return b.errAt(c.line, "calendar for '%s': unknown time_zone %q (an IANA name: Europe/Berlin, America/New_York, UTC)", statKey, c.zone)
	}
	p := calendar.Period{Unit: cu, Location: loc, Anchor: calendar.Anchor{
		Hour: int(min(c.hour, 99)), Minute: int(min(c.minute, 99)), Weekday: int(min(c.weekday, 99)),
		Day: int(min(c.day, 99)), Month: time.Month(min(c.month, 99))}}
	if err := p.Check(); err != nil {
		return b.errAt(c.line, "calendar for '%s': %v", statKey, strings.TrimPrefix(err.Error(), "calendar: "))
	}
	r.calendar = &p
	return nil
}

// reserve makes r a reserve: true rule: its hits held as an estimate for
// hold_ttl, then settled at the stream-done call's. It needs a limit
// (requests_per_unit 1 or more), and takes no debt (a settlement past the
// limit is one already), no lease (a hold is settled by a later call,
// perhaps to another replica) and no sliding_log (whose settlement past
// the limit would add an entry per hit).
func (b builder) reserve(f *rateLimitForm, r *rule, statKey string) error {
	switch {
	case f.unlimited || f.perUnit == 0:
		return b.errAt(f.reserveLine, "reserve: true for '%s' needs a limit: requests_per_unit of 1 or more", statKey)
	case f.debt || f.lease:
		return b.errAt(f.reserveLine, "reserve: true for '%s' takes no debt and no lease: a settlement past the limit is a charge already, and a hold is settled by a later call", statKey)
	case r.algorithm == SlidingLog:
		return b.errAt(f.reserveLine, "reserve: true does not go with sliding_log for '%s' (a settlement past the limit adds an entry per hit): take sliding_window", statKey)
	}
	ttl, ok := holdTTL(f.holdTTL)
	if !ok {
		return b.errAt(max(f.holdTTLLine, f.reserveLine), "reserve: true for '%s' needs hold_ttl, how long a hold waits for its settlement: whole seconds from 1 s to %d s (\"30s\", \"2m\" or 30), not %q", statKey, maxHoldSeconds, f.holdTTL)
	}
	r.reserve, r.holdTTL = true, ttl
	return nil
}

// concurrency is a rate_limit of algorithm: concurrency: limit holders at
// once (1 to 100000), each held for hold_ttl (whole seconds: "30s", "2m"
// or 30) unless released; requests_per_unit, unit, unlimited, debt, lease
// and replaces do not go with it.
func (b builder) concurrency(f *rateLimitForm, statKey string) (*rule, error) {
	switch {
	case f.perUnit > 0 || f.unit != "":
		return nil, b.errAt(max(f.perUnitLine, f.unitLine), "algorithm: concurrency for '%s' takes limit (holders at once) and hold_ttl, not requests_per_unit and unit", statKey)
	case f.unlimited || f.debt || f.lease || f.reserve || len(f.replaces) > 0:
		return nil, b.errAt(f.line, "algorithm: concurrency for '%s' takes only limit, hold_ttl and name", statKey)
	case f.limit < 1 || f.limit > maxHolders:
		return nil, b.errAt(max(f.limitLine, f.line), "algorithm: concurrency for '%s' needs limit, the holders at once, from 1 to %d", statKey, maxHolders)
	}
	ttl, ok := holdTTL(f.holdTTL)
	if !ok {
		return nil, b.errAt(max(f.holdTTLLine, f.line), "algorithm: concurrency for '%s' needs hold_ttl, how long a hold lasts unless released: whole seconds from 1 s to %d s (\"30s\", \"2m\" or 30), not %q", statKey, maxHoldSeconds, f.holdTTL)
	}
	return &rule{
		proto:     &pb.RateLimitResponse_RateLimit{Name: f.name, RequestsPerUnit: f.limit},
		perUnit:   int64(f.limit),
		unit:      ttl,
		algorithm: Concurrency,
		conc:      client.Concurrency{Limit: int64(f.limit), Lease: ttl},
		name:      f.name,
		statKey:   statKey,
	}, nil
}

// maxHoldSeconds bounds hold_ttl: a year, far past any request, well
// within what a lease holds.
const maxHoldSeconds = 365 * 24 * 3600

// holdTTL reads hold_ttl: a duration of whole seconds ("30s", "2m") or
// a number of seconds, from 1 s to a year.
func holdTTL(s string) (time.Duration, bool) {
	d, err := time.ParseDuration(s)
	if err != nil {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > maxHoldSeconds {
			return 0, false
		}
		d = time.Duration(n) * time.Second
	}
	return d, d >= time.Second && d <= maxHoldSeconds*time.Second && d%time.Second == 0
}

// loader decodes one YAML file into its form.
type loader struct{ name string }

func (l loader) errAt(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ConfigError{File: l.name, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// Keys each level accepts: every key of the peer's, and rls's own; any
// other is refused by name rather than ignored.
var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "holder", "value_to_metric", "share_threshold",
		"quota_mode", "metadata"}
	rateLimitKeys = []string{"requests_per_unit", "unit", "unlimited", "name", "replaces", "algorithm", "debt", "lease", "limit", "hold_ttl", "reserve", "spread", "calendar", "overrides"}
	replacesKeys  = []string{"name"}
	calendarKeys  = []string{"time_zone", "month", "day", "weekday", "hour", "minute"}
)

// fields checks a mapping's keys against those allowed and returns the
// values by key.
func (l loader) fields(n *yaml.Node, where string, allowed []string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, l.errAt(n, "%s must be a mapping", where)
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, l.errAt(k, "config error, key is not a string in %s", where)
		}
		if !slices.Contains(allowed, k.Value) {
			return nil, l.errAt(k, "config error, unknown key '%s' in %s", k.Value, where)
		}
		if _, dup := out[k.Value]; dup {
			return nil, l.errAt(k, "config error, key '%s' given twice in %s", k.Value, where)
		}
		out[k.Value] = v
	}
	return out, nil
}

// scalar decodes a scalar value into v, naming on failure the key and the
// descriptor it is of (its stat key; "" where there is none, or none yet).
func (l loader) scalar(n *yaml.Node, key, of string, v any) error {
	if n.Kind != yaml.ScalarNode {
		return l.errAt(n, "%v", notSingle(key, of))
	}
	if err := n.Decode(v); err != nil {
		return l.errAt(n, "%v", cannotRead(key, of, n.Value, v))
	}
	return nil
}

// notSingle is the fault of a mapping or a list where the key's one value
// goes, cannotRead of a value (as text) that is not of the kind v holds:
// of a file's value (scalar) and of an xDS resource's metadata
// (metaField) alike, naming the key and the descriptor it is of, by its
// stat key, where of gives one: 'debt' of 'd.k' (else 'domain').
func notSingle(key, of string) error {
	return fmt.Errorf("config error, %s must be a single value", fieldName(key, of))
}

func cannotRead(key, of, text string, v any) error {
	return fmt.Errorf("config error, %s: cannot read %q as %s", fieldName(key, of), text, kindOf(v))
}

func fieldName(key, of string) string {
	if of == "" {
		return "'" + key + "'"
	}
	return "'" + key + "' of '" + of + "'"
}

// scalars decodes the fields of a mapping's values given (f) into their
// places, in the order of the list, stopping at the first that cannot be
// read; of is as scalar's.
func (l loader) scalars(f map[string]*yaml.Node, of string, fields []field) error {
	for _, kv := range fields {
		if n := f[kv.name]; n != nil {
			if err := l.scalar(n, kv.name, of, kv.dst); err != nil {
				return err
			}
		}
	}
	return nil
}

// kindOf is what a value decoded into v must be, as a fault says it.
func kindOf(v any) string {
	switch v.(type) {
	case *bool:
		return "true or false"
	case *uint32:
		return "a whole number from 0 to 4294967295"
	}
	return "text"
}

// lineOf is where n was found, 0 for no node.
func lineOf(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

// decodeFile decodes a YAML config file into its form.
func decodeFile(name string, data []byte) *fileForm {
	l := loader{name: name}
	f := &fileForm{name: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		f.err = &ConfigError{File: name, Msg: "error loading config file: " + err.Error()}
		return f
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		f.err = &ConfigError{File: name, Msg: "config file cannot have empty domain"}
		return f
	}
	root, err := l.fields(doc.Content[0], "the file", rootKeys)
	if err != nil {
		f.err = err
		return f
	}
	if n := root["domain"]; n != nil {
		if err := l.scalar(n, "domain", "", &f.domain); err != nil {
			f.err = err
			return f
		}
	}
	f.domainLine = lineOf(root["domain"])
	f.descriptors, _ = l.descriptors(root["descriptors"], f.domain+".")
	return f
}

// descriptors decodes a list of descriptors, in the order build checks
// them, up to and including the first that could not be read (ok false);
// prefix is the parent's stat key and a dot (for the faults that name a
// rate_limit).
func (l loader) descriptors(list *yaml.Node, prefix string) (out []descriptorForm, ok bool) {
	if list == nil || (list.Kind == yaml.ScalarNode && list.Tag == "!!null") {
		return nil, true
	}
	if list.Kind != yaml.SequenceNode {
		return []descriptorForm{{err: l.errAt(list, "config error, 'descriptors' must be a list")}}, false
	}
	out = make([]descriptorForm, 0, len(list.Content))
	for _, item := range list.Content {
		out = append(out, descriptorForm{line: item.Line})
		d := &out[len(out)-1]
		f, err := l.fields(item, "a descriptor", descriptorKeys)
		if err != nil {
			d.err = err
			return out, false
		}
		// Its key and value first: the faults of the others name the
		// descriptor by them.
		if err := l.scalars(f, "", []field{{"key", &d.key}, {"value", &d.value}}); err != nil {
			d.err = err
			return out, false
		}
		statKey := prefix + d.key
		if d.value != "" {
			statKey += "_" + d.value
		}
		if err := l.scalars(f, statKey, []field{{"shadow_mode", &d.shadow}, {"detailed_metric", &d.detailed}, {"holder", &d.holder},
			{"value_to_metric", &d.toMetric}, {"share_threshold", &d.share}, {"quota_mode", &d.quota}}); err != nil {
			d.err = err
			return out, false
		}
		if n := f["metadata"]; n != nil {
			if d.metadata, err = l.metadata(n); err != nil {
				d.err = err
				return out, false
			}
		}
		if n := f["rate_limit"]; n != nil {
			d.rateLimit = l.rateLimit(n, statKey)
			if d.rateLimit.err != nil || len(d.rateLimit.replaces) > 0 && d.rateLimit.replaces[len(d.rateLimit.replaces)-1].err != nil {
				return out, false
			}
		}
		if d.descriptors, ok = l.descriptors(f["descriptors"], statKey+"."); !ok {
			return out, false
		}
	}
	return out, true
}

// metadata reads a descriptor's metadata: any mapping, sent back as it is
// in dynamic_metadata (a protobuf Struct: numbers are doubles).
func (l loader) metadata(n *yaml.Node) (*structpb.Struct, error) {
	var m map[string]any
	if n.Kind != yaml.MappingNode || n.Decode(&m) != nil {
		return nil, l.errAt(n, "config error, 'metadata' must be a mapping")
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		return nil, l.errAt(n, "config error, 'metadata': %v", err)
	}
	return st, nil
}

// rateLimit decodes a descriptor's rate_limit: its err, or its last
// replaces entry's, is set when it could not be read.
func (l loader) rateLimit(n *yaml.Node, statKey string) *rateLimitForm {
	r := &rateLimitForm{line: n.Line}
	f, err := l.fields(n, "rate_limit of '"+statKey+"'", rateLimitKeys)
	if err != nil {
		r.err = err
		return r
	}
	if err := l.scalars(f, statKey, []field{{"requests_per_unit", &r.perUnit}, {"unit", &r.unit}, {"name", &r.name}, {"algorithm", &r.algorithm}, {"unlimited", &r.unlimited},
		{"debt", &r.debt}, {"lease", &r.lease}, {"limit", &r.limit}, {"hold_ttl", &r.holdTTL}, {"reserve", &r.reserve}, {"spread", &r.spread}, {"overrides", &r.overrides}}); err != nil {
		r.err = err
		return r
	}
	r.perUnitLine, r.unitLine, r.algorithmLine = lineOf(f["requests_per_unit"]), lineOf(f["unit"]), lineOf(f["algorithm"])
	r.debtLine, r.leaseLine = lineOf(f["debt"]), lineOf(f["lease"])
	r.limitLine, r.holdTTLLine, r.reserveLine = lineOf(f["limit"]), lineOf(f["hold_ttl"]), lineOf(f["reserve"])
	r.spreadLine, r.overridesLine = lineOf(f["spread"]), lineOf(f["overrides"])
	if x := f["calendar"]; x != nil {
		c := &calendarForm{line: x.Line}
		cf, err := l.fields(x, "calendar of '"+statKey+"'", calendarKeys)
		if err == nil {
			err = l.scalars(cf, statKey, []field{{"time_zone", &c.zone}, {"month", &c.month}, {"day", &c.day},
				{"weekday", &c.weekday}, {"hour", &c.hour}, {"minute", &c.minute}})
		}
		if err != nil {
			r.err = err
			return r
		}
		r.calendar = c
	}
	v := f["replaces"]
	if v == nil {
		return r
	}
	if v.Kind != yaml.SequenceNode {
		r.replaces = []replaceForm{{err: l.errAt(v, "config error, 'replaces' must be a list")}}
		return r
	}
	for _, item := range v.Content {
		r.replaces = append(r.replaces, replaceForm{line: item.Line})
		rp := &r.replaces[len(r.replaces)-1]
		rf, err := l.fields(item, "replaces", replacesKeys)
		if err != nil {
			rp.err = err
			return r
		}
		if x := rf["name"]; x != nil {
			if err := l.scalar(x, "name", statKey, &rp.name); err != nil {
				rp.err = err
				return r
			}
		}
	}
	return r
}

// leases reports whether a's limits are decided through a local tier when
// lease: true, as the command table says of its family.
func leases(a Algorithm) bool { return lease.Leases(limitOf(a, 1, time.Second)) }

// leasing names the algorithms that lease, for errors: "fixed_window, gcra
// or token_bucket".
var leasing = func() string {
	var names []string
	for _, a := range algorithms {
		if leases(a) {
			names = append(names, string(a))
		}
	}
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " or " + names[last]
}()

// limitOf is the module's limit for n requests per unit.
func limitOf(a Algorithm, n int64, unit time.Duration) client.Limit {
	switch a {
	case SlidingWindow:
		return client.SlidingWindow(n, unit)
	case SlidingLog:
		return client.SlidingLog(n, unit)
	case GCRA:
		return client.GCRA(n-1, n, unit)
	case TokenBucket:
		return client.TokenBucket(n, n, unit)
	}
	return client.FixedWindow(n, unit)
}

// match reports whether value matches a wildcard split on its '*'s: each
// '*' stands for any run of bytes, the empty one included.
func match(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// errNoConfig is a request met before any config was loaded.
var errNoConfig = errors.New("no rate limit configuration loaded")

// lookup finds a descriptor's rule as the peer does: each entry in turn,
// first as "key_value", then against the wildcards, then as "key" alone; the
// rule counts only at the request's last entry. statKey is the metric key
// (the request's own values when the rule asks for detailed metrics).
func (c *Config) lookup(domain string, d *rlv3.RateLimitDescriptor) (r *rule, statKey string) {
	level := c.domains[domain]
	if level == nil {
		return nil, ""
	}
	for i, e := range d.Entries {
		final := e.Key + "_" + e.Value
		next := level.children[final]
		if next == nil {
			for _, w := range level.wild {
				if match(w.parts, final) {
					next = level.children[w.key]
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.Key]
		}
		if next == nil {
			break
		}
		if next.rule != nil && i == len(d.Entries)-1 {
			r = next.rule
		}
		if len(next.children) == 0 {
			break
		}
		level = next
	}
	if r == nil {
		return nil, ""
	}
	if !r.detailed && r.levels == nil {
		return r, r.statKey
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range d.Entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if v, ok := statValue(r, i, e.Value); ok {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return r, b.String()
}

// statValue is what the stat key says of the request's i-th entry, of
// value v, and whether it says anything, as the peer's: a share_threshold
// wildcard its pattern; else under detailed_metric the value (an empty
// one too, but beside a share_threshold); a wildcard the value with
// value_to_metric, else its pattern; a key and value of the config its
// value; a key alone the value with value_to_metric, else nothing; an
// empty value, nothing.
func statValue(r *rule, i int, v string) (string, bool) {
	if r.levels == nil {
		return v, true // detailed_metric
	}
	switch l := r.levels[i]; {
	case l.share:
		return l.value, true
	case r.detailed:
		return v, v != "" || !slices.ContainsFunc(r.levels, func(l level) bool { return l.share })
	case l.wildcard && !l.toMetric:
		return l.value, true
	case l.value == "" && !l.toMetric:
		return "", false
	}
	return v, v != ""
}
