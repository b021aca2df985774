package integration

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the calendar windows' zones, whatever the machine has

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/calendar"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// The Lua engine is proven against the module by differential tests: the
// same random call sequences through both, on one server whose wall clock
// the test stops and moves (build/clockshift.so), so the module's cached
// command time and the scripts' TIME read the same instant. Neither engine
// has a test-only path: the scripts run as shipped, and every reply, error
// and stored value must be the same, byte for byte.

// stopClock stops the clock of servers started with clockDir dir at the
// instant start, and returns the function that moves it.
func stopClock(t *testing.T, dir string, start int64) func(ns int64) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "at"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	set := func(ns int64) {
		// Fixed width, written in place: the server maps this file.
		if _, err := f.WriteAt(fmt.Appendf(nil, "%020d", ns), 0); err != nil {
			t.Fatal(err)
		}
	}
	set(start)
	if _, err := f.WriteAt([]byte("            \n"), 20); err != nil {
		t.Fatal(err)
	}
	return set
}

// engines calls a command through the module, its script or its function.
type engines struct {
	shas map[string]string // command, lower case -> SHA1
}

// loadScripts loads every script and the FUNCTION library into c's server.
func loadScripts(t *testing.T, c *redis.Client) engines {
	t.Helper()
	lib, version := lua.Library()
	if name, err := c.FunctionLoadReplace(ctx, lib).Result(); err != nil || name != lua.LibraryName {
		t.Fatalf("FUNCTION LOAD: %q %v", name, err)
	}
	if v, err := c.FCallRO(ctx, lua.VersionFunction, nil).Text(); err != nil || v != version {
		t.Fatalf("FCALL_RO %s: %q %v, want %q", lua.VersionFunction, v, err, version)
	}
	e := engines{shas: map[string]string{}}
	for _, name := range lua.Commands() {
		s, _ := lua.Get(name)
		sha, err := c.ScriptLoad(ctx, s.Source).Result()
		if err != nil {
			t.Fatalf("SCRIPT LOAD %s: %v", name, err)
		}
		if sha != s.SHA1 {
			t.Fatalf("%s: server SHA1 %s, package %s", name, sha, s.SHA1)
		}
		e.shas[strings.ToLower(name)] = sha
	}
	return e
}

// module calls the command (in lower case, as the scripts name themselves
// in arity errors) and returns its reply or error as text. RL.ALL and
// RL.PEEK take numkeys and their keys; the others their one key (RL.HOLD
// and RL.SETTLE their two).
func (e engines) module(c *redis.Client, cmd string, keys, args []string) string {
	a := []any{cmd}
	if strings.HasPrefix(cmd, "rl.") && cmd != "rl.hold" && cmd != "rl.settle" {
		a = append(a, len(keys))
	}
	a = append(append(a, anys(keys)...), anys(args)...)
	return replyText(c.Do(ctx, a...).Result())
}

// script calls the command's script with EVALSHA, or EVALSHA_RO for a peek.
func (e engines) script(c *redis.Client, cmd string, keys, args []string) string {
	sha, ok := e.shas[cmd]
	if !ok {
		return "no script for " + cmd
	}
	s, _ := lua.Get(cmd)
	if s.ReadOnly {
		return replyText(c.EvalShaRO(ctx, sha, keys, anys(args)...).Result())
	}
	return replyText(c.EvalSha(ctx, sha, keys, anys(args)...).Result())
}

// function calls the command's function with FCALL, or FCALL_RO for a
// peek.
func (e engines) function(c *redis.Client, cmd string, keys, args []string) string {
	s, ok := lua.Get(cmd)
	if !ok {
		return "no function for " + cmd
	}
	if s.ReadOnly {
		return replyText(c.FCallRO(ctx, s.Function, keys, anys(args)...).Result())
	}
	return replyText(c.FCall(ctx, s.Function, keys, anys(args)...).Result())
}

func anys(args []string) []any {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	return a
}

func replyText(v any, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprint(v)
}

// state is a key's type, value (a sorted set's members and scores) and
// absolute expiry, in one round trip.
func state(c *redis.Client, key string) string {
	p := c.Pipeline()
	typ := p.Type(ctx, key)
	get := p.Do(ctx, "GET", key)
	z := p.ZRangeWithScores(ctx, key, 0, -1)
	exp := p.Do(ctx, "PEXPIRETIME", key)
	_, _ = p.Exec(ctx)
	v, err := get.Result()
	if err != nil && err != redis.Nil && !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%s %v %v %d", typ.Val(), v, z.Val(), exp.Val())
}

// diffCase makes one random command: GCRA (under both names), the token
// bucket, the shaper, the sliding window counter, the fixed window or the
// sliding log,
// consuming or peeking,
// with their arguments fixed per sequence and a random cost and options.
type diffCase struct {
	cmd, peek string
	params    []string
	limit     int64
	refunds   bool // the cost may be negative
	reserve   bool
}

func randomCase(r *rand.Rand) diffCase {
	pick := func(v ...int64) string { return fmt.Sprint(v[r.IntN(len(v))]) }
	periods := []int64{1, 2, 60, 3600, 86400, 365 * 86400, 9223372036}
	var c diffCase
	switch r.IntN(8) {
	case 6:
		c = diffCase{cmd: "sl.hit", peek: "sl.peek", refunds: true, reserve: true}
		c.params = []string{pick(1, 2, 5, 16, 100, 1000, 100000), pick(1, 2, 10, 60, 3600, 1e9, 9223372036)}
		c.limit, _ = strconv.ParseInt(c.params[0], 10, 64)
		return c
	case 4, 5:
		c = diffCase{cmd: "sw.hit", peek: "sw.peek", refunds: true, reserve: true}
		if r.IntN(2) == 0 {
			c = diffCase{cmd: "fw.hit", peek: "fw.peek", refunds: true, reserve: true}
		}
		c.params = []string{pick(1, 2, 5, 16, 100, 6000, 1<<40, 1<<53-1), pick(1, 2, 10, 60, 3600, 86400, 1e9, 1e9+1, 9223372036)}
		c.limit, _ = strconv.ParseInt(c.params[0], 10, 64)
		return c
	case 0, 1:
		c = diffCase{cmd: "gcra.throttle", peek: "gcra.peek", refunds: true, reserve: true}
		if r.IntN(2) == 0 {
			c.cmd = "cl.throttle"
		}
		c.params = []string{pick(0, 1, 2, 5, 15, 99, 5999, 1<<40, 1<<53-2), pick(1, 3, 7, 30, 1000, 6000, 1e9, 1<<62, math.MaxInt64), pick(periods...)}
	case 2:
		c = diffCase{cmd: "tb.take", peek: "tb.peek", refunds: true, reserve: true}
		c.params = []string{pick(1, 2, 5, 10, 100, 6000, 1<<50, 1<<53-1), pick(1, 3, 7, 30, 6000, 1e9, 1<<62), pick(periods...)}
	default:
		c = diffCase{cmd: "lb.enqueue", peek: "lb.peek"}
		c.params = []string{pick(0, 1, 2, 5, 10, 100, 1<<53-1), pick(1, 3, 7, 30, 6000, 1e9), pick(periods...)}
	}
	c.limit, _ = strconv.ParseInt(c.params[0], 10, 64)
	if c.cmd == "gcra.throttle" || c.cmd == "cl.throttle" {
		c.limit++
	}
	return c
}

