// Package fakeredis is a Redis server for tests that needs neither a
// server nor a network: a go-redis hook answers every command in process.
// client, httplimit and rls test on it.
//
// By default it is a server with the module loaded: the module's commands
// run through internal/engine, the module's own decision code, on keys it
// keeps in memory, at the time Clock gives; the Lua engine's scripts and
// library functions run the same way (the Lua engine answers as the module
// does, which the integration suites prove). Transactions (MULTI/EXEC, as
// TxPipelined sends them) run their commands together. A test can set
// what it needs instead: a fixed Reply or Err for every limiter call, an
// Answer function for every command, a server without FUNCTION, without
// the module, that refuses COMMAND, that fails some commands (Before) or
// waits (Hold).
//
//	s := fakeredis.New()
//	rdb := s.Client()               // a *redis.Client that never dials
//	rdb.Do(ctx, "GCRA.THROTTLE", "k", 10, 10, 60) // [0 11 10 -1 6]
//	s.Advance(6 * time.Second)      // one unit back
//
// Cluster is several of them behind a *redis.ClusterClient, each owning a
// range of slots and answering MOVED and CROSSSLOT as a primary does.
package fakeredis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/internal/engine"
	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// Server is one fake Redis server. Its exported fields are read and set
// with it locked (it embeds its mutex) once clients use it.
type Server struct {
	sync.Mutex

	// Addr is the address it answers as (in MOVED replies, and its
	// clients' options): "fake:6379" unless set.
	Addr string
	// Clock is its time; time.Now when nil (see Advance).
	Clock func() time.Time

	// Reply, when non-nil, answers every command the server does not
	// answer itself (COMMAND, SCRIPT LOAD, ASKING, FUNCTION and the
	// library's version function) in place of the engine; Err, when set,
	// fails them.
	Reply any
	Err   error
	// Answer, when set, answers every command but COMMAND (after Before),
	// in place of everything below.
	Answer func(args []any) (any, error)
	// Before, when set, is called with every command but a probe, a
	// library check or load, or ASKING; a non-nil error is the command's
	// answer.
	Before func(cmd redis.Cmder) error
	// Hold, when set, makes every command wait for it to close.
	Hold chan struct{}

	// NoModule: COMMAND INFO knows no GCRA.THROTTLE; NoCommand: COMMAND is
	// refused (an ACL); Unknown: the module's commands are unknown,
	// whatever COMMAND INFO said.
	NoModule, NoCommand, Unknown bool
	// Functions: the server takes FUNCTION (else it answers FCALL,
	// FCALL_RO and FUNCTION as unknown commands). Lib is the version of
	// the library it holds ("": none; another version's edition defines
	// none of this one's functions, so FCALL answers that the function is
	// not found).
	Functions bool
	Lib       string
	// Loaded holds the SHA1s SCRIPT LOAD loaded: EVALSHA of another
	// answers NOSCRIPT.
	Loaded map[string]bool
	// TxFails is how many of the next EXECs fail as when a watched key
	// changed (go-redis's TxFailedErr).
	TxFails int

	// Probes counts COMMAND calls; VersionAsks the library's version
	// checks; Loads FUNCTION LOADs, Replaced those with REPLACE.
	Probes, VersionAsks, Loads, Replaced int
	// Sent records every command's arguments but the library's checks and
	// loads, in order.
	Sent [][]any

	keys    map[string]*value
	offset  time.Duration
	owns    func(slot int) string // in a Cluster: the owner of a slot
	scripts map[string]lua.Script // by SHA1 and by source
}

// value is one key.
type value struct {
	kind     engine.KeyKind
	s        string
	z        map[string]float64
	h        map[string]string // a hash (kind KeyOther to the module's keys)
	expireMs int64             // absolute Unix ms, -1 for none
}

// New is a server with the module loaded and no keys.
func New() *Server { return &Server{Addr: "fake:6379", keys: map[string]*value{}} }

