package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/internal/clientx"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
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
	// Functions always runs the FUNCTION library, this version's edition
	// (lua.Versioned): loaded on a server once (FUNCTION LOAD, never
	// replacing another version's), then called with FCALL (FCALL_RO for
	// a peek). A server that lost it (FUNCTION FLUSH, a new primary that
	// never had it) gets it loaded again and the call sent again: a
	// function not found ran nothing.
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

// recheck is how long a server found without the module is taken at its
// word before it is asked again.
const recheck = time.Minute

// prepareTimeout bounds one piece of start-up work: an engine probe (with
// the library load it may bring), a script load, a Cluster's first map. It
// runs apart from the calls that wait for it, and a caller that gives up
// does not cancel the work the others wait for. A client takes it when made
// (Client.prepareTimeout), so a test can shorten it for its own client.
var prepareTimeout = 2 * time.Second

// commandIndex finds a command's position in spec.Commands by its name as
// the client sends it; the Lua code of each is assembled only when a
// server needs it (luaCode).
var commandIndex = func() map[string]int {
	m := make(map[string]int, len(spec.Commands))
	for i := range spec.Commands {
		m[spec.Commands[i].Name] = i
	}
	return m
}()

// luaCode is the Lua engine as the client sends it: each command's script
// and its function in this version's edition of the library, by position
// in spec.Commands.
type luaCode struct {
	scripts   []lua.Script
	functions []string
	edition   lua.Edition
}

// theLua assembles the Lua engine the first time a server needs it: a
// client whose servers all have the module never does.
var theLua = sync.OnceValue(func() *luaCode {
	l := &luaCode{edition: lua.Versioned()}
	for i := range spec.Commands {
		s := lua.Must(spec.Commands[i].Name)
		l.scripts = append(l.scripts, s)
		l.functions = append(l.functions, s.Function+l.edition.Suffix)
	}
	return l
})

// node is what the client knows of one server.
type node struct {
	addr   string       // its address ("" when the client does not say)
	engine atomic.Int32 // 0 not known yet, else Module, Scripts or Functions
	asked  atomic.Int64 // when, in Unix ns
	probe  flight       // the COMMAND INFO (and library load) in flight
	loads  []flight     // per command: its SCRIPT LOAD in flight, or done
	lib    flight       // the library's load in flight, or done
}

func newNode(addr string) *node {
	return &node{addr: addr, loads: make([]flight, len(spec.Commands))}
}

// flight is work that many calls may need at once (an engine probe, a
// script load) done once for all of them: the first call starts it in a
// goroutine of its own, bounded by its own timeout (prepareTimeout), and
// every call waits for it (see Client.await). Done records that it
// succeeded, until reset.
type flight struct {
	mu     sync.Mutex
	cur    *flightCall
	done   atomic.Bool
	failed atomic.Bool // its last run failed: calls wait for the next only within their own deadlines
}

type flightCall struct {
	finished chan struct{}
	err      error        // set before finished is closed
	waiters  atomic.Int32 // calls waiting for it now
}

// wait runs work unless it is already in flight, and waits for it (see
// Client.await), returning the context the call goes on with. The work
// gets its own context of c's prepareTimeout, with ctx's values but not
// its deadline or cancellation.
func (f *flight) wait(ctx context.Context, c *Client, work func(context.Context) error) (context.Context, error) {
	return f.run(ctx, c, work, false)
}

// once is wait for work that stays done once it succeeded (until done is
// reset): a call that finds it done, even as it was finishing, runs
// nothing and waits for nothing.
func (f *flight) once(ctx context.Context, c *Client, work func(context.Context) error) (context.Context, error) {
	if f.done.Load() {
		return ctx, nil
	}
	return f.run(ctx, c, work, true)
}

func (f *flight) run(ctx context.Context, c *Client, work func(context.Context) error, once bool) (context.Context, error) {
	f.mu.Lock()
	if once && f.done.Load() { // it finished between the caller's look and now
		f.mu.Unlock()
		return ctx, nil
	}
	call := f.cur
	if call == nil {
		call = &flightCall{finished: make(chan struct{})}
		f.cur = call
		c.starting.Add(1)
		go func() {
			defer c.starting.Add(-1)
			f.do(call, context.WithoutCancel(ctx), c.prepareTimeout, work)
		}()
	}
	patient := !f.failed.Load()
	call.waiters.Add(1)
	f.mu.Unlock()
	defer call.waiters.Add(-1)
	return c.await(ctx, call, patient)
}