// diffNow is the stopped clocks' time while a sequence makes its call.
var diffNow int64

// zones are the time zones of the calendar windows the tests send: two
// with daylight saving on different days, one without.
var zones = func() (z [3]*time.Location) {
	for i, name := range []string{"Europe/Berlin", "America/New_York", "Asia/Tokyo"} {
		var err error
		if z[i], err = time.LoadLocation(name); err != nil {
			panic(err)
		}
	}
	return z
}()

// spanArgs is SPAN start end next for a calendar window: a day (from a
// billing hour), a week, a month (from a billing day) or a year, in
// Berlin, New York or Tokyo, holding the clock's time, a time a little
// behind or ahead of it (a client's clock), one long past, or a day of
// 2027's daylight-saving changes and month ends (23-, 25-hour days; 28- to
// 31-day months); sometimes out of order.
func spanArgs(r *rand.Rand) []string {
	loc := zones[r.IntN(len(zones))]
	p := calendar.Period{Unit: calendar.Unit(1 + r.IntN(4)), Location: loc}
	switch p.Unit {
	case calendar.Day:
		p.Anchor.Hour = []int{0, 0, 2, 3, 23}[r.IntN(5)] // 02:00 and 03:00: the hours daylight saving skips or repeats
	case calendar.Month:
		p.Anchor.Day = []int{0, 15, 29, 31}[r.IntN(4)]
	}
	at := time.Unix(0, diffNow)
	switch r.IntN(7) {
	case 0:
		at = at.Add(-time.Duration(r.Int64N(int64(2 * time.Second)))) // a client behind the server
	case 1:
		at = at.Add(time.Duration(r.Int64N(int64(2 * time.Second)))) // ahead
	case 2:
		at = at.Add(-400 * 24 * time.Hour) // long past
	case 3:
		days := []time.Time{time.Date(2027, 3, 28, 2, 30, 0, 0, loc), time.Date(2027, 10, 31, 2, 30, 0, 0, loc),
			time.Date(2027, 3, 14, 2, 30, 0, 0, loc), time.Date(2027, 11, 7, 1, 30, 0, 0, loc), time.Date(2027, 2, 28, 12, 0, 0, 0, loc)}
		at = days[r.IntN(len(days))]
	}
	start, end := p.Bounds(at)
	_, next := p.Bounds(end)
	b := []int64{start.UnixMilli(), end.UnixMilli(), next.UnixMilli()}
	if r.IntN(15) == 0 {
		b[r.IntN(3)] = []int64{0, -1, b[0], b[2] + 1, 9223372036001}[r.IntN(5)]
	}
	return []string{[]string{"SPAN", "span"}[r.IntN(2)], fmt.Sprint(b[0]), fmt.Sprint(b[1]), fmt.Sprint(b[2])}
}

// spread reports a window that SPREAD shifts: a fixed or sliding window.
func (c diffCase) spread() bool { return c.cmd == "fw.hit" || c.cmd == "sw.hit" }

// args makes one call's arguments: sometimes a bad one.
func (c diffCase) args(r *rand.Rand) (cmd string, args []string) {
	cmd = c.cmd
	if r.IntN(5) == 0 {
		cmd = c.peek
	}
	args = append([]string(nil), c.params...)
	costs := []int64{1, 1, 1, 0, 2, 3, c.limit, c.limit + 1, math.MaxInt64}
	if c.refunds {
		costs = append(costs, -1, -3, -c.limit, math.MinInt64)
	}
	if r.IntN(4) > 0 {
		args = append(args, fmt.Sprint(costs[r.IntN(len(costs))]))
	}
	if r.IntN(2) == 0 {
		args = append(args, []string{"MS", "ms", "Ms"}[r.IntN(3)])
	}
	if c.reserve && r.IntN(4) == 0 {
		args = append(args, "RESERVE", fmt.Sprint([]int64{0, 1, 2, c.limit, c.limit + 1}[r.IntN(5)]))
	}
	if r.IntN(4) == 0 { // UPTO n: a grant (peeks and LB.ENQUEUE refuse it)
		args = append(args, []string{"UPTO", "upto"}[r.IntN(2)], fmt.Sprint([]int64{1, 2, 3, 7, c.limit, 1000000, 0, 1000001}[r.IntN(8)]))
	}
	if r.IntN(4) == 0 { // DEBT: a charge taken past the limit (refused beside RESERVE or UPTO)
		args = append(args, []string{"DEBT", "debt"}[r.IntN(2)])
	}
	switch {
	case c.cmd == "fw.hit" && r.IntN(3) == 0 || r.IntN(60) == 0: // SPAN: a window on the calendar (the other families refuse it)
		args[1] = []string{"90000", "694800", "2682000", "31626000", "60"}[r.IntN(5)] // the longest day, week, month, year; too short
		args = append(args, spanArgs(r)...)
	case c.spread() && r.IntN(3) > 0 || r.IntN(40) == 0: // SPREAD: the key's own windows (the other families refuse it)
		args = append(args, []string{"SPREAD", "spread"}[r.IntN(2)])
	}
	if r.IntN(12) == 0 { // bad input
		bad := []string{"", "x", "1.5", "1e3", " 1", "0x10", "-1", "0", "9223372036854775808", "-9223372036854775809",
			"9007199254740991", "9007199254740992", "9223372036", "9223372037", "1000000000", "1000000001",
			"RESERVE", "reserve", "MS", "EACH", "UPTO", "DEBT", "SPREAD", "\xff\"\\", strings.Repeat("a", 40)}
		switch r.IntN(4) {
		case 0:
			args = args[:r.IntN(len(args))]
		case 1:
			for len(args) < 15 {
				args = append(args, "MS")
			}
		default:
			args[r.IntN(len(args))] = bad[r.IntN(len(bad))]
		}
	}
	return cmd, args
}