// Client is a client of s that never dials: every command it sends is
// answered by s.
func (s *Server) Client() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	rdb.AddHook(s)
	return rdb
}

// Now is the server's time: Clock's, moved by Advance.
func (s *Server) Now() time.Time {
	s.Lock()
	defer s.Unlock()
	return s.now()
}

func (s *Server) now() time.Time {
	t := time.Now()
	if s.Clock != nil {
		t = s.Clock()
	}
	return t.Add(s.offset)
}

// Advance moves the server's clock on by d.
func (s *Server) Advance(d time.Duration) {
	s.Lock()
	s.offset += d
	s.Unlock()
}

// Flush drops every key, as a server restarted without persistence
// comes back.
func (s *Server) Flush() {
	s.Lock()
	clear(s.keys)
	s.Unlock()
}

// Calls is a copy of Sent.
func (s *Server) Calls() [][]any {
	s.Lock()
	defer s.Unlock()
	return slices.Clone(s.Sent)
}

// Keys lists the keys the server holds (live ones), sorted.
func (s *Server) Keys() []string {
	s.Lock()
	defer s.Unlock()
	var out []string
	for k := range s.keys {
		if s.lookup(k) != nil {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// ReplyError is an error reply, as go-redis returns one.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// RedisError marks it a reply from the server (redis.Error).
func (ReplyError) RedisError() {}

// DialHook refuses to dial: nothing reaches a network.
func (s *Server) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("fakeredis: no network")
	}
}

// ProcessHook answers a command.
func (s *Server) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.wait()
		s.Lock()
		defer s.Unlock()
		return s.process(cmd)
	}
}

// ProcessPipelineHook answers a pipeline's commands in order; a
// transaction's (MULTI ... EXEC) together, nothing else running between
// them.
func (s *Server) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var first error
		keep := func(err error) {
			if err != nil && first == nil {
				first = err
			}
		}
		if len(cmds) >= 2 && name(cmds[0]) == "multi" && name(cmds[len(cmds)-1]) == "exec" {
			s.wait()
			s.Lock()
			defer s.Unlock()
			keep(s.process(cmds[0]))
			if first != nil {
				return first
			}
			if s.TxFails > 0 {
				s.TxFails--
				for _, c := range cmds {
					c.SetErr(redis.TxFailedErr)
				}
				return redis.TxFailedErr
			}
			for _, c := range cmds[1 : len(cmds)-1] {
				keep(s.process(c))
			}
			setVal(cmds[len(cmds)-1], []any{})
			return first
		}
		one := s.ProcessHook(nil)
		for _, c := range cmds {
			keep(one(ctx, c))
		}
		return first
	}
}

// wait waits for Hold to close, when set.
func (s *Server) wait() {
	s.Lock()
	hold := s.Hold
	s.Unlock()
	if hold != nil {
		<-hold
	}
}

// name is a command's name in lower case.
func name(cmd redis.Cmder) string {
	n, _ := cmd.Args()[0].(string)
	return strings.ToLower(n)
}

// setVal sets a command's value, converted to the type its SetVal takes
// (a StringCmd's string, an IntCmd's int64).
func setVal(cmd redis.Cmder, v any) {
	if c, ok := cmd.(interface{ SetVal(any) }); ok {
		c.SetVal(v)
		return
	}
	m := reflect.ValueOf(cmd).MethodByName("SetVal")
	if !m.IsValid() {
		panic(fmt.Sprintf("fakeredis: cannot answer %T", cmd))
	}
	want := m.Type().In(0)
	rv := reflect.ValueOf(v)
	switch {
	case v == nil:
		rv = reflect.Zero(want)
	case want.Kind() == reflect.String:
		rv = reflect.ValueOf(str(v)).Convert(want)
	case rv.Type().ConvertibleTo(want):
		rv = rv.Convert(want)
	default:
		panic(fmt.Sprintf("fakeredis: cannot answer %T with %T", cmd, v))
	}
	m.Call([]reflect.Value{rv})
}