// warming reports whether start-up work of c's (see flight) is running:
// a call that waits on another's call (the local tier's cold calls, which
// share one) waits past its deadline while it does, as await does.
func (c *Client) warming() bool { return c.starting.Load() > 0 }

// waiting is how many calls wait for the work in flight now.
func (f *flight) waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == nil {
		return 0
	}
	return int(f.cur.waiters.Load())
}

// do runs work for call within timeout. The calls waiting are told at the
// timeout even if work has not returned (a doer that ignores its context):
// what they wait for is bounded whatever the server does.
func (f *flight) do(call *flightCall, ctx context.Context, timeout time.Duration, work func(context.Context) error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- work(wctx) }()
	var err error
	select {
	case err = <-ended:
	case <-wctx.Done():
		err = fmt.Errorf("ratelimit: the server's start-up work (engine probe, library or script load) took over %v: %w", timeout, wctx.Err())
	}
	f.mu.Lock()
	call.err, f.cur = err, nil
	if err == nil {
		f.done.Store(true)
	}
	f.failed.Store(err != nil)
	f.mu.Unlock()
	close(call.finished)
}

// await waits for start-up work in flight (call) on behalf of a call whose
// context is ctx, and returns the context the call goes on with and the
// work's error.
//
// Start-up work is not the call's to pay for. While it is patient (no run
// of this work has failed since the last that succeeded), the call waits
// for the work whatever its deadline, the work bounded by its own timeout,
// and goes on with the time it had when it began to wait: ctx with its
// deadline pushed back by the wait (pushBack), which the calls made with
// ctx afterwards get too (resumed). The caller's own cancellation
// (context.Canceled) ends the wait at once. A context whose deadline has
// passed no longer tells when its caller goes; one from WithTimeout does:
// its parent's end ends the wait.
//
// After a run has failed (the server is down, or stopped), calls wait only
// within their own deadlines: an outage is decided fast, by the caller's
// failure policy, while the work is tried again behind them.
func (c *Client) await(ctx context.Context, call *flightCall, patient bool) (context.Context, error) {
	select {
	case <-call.finished:
		return ctx, call.err
	default:
	}
	if !patient {
		select {
		case <-call.finished:
			return ctx, call.err
		case <-ctx.Done():
			return ctx, ctx.Err()
		}
	}
	start := time.Now()
	select {
	case <-call.finished:
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ctx, ctx.Err() // the caller gave up
		}
		var gone <-chan struct{} // the caller's end, where its context still tells it
		parent := anchorOf(ctx)
		if parent != nil {
			gone = parent.Done()
		}
		select {
		case <-call.finished:
		case <-gone:
			return ctx, parent.Err()
		}
	}
	if call.err != nil {
		return ctx, call.err
	}
	return c.pushBack(ctx, time.Since(start)), nil
}

// pushBack is ctx with its deadline, if it has one, pushed back by waited,
// the time its call spent waiting for start-up work: ctx's values, and its
// caller's cancellation (from a WithTimeout context's parent; from ctx
// itself until its deadline otherwise). The calls made with ctx from then
// on are made with it (resumed), until it ends.
func (c *Client) pushBack(ctx context.Context, waited time.Duration) context.Context {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx
	}
	var later context.Context
	var cancel context.CancelFunc
	if a := anchorFor(ctx); a != nil {
		later, cancel = withAnchor(a.parent, func(p context.Context) (context.Context, context.CancelFunc) {
			return context.WithDeadline(p, d.Add(waited))
		})
		a.hold(cancel)
	} else {
		later, cancel = context.WithDeadline(context.WithoutCancel(ctx), d.Add(waited))
	}
	context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel() // the caller gave up
		}
	})
	if done := ctx.Done(); done != nil {
		c.pushed.Store(done, later)
		c.npushed.Add(1)
		context.AfterFunc(later, func() {
			c.pushed.CompareAndDelete(done, later)
			c.npushed.Add(-1)
			cancel()
		})
	}
	return valuesOf{later, ctx}
}