// foreignValues are what a key may hold before a sequence: nothing, or
// data of another kind that both engines must refuse alike.
var foreignValues = []func(c *redis.Client, key string, now time.Time) error{
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, "42", time.Minute).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, "hello", time.Minute).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, "+1795448790000000000", time.Minute).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, fmt.Sprint(now.Add(2*time.Second).UnixNano()), 0).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, fmt.Sprint(now.Add(100*24*time.Hour).UnixNano()), time.Minute).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, fmt.Sprint(now.Add(time.Second).UnixNano()), time.Minute).Err()
	},
	func(c *redis.Client, key string, now time.Time) error { return c.HSet(ctx, key, "a", 1).Err() },
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, "9223372036854775807", time.Hour).Err()
	},
	// Instants with leading zeros: one in range, one past 2^63 - 1.
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, fmt.Sprintf("000%d", now.Add(300*time.Millisecond).UnixNano()), time.Hour).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, "09223372036854775808", time.Hour).Err()
	},
	// Window states: a count that outlives its window, counters from a
	// window ahead (a clock that stepped back), huge counts, and shapes
	// that are not the counter's.
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, "3", 48*time.Hour).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, fmt.Sprintf("%d:4:9", now.Unix()/60+5), time.Hour).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, fmt.Sprintf("%d:%d:%d", now.Unix()/60, int64(math.MaxInt64), int64(math.MaxInt64)), time.Hour).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, fmt.Sprintf("%d:0:%d", now.Unix()/60-1, int64(1)<<60), time.Hour).Err()
	},
	func(c *redis.Client, key string, now time.Time) error { return c.Set(ctx, key, "1:2", time.Hour).Err() },
	func(c *redis.Client, key string, now time.Time) error {
		return c.Set(ctx, key, "1:2:3:4", time.Hour).Err()
	},
	// Sorted sets: a log's own entries (one dated ahead of now, as a clock
	// that stepped back leaves), and sets that are not logs.
	func(c *redis.Client, key string, now time.Time) error {
		return zset(c, key, time.Minute, now.UnixMicro()-2e6, now.UnixMicro()-1e6, now.UnixMicro())
	},
	func(c *redis.Client, key string, now time.Time) error {
		return zset(c, key, time.Hour, now.UnixMicro()-3e6, now.UnixMicro()+30e6)
	},
	func(c *redis.Client, key string, now time.Time) error { return zset(c, key, 0, now.UnixMicro()) },
	func(c *redis.Client, key string, now time.Time) error {
		return c.ZAdd(ctx, key, redis.Z{Score: 1e300, Member: "x"}).Err()
	},
	func(c *redis.Client, key string, now time.Time) error {
		if err := zset(c, key, time.Hour, now.UnixMicro()-1e6, now.UnixMicro()); err != nil {
			return err
		}
		return c.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMicro() - 5e5), Member: "not-the-log's"}).Err()
	},
	// A concurrency state: two leases, the key expiring at the second
	// after the latest, as the limiter leaves it.
	func(c *redis.Client, key string, now time.Time) error {
		end := now.Add(3500 * time.Millisecond)
		if err := c.ZAdd(ctx, key, redis.Z{Score: float64(now.Add(time.Second).UnixMicro()), Member: "r1"},
			redis.Z{Score: float64(end.UnixMicro()), Member: "r9"}).Err(); err != nil {
			return err
		}
		return c.PExpireAt(ctx, key, end.Truncate(time.Second).Add(time.Second)).Err()
	},
	// 100 holders whose leases lapse within a second: more than one write
	// sweeps (64).
	func(c *redis.Client, key string, now time.Time) error {
		zs := make([]redis.Z, 100)
		for i := range zs {
			zs[i] = redis.Z{Score: float64(now.Add(time.Duration(i) * 5 * time.Millisecond).UnixMicro()), Member: fmt.Sprintf("h%03d", i)}
		}
		if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
			return err
		}
		last := now.Add(495 * time.Millisecond)
		return c.PExpireAt(ctx, key, last.Truncate(time.Second).Add(time.Second)).Err()
	},
}

// zset writes a sliding log's entries at the given Unix µs, expiring after
// ttl (none when 0).
func zset(c *redis.Client, key string, ttl time.Duration, us ...int64) error {
	for i, u := range us {
		if err := c.ZAdd(ctx, key, redis.Z{Score: float64(u), Member: fmt.Sprintf("%d-%d", u, i)}).Err(); err != nil {
			return err
		}
	}
	if ttl > 0 {
		return c.Expire(ctx, key, ttl).Err()
	}
	return nil
}

// A random clock step: mostly small and forward, sometimes long, sometimes
// back (a clock that steps back costs at most one refill in both engines).
func clockStep(r *rand.Rand, res int64) int64 {
	var d int64
	switch r.IntN(10) {
	case 0:
		d = 0
	case 1, 2, 3:
		d = r.Int64N(int64(time.Second))
	case 4, 5:
		d = r.Int64N(int64(time.Minute))
	case 6:
		d = r.Int64N(int64(48 * time.Hour))
	case 7:
		d = -r.Int64N(int64(time.Hour))
	default:
		d = r.Int64N(int64(10 * time.Millisecond))
	}
	return d / res * res
}

// luaStart is when the stopped clocks of the Lua tests start.
var luaStart = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// stoppedServer is a server with the module and the scripts loaded, its
// clock stopped at luaStart and moved by setClock, and a client on each of
// its first n databases.
type stoppedServer struct {
	*server
	e        engines
	dbs      []*redis.Client
	setClock func(ns int64)
}

func startStopped(t *testing.T, f flavor, n int) stoppedServer {
	t.Helper()
	dir := t.TempDir()
	setClock := stopClock(t, dir, luaStart.UnixNano())
	s := startFor(t, f, opts{module: true, clockDir: dir})
	st := stoppedServer{server: s, e: loadScripts(t, s.rdb), setClock: setClock}
	for i := range n {
		c := redis.NewClient(&redis.Options{Addr: s.addr(), DB: i, Protocol: 2})
		t.Cleanup(func() { c.Close() })
		st.dbs = append(st.dbs, c)
	}
	return st
}

// sequence is one run of calls against fixed keys: next makes each call.
type sequence struct {
	keys []string // every key the calls touch, for their states
	next func(r *rand.Rand) (cmd string, keys, args []string)
	// plan is a hash the calls name with LIMITS plan field, and limits a
	// field and value for it, which differential sets in every database
	// before the first call and changes between calls (nil: none).
	plan   string
	limits func(r *rand.Rand) (field, value string)
}