func fail(cmd redis.Cmder, msg string) error {
	err := ReplyError(msg)
	cmd.SetErr(err)
	return err
}

// process answers one command, with s locked.
func (s *Server) process(cmd redis.Cmder) error {
	args := cmd.Args()
	lower := name(cmd)
	if lower == "command" {
		s.Probes++
		if s.NoCommand {
			return fail(cmd, "NOPERM User default has no permissions to run the 'command' command")
		}
		info := []any{[]any{"gcra.throttle"}}
		if s.NoModule {
			info = []any{nil}
		}
		setVal(cmd, info)
		return nil
	}
	library := lower == "function" || (lower == "fcall_ro" && len(args) > 1 && args[1] == versionFunction())
	if !library {
		s.Sent = append(s.Sent, args)
	}
	if !library && lower != "asking" && s.Before != nil {
		if err := s.Before(cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
	}
	if s.Answer != nil {
		v, err := s.Answer(args)
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		setVal(cmd, v)
		return nil
	}
	if lower == "fcall" || lower == "fcall_ro" || lower == "function" {
		if done, err := s.function(cmd); done || err != nil {
			return err
		}
	}
	first, _ := args[0].(string)
	if s.Unknown && strings.Contains(first, ".") {
		return fail(cmd, "ERR unknown command '"+first+"', with args beginning with: ")
	}
	switch lower {
	case "script":
		src := str(args[len(args)-1])
		sum := sha1.Sum([]byte(src))
		sha := hex.EncodeToString(sum[:])
		if s.Loaded == nil {
			s.Loaded = map[string]bool{}
		}
		s.Loaded[sha] = true
		setVal(cmd, sha)
		return nil
	case "asking", "multi", "watch", "unwatch":
		setVal(cmd, "OK")
		return nil
	}
	if strings.HasPrefix(lower, "evalsha") && !s.Loaded[str(args[1])] {
		return fail(cmd, "NOSCRIPT No matching script. Please use EVAL.")
	}
	if s.Err != nil {
		cmd.SetErr(s.Err)
		return s.Err
	}
	if s.Reply != nil {
		setVal(cmd, s.Reply)
		return nil
	}
	v, err := s.run(lower, args)
	if err != nil {
		cmd.SetErr(err)
		return err
	}
	setVal(cmd, v)
	return nil
}

// versionFunction is this version's edition's version function.
func versionFunction() string { return lua.VersionFunction + lua.Versioned().Suffix }

// function answers FUNCTION LOAD and the version function as a server
// with (or without) FUNCTION does, and fails an FCALL of a library it does
// not hold. done: the command is answered.
func (s *Server) function(cmd redis.Cmder) (done bool, err error) {
	args := cmd.Args()
	first, _ := args[0].(string)
	ed := lua.Versioned()
	switch {
	case !s.Functions:
		return true, fail(cmd, "ERR unknown command '"+first+"', with args beginning with: ")
	case strings.EqualFold(first, "function"):
		if !strings.EqualFold(str(args[1]), "load") {
			setVal(cmd, "OK")
			return true, nil
		}
		s.Loads++
		if args[2] == "REPLACE" {
			s.Replaced++
		} else if s.Lib == ed.Version {
			return true, fail(cmd, "ERR Library '"+ed.Name+"' already exists")
		}
		s.Lib = ed.Version
		setVal(cmd, ed.Name)
		return true, nil
	case s.Lib != ed.Version:
		if args[1] == versionFunction() {
			s.VersionAsks++
		}
		return true, fail(cmd, "ERR Function not found")
	case args[1] == versionFunction():
		s.VersionAsks++
		setVal(cmd, s.Lib)
		return true, nil
	}
	return false, nil
}

// str is an argument as go-redis writes it.
func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case time.Duration:
		return strconv.FormatInt(v.Nanoseconds(), 10)
	}
	return fmt.Sprint(v)
}