// resumed is the context a call made with ctx goes on with: ctx, or, when
// an earlier call made with it waited for start-up work, ctx with its
// deadline pushed back by that wait (pushBack), while that lasts, and
// ctx's values. A ctx its caller has cancelled is itself.
func (c *Client) resumed(ctx context.Context) context.Context {
	if c.npushed.Load() == 0 {
		return ctx
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return ctx // the caller gave up: nothing more is sent for it
	}
	cur := ctx
	for done := cur.Done(); done != nil; done = cur.Done() {
		later, ok := c.pushed.Load(done)
		if !ok {
			break
		}
		cur = later.(context.Context)
	}
	if cur == ctx {
		return ctx
	}
	return valuesOf{cur, ctx}
}

// valuesOf is a pushed-back context (its deadline, Done and Err) with the
// values of the caller's (a context derived from ctx with WithValue shares
// its Done channel, so it finds the same pushed-back one, and its call
// carries its own values: a trace's span, a request's id). The anchor is
// the pushed-back context's own, which tells its caller's end.
type valuesOf struct {
	context.Context
	values context.Context
}

func (v valuesOf) Value(key any) any {
	if _, ok := key.(anchorKey); ok {
		return v.Context.Value(key)
	}
	return v.values.Value(key)
}

// WithTimeout is context.WithTimeout(parent, timeout) for limiter calls,
// which waits for the client's start-up work (the engine probe, the library
// or a script loaded, a Cluster's map; see Start-up work in the package
// documentation) never count against. With any context a call waits for
// that work past its deadline and then has its time back; one from
// WithTimeout also ends the wait when parent ends, however long the wait
// has lasted (another context, once its deadline has passed, no longer
// tells when its caller goes). Pass it to the client as it is: a context
// derived from it is an ordinary one. Call cancel when the calls are done.
func WithTimeout(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return withAnchor(parent, func(p context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(p, timeout)
	})
}

// anchor is what a context made by withAnchor holds under anchorKey: the
// parent whose end is its caller's, and its own Done channel, by which a
// context derived from it (which finds the anchor too) is told apart.
type anchor struct {
	parent context.Context
	done   <-chan struct{}
	mu     sync.Mutex
	later  []context.CancelFunc // the pushed-back contexts made from it (pushBack): cancelled with it
	ended  bool                 // its cancel was called
}

type anchorKey struct{}

// withAnchor is the context derive makes from parent, holding parent as
// its anchor. Its cancel also cancels the pushed-back contexts made from
// it: a caller who cancels after the deadline has passed sends nothing
// more.
func withAnchor(parent context.Context, derive func(context.Context) (context.Context, context.CancelFunc)) (context.Context, context.CancelFunc) {
	a := &anchor{parent: parent}
	ctx, cancel := derive(context.WithValue(parent, anchorKey{}, a))
	a.done = ctx.Done()
	return ctx, func() {
		a.mu.Lock()
		later := a.later
		a.later, a.ended = nil, true
		a.mu.Unlock()
		for _, c := range later {
			c()
		}
		cancel()
	}
}

// hold has a's cancel cancel later too (at once when it was called).
func (a *anchor) hold(later context.CancelFunc) {
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		later()
		return
	}
	a.later = append(a.later, later)
	a.mu.Unlock()
}

// anchorFor is the anchor of a context from WithTimeout (or pushBack's of
// one), nil for any other.
func anchorFor(ctx context.Context) *anchor {
	if a, ok := ctx.Value(anchorKey{}).(*anchor); ok && a.done == ctx.Done() {
		return a
	}
	return nil
}

// anchorOf is the parent of a context from WithTimeout (or pushBack's of
// one), nil for any other.
func anchorOf(ctx context.Context) context.Context {
	if a := anchorFor(ctx); a != nil {
		return a.parent
	}
	return nil
}