// limitsValue is a value for a LIMITS field overriding c's parameters:
// mostly others the family takes, sometimes ones it refuses (too few or
// too many words, out of range, not integers) or spaced oddly.
func (c diffCase) limitsValue(r *rand.Rand) string {
	p := slices.Clone(c.params)
	for i := range p {
		if r.IntN(2) == 0 {
			p[i] = fmt.Sprint([]int64{1, 2, 3, 5, 10, 60, 100, 2682000}[r.IntN(8)])
		}
	}
	switch r.IntN(12) {
	case 0:
		return p[0]
	case 1:
		return strings.Join(append(p, "1"), " ")
	case 2:
		p[r.IntN(len(p))] = []string{"x", "-1", "0", "1.5", "9223372036854775808", "\t7", "\xff", ""}[r.IntN(8)]
	case 3:
		return "  " + strings.Join(p, "   ") + " "
	}
	return strings.Join(p, " ")
}

// limitsArgs is LIMITS plan field naming the sequence's plan (mostly), a
// field it lacks, or the key itself (a hash of another type, or none).
func limitsArgs(r *rand.Rand, plan, field, key string) []string {
	switch r.IntN(10) {
	case 0:
		field = "absent"
	case 1:
		plan = key
	}
	return []string{[]string{"LIMITS", "limits"}[r.IntN(2)], plan, field}
}

