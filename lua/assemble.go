package lua

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The scripts are assembled from src/: each is its flags line, the shared
// parts and its family's part, then the call that runs its command. A
// script must hold everything it uses, since EVAL loads no libraries.
// `make lua` writes them; TestScriptsUpToDate checks the files match.

// recipe is how one script is made.
type recipe struct {
	file  string   // the script's file name
	peek  bool     // flagged no-writes
	parts []string // files of src/, in order
	call  string   // the last line
}

var common = []string{"int.lua", "common.lua"}

// oneKey is the recipe of a command of one key: its family's part of src/
// and the function that runs it.
func oneKey(part, run, kind, command string, peek bool) recipe {
	return recipe{
		file:  strings.ReplaceAll(command, ".", "_") + ".lua",
		peek:  peek,
		parts: append(common[:len(common):len(common)], part),
		call:  fmt.Sprintf("return %s(%q, %q, %v)", run, kind, command, peek),
	}
}

func instantRecipe(kind, command string, peek bool) recipe {
	return oneKey("instant.lua", "instant_command", kind, command, peek)
}

func windowRecipe(kind, command string, peek bool) recipe {
	return oneKey("window.lua", "window_command", kind, command, peek)
}

var recipes = []recipe{
	instantRecipe("gcra", "gcra.throttle", false),
	instantRecipe("gcra", "cl.throttle", false),
	instantRecipe("gcra", "gcra.peek", true),
	instantRecipe("tb", "tb.take", false),
	instantRecipe("tb", "tb.peek", true),
	instantRecipe("lb", "lb.enqueue", false),
	instantRecipe("lb", "lb.peek", true),
	windowRecipe("sw", "sw.hit", false),
	windowRecipe("sw", "sw.peek", true),
	windowRecipe("fw", "fw.hit", false),
	windowRecipe("fw", "fw.peek", true),
	oneKey("log.lua", "log_command", "sl", "sl.hit", false),
	oneKey("log.lua", "log_command", "sl", "sl.peek", true),
	allRecipe("rl.all", false),
	allRecipe("rl.peek", true),
	concRecipe("acquire", "conc.acquire", false),
	concRecipe("peek", "conc.peek", true),
	concRecipe("release", "conc.release", false),
}

// concRecipe is a concurrency command's: the sorted-set reading it shares
// with the sliding log, then its own part.
func concRecipe(op, command string, peek bool) recipe {
	r := oneKey("conc.lua", "conc_command", op, command, peek)
	r.parts = append(common[:len(common):len(common)], "log.lua", "conc.lua")
	return r
}

// allRecipe is RL.ALL's or RL.PEEK's: every family it takes, then its own
// part.
func allRecipe(command string, peek bool) recipe {
	r := oneKey("all.lua", "all_command", "all", command, peek)
	r.parts = append(common[:len(common):len(common)], "instant.lua", "window.lua", "log.lua", "all.lua")
	return r
}

// assemble builds one script from the sources in dir.
func assemble(dir string, r recipe) ([]byte, error) {
	var b strings.Builder
	if r.peek {
		b.WriteString("#!lua flags=no-writes\n")
	} else {
		b.WriteString("#!lua\n")
	}
	fmt.Fprintf(&b, "-- %s: generated from lua/src by `make lua`; edit the sources, not this file.\n", r.file)
	for _, p := range r.parts {
		src, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return nil, err
		}
		b.WriteString("\n")
		b.Write(src)
	}
	b.WriteString("\n" + r.call + "\n")
	return []byte(b.String()), nil
}