// engineFor is the engine that runs a command on key's server, and that
// server, and the context the call goes on with (see Client.await). A
// server not asked yet is asked once, whatever the number of calls waiting
// for the answer.
func (c *Client) engineFor(ctx context.Context, key string) (context.Context, Engine, *node, doer, error) {
	ctx, n, ask, err := c.nodeFor(ctx, key)
	if err != nil || c.engine != Auto {
		return ctx, c.engine, n, ask, err
	}
	e := Engine(n.engine.Load())
	switch {
	case e == Module:
		return ctx, e, n, ask, nil
	case e == Scripts || e == Functions:
		if asked := n.asked.Load(); time.Since(time.Unix(0, asked)) >= recheck &&
			n.asked.CompareAndSwap(asked, time.Now().UnixNano()) { // one call a minute asks again, in the background
			go n.probe.wait(context.WithoutCancel(ctx), c, func(ctx context.Context) error { return n.redetect(ctx, c, ask) })
		}
		return ctx, e, n, ask, nil
	}
	// once: a probe that succeeded between the look above and now (the
	// engine known) is not sent again.
	ctx, err = n.probe.once(ctx, c, func(ctx context.Context) error { return n.start(ctx, c, ask) })
	if err != nil {
		return ctx, Module, n, ask, err
	}
	return ctx, Engine(n.engine.Load()), n, ask, nil
}

// start is a server's start-up work for the first calls: detect, then the
// connections they will take (warm), and only then the engine made known,
// so that the calls coming meanwhile wait with the others rather than dial
// beside the warming.
func (n *node) start(ctx context.Context, c *Client, ask doer) error {
	e, err := n.detect(ctx, c, ask)
	if err != nil {
		return err
	}
	c.warm(ctx, ask, n.probe.waiting())
	n.learn(e)
	return nil
}

// redetect is detect, the engine made known at once.
func (n *node) redetect(ctx context.Context, c *Client, ask doer) error {
	e, err := n.detect(ctx, c, ask)
	if err == nil {
		n.learn(e)
	}
	return err
}

// learn records that the server runs engine e, as of now.
func (n *node) learn(e Engine) {
	n.asked.Store(time.Now().UnixNano())
	n.engine.Store(int32(e))
}

// warm opens the connections that want calls, waiting for a server's
// start-up work, will take when it ends: a herd of first calls on a fresh
// process would otherwise open them all at once, each within its own
// deadline, after the work. One PING each, sent at once (errors ignored),
// up to the pool's size, within half the time the work has left, so that
// a slow server fails none of the calls for it; none for a lone call,
// which takes the probe's. Only a real pool is warmed: one that opened a
// connection for the probe (not a hook that answered in its place).
func (c *Client) warm(ctx context.Context, ask doer, want int) {
	rdb, ok := ask.(*redis.Client)
	if !ok || want < 2 || rdb.PoolStats().TotalConns == 0 {
		return
	}
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Until(d)/2)
		defer cancel()
	}
	var wg sync.WaitGroup
	for range min(want, rdb.Options().PoolSize) {
		wg.Go(func() { c.bound(ctx, rdb, redis.NewStatusCmd(ctx, "PING")) })
	}
	wg.Wait()
}

// detect asks the server whether it has the module and, where it has not,
// readies the Lua engine it takes: the library, else the scripts. It
// returns the engine; the caller makes it known (learn).
func (n *node) detect(ctx context.Context, c *Client, ask doer) (Engine, error) {
	cmd := redis.NewCmd(ctx, "COMMAND", "INFO", algos[algoGCRA].take)
	err := c.bound(ctx, ask, cmd)
	var refused redis.Error
	switch {
	case errors.As(err, &refused):
		// The server will not say (an ACL without COMMAND): take the module,
		// whose "unknown command" turns the call into its script.
		return Module, nil
	case err != nil:
		return 0, err // no answer (and cmd not ours to read): the calls waiting fail with it, and the next asks again
	}
	if info, _ := cmd.Slice(); len(info) != 1 || info[0] == nil {
		return n.luaEngine(ctx, c, ask)
	}
	return Module, nil
}

// luaEngine readies the library on a server without the module: Functions
// when the server takes it, Scripts when it refuses FUNCTION, or the error
// of a server that did not answer.
func (n *node) luaEngine(ctx context.Context, c *Client, ask doer) (Engine, error) {
	_, err := n.library(ctx, c, ask)
	var refused redis.Error
	switch {
	case err == nil:
		return Functions, nil
	case errors.As(err, &refused):
		return Scripts, nil
	}
	return 0, err
}

