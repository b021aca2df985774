package main

// #include "shim.h"
import "C"

import (
	"fmt"
	"runtime"
	"runtime/metrics"

	"github.com/seed-6b3823f5/ratelimit/internal/engine"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// scratch holds one command's arguments and outcome. The server runs
// module commands one at a time, on one thread, and nothing Go does calls
// back into a command, so one is enough; reusing it spares zeroing 4 KB per
// call (see bench/NOTES.md: make callgrind BASELINE_REF=c6520f9).
var scratch struct {
	args [C.RL_MAX_ARGS]string
	o    engine.Outcome
}

// rlExecute runs one command for the C side, whose keys C has read: parse,
// compute, and leave in c what C must write and reply. A panic becomes an
// error reply; it never reaches the server.
//
//export rlExecute
func rlExecute(c *C.rl_call) {
	defer func() {
		if r := recover(); r != nil {
			c.action = C.RL_ACT_ERROR
			setErr(c, fmt.Sprintf("ERR internal error in ratelimit: %v", r))
		}
	}()
	o := &scratch.o
	o.Reset(int(c.nkeys))
	engine.Execute(opOf(int(c.cmd)), callArgs(c, &scratch.args), cReader{c}, o)
	store(o, c)
}

// opOf is what row of the command table runs: C passes the row, so the
// operations are numbered in Go alone.
func opOf(row int) spec.Op {
	if row < 0 || row >= len(spec.Commands) {
		return -1 // the engine replies an internal error naming it
	}
	return spec.Commands[row].Op
}

// rlInit runs once at load: it caps the Go runtime's threads, since the
// server calls in from one thread and nothing runs in the background.
//
//export rlInit
func rlInit() C.int {
	runtime.GOMAXPROCS(min(runtime.NumCPU(), 2))
	return C.int(runtime.GOMAXPROCS(0))
}

// rlGoMemory reports the bytes the Go runtime has mapped from the operating
// system (heap, stacks, metadata), for INFO ratelimit. It does not stop the
// world.
//
//export rlGoMemory
func rlGoMemory() C.longlong {
	defer func() { _ = recover() }()
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return C.longlong(s[0].Value.Uint64())
}