// strs is every argument as a string.
func strs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = str(a)
	}
	return out
}

// commands are the module's, by name in upper case.
var commands = func() map[string]*spec.Command {
	m := map[string]*spec.Command{}
	for i := range spec.Commands {
		m[spec.Commands[i].Name] = &spec.Commands[i]
	}
	return m
}()

// script finds the script named by an EVALSHA (its SHA1), an EVAL (its
// source) or an FCALL (its function).
func (s *Server) script(verb, name string) (lua.Script, bool) {
	if s.scripts == nil {
		s.scripts = map[string]lua.Script{}
		suffix := lua.Versioned().Suffix
		for _, c := range lua.Commands() {
			sc := lua.Must(c)
			s.scripts["evalsha "+sc.SHA1] = sc
			s.scripts["eval "+sc.Source] = sc
			s.scripts["fcall "+sc.Function+suffix] = sc
		}
	}
	sc, ok := s.scripts[strings.TrimSuffix(verb, "_ro")+" "+name]
	return sc, ok
}

// run answers a command the fake runs itself: the module's (and the Lua
// engine's) on the engine, and the three of Redis's own the tests read
// state with (GET, ZCARD, PTTL), and the hash commands of the limits
// held in Redis (HSET, HGET, HDEL).
func (s *Server) run(lower string, args []any) (any, error) {
	a := strs(args)
	switch lower {
	case "get":
		if err := s.slotCheck(a[1:2]); err != nil {
			return nil, err
		}
		v := s.lookup(a[1])
		switch {
		case v == nil:
			return nil, redis.Nil
		case v.kind != engine.KeyString:
			return nil, ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value")
		}
		return v.s, nil
	case "hset":
		if len(a) < 4 || len(a)%2 != 0 {
			return nil, ReplyError("ERR wrong number of arguments for 'hset' command")
		}
		v := s.lookup(a[1])
		switch {
		case v == nil:
			v = &value{kind: engine.KeyOther, h: map[string]string{}, expireMs: -1}
			s.keys[a[1]] = v
		case v.h == nil:
			return nil, ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value")
		}
		var added int64
		for i := 2; i < len(a); i += 2 {
			if _, ok := v.h[a[i]]; !ok {
				added++
			}
			v.h[a[i]] = a[i+1]
		}
		return added, nil
	case "hget", "hdel":
		v := s.lookup(a[1])
		if v != nil && v.h == nil {
			return nil, ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value")
		}
		h := v.hash()
		if lower == "hget" {
			if x, ok := h[a[2]]; ok {
				return x, nil
			}
			return nil, redis.Nil
		}
		var n int64
		for _, f := range a[2:] {
			if _, ok := h[f]; ok {
				delete(h, f)
				n++
			}
		}
		if v != nil && len(h) == 0 {
			delete(s.keys, a[1])
		}
		return n, nil
	case "zcard":
		if v := s.lookup(a[1]); v != nil {
			return int64(len(v.z)), nil
		}
		return int64(0), nil
	case "pttl":
		v := s.lookup(a[1])
		switch {
		case v == nil:
			return int64(-2), nil
		case v.expireMs < 0:
			return int64(-1), nil
		}
		return v.expireMs - s.now().UnixMilli(), nil
	}
	upper := strings.ToUpper(a[0])
	if c := commands[upper]; c != nil {
		return s.execute(c, a)
	}
	if strings.HasPrefix(lower, "eval") || strings.HasPrefix(lower, "fcall") {
		sc, ok := s.script(lower, a[1])
		if !ok {
			return nil, ReplyError("ERR this fake runs only the ratelimit library's scripts and functions")
		}
		c := commands[sc.Command]
		margs := []string{c.Name}
		if c.NumKeys {
			margs = append(margs, a[2:]...)
		} else {
			margs = append(margs, a[3:]...)
		}
		return s.execute(c, margs)
	}
	return nil, ReplyError("ERR unknown command '" + a[0] + "', with args beginning with: ")
}

