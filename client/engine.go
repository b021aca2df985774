package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	Auto Engine = iota
	// Module always runs the module's commands: a server without the
	// module answers with an error wrapping ErrNoModule.
	Module
	// Scripts always runs the Lua scripts, loading each on a server the
	// first time it answers NOSCRIPT.
	Scripts
)

func (e Engine) String() string {
	switch e {
	case Auto:
		return "auto"
	case Module:
		return "module"
	case Scripts:
		return "scripts"
	}
	return fmt.Sprintf("Engine(%d)", int(e))
}

// recheck is how long a server found without the module is taken at its
// word before it is asked again.
const recheck = time.Minute

// node is what the client knows of one server.
type node struct {
	engine atomic.Int32 // 0 not asked yet, else Module or Scripts
	asked  atomic.Int64 // when, in Unix ns
}

// scriptOf is the script of each command the client sends, by the name it
// sends it under.
var scriptOf = func() map[string]lua.Script {
	m := map[string]lua.Script{}
	for _, name := range lua.Commands() {
		m[name], _ = lua.Get(name)
	}
	return m
}()

// engineFor is the engine that runs a command on key's server.
func (c *Client) engineFor(ctx context.Context, key string) Engine {
	if c.engine != Auto {
		return c.engine
	}
	n, ask := c.nodeFor(ctx, key)
	if n == nil {
		return Module // the call itself will say what is wrong
	}
	e := Engine(n.engine.Load())
	if e == Module || (e == Scripts && time.Since(time.Unix(0, n.asked.Load())) < recheck) {
		return e
	}
	info, err := ask.Do(ctx, "COMMAND", "INFO", "GCRA.THROTTLE").Slice()
	var refused redis.Error
	switch {
	case errors.As(err, &refused):
		// The server will not say (an ACL without COMMAND): take the module,
		// whose "unknown command" turns the call into its script.
		e = Module
	case err != nil:
		return Module // no answer (a network error): the call itself will say so; ask again next time
	case len(info) != 1 || info[0] == nil:
		e = Scripts
	default:
		e = Module
	}
	n.asked.Store(time.Now().UnixNano())
	n.engine.Store(int32(e))
	return e
}

// nodeFor is what the client knows of key's server, and a client that
// reaches it; nil when that server cannot be found.
func (c *Client) nodeFor(ctx context.Context, key string) (*node, doer) {
	var server *redis.Client
	var err error
	switch r := c.rdb.(type) {
	case *redis.Client: // one server (a failover client follows its primary)
		return &c.single, r
	case *redis.ClusterClient:
		server, err = r.MasterForKey(ctx, key)
	case *redis.Ring:
		server, err = r.GetShardClientForKey(key)
	default:
		return &c.single, c.rdb
	}
	if err != nil {
		return nil, nil
	}
	addr := server.Options().Addr
	n, ok := c.nodes.Load(addr)
	if !ok {
		n, _ = c.nodes.LoadOrStore(addr, &node{})
	}
	return n.(*node), server
}

// markScripts records that key's server lacks the module.
func (c *Client) markScripts(ctx context.Context, key string) {
	if n, _ := c.nodeFor(ctx, key); n != nil {
		n.asked.Store(time.Now().UnixNano())
		n.engine.Store(int32(Scripts))
	}
}

// script runs the command in args (its name, then its arguments as the
// module takes them) as its Lua script: EVALSHA (EVALSHA_RO for a peek),
// then EVAL with the script's text if the server answers NOSCRIPT.
func (c *Client) script(ctx context.Context, args []any) (*onceCmd, error) {
	name, _ := args[0].(string)
	s, ok := scriptOf[name]
	if !ok {
		return nil, fmt.Errorf("%w: no script for %v", ErrNoModule, args[0])
	}
	sargs := make([]any, 0, len(args)+3)
	verb, loadVerb := "evalsha", "eval"
	if s.ReadOnly {
		verb, loadVerb = "evalsha_ro", "eval_ro"
	}
	sargs = append(sargs, verb, s.SHA1)
	if !strings.HasPrefix(name, "RL.") { // RL.ALL and RL.PEEK give numkeys themselves
		sargs = append(sargs, 1)
	}
	sargs = append(sargs, args[1:]...)
	cmd := &onceCmd{Cmd: *redis.NewCmd(ctx, sargs...)}
	cmd.SetFirstKeyPos(3)
	err := c.rdb.Process(ctx, cmd)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		cmd = &onceCmd{Cmd: *redis.NewCmd(ctx, append([]any{loadVerb, s.Source}, sargs[2:]...)...)}
		cmd.SetFirstKeyPos(3)
		err = c.rdb.Process(ctx, cmd)
	}
	return cmd, err
}

// process sends a limiter command once, through the engine its key's
// server uses, and returns the command holding the reply.
func (c *Client) process(ctx context.Context, args []any, keyPos int8) (*onceCmd, error) {
	key, _ := args[keyPos].(string)
	if c.engineFor(ctx, key) == Scripts {
		return c.script(ctx, args)
	}
	cmd := &onceCmd{Cmd: *redis.NewCmd(ctx, args...)}
	cmd.SetFirstKeyPos(keyPos)
	err := c.rdb.Process(ctx, cmd)
	if err != nil && c.engine == Auto && unknownCommand(err) {
		c.markScripts(ctx, key)
		return c.script(ctx, args)
	}
	return cmd, wrap(err)
}

func unknownCommand(err error) bool { return strings.HasPrefix(err.Error(), "ERR unknown command") }

// doer sends a command to one server.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}