// library readies this version's edition of the FUNCTION library
// (lua.Versioned) on the server, once for every call waiting: nothing when
// its version function answers, FUNCTION LOAD otherwise. Another version's
// edition is never replaced: each version calls its own functions. The
// server's error reply (no FUNCTION, an ACL) comes back as it is, with the
// context the call goes on with (see Client.await).
func (n *node) library(ctx context.Context, c *Client, ask doer) (context.Context, error) {
	return n.lib.once(ctx, c, func(ctx context.Context) error {
		ed := theLua().edition
		v := redis.NewCmd(ctx, "fcall_ro", lua.VersionFunction+ed.Suffix, 0)
		err := c.bound(ctx, ask, v)
		got, _ := v.Text()
		if err == nil && got == ed.Version {
			return nil
		}
		if err != nil && !functionNotFound(err) {
			return err
		}
		args := []any{"FUNCTION", "LOAD", ed.Source}
		if err == nil { // a library of this name answering another version: not one this code loaded
			args = []any{"FUNCTION", "LOAD", "REPLACE", ed.Source}
		}
		load := redis.NewCmd(ctx, args...)
		err = c.bound(ctx, ask, load)
		switch name, _ := load.Text(); {
		case err != nil && alreadyExists(err):
			return nil // another process of this version loaded it meanwhile
		case err != nil:
			return err
		case name != ed.Name:
			return fmt.Errorf("ratelimit: FUNCTION LOAD answered %q, want %s", name, ed.Name)
		}
		return nil
	})
}

// alreadyExists reports FUNCTION LOAD's answer for a library the server
// holds already.
func alreadyExists(err error) bool { return strings.Contains(err.Error(), "already exists") }