// differential runs random sequences through the module on database 0, the
// scripts on database 1, the library's functions on database 2, and a
// random engine per call on database 3 (so that key names, which errors
// quote, are the same), at instants the test sets, and fails at the first
// reply or stored state (value, members, PEXPIRETIME) that differs.
func differential(t *testing.T, f flavor, seqs int, newSeq func(r *rand.Rand, e engines, probe *redis.Client, n int) sequence) {
	st := startStopped(t, f, 5) // database 4 probes arguments
	e, dbs, probe, setClock := st.e, st.dbs[:4], st.dbs[4], st.setClock
	now := luaStart.UnixNano()
	// Redis 7.0's module clock is in ms: instants there are whole ms.
	res := int64(time.Microsecond)
	if !f.cachedClock {
		res = int64(time.Millisecond)
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LUA_SEED"); v != "" { // to replay a failure: its seed
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	r := rand.New(rand.NewPCG(seed, 15))
	calls, refused, errs, foreign := 0, 0, 0, 0
	spans, spansDecided := 0, 0   // calls with SPAN, and those decided
	limits, limitsDecided := 0, 0 // calls with LIMITS, and those decided
	for n := range seqs {
		sq := newSeq(r, e, probe, n)
		setPlan := func() {
			field, v := sq.limits(r)
			for _, c := range dbs {
				if err := c.HSet(context.Background(), sq.plan, field, v).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		for range 4 {
			if sq.limits != nil {
				setPlan()
			}
		}
		if r.IntN(8) == 0 {
			put := foreignValues[r.IntN(len(foreignValues))]
			for _, c := range dbs {
				for _, k := range sq.keys {
					if err := put(c, k, time.Unix(0, now)); err != nil {
						t.Fatal(err)
					}
				}
			}
			foreign++
		}
		for step := range 30 {
			now += clockStep(r, res)
			setClock(now)
			diffNow = now
			switch { // the plan changes between calls
			case sq.limits != nil && r.IntN(6) == 0:
				setPlan()
			case sq.limits != nil && r.IntN(30) == 0:
				for _, c := range dbs {
					c.Del(context.Background(), sq.plan)
				}
			}
			cmd, keys, args := sq.next(r)
			viaM := e.module(dbs[0], cmd, keys, args)
			viaS := e.script(dbs[1], cmd, keys, args)
			viaF := e.function(dbs[2], cmd, keys, args)
			viaX := []func(*redis.Client, string, []string, []string) string{e.module, e.script, e.function}[r.IntN(3)](dbs[3], cmd, keys, args)
			what := fmt.Sprintf("seed %d, sequence %d step %d at %d: %s %s %s", seed, n, step, now, cmd, strings.Join(keys, " "), strings.Join(args, " "))
			if viaS != viaM || viaF != viaM || viaX != viaM {
				t.Fatalf("%s\nmodule    %s\nscript    %s\nfunction  %s\nany       %s", what, viaM, viaS, viaF, viaX)
			}
			for _, k := range sq.keys {
				stM, stS, stF, stX := state(dbs[0], k), state(dbs[1], k), state(dbs[2], k), state(dbs[3], k)
				if stS != stM || stF != stM || stX != stM {
					t.Fatalf("%s: reply %s\n%s after the module  %s\nafter the script  %s\nafter the function  %s\nafter any  %s", what, viaM, k, stM, stS, stF, stX)
				}
			}
			calls++
			switch {
			case strings.HasPrefix(viaM, "error"):
				errs++
			case strings.HasPrefix(viaM, "[1 "):
				refused++
			}
			if slices.ContainsFunc(args, func(a string) bool { return strings.EqualFold(a, "SPAN") }) {
				spans++
				if !strings.HasPrefix(viaM, "error") {
					spansDecided++
				}
			}
			if slices.ContainsFunc(args, func(a string) bool { return strings.EqualFold(a, "LIMITS") }) {
				limits++
				if !strings.HasPrefix(viaM, "error") {
					limitsDecided++
				}
			}
		}
	}
	t.Logf("seed %d: %d calls alike (%d refused, %d errors; %d sequences on foreign data; %d with SPAN, %d of them decided; "+
		"%d with LIMITS, %d of them decided)", seed, calls, refused, errs, foreign, spans, spansDecided, limits, limitsDecided)
	if refused < calls/20 || errs < calls/50 || spansDecided < spans/20 || limitsDecided < limits/10 {
		t.Fatalf("the sequences exercised too little: %d refused, %d errors in %d calls; %d of %d SPAN calls, %d of %d LIMITS calls decided",
			refused, errs, calls, spansDecided, spans, limitsDecided, limits)
	}
}

// TestLuaMatchesModule: random sequences of GCRA.THROTTLE, CL.THROTTLE,
// TB.TAKE, LB.ENQUEUE, SW.HIT, FW.HIT, SL.HIT and their peeks, with costs,
// refunds, MS, RESERVE, bad arguments, foreign data and clock steps: every
// reply and every stored state must be the same at every step.
func TestLuaMatchesModule(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		differential(t, f, 250, func(r *rand.Rand, e engines, probe *redis.Client, n int) sequence {
			// Most sequences run on arguments the arithmetic takes; one in
			// eight keeps arguments it refuses (overflow, rate, range).
			c := randomCase(r)
			for try := 0; try < 8 && r.IntN(8) > 0 && strings.HasPrefix(e.module(probe, c.peek, []string{"probe"}, c.params), "error"); try++ {
				c = randomCase(r)
			}
			key := fmt.Sprintf("{lua%d}", n)
			plan := key + ":plan"
			return sequence{keys: []string{key}, next: func(r *rand.Rand) (string, []string, []string) {
				cmd, args := c.args(r)
				if r.IntN(3) == 0 { // LIMITS: the parameters from the plan, when it holds them
					args = append(args, limitsArgs(r, plan, "f", key)...)
				}
				return cmd, []string{key}, args
			}, plan: plan, limits: func(r *rand.Rand) (string, string) { return "f", c.limitsValue(r) }}
		})
	})
}

// TestLuaMatchesModuleAll: RL.ALL and RL.PEEK over one to four limits of
// every family it takes, with EACH, RESERVE, refusals by any limit, and
// bad input of every kind it names (unknown limiters, LB, missing words,
// too few or too many limiters, a key named twice).
func TestLuaMatchesModuleAll(t *testing.T) {
	families := map[string]string{"gcra.throttle": "GCRA", "cl.throttle": "GCRA", "tb.take": "TB", "sw.hit": "SW", "fw.hit": "FW", "sl.hit": "SL"}
	eachFlavor(t, func(t *testing.T, f flavor) {
		differential(t, f, 150, func(r *rand.Rand, e engines, probe *redis.Client, n int) sequence {
			lims := make([]diffCase, 1+r.IntN(4))
			keys := make([]string, len(lims))
			for i := range lims {
				for try := 0; ; try++ {
					lims[i] = randomCase(r)
					if families[lims[i].cmd] == "" {
						continue
					}
					if try > 8 || r.IntN(12) == 0 || !strings.HasPrefix(e.module(probe, lims[i].peek, []string{"probe"}, lims[i].params), "error") {
						break
					}
				}
				keys[i] = fmt.Sprintf("{all%d}:k%d", n, i)
			}
			plan := fmt.Sprintf("{all%d}:plan", n)
			return sequence{keys: keys, plan: plan, limits: func(r *rand.Rand) (string, string) {
				j := r.IntN(len(lims))
				return fmt.Sprint("f", j), lims[j].limitsValue(r)
			}, next: func(r *rand.Rand) (string, []string, []string) {
				cmd := "rl.all"
				if r.IntN(5) == 0 {
					cmd = "rl.peek"
				}
				var args []string
				for j, l := range lims {
					name := families[l.cmd]
					if r.IntN(4) == 0 {
						name = strings.ToLower(name)
					}
					costs := []int64{1, 1, 0, 2, l.limit, l.limit + 1, math.MaxInt64}
					if l.refunds {
						costs = append(costs, -1, -l.limit)
					}
					args = append(append(append(args, name), l.params...), fmt.Sprint(costs[r.IntN(len(costs))]))
					switch {
					case l.cmd == "fw.hit" && r.IntN(3) == 0 || r.IntN(40) == 0: // SPAN follows its limiter
						args[len(args)-2] = "2682000"
						args = append(args, spanArgs(r)...)
					case l.spread() && r.IntN(2) == 0 || r.IntN(30) == 0: // SPREAD follows its limiter
						args = append(args, []string{"SPREAD", "spread"}[r.IntN(2)])
					}
					if r.IntN(3) == 0 { // LIMITS follows its limiter too
						args = append(args, limitsArgs(r, plan, fmt.Sprint("f", j), keys[j])...)
					}
				}
				if r.IntN(2) == 0 {
					args = append(args, "MS")
				}
				if r.IntN(2) == 0 {
					args = append(args, "EACH")
				}
				if r.IntN(4) == 0 {
					l := lims[r.IntN(len(lims))]
					args = append(args, "RESERVE", fmt.Sprint([]int64{0, 1, l.limit, l.limit + 1}[r.IntN(4)]))
				}
				if r.IntN(3) == 0 {
					args = append(args, "UPTO", fmt.Sprint([]int64{1, 2, 5, 100, 1000000, 0}[r.IntN(6)]))
				}
				if r.IntN(4) == 0 {
					args = append(args, "DEBT")
				}
				ks := keys
				if r.IntN(10) == 0 { // bad input
					switch r.IntN(7) {
					case 0:
						args[0] = []string{"LB", "lb", "XX", "", "RESERVE", "MS", "UPTO"}[r.IntN(7)]
					case 1:
						args = args[:len(args)-1-r.IntN(min(len(args)-1, 3))]
					case 2:
						args = append(args, "FW", "1", "1", "1")
					case 3:
						if len(ks) > 1 {
							ks = append([]string{ks[0]}, ks[:len(ks)-1]...)
						}
					case 4:
						args[1+r.IntN(len(args)-1)] = []string{"x", "-1", "0", "1.5", "9223372036854775808", "9007199254740992"}[r.IntN(6)]
					case 5:
						args = append(args, "EVERY")
					default:
						ks = append(ks[:len(ks):len(ks)], fmt.Sprintf("{all%d}:extra", n))
					}
				}
				return cmd, ks, args
			}}
		})
	})
}

// TestLuaMatchesModuleHold: RL.HOLD and RL.SETTLE on one limiter of every
// family they take, with two holds that add up, settle above, below and at
// their estimates, lapse as the clock moves and are settled again, and bad
// input of every kind they name (ttl, estimate and actual out of range, a
// shaper, an option in the limiter's place, an option they do not take,
// one key as both) and on foreign data in the hold key as in the limiter's.
func TestLuaMatchesModuleHold(t *testing.T) {
	families := map[string]string{"gcra.throttle": "GCRA", "cl.throttle": "GCRA", "tb.take": "TB", "sw.hit": "SW", "fw.hit": "FW", "sl.hit": "SL"}
	eachFlavor(t, func(t *testing.T, f flavor) {
		differential(t, f, 150, func(r *rand.Rand, e engines, probe *redis.Client, n int) sequence {
			var l diffCase
			for try := 0; ; try++ {
				l = randomCase(r)
				if families[l.cmd] == "" {
					continue
				}
				if try > 8 || r.IntN(12) == 0 || !strings.HasPrefix(e.module(probe, l.peek, []string{"probe"}, l.params), "error") {
					break
				}
			}
			key := fmt.Sprintf("{hold%d}:k", n)
			holds := []string{key + ":h1", key + ":h2"}
			return sequence{keys: append([]string{key}, holds...), plan: key + ":plan", limits: func(r *rand.Rand) (string, string) {
				return "f", l.limitsValue(r)
			}, next: func(r *rand.Rand) (string, []string, []string) {
				ks := []string{key, holds[r.IntN(2)]}
				cmd := "rl.settle"
				var args []string
				if r.IntN(2) == 0 {
					cmd, args = "rl.hold", []string{[]string{"1", "2", "5", "60"}[r.IntN(4)]}
				}
				name := families[l.cmd]
				if r.IntN(4) == 0 {
					name = strings.ToLower(name)
				}
				costs := []int64{0, 1, 2, 3, l.limit / 2, l.limit, l.limit + 1, 1<<53 - 1}
				args = append(append(append(args, name), l.params...), fmt.Sprint(costs[r.IntN(len(costs))]))
				switch {
				case l.cmd == "fw.hit" && r.IntN(3) == 0:
					args[len(args)-2] = "2682000"
					args = append(args, spanArgs(r)...)
				case l.spread() && r.IntN(2) == 0 || r.IntN(30) == 0:
					args = append(args, "SPREAD")
				}
				if r.IntN(3) == 0 {
					args = append(args, limitsArgs(r, key+":plan", "f", key)...)
				}
				if r.IntN(2) == 0 {
					args = append(args, "MS")
				}
				if r.IntN(10) == 0 { // bad input
					i := 0
					if cmd == "rl.hold" {
						i = 1
					}
					switch r.IntN(5) {
					case 0:
						args[i] = []string{"LB", "XX", "MS", "DEBT", ""}[r.IntN(5)]
					case 1:
						args[len(args)-1] = []string{"-1", "9007199254740992", "x", "1.5"}[r.IntN(4)]
					case 2:
						args = append(args, []string{"EACH", "DEBT", "MS", "RESERVE"}[r.IntN(4)])
					case 3:
						if i == 1 {
							args[0] = []string{"0", "31536001", "x", "-5"}[r.IntN(4)]
						} else {
							args = args[:len(args)-1-r.IntN(min(len(args)-1, 3))]
						}
					default:
						ks[1] = key
					}
				}
				return cmd, ks, args
			}}
		})
	})
}

// TestLuaMatchesModuleConc: CONC.ACQUIRE, CONC.RELEASE and CONC.PEEK from
// a pool of holders, with renewals, releases of held and lapsed slots,
// several slots per id (UPTO n, CONC.RELEASE of n), RESERVE, leases that
// lapse as the clock moves, and bad input.
func TestLuaMatchesModuleConc(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		differential(t, f, 150, func(r *rand.Rand, e engines, probe *redis.Client, n int) sequence {
			limit := []int64{1, 2, 3, 5, 100000}[r.IntN(5)]
			lease := []string{"1", "2", "5", "30", "3600", "9223372036"}[r.IntN(6)]
			if r.IntN(8) > 0 && lease == "9223372036" {
				lease = "5"
			}
			ids := []string{"r1", "r2", "r3", "r4", "r5", strings.Repeat("h", 128)}
			key := fmt.Sprintf("{conc%d}", n)
			return sequence{keys: []string{key}, next: func(r *rand.Rand) (string, []string, []string) {
				id := ids[r.IntN(len(ids))]
				if r.IntN(25) == 0 {
					id = []string{"", strings.Repeat("h", 129)}[r.IntN(2)]
				}
				var cmd string
				var args []string
				switch x := r.IntN(20); {
				case x < 11:
					cmd, args = "conc.acquire", []string{fmt.Sprint(limit), lease, id}
				case x < 16:
					args = []string{id}
					if r.IntN(3) == 0 { // some of its slots
						args = append(args, []string{"1", "2", "5", "0"}[r.IntN(4)])
					}
					return "conc.release", []string{key}, args
				default:
					cmd, args = "conc.peek", []string{fmt.Sprint(limit)}
				}
				if r.IntN(2) == 0 {
					args = append(args, "MS")
				}
				if r.IntN(4) == 0 {
					args = append(args, "RESERVE", fmt.Sprint([]int64{0, 1, limit, limit + 1}[r.IntN(4)]))
				}
				if cmd == "conc.acquire" && r.IntN(3) == 0 { // several slots
					args = append(args, "UPTO", []string{"1", "2", "3", "7", "200"}[r.IntN(5)])
				}
				if r.IntN(12) == 0 { // bad input
					switch r.IntN(5) {
					case 4:
						args = append(args, "UPTO")
					case 0:
						args = args[:r.IntN(len(args))]
					case 1:
						args[0] = []string{"0", "100001", "x", "-1"}[r.IntN(4)]
					case 2:
						args = append(args, "EACH")
					default:
						args = append(args, "RESERVE")
					}
				}
				return cmd, []string{key}, args
			}}
		})
	})
}

