package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/lua"
)

// Engine is how a Client runs the limiter commands on a server.
type Engine int

const (
	// Auto runs the module's commands on the servers that have the module
	// and the Lua scripts (package lua: the same replies and state) on the
	// ones that don't. It asks each server once, with COMMAND INFO: per
	// node in a Cluster or a Ring. A server found without the module is
	// asked again a minute later (a failover may bring one with it), and a
	// module command answered "unknown command" (a failover to a server
	// without it) is sent again as its script at once: a command the
	// server does not know never ran, so nothing is counted twice.
	//
	// On a server without the module the Lua engine runs as the FUNCTION
	// library (Functions) where the server takes it (Redis 7 and later,
	// Valkey), and as EVAL scripts (Scripts) where it refuses FUNCTION
	// (Redis 6, an ACL, a service that forbids it).
	Auto Engine = iota
	// Module always runs the module's commands: a server without the
	// module answers with an error wrapping ErrNoModule.
	Module
	// Scripts always runs the Lua scripts, loading each on a server once
	// (SCRIPT LOAD) and calling it by its SHA1 from then on.
	Scripts
	// Functions always runs the FUNCTION library (lua.Library): loaded on
	// a server once (FUNCTION LOAD, with REPLACE only when the server holds
	// another version), then called with FCALL (FCALL_RO for a peek). A
	// server that lost it (FUNCTION FLUSH, a new primary that never had it)
	// gets it loaded again and the call sent again: a function not found
	// ran nothing.
	Functions
)

func (e Engine) String() string {
	switch e {
	case Auto:
		return "auto"
	case Module:
		return "module"
	case Scripts:
		return "scripts"
	case Functions:
		return "functions"
	}
	return fmt.Sprintf("Engine(%d)", int(e))
}

const (
	// recheck is how long a server found without the module is taken at
	// its word before it is asked again.
	recheck = time.Minute
	// prepareTimeout bounds one probe or one script load. It runs apart
	// from the calls that wait for it, each of which waits only as long as
	// its own context allows: a caller that gives up does not cancel the
	// work the others wait for.
	prepareTimeout = 2 * time.Second
)

// scriptList is every command's script; scriptIndex finds one by the
// command's name as the client sends it.
var scriptList, scriptIndex = func() ([]lua.Script, map[string]int) {
	names := lua.Commands()
	list := make([]lua.Script, len(names))
	index := make(map[string]int, len(names))
	for i, name := range names {
		list[i] = lua.Must(name)
		index[name] = i
	}
	return list, index
}()

// node is what the client knows of one server.
type node struct {
	engine atomic.Int32 // 0 not known yet, else Module, Scripts or Functions
	asked  atomic.Int64 // when, in Unix ns
	probe  flight       // the COMMAND INFO (and library load) in flight
	loads  []flight     // per script: the SCRIPT LOAD in flight, or done
	lib    flight       // the library's load in flight, or done
}

// The library, and its version, as the client loads it.
var libSource, libVersion = lua.Library()

func newNode() *node { return &node{loads: make([]flight, len(scriptList))} }

// flight is work that many calls may need at once (an engine probe, a
// script load) done once for all of them: the first call starts it in a
// goroutine of its own, and every call waits for it within its own
// context. Done records that it succeeded, until reset.
type flight struct {
	mu   sync.Mutex
	cur  *flightCall
	done atomic.Bool
}

type flightCall struct {
	finished chan struct{}
	err      error // set before finished is closed
}

// wait runs work unless it is already in flight, and waits for it or for
// ctx. The work gets its own context of prepareTimeout, with ctx's values
// but not its deadline or cancellation.
func (f *flight) wait(ctx context.Context, work func(context.Context) error) error {
	return f.run(ctx, work, false)
}

// once is wait for work that stays done once it succeeded (until done is
// reset): a call that finds it done, even as it was finishing, runs
// nothing.
func (f *flight) once(ctx context.Context, work func(context.Context) error) error {
	if f.done.Load() {
		return nil
	}
	return f.run(ctx, work, true)
}