// load loads script i on the server, once for every call waiting, and
// returns the context the call goes on with (see Client.await).
func (n *node) load(ctx context.Context, c *Client, ask doer, i int) (context.Context, error) {
	return n.loads[i].once(ctx, c, func(ctx context.Context) error {
		s := theLua().scripts[i]
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
// reaches it, and the context the call goes on with: in a Cluster, the
// first calls wait for the cluster's map (go-redis's CLUSTER SLOTS), read
// once for all of them as start-up work (see Client.await).
func (c *Client) nodeFor(ctx context.Context, key string) (context.Context, *node, doer, error) {
	var server *redis.Client
	var err error
	switch r := c.rdb.(type) {
	case *redis.Client: // one server (a failover client follows its primary)
		return ctx, c.single, r, nil
	case *redis.ClusterClient:
		if !c.mapped.done.Load() {
			ctx, err = c.mapped.once(ctx, c, func(ctx context.Context) error {
				_, err := r.MasterForKey(ctx, key)
				return err
			})
		}
		if err == nil {
			server, err = r.MasterForKey(ctx, key)
		}
	case *redis.Ring:
		server, err = r.GetShardClientForKey(key)
	default:
		return ctx, c.single, c.rdb, nil
	}
	if err != nil {
		return ctx, nil, nil, err
	}
	return ctx, c.nodeAt(server.Options().Addr), server, nil
}

// nodeAt is what the client knows of the server at addr, in a Cluster or a
// Ring.
func (c *Client) nodeAt(addr string) *node {
	n, ok := c.nodes.Load(addr)
	if !ok {
		n, _ = c.nodes.LoadOrStore(addr, newNode(addr))
	}
	return n.(*node)
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
	switch c.rdb.(type) {
	case *redis.ClusterClient, *redis.Ring:
		c.nodes.Range(func(k, v any) bool {
			add(k.(string), v.(*node))
			return true
		})
	default:
		add(c.single.addr, c.single)
	}
	return m
}

// script runs command i, whose arguments args holds (its name, then its
// arguments as the module takes them), as its Lua script: EVALSHA
// (EVALSHA_RO for a peek), loading the script first where the server does
// not have it yet, and again, once, if the server answers NOSCRIPT (its
// scripts were flushed, or a failover brought a server that never had
// them). In a Cluster the call is sent as its source instead (elsewhere).
func (c *Client) script(ctx context.Context, args []any, i int, n *node, ask doer) (context.Context, *onceCmd, error) {
	for attempt := 0; ; attempt++ {
		var err error
		if ctx, err = n.load(ctx, c, ask, i); err != nil {
			return ctx, nil, err
		}
		cmd := luaCmd(ctx, args, i, "evalsha")
		err = c.bound(ctx, c.rdb, cmd)
		switch {
		case err == nil || !c.lost(Scripts, n, i, err):
			return ctx, cmd, err
		case c.cluster():
			cmd, err = c.elsewhere(ctx, args, i, n)
			return ctx, cmd, err
		case attempt > 0:
			return ctx, cmd, err
		}
	}
}

// luaCmd is the command that runs args (a command's name, then its
// arguments as the module takes them) as command i's script or function:
// verb evalsha (EVALSHA sha numkeys key... arg...), eval (the script's
// source in place of its SHA1) or fcall (FCALL function numkeys key...
// arg...), with _ro for a peek.
func luaCmd(ctx context.Context, args []any, i int, verb string) *onceCmd {
	l := theLua()
	s := l.scripts[i]
	sargs := make([]any, 0, len(args)+3)
	var name string
	switch verb {
	case "evalsha":
		name = s.SHA1
	case "eval":
		name = s.Source
	default:
		name = l.functions[i]
	}
	if s.ReadOnly {
		verb += "_ro"
	}
	sargs = append(sargs, verb, name)
	switch c := &spec.Commands[i]; {
	case c.Hold: // the limiter's key and the hold's
		sargs = append(sargs, 2)
	case !c.NumKeys: // RL.ALL and RL.PEEK give numkeys themselves
		sargs = append(sargs, 1)
	}
	sargs = append(sargs, args[1:]...)
	cmd := &onceCmd{Cmd: *redis.NewCmd(ctx, sargs...)}
	cmd.SetFirstKeyPos(3)
	return cmd
}

// commandName is the name of the command args hold.
func commandName(args []any) string {
	name, _ := args[0].(string)
	return name
}

func noScript(err error) bool { return strings.HasPrefix(err.Error(), "NOSCRIPT") }

// function runs command i, whose arguments args holds, as its function of
// the library: FCALL (FCALL_RO for a peek), loading the library first
// where the server does not have it yet, and again, once, if the server
// answers that the function is not found (the library was flushed, or a
// failover brought a server that never had it). A server that refuses
// FUNCTION from then on runs the scripts. In a Cluster a function not
// found is sent as its script's source instead (elsewhere).
func (c *Client) function(ctx context.Context, args []any, i int, n *node, ask doer) (context.Context, *onceCmd, error) {
	for attempt := 0; ; attempt++ {
		var e Engine
		var err error
		ctx, e, err = c.readyLua(ctx, Functions, n, ask)
		switch {
		case err != nil:
			return ctx, nil, err
		case e == Scripts:
			return c.script(ctx, args, i, n, ask)
		}
		cmd := luaCmd(ctx, args, i, "fcall")
		err = c.bound(ctx, c.rdb, cmd)
		switch {
		case err == nil:
			return ctx, cmd, nil
		case c.cluster() && functionNotFound(err):
			// Perhaps n lost it, perhaps the call went elsewhere: prepare
			// asks every primary again, n among them.
			cmd, err = c.elsewhere(ctx, args, i, n)
			return ctx, cmd, err
		case !c.lost(Functions, n, i, err) || attempt > 0:
			return ctx, cmd, err
		}
	}
}

// elsewhere runs command i as its script's source (EVAL), after a Lua
// call in a Cluster found no script or no function: go-redis may have
// followed a redirection (ASK during a slot's migration, MOVED after one or
// after a failover) to a primary that never had them, which the client
// cannot name. EVAL needs nothing loaded wherever it lands, so the call
// costs one more round trip, and is decided. Behind it, the primaries are
// readied (prepare).
func (c *Client) elsewhere(ctx context.Context, args []any, i int, n *node) (*onceCmd, error) {
	go c.prepare(context.WithoutCancel(ctx), n)
	cmd := luaCmd(ctx, args, i, "eval")
	return cmd, c.bound(ctx, c.rdb, cmd)
}

// prepareEvery is how often at most a Cluster's primaries are readied
// again for the Lua engine.
const prepareEvery = 250 * time.Millisecond

// prepare readies the Lua engine on a Cluster's primaries after a call
// found it missing: n (which may have lost it) and every primary the
// cluster's map holds (a new one, a slot's new owner), each asked again
// whether it holds this version's library, and given it where not. Once
// per prepareEvery at most, in a goroutine of its own.
func (c *Client) prepare(ctx context.Context, n *node) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if last := c.prepared.Load(); !ok || time.Since(time.Unix(0, last)) < prepareEvery ||
		!c.prepared.CompareAndSwap(last, time.Now().UnixNano()) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.prepareTimeout)
	defer cancel()
	cc.ForEachMaster(ctx, func(ctx context.Context, server *redis.Client) error {
		m := c.nodeAt(server.Options().Addr)
		e := c.engine
		if e == Auto {
			e = Engine(m.engine.Load())
		}
		var err error
		switch e {
		case 0: // not asked yet: whether it has the module, and its Lua engine if not
			_, err = m.probe.wait(ctx, c, func(ctx context.Context) error { return m.redetect(ctx, c, server) })
		case Functions:
			m.lib.done.Store(false)
			_, err = m.library(ctx, c, server)
		}
		return err
	})
}

// readyLua is the engine a call on a server whose engine is e runs now:
// with Functions, the library loaded first (a server that refuses FUNCTION
// runs the scripts from then on, under Auto); and the context the call
// goes on with (see Client.await).
func (c *Client) readyLua(ctx context.Context, e Engine, n *node, ask doer) (context.Context, Engine, error) {
	if e != Functions {
		return ctx, e, nil
	}
	ctx, err := n.library(ctx, c, ask)
	var refused redis.Error
	if err != nil && c.engine == Auto && errors.As(err, &refused) {
		n.engine.Store(int32(Scripts))
		return ctx, Scripts, nil
	}
	return ctx, e, err
}

// functionNotFound reports the server's answer to a function it does not
// hold.
func functionNotFound(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "function not found")
}

