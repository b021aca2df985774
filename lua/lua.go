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
// Lua numbers are doubles, exact only below 2^53, while the module
// computes on 64-bit nanoseconds: the scripts keep instants as seconds and
// nanoseconds and compute on exact integers of any size (a number while it
// is below 2^53, limbs beyond), so every result is the module's. Reply
// integers must be doubles, so the module and the scripts both accept
// limits (max_burst + 1, capacity) up to 2^53 - 1.
package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"sort"
	"strings"
)

//go:embed *.lua
var files embed.FS

// Script is one command's script.
type Script struct {
	// Command is the command it implements, in upper case: "GCRA.THROTTLE".
	Command string
	// Source is the script's text, to load with SCRIPT LOAD or send with
	// EVAL.
	Source string
	// SHA1 is the hex digest EVALSHA names it by.
	SHA1 string
	// ReadOnly reports a peek: flagged no-writes, for EVALSHA_RO.
	ReadOnly bool
}

var scripts = map[string]Script{}

func init() {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		b, err := files.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		name := strings.ToUpper(strings.Replace(strings.TrimSuffix(e.Name(), ".lua"), "_", ".", 1))
		sum := sha1.Sum(b)
		scripts[name] = Script{
			Command:  name,
			Source:   string(b),
			SHA1:     hex.EncodeToString(sum[:]),
			ReadOnly: strings.HasPrefix(string(b), "#!lua flags=no-writes"),
		}
	}
}

// Get returns the script of a command, named in any case ("gcra.throttle").
func Get(command string) (Script, bool) {
	s, ok := scripts[strings.ToUpper(command)]
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
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