// Every kind of foreign data against every command of one key, once each:
// the same error (or the same continuation) from the module, the script
// and the function.
func TestLuaForeignValues(t *testing.T) {
	calls := [][]string{
		{"gcra.throttle", "5", "1", "60", "1"}, {"tb.take", "5", "1", "60", "1"}, {"lb.enqueue", "5", "1", "60", "1"},
		{"sw.hit", "5", "60", "1"}, {"fw.hit", "5", "60", "1"}, {"sl.hit", "5", "60", "1"},
		{"conc.acquire", "5", "60", "r1"}, {"conc.release", "r1"}, {"gcra.peek", "5", "1", "60", "0"},
	}
	eachFlavor(t, func(t *testing.T, f flavor) {
		st := startStopped(t, f, 3)
		e, dbs, now := st.e, st.dbs, luaStart
		for v, put := range foreignValues {
			for _, call := range calls {
				key := fmt.Sprintf("{f%d}:%s", v, call[0])
				for _, c := range dbs {
					if err := put(c, key, now); err != nil {
						t.Fatal(err)
					}
				}
				m := e.module(dbs[0], call[0], []string{key}, call[1:])
				sc := e.script(dbs[1], call[0], []string{key}, call[1:])
				fn := e.function(dbs[2], call[0], []string{key}, call[1:])
				if m != sc || m != fn {
					t.Fatalf("foreign value %d, %v: module %s, script %s, function %s", v, call, m, sc, fn)
				}
				sm, ss, sf := state(dbs[0], key), state(dbs[1], key), state(dbs[2], key)
				if sm != ss || sm != sf {
					t.Fatalf("foreign value %d, %v: state after the module %s, after the script %s, after the function %s", v, call, sm, ss, sf)
				}
			}
		}
	})
}