// hash is v's hash, nil for none.
func (v *value) hash() map[string]string {
	if v == nil {
		return nil
	}
	return v.h
}

// limitsField reads the LIMITS key field whose key is a[arg], as the
// module's C does when the engine asks.
func (s *Server) limitsField(a []string, arg int) (string, int) {
	if arg < 1 || arg+1 >= len(a) {
		return "", engine.LimitsUnread
	}
	switch v := s.lookup(a[arg]); {
	case v == nil:
	case v.h == nil:
		return "", engine.LimitsWrongType
	default:
		if val, ok := v.h[a[arg+1]]; ok {
			return val, engine.LimitsFound
		}
	}
	return "", engine.LimitsAbsent
}

// keysOf are the keys a module command names: its first argument (and
// the hold's after it, RL.HOLD and RL.SETTLE), or numkeys of them, counted as the module counts them (none when numkeys is
// not from 1 to 16 with that many arguments after it).
func keysOf(c *spec.Command, a []string) []string {
	if c.Hold && len(a) >= 3 { // the limiter's key and the hold's
		return a[1:3]
	}
	if !c.NumKeys {
		if len(a) < 2 {
			return nil
		}
		return a[1:2]
	}
	n, err := strconv.Atoi(strings.TrimPrefix(a[1], "+"))
	if len(a) < 3 || err != nil || n < 1 || n > engine.MaxKeys || 2+n > len(a) || strings.HasPrefix(a[1], "-") {
		return nil
	}
	return a[2 : 2+n]
}

// execute runs a module command on the engine: the server's arity check,
// the keys read, the engine's decision, each key's write, the reply.
func (s *Server) execute(c *spec.Command, a []string) (any, error) {
	if ar := c.Arity(); (ar > 0 && len(a) != ar) || (ar < 0 && len(a) < -ar) {
		return nil, ReplyError("ERR wrong number of arguments for '" + strings.ToLower(c.Name) + "' command")
	}
	keys := keysOf(c, a)
	if err := s.slotCheck(keys); err != nil {
		return nil, err
	}
	r := &reader{now: s.now().UnixNano(), keys: keys}
	for _, k := range keys {
		r.vals = append(r.vals, s.lookup(k))
	}
	if c.Limits() {
		r.limits = func(arg int) (string, int) { return s.limitsField(a, arg) }
	}
	var o engine.Outcome
	engine.Execute(c.Op, a, r, &o)
	switch o.Action {
	case engine.ActWrongType:
		if o.Err != "" {
			return nil, ReplyError(o.Err)
		}
		return nil, ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value")
	case engine.ActArity:
		return nil, ReplyError("ERR wrong number of arguments for '" + a[0] + "' command")
	case engine.ActReply:
	default:
		if o.Err == "" {
			o.Err = "ERR internal error"
		}
		return nil, ReplyError(o.Err)
	}
	if c.Peek && slices.ContainsFunc(o.Writes[:len(keys)], func(w engine.KeyWrite) bool { return w.Action != engine.WriteNone }) {
		return nil, ReplyError("ERR internal error: a write without a key open for writing")
	}
	for i, k := range keys {
		s.write(k, &o.Writes[i], a)
	}
	if o.ReplyLen == 1 {
		return o.Reply[0], nil
	}
	n := o.ReplyLen
	if n < 5 || n > engine.MaxReply {
		n = 5
	}
	out := make([]any, n)
	for i := range n {
		out[i] = o.Reply[i]
	}
	return out, nil
}