func (f *flight) run(ctx context.Context, work func(context.Context) error, once bool) error {
	f.mu.Lock()
	if once && f.done.Load() { // it finished between the caller's look and now
		f.mu.Unlock()
		return nil
	}
	call := f.cur
	if call == nil {
		call = &flightCall{finished: make(chan struct{})}
		f.cur = call
		go func() {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), prepareTimeout)
			err := work(wctx)
			cancel()
			f.mu.Lock()
			call.err, f.cur = err, nil
			if err == nil {
				f.done.Store(true)
			}
			f.mu.Unlock()
			close(call.finished)
		}()
	}
	f.mu.Unlock()
	select {
	case <-call.finished:
		return call.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// engineFor is the engine that runs a command on key's server, and that
// server. A server not asked yet is asked once, whatever the number of
// calls waiting for the answer.
func (c *Client) engineFor(ctx context.Context, key string) (Engine, *node, doer, error) {
	n, ask, err := c.nodeFor(ctx, key)
	if err != nil || c.engine != Auto {
		return c.engine, n, ask, err
	}
	e := Engine(n.engine.Load())
	switch {
	case e == Module:
		return e, n, ask, nil
	case e == Scripts || e == Functions:
		if asked := n.asked.Load(); time.Since(time.Unix(0, asked)) >= recheck &&
			n.asked.CompareAndSwap(asked, time.Now().UnixNano()) { // one call a minute asks again, in the background
			go n.probe.wait(context.WithoutCancel(ctx), func(ctx context.Context) error { return n.detect(ctx, c, ask) })
		}
		return e, n, ask, nil
	}
	if err := n.probe.wait(ctx, func(ctx context.Context) error { return n.detect(ctx, c, ask) }); err != nil {
		return Module, n, ask, err
	}
	return Engine(n.engine.Load()), n, ask, nil
}

// detect asks the server whether it has the module and, where it has not,
// readies the Lua engine it takes: the library, else the scripts.
func (n *node) detect(ctx context.Context, c *Client, ask doer) error {
	cmd := redis.NewCmd(ctx, "COMMAND", "INFO", algos[algoGCRA].take)
	err := c.bound(ctx, ask, cmd)
	var e Engine
	var refused redis.Error
	switch {
	case errors.As(err, &refused):
		// The server will not say (an ACL without COMMAND): take the module,
		// whose "unknown command" turns the call into its script.
		e = Module
	case err != nil:
		return err // no answer (and cmd not ours to read): the calls waiting fail with it, and the next asks again
	default:
		e = Module
		if info, _ := cmd.Slice(); len(info) != 1 || info[0] == nil {
			var err error
			if e, err = n.luaEngine(ctx, c, ask); err != nil {
				return err
			}
		}
	}
	n.asked.Store(time.Now().UnixNano())
	n.engine.Store(int32(e))
	return nil
}

// luaEngine readies the library on a server without the module: Functions
// when the server takes it, Scripts when it refuses FUNCTION, or the error
// of a server that did not answer.
func (n *node) luaEngine(ctx context.Context, c *Client, ask doer) (Engine, error) {
	err := n.library(ctx, c, ask)
	var refused redis.Error
	switch {
	case err == nil:
		return Functions, nil
	case errors.As(err, &refused):
		return Scripts, nil
	}
	return 0, err
}

// library loads the FUNCTION library on the server, once for every call
// waiting: nothing when its ratelimit_version answers this library's
// version, FUNCTION LOAD REPLACE otherwise. The server's error reply (no
// FUNCTION, an ACL) comes back as it is.
func (n *node) library(ctx context.Context, c *Client, ask doer) error {
	return n.lib.once(ctx, func(ctx context.Context) error {
		v := redis.NewCmd(ctx, "fcall_ro", lua.VersionFunction, 0)
		err := c.bound(ctx, ask, v)
		if got, _ := v.Text(); err == nil && got == libVersion {
			return nil
		}
		if err != nil && !functionNotFound(err) {
			return err
		}
		load := redis.NewCmd(ctx, "FUNCTION", "LOAD", "REPLACE", libSource)
		if err := c.bound(ctx, ask, load); err != nil {
			return err
		}
		if name, _ := load.Text(); name != lua.LibraryName {
			return fmt.Errorf("ratelimit: FUNCTION LOAD answered %q, want %s", name, lua.LibraryName)
		}
		return nil
	})
}

// load loads script i on the server, once for every call waiting.
func (n *node) load(ctx context.Context, c *Client, ask doer, i int) error {
	return n.loads[i].once(ctx, func(ctx context.Context) error {
		s := scriptList[i]
		cmd := redis.NewCmd(ctx, "SCRIPT", "LOAD", s.Source)
		if err := c.bound(ctx, ask, cmd); err != nil {
			return err
		}
		if sha, _ := cmd.Text(); sha != s.SHA1 {
			return fmt.Errorf("ratelimit: SCRIPT LOAD of %s answered %q, want %s", s.Command, sha, s.SHA1)
		}
		return nil
	})
}

// nodeFor is what the client knows of key's server, and a client that
// reaches it.
func (c *Client) nodeFor(ctx context.Context, key string) (*node, doer, error) {
	var server *redis.Client
	var err error
	switch r := c.rdb.(type) {
	case *redis.Client: // one server (a failover client follows its primary)
		return c.single, r, nil
	case *redis.ClusterClient:
		server, err = r.MasterForKey(ctx, key)
	case *redis.Ring:
		server, err = r.GetShardClientForKey(key)
	default:
		return c.single, c.rdb, nil
	}
	if err != nil {
		return nil, nil, err
	}
	addr := server.Options().Addr
	n, ok := c.nodes.Load(addr)
	if !ok {
		n, _ = c.nodes.LoadOrStore(addr, newNode())
	}
	return n.(*node), server, nil
}

// Engines reports the engine each server met so far runs: by address for
// a Cluster's or a Ring's nodes, under the client's address (or "" for
// other clients) for one server. A server not asked yet is not listed.
func (c *Client) Engines() map[string]Engine {
	m := map[string]Engine{}
	add := func(addr string, n *node) {
		e := c.engine
		if e == Auto {
			e = Engine(n.engine.Load())
		}
		if e != Auto {
			m[addr] = e
		}
	}
	switch r := c.rdb.(type) {
	case *redis.ClusterClient, *redis.Ring:
		c.nodes.Range(func(k, v any) bool {
			add(k.(string), v.(*node))
			return true
		})
	case *redis.Client:
		add(r.Options().Addr, c.single)
	default:
		add("", c.single)
	}
	return m
}

// script runs the command in args (its name, then its arguments as the
// module takes them) as its Lua script: EVALSHA (EVALSHA_RO for a peek),
// loading the script first where the server does not have it yet, and
// again, once, if the server answers NOSCRIPT (its scripts were flushed,
// or a failover brought a server that never had them).
func (c *Client) script(ctx context.Context, args []any, n *node, ask doer) (*onceCmd, error) {
	i, ok := scriptIndex[commandName(args)]
	if !ok {
		return nil, fmt.Errorf("%w: no script for %v", ErrNoModule, args[0])
	}
	for attempt := 0; ; attempt++ {
		if err := n.load(ctx, c, ask, i); err != nil {
			return nil, err
		}
		cmd := luaCmd(ctx, args, i, false)
		err := c.bound(ctx, c.rdb, cmd)
		if err == nil || attempt > 0 || !noScript(err) {
			return cmd, err
		}
		n.loads[i].done.Store(false) // it ran nothing: load it and send it again
	}
}

// commandName is the name of the command args hold.
func commandName(args []any) string {
	name, _ := args[0].(string)
	return name
}

// luaCmd is the command that runs args (a command's name, then its
// arguments as the module takes them) as script i, EVALSHA sha numkeys
// key... arg... (EVALSHA_RO for a peek), or as its function, FCALL name
// numkeys key... arg... (FCALL_RO).
func luaCmd(ctx context.Context, args []any, i int, function bool) *onceCmd {
	s := scriptList[i]
	sargs := make([]any, 0, len(args)+3)
	verb, name := "evalsha", s.SHA1
	if function {
		verb, name = "fcall", s.Function
	}
	if s.ReadOnly {
		verb += "_ro"
	}
	sargs = append(sargs, verb, name)
	if s.Command != cmdAll && s.Command != cmdPeekAll { // RL.ALL and RL.PEEK give numkeys themselves
		sargs = append(sargs, 1)
	}
	sargs = append(sargs, args[1:]...)
	cmd := &onceCmd{Cmd: *redis.NewCmd(ctx, sargs...)}
	cmd.SetFirstKeyPos(3)
	return cmd
}

func noScript(err error) bool { return strings.HasPrefix(err.Error(), "NOSCRIPT") }

// function runs the command in args as its function of the library: FCALL
// (FCALL_RO for a peek), loading the library first where the server does
// not have it yet, and again, once, if the server answers that the
// function is not found (the library was flushed, or a failover brought a
// server that never had it). A server that refuses FUNCTION from then on
// runs the scripts.
func (c *Client) function(ctx context.Context, args []any, n *node, ask doer) (*onceCmd, error) {
	i, ok := scriptIndex[commandName(args)]
	if !ok {
		return nil, fmt.Errorf("%w: no function for %v", ErrNoModule, args[0])
	}
	for attempt := 0; ; attempt++ {
		e, err := c.readyLua(ctx, Functions, n, ask)
		switch {
		case err != nil:
			return nil, err
		case e == Scripts:
			return c.script(ctx, args, n, ask)
		}
		cmd := luaCmd(ctx, args, i, true)
		err = c.bound(ctx, c.rdb, cmd)
		if err == nil || attempt > 0 || !functionNotFound(err) {
			return cmd, err
		}
		n.lib.done.Store(false) // it ran nothing: load the library and send it again
	}
}

// readyLua is the engine a call on a server whose engine is e runs now:
// with Functions, the library loaded first (a server that refuses FUNCTION
// runs the scripts from then on, under Auto).
func (c *Client) readyLua(ctx context.Context, e Engine, n *node, ask doer) (Engine, error) {
	if e != Functions {
		return e, nil
	}
	err := n.library(ctx, c, ask)
	var refused redis.Error
	if err != nil && c.engine == Auto && errors.As(err, &refused) {
		n.engine.Store(int32(Scripts))
		return Scripts, nil
	}
	return e, err
}

// functionNotFound reports the server's answer to a function it does not
// hold.
func functionNotFound(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "function not found")
}