// A concurrency key holding 100 lapsed holders: each engine's acquire
// removes the same 64 (the sweep bound), and the next the other 36.
func TestLuaConcSweep(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		st := startStopped(t, f, 3)
		e, dbs, now := st.e, st.dbs, luaStart
		for _, c := range dbs {
			if err := foreignValues[len(foreignValues)-1](c, "{c}", now); err != nil {
				t.Fatal(err)
			}
		}
		st.setClock(now.Add(600 * time.Millisecond).UnixNano())
		for i, id := range []string{"new1", "new2"} {
			args := []string{"5", "10", id}
			m, sc := e.module(dbs[0], "conc.acquire", []string{"{c}"}, args), e.script(dbs[1], "conc.acquire", []string{"{c}"}, args)
			fn := e.function(dbs[2], "conc.acquire", []string{"{c}"}, args)
			if m != sc || m != fn {
				t.Fatalf("acquire %d: module %s, script %s, function %s", i, m, sc, fn)
			}
			n := dbs[0].ZCard(ctx, "{c}").Val()
			if want := []int64{100 - 64 + 1, 2}[i]; n != want {
				t.Fatalf("after acquire %d the module's key holds %d, want %d", i, n, want)
			}
			if sm, ss, sf := state(dbs[0], "{c}"), state(dbs[1], "{c}"), state(dbs[2], "{c}"); sm != ss || sm != sf {
				t.Fatalf("after acquire %d:\nmodule %s\nscript %s\nfunction %s", i, sm, ss, sf)
			}
		}
	})
}

// The scripts and the functions run on a server that has no module, and
// reply there what the module replies on another server at the same
// stopped instant.
func TestLuaWithoutModule(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		dir := t.TempDir()
		now := luaStart.UnixNano()
		setClock := stopClock(t, dir, now)
		plain := startFor(t, f, opts{clockDir: dir})
		withModule := startFor(t, f, opts{module: true, clockDir: dir})
		if err := plain.rdb.Do(ctx, "GCRA.THROTTLE", "k", 1, 1, 1).Err(); err == nil || !strings.Contains(err.Error(), "unknown command") {
			t.Fatalf("the plain server knows GCRA.THROTTLE: %v", err)
		}
		e := loadScripts(t, plain.rdb)
		for i, step := range []int64{0, 1e8, 3e8, 2e9, 0, 5e8} {
			now += step
			setClock(now)
			for _, cmd := range []string{"gcra.throttle", "tb.take", "lb.enqueue", "gcra.peek", "sw.hit", "fw.hit", "sl.hit"} {
				args := []string{"2", "1", "1", "1", "MS"}
				if strings.HasSuffix(cmd, ".hit") {
					args = []string{"2", "1", "1", "MS"}
				}
				keys := []string{"{p}:" + cmd}
				got, want := e.script(plain.rdb, cmd, keys, args), e.module(withModule.rdb, cmd, keys, args)
				if got != want {
					t.Fatalf("step %d, %s: script without the module %s, module %s", i, cmd, got, want)
				}
				if gs, ms := state(plain.rdb, keys[0]), state(withModule.rdb, keys[0]); gs != ms {
					t.Fatalf("step %d, %s: state %s, module's %s", i, cmd, gs, ms)
				}
				fkeys := []string{"{f}:" + cmd}
				if got, want := e.function(plain.rdb, cmd, fkeys, args), e.module(withModule.rdb, cmd, fkeys, args); got != want {
					t.Fatalf("step %d, %s: function without the module %s, module %s", i, cmd, got, want)
				}
				if gs, ms := state(plain.rdb, fkeys[0]), state(withModule.rdb, fkeys[0]); gs != ms {
					t.Fatalf("step %d, %s: state after the function %s, module's %s", i, cmd, gs, ms)
				}
			}
		}
	})
}

// The scripts' exact integers (lua/src/int.lua), in the server's own Lua,
// against math/big: sums, differences, products, quotients and remainders
// of random integers of every size up to 2^126, with the 2^53 and 2^63
// edges, and parsing and printing of 64-bit decimals.
func TestLuaIntegers(t *testing.T) {
	lib, err := os.ReadFile("../lua/src/int.lua")
	if err != nil {
		t.Fatal(err)
	}
	const harness = `
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = parse(ARGV[i]), parse(ARGV[i + 1])
  local row = {fmt(add(a, b)), fmt(sub(a, b)), fmt(mul(a, b)), tostring(cmp(a, b)), fits(mul(a, b)) and '1' or '0'}
  if cmp(b, 0) ~= 0 then
    local q, r = quorem(mul(a, b), b)
    row[#row + 1] = fmt(q) .. '/' .. fmt(r)
    q, r = quorem(a, b)
    row[#row + 1] = fmt(q) .. '/' .. fmt(r)
  end
  row[#row + 1] = string.format('%.17g', float(a))
  out[#out + 1] = table.concat(row, ' ')
end
return out`
	src := string(lib) + harness
	each(t, func(t *testing.T, s *server) {
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 53))
		edges := []int64{0, 1, -1, 2, 1e7 - 1, 1e7, 1 << 26, 9e15, 9e15 - 1, 1<<53 - 1, 1 << 53, 1<<53 + 1, -(1 << 53),
			1e9, 1795448790123456789, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1, 3037000499, 3037000500}
		randInt := func() int64 {
			switch r.IntN(4) {
			case 0:
				return edges[r.IntN(len(edges))]
			case 1:
				return r.Int64N(1<<20) - 1<<19
			default:
				v := int64(r.Uint64() >> r.IntN(64))
				if r.IntN(2) == 0 {
					v = -v
				}
				return v
			}
		}
		for range 20 {
			var args []any
			var pairs [][2]int64
			for range 250 {
				a, b := randInt(), randInt()
				pairs = append(pairs, [2]int64{a, b})
				args = append(args, fmt.Sprint(a), fmt.Sprint(b))
			}
			got, err := s.rdb.Eval(ctx, src, nil, args...).StringSlice()
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range pairs {
				if want := bigRow(p[0], p[1]); got[i] != want {
					t.Fatalf("%d, %d:\n got  %s\n want %s", p[0], p[1], got[i], want)
				}
			}
		}
	})
}