// slotCheck answers, in a Cluster, as a primary does a command whose keys
// are of several slots (CROSSSLOT) or of a slot another owns (MOVED).
func (s *Server) slotCheck(keys []string) error {
	if s.owns == nil || len(keys) == 0 {
		return nil
	}
	slot := protocol.Slot(keys[0])
	for _, k := range keys[1:] {
		if protocol.Slot(k) != slot {
			return ReplyError("CROSSSLOT Keys in request don't hash to the same slot")
		}
	}
	if owner := s.owns(slot); owner != s.Addr {
		return ReplyError(fmt.Sprintf("MOVED %d %s", slot, owner))
	}
	return nil
}

// lookup is a live key, nil when there is none (an expired key goes).
func (s *Server) lookup(k string) *value {
	v := s.keys[k]
	if v != nil && v.expireMs >= 0 && v.expireMs <= s.now().UnixMilli() {
		delete(s.keys, k)
		return nil
	}
	return v
}

// write carries out what the engine decided for key k, as the module's C
// does.
func (s *Server) write(k string, w *engine.KeyWrite, a []string) {
	switch w.Action {
	case engine.WriteSet:
		v := s.keys[k]
		if v == nil || v.kind != engine.KeyString {
			v = &value{kind: engine.KeyString}
			s.keys[k] = v
		}
		v.s, v.expireMs = string(w.Value[:w.ValueLen]), w.ExpireMs
	case engine.WriteDel:
		delete(s.keys, k)
	case engine.WriteZLog:
		v := s.zset(k)
		moved := 0
		for m, sc := range v.z {
			switch {
			case sc <= float64(w.ZCutoff):
				delete(v.z, m)
			case w.ZRedate && sc > float64(w.ZScore):
				delete(v.z, m)
				moved++
			}
		}
		score := strconv.FormatInt(w.ZScore, 10)
		for seq, added := len(v.z), 0; added < int(w.ZAdd)+moved; seq++ {
			m := score + "-" + strconv.Itoa(seq)
			if _, there := v.z[m]; !there {
				v.z[m] = float64(w.ZScore)
				added++
			}
		}
		if w.ZRemove > 0 { // a return: the newest entries go, as ZREMRANGEBYRANK -n -1
			members := slices.Collect(maps.Keys(v.z))
			slices.SortFunc(members, func(x, y string) int { return compare(v.z, x, y) })
			for _, m := range members[max(len(members)-int(w.ZRemove), 0):] {
				delete(v.z, m)
			}
		}
		s.settle(k, v, w.ExpireMs)
	case engine.WriteConc:
		v := s.zset(k)
		id := a[w.ConcID]
		var lapsed []string
		for m, sc := range v.z {
			if sc <= float64(w.ZCutoff) && m != id {
				lapsed = append(lapsed, m)
			}
		}
		slices.SortFunc(lapsed, func(x, y string) int { return compare(v.z, x, y) })
		for _, m := range lapsed[:min(len(lapsed), engine.ConcSweep)] {
			delete(v.z, m)
		}
		for slot := w.ConcFrom; slot <= w.ConcTo; slot++ {
			switch m := engine.SlotMember(id, slot); {
			case w.ConcAdd:
				v.z[m] = float64(w.ZScore)
			case w.ConcRemove:
				delete(v.z, m)
			}
		}
		s.settle(k, v, w.ExpireMs)
	}
}

// zset is key k's sorted set, made when missing.
func (s *Server) zset(k string) *value {
	v := s.lookup(k)
	if v == nil || v.kind != engine.KeyZSet {
		v = &value{kind: engine.KeyZSet, z: map[string]float64{}}
		s.keys[k] = v
	}
	return v
}

// settle expires a sorted set at ms, or deletes it when it is empty (as
// the server deletes an emptied set).
func (s *Server) settle(k string, v *value, ms int64) {
	if len(v.z) == 0 {
		delete(s.keys, k)
		return
	}
	v.expireMs = ms
}

// compare orders sorted-set members as the server does: by score, then
// by member.
func compare(z map[string]float64, x, y string) int {
	if z[x] != z[y] {
		if z[x] < z[y] {
			return -1
		}
		return 1
	}
	return strings.Compare(x, y)
}