// lost reports an answer saying that the server ran nothing because it
// lacks what engine e runs command i with: its script (NOSCRIPT), its
// function (not found), the module's command (unknown, under Auto). The
// client forgets that the server had it, so the call can be sent again:
// the script or the library is loaded again first, and a server found
// without the module runs the Lua engine from then on.
func (c *Client) lost(e Engine, n *node, i int, err error) bool {
	switch {
	case e == Scripts && noScript(err):
		n.loads[i].done.Store(false)
	case e == Functions && functionNotFound(err):
		n.lib.done.Store(false)
	case e == Module && c.engine == Auto && unknownCommand(err):
		n.asked.Store(time.Now().UnixNano())
		n.engine.Store(int32(Functions))
	default:
		return false
	}
	return true
}

// awaitChan waits for ch until deadline or ctx's end: late when the
// deadline came first, ctx's error when ctx ended. While the client's
// start-up work runs (warming) the deadline is prepareTimeout later, and
// ctx's deadline passing does not end the wait: start-up work is not the
// call's to pay for (see Client.await); the caller's own end still does,
// where its context tells it (WithTimeout). The local tier (package lease)
// waits for its grants so, through clientx.Await.
func (c *Client) awaitChan(ctx context.Context, ch <-chan struct{}, deadline time.Time) (late bool, err error) {
	warming := c.warming()
	if warming { // the call waited for may itself wait that long first
		deadline = deadline.Add(c.prepareTimeout)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-ch:
		return false, nil
	case <-timer.C:
		return true, nil
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !warming && !c.warming() {
			return false, ctx.Err()
		}
	}
	var gone <-chan struct{}
	parent := anchorOf(ctx)
	if parent != nil {
		gone = parent.Done()
	}
	select {
	case <-ch:
		return false, nil
	case <-timer.C:
		return true, nil
	case <-gone:
		return false, parent.Err()
	}
}

func init() {
	clientx.Await = func(c any, ctx context.Context, ch <-chan struct{}, deadline time.Time) (bool, error) {
		return c.(*Client).awaitChan(ctx, ch, deadline)
	}
	clientx.PrepareTimeout = func(c any) time.Duration { return c.(*Client).prepareTimeout }
	clientx.Cluster = func(c any) bool { return c.(*Client).cluster() }
	clientx.Grouped = func(c any) bool { return c.(*Client).grouped() }
	clientx.Moving = movedOut
	clientx.Watch = func(c any, ctx context.Context, limits, each any, reserve int64, known, taken []bool) error {
		return c.(*Client).watched(ctx, &watching{limits: limits.([]Keyed), each: each.([]Result), reserve: reserve, known: known, taken: taken})
	}
}