// bigRow is what the harness must print for a and b, from math/big.
func bigRow(a, b int64) string {
	A, B := big.NewInt(a), big.NewInt(b)
	P := new(big.Int).Mul(A, B)
	fits := "0"
	if P.IsInt64() {
		fits = "1"
	}
	row := []string{new(big.Int).Add(A, B).String(), new(big.Int).Sub(A, B).String(), P.String(), fmt.Sprint(A.Cmp(B)), fits}
	if b != 0 {
		for _, x := range []*big.Int{P, A} {
			q, m := new(big.Int).QuoRem(x, B, new(big.Int)) // truncated, as Go's / and %
			row = append(row, q.String()+"/"+m.String())
		}
	}
	row = append(row, strconv.FormatFloat(float64(a), 'g', 17, 64))
	return strings.Join(row, " ")
}

// TestLuaDebtEdges: DEBT at its edges, in the module, the scripts and the
// functions alike: replies, errors and states. A sliding log charged past
// its limit and 100,000 entries, a count at 2^63 - 1, a schedule near 2262,
// a refund and a peek on a state in debt, a shaper given the debt's mark.
func TestLuaDebtEdges(t *testing.T) {
	calls := [][]string{
		{"sl.hit", "{d}:sl", "1", "60", "100000", "DEBT"}, {"sl.hit", "{d}:sl", "1", "60", "1", "DEBT"},
		{"sl.hit", "{d}:sl", "1", "60", "0"}, {"sl.hit", "{d}:sl", "1", "60", "2", "debt"},
		{"fw.hit", "{d}:fw", "5", "60", "9223372036854775806", "DEBT"}, {"fw.hit", "{d}:fw", "5", "60", "2", "DEBT"},
		{"sw.hit", "{d}:sw", "5", "60", "9223372036854775807", "DEBT"}, {"sw.hit", "{d}:sw", "5", "60", "1", "DEBT"},
		{"gcra.throttle", "{d}:g", "0", "1", "100000000", "50", "DEBT"}, {"gcra.throttle", "{d}:g", "0", "1", "100000000", "50", "DEBT"},
		{"tb.take", "{d}:tb", "5", "1", "60", "12", "DEBT"}, {"tb.take", "{d}:tb", "5", "1", "60", "-3", "MS"},
		{"tb.peek", "{d}:tb", "5", "1", "60", "0"}, {"tb.take", "{d}:tb", "5", "1", "60", "0", "DEBT"},
		{"lb.enqueue", "{d}:tb", "5", "1", "60", "1"},
		{"rl.all", "2", "{d}:a", "{d}:b", "GCRA", "4", "1", "60", "7", "SL", "2", "60", "99999", "DEBT", "EACH"},
		{"rl.all", "2", "{d}:a", "{d}:b", "GCRA", "4", "1", "60", "0", "SL", "2", "60", "2", "DEBT"},
	}
	eachFlavor(t, func(t *testing.T, f flavor) {
		st := startStopped(t, f, 3)
		e, dbs := st.e, st.dbs
		for i, call := range calls {
			st.setClock(luaStart.UnixNano() + int64(i)*int64(time.Second))
			keys, args := call[1:2], call[2:]
			if call[0] == "rl.all" {
				keys, args = call[2:4], call[4:]
			}
			m := e.module(dbs[0], call[0], keys, args)
			sc := e.script(dbs[1], call[0], keys, args)
			fn := e.function(dbs[2], call[0], keys, args)
			if m != sc || m != fn {
				t.Fatalf("%v: module %s, script %s, function %s", call, m, sc, fn)
			}
			for _, k := range keys {
				sm, ss, sf := state(dbs[0], k), state(dbs[1], k), state(dbs[2], k)
				if sm != ss || sm != sf {
					t.Fatalf("%v: %s after the module %s, after the script %s, after the function %s", call, k, sm, ss, sf)
				}
			}
			t.Logf("%v: %s", call, m)
		}
	})
}

// The concurrency commands emit the same keyspace events through the
// module, the script and the function (and so replicate alike): plain
// acquires and releases, a release that sweeps a lapsed holder in the same
// ZREM, several slots taken, partly released, renewed and released.
func TestLuaConcEvents(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		st := startStopped(t, f, 3)
		if err := st.dbs[0].ConfigSet(ctx, "notify-keyspace-events", "KEA").Err(); err != nil {
			t.Fatal(err)
		}
		ps := st.dbs[0].PSubscribe(ctx, "__keyspace@*__:{ce}*")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			cmd  string
			args []string
			step time.Duration // the clock moves on first
		}{
			{"conc.acquire", []string{"5", "60", "a"}, 0},
			{"conc.acquire", []string{"5", "1", "s"}, 0},
			{"conc.acquire", []string{"5", "60", "w", "UPTO", "3"}, 0},
			{"conc.release", []string{"a"}, 2 * time.Second}, // s lapsed: swept with a, in one ZREM
			{"conc.release", []string{"w", "2"}, 0},
			{"conc.acquire", []string{"5", "90", "w", "UPTO", "2"}, 0},
			{"conc.release", []string{"w"}, 0},
			{"conc.acquire", []string{"5", "60", "end"}, 0},
		}
		now := luaStart
		call := [3]func(c *redis.Client, cmd string, keys, args []string) string{st.e.module, st.e.script, st.e.function}
		for _, s := range steps {
			now = now.Add(s.step)
			st.setClock(now.UnixNano())
			var replies [3]string
			for i, c := range st.dbs {
				replies[i] = call[i](c, s.cmd, []string{"{ce}"}, s.args)
			}
			if replies[0] != replies[1] || replies[0] != replies[2] {
				t.Fatalf("%s %v: module %s, script %s, function %s", s.cmd, s.args, replies[0], replies[1], replies[2])
			}
		}
		for _, c := range st.dbs { // the end of each database's events
			c.Set(ctx, "{ce}:end", "x", 0)
		}
		var events [3][]string
		for ends := 0; ends < 3; {
			select {
			case m := <-ps.Channel():
				db := int(m.Channel[len("__keyspace@")] - '0')
				if strings.HasSuffix(m.Channel, ":end") {
					ends++
				} else {
					events[db] = append(events[db], m.Payload)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("events so far: %v", events)
			}
		}
		t.Logf("module events: %v", events[0])
		for i := 1; i < 3; i++ {
			if fmt.Sprint(events[i]) != fmt.Sprint(events[0]) {
				t.Fatalf("%s events differ:\nmodule %v\n%s %v", []string{"", "script", "function"}[i], events[0], []string{"", "script", "function"}[i], events[i])
			}
		}
	})
}
