// Package lua holds Lua scripts that implement the module's commands with
// the module's replies, errors and stored state, byte for byte, for
// servers that load no modules (managed Redis and Valkey services).
//
// There is one script per command, named after it in lower case with the
// dot as an underscore: GCRA.THROTTLE is gcra_throttle.lua. A script takes
// exactly the command's arguments, its key as the one key:
//
//	GCRA.THROTTLE user:42 15 30 60 1 MS
//	EVALSHA <sha1 of gcra_throttle.lua> 1 user:42 15 30 60 1 MS
//
// Both reply [0 16 15 -1 2000] on an empty key, and either continues a key
// the other wrote. The scripts read the clock with TIME; the module reads
// the server's cached command time, so the two agree for equal instants.
// Peek scripts are flagged no-writes, so they run with EVALSHA_RO and on
// replicas.
//
// On Redis 7 and later (and Valkey), every command is also a function of
// one FUNCTION library, Library, loaded once per primary and called by the
// same name with FCALL (FCALL_RO for a peek):
//
//	FCALL gcra_throttle 1 user:42 15 30 60 1 MS
//
// The library defines its helpers once per load, where a script builds
// them on every call. lua/ratelimit.lua is the library as a file, for other
// languages; `make lua` writes each script to build/lua.
//
// Lua numbers are doubles, exact only below 2^53, while the module
// computes on 64-bit nanoseconds: the scripts keep instants as seconds and
// nanoseconds and compute on exact integers of any size (a number while it
// is below 2^53, limbs beyond), so every result is the module's. Reply
// integers must be doubles, so the module and the scripts both accept
// limits (max_burst + 1, capacity) up to 2^53 - 1.
package lua

// ratelimit.lua: the FUNCTION library, as a file for other languages.
//go:generate go run ../cmd/gen -only lua

import (
	"crypto/sha1"
	"encoding/hex"
	"sort"
	"strings"
	"sync"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// Script is one command's script.
type Script struct {
	// Command is the command it implements, in upper case: "GCRA.THROTTLE".
	Command string
	// Source is the script's text, to load with SCRIPT LOAD or send with
	// EVAL.
	Source string
	// SHA1 is the hex digest EVALSHA names it by.
	SHA1 string
	// ReadOnly reports a peek: flagged no-writes, for EVALSHA_RO and
	// FCALL_RO.
	ReadOnly bool
	// Function is its function in the library: "gcra_throttle".
	Function string
}

type assembled struct {
	scripts          map[string]Script
	library, version string
	edition          Edition
}

// built assembles the scripts and the library once, when first asked.
var built = sync.OnceValue(func() *assembled {
	a := &assembled{scripts: map[string]Script{}}
	for i := range spec.Commands {
		c := &spec.Commands[i]
		src := script(c)
		sum := sha1.Sum([]byte(src))
		a.scripts[c.Name] = Script{Command: c.Name, Source: src, SHA1: hex.EncodeToString(sum[:]), ReadOnly: c.Peek, Function: c.File()}
	}
	a.library = library("", "")
	a.version = versionOf(a.library)
	suffix := suffixOf(a.version)
	a.edition = Edition{Name: LibraryName + suffix, Source: library(suffix, a.version), Suffix: suffix, Version: a.version}
	return a
})

// Library returns the FUNCTION library holding every command as a
// function named like its script (gcra_throttle), for FUNCTION LOAD, and
// its version, which the library's ratelimit_version function returns.
func Library() (source, version string) {
	a := built()
	return a.library, a.version
}

// Edition is the library as clients load it: the same code as Library's,
// its library and functions named after its version, so that processes of
// two versions sharing a server each run their own code. Each loads its
// edition once per primary (FUNCTION LOAD, never REPLACE) and calls its
// own functions; an edition no process uses any more stays until an
// operator deletes it (FUNCTION DELETE, or client.Client.DeleteLibraries).
type Edition struct {
	// Name is the library's: "ratelimit_v0_1_0_5c0e1a2b3c4d5e6f".
	Name string
	// Source is its text, for FUNCTION LOAD.
	Source string
	// Suffix ends every function's name: FCALL
	// gcra_throttle_v0_1_0_5c0e1a2b3c4d5e6f 1 user:42 15 30 60 1 MS, and
	// FCALL_RO ratelimit_version_v0_1_0_5c0e1a2b3c4d5e6f 0.
	Suffix string
	// Version is what its version function returns, Library's version:
	// "0.1.0+5c0e1a2b3c4d5e6f".
	Version string
}

// Versioned returns the library's edition for clients.
func Versioned() Edition { return built().edition }

// Get returns the script of a command, named in any case ("gcra.throttle").
func Get(command string) (Script, bool) {
	s, ok := built().scripts[strings.ToUpper(command)]
	return s, ok
}

// Must returns the script of a command that has one, and panics
// otherwise: for commands named in code.
func Must(command string) Script {
	s, ok := Get(command)
	if !ok {
		panic("lua: no script for " + command)
	}
	return s
}

// Commands lists the commands that have a script, sorted.
func Commands() []string {
	scripts := built().scripts
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