// grouped reports a client whose keys live on several servers, grouped
// by slot (a Cluster) or by hash tag (a Ring): those of one group can be
// one RL.ALL call.
func (c *Client) grouped() bool {
	switch c.rdb.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// cluster reports a Redis Cluster client, which follows redirections
// itself.
func (c *Client) cluster() bool {
	_, ok := c.rdb.(*redis.ClusterClient)
	return ok
}

// process sends a limiter command once, through the engine its key's
// server uses, and returns the command holding the reply. A reply saying
// the command ran nothing because the key's slot is moving or the cluster
// is changing hands (moving) sends it again after a short wait, until
// ctx's deadline (redirectBudget without one). Its error names the server
// it was sent to (ServerError).
func (c *Client) process(ctx context.Context, args []any, keyPos int8) (*onceCmd, error) {
	ctx = c.resumed(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err // the caller is gone: Redis is not asked
	}
	key, _ := args[keyPos].(string)
	i, ok := commandIndex[commandName(args)]
	if !ok {
		return nil, fmt.Errorf("ratelimit: no command %v", args[0])
	}
	var wait backoff
	for {
		var cmd *onceCmd
		var n *node
		var err error
		ctx, cmd, n, err = c.processOnce(ctx, args, keyPos, key, i) // ctx: the call's, after any start-up work
		if err == nil {
			return cmd, nil
		}
		if c.moving(err) && wait.next(ctx) {
			continue
		}
		addr := ""
		if n != nil {
			addr = n.addr
		}
		return cmd, &ServerError{Server: addr, Err: wrap(err)}
	}
}

// processOnce is one attempt of process: command i on the engine key's
// server runs, recovering once from a server that lost its Lua code or
// lacks the module; with the context the call goes on with, after the
// start-up work it waited for (see Client.await).
func (c *Client) processOnce(ctx context.Context, args []any, keyPos int8, key string, i int) (context.Context, *onceCmd, *node, error) {
	ctx, e, n, ask, err := c.engineFor(ctx, key)
	if err != nil {
		return ctx, nil, n, err
	}
	var cmd *onceCmd
	switch e {
	case Scripts:
		ctx, cmd, err = c.script(ctx, args, i, n, ask)
	case Functions:
		ctx, cmd, err = c.function(ctx, args, i, n, ask)
	default:
		cmd = &onceCmd{Cmd: *redis.NewCmd(ctx, args...)}
		cmd.SetFirstKeyPos(keyPos)
		err = c.bound(ctx, c.rdb, cmd)
		if err != nil && n != nil && c.lost(Module, n, i, err) {
			// A server without the module after all (a failover): its Lua
			// engine, from now on.
			ctx, cmd, err = c.function(ctx, args, i, n, ask)
		}
	}
	return ctx, cmd, n, err
}

// moving reports a reply saying that the command ran nothing because its
// slot is moving (TRYAGAIN: a command of several keys some of which have
// moved; ASK and MOVED beyond go-redis's MaxRedirects) or the cluster is
// changing hands (CLUSTERDOWN during a failover): sent again, it may run.
func (c *Client) moving(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := reply.Error()
	if strings.HasPrefix(msg, "TRYAGAIN") || strings.HasPrefix(msg, "CLUSTERDOWN") {
		return true
	}
	return c.cluster() && (strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK "))
}

// redirectBudget bounds the time a call without a deadline spends sending
// itself again while its slot moves.
const redirectBudget = 2 * time.Second

// backoff paces the attempts of one call whose slot is moving: 1 ms, then
// twice as long each time up to 32 ms, each shortened by a random part of
// up to a half so that the calls waiting do not come back together.
type backoff struct {
	attempt int
	until   time.Time // redirectBudget after the first wait, for a context without a deadline
}

// next waits before the next attempt and reports whether there is one:
// false when the wait would end past ctx's deadline (or the budget), or
// ctx ended while waiting.
func (b *backoff) next(ctx context.Context) bool {
	d := time.Millisecond << min(b.attempt, 5)
	d -= time.Duration(rand.Int64N(int64(d) / 2))
	b.attempt++
	end, ok := ctx.Deadline()
	if !ok {
		if b.until.IsZero() {
			b.until = time.Now().Add(redirectBudget)
		}
		end = b.until
	}
	if time.Until(end) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
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