// process sends a limiter command once, through the engine its key's
// server uses, and returns the command holding the reply.
func (c *Client) process(ctx context.Context, args []any, keyPos int8) (*onceCmd, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // the caller is gone: Redis is not asked
	}
	key, _ := args[keyPos].(string)
	e, n, ask, err := c.engineFor(ctx, key)
	if err != nil {
		return nil, err
	}
	switch e {
	case Scripts:
		return c.script(ctx, args, n, ask)
	case Functions:
		return c.function(ctx, args, n, ask)
	}
	cmd := &onceCmd{Cmd: *redis.NewCmd(ctx, args...)}
	cmd.SetFirstKeyPos(keyPos)
	err = c.bound(ctx, c.rdb, cmd)
	if err != nil && c.engine == Auto && unknownCommand(err) {
		// A server without the module after all (a failover): its Lua
		// engine, from now on.
		if n != nil {
			n.asked.Store(time.Now().UnixNano())
			n.engine.Store(int32(Functions))
		}
		return c.function(ctx, args, n, ask)
	}
	return cmd, wrap(err)
}

func unknownCommand(err error) bool { return strings.HasPrefix(err.Error(), "ERR unknown command") }

// doer sends a command to one server.
type doer interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// bound sends cmd through d within ctx's deadline. A go-redis client built
// with ContextTimeoutEnabled bounds its reads and writes by the deadline
// itself; with any other client the call runs in a goroutine of its own
// and is left to finish alone when ctx ends first (its connection is held
// until go-redis's ReadTimeout, and its reply is never read).
func (c *Client) bound(ctx context.Context, d doer, cmd redis.Cmder) error {
	return c.within(ctx, func() error { return d.Process(ctx, cmd) })
}

// within runs send, which talks to Redis, within ctx's deadline (see
// bound). When ctx ends first, send is left to finish alone: what it
// writes must not be read.
func (c *Client) within(ctx context.Context, send func() error) error {
	if c.deadlines || ctx.Done() == nil {
		return send()
	}
	finished := make(chan error, 1)
	go func() { finished <- send() }()
	select {
	case err := <-finished:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// honoursDeadlines reports whether rdb bounds each command by its
// context's deadline (go-redis's ContextTimeoutEnabled).
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return r.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return r.Options().ContextTimeoutEnabled
	}
	return false
}
