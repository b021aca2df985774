package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/seed-6b3823f5/ratelimit/bucket"
	"github.com/seed-6b3823f5/ratelimit/gcra"
	"github.com/seed-6b3823f5/ratelimit/internal/engine"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
	"github.com/seed-6b3823f5/ratelimit/window"
)

// luaString quotes s as a Lua string literal.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c > '~':
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// luaInt writes v as the scripts hold it: a number when exact as a double,
// MAXI and MINI (int.lua's limbs) for the 64-bit bounds.
func luaInt(v int64) string {
	switch {
	case v == math.MaxInt64:
		return "MAXI"
	case v == math.MinInt64:
		return "MINI"
	case v > 1<<53 || v < -(1<<53):
		panic(fmt.Sprintf("gen: %d is neither exact in Lua nor a 64-bit bound", v))
	}
	return fmt.Sprint(v)
}

func luaArg(a spec.Arg) string {
	s := fmt.Sprintf("{name = %s, min = %s, max = %s", luaString(a.Name), luaInt(a.Min), luaInt(a.Max))
	if a.Seconds {
		s += ", seconds = true"
	}
	return s + "}"
}

// The algorithm packages' errors the scripts reply, named as the scripts
// name them.
var luaErrors = []struct {
	name string
	err  error
}{
	{"GCRA_RATE", gcra.ErrRate},
	{"GCRA_OVERFLOW", gcra.ErrOverflow},
	{"BUCKET_RATE", bucket.ErrRate},
	{"BUCKET_OVERFLOW", bucket.ErrOverflow},
	{"WINDOW_OVERFLOW", window.ErrOverflow},
}

// luaStates name each family's state, in the error a key of other data
// gets, as the scripts name them.
var luaStates = [spec.NumFamilies]string{
	spec.GCRA: "GCRA_STATE", spec.TB: "BUCKET_STATE", spec.LB: "SHAPER_STATE", spec.SW: "COUNTER_STATE",
	spec.FW: "FIXED_STATE", spec.SL: "LOG_STATE", spec.CONC: "CONC_STATE",
}

// specLua is lua/src/spec.lua: the bounds, each family's syntax, the
// families RL.ALL names, what each keeps in its key and the algorithm
// packages' error texts.
func specLua() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "-- %s\n", generated)
	b.WriteString("-- The command table's bounds, syntaxes and texts, for every script.\n\n")
	fmt.Fprintf(&b, "local MAX_SECONDS = %d -- the longest period, window or lease: whole seconds of 64-bit ns\n", spec.MaxSeconds)
	fmt.Fprintf(&b, "local MAX_LIMIT = %d -- 2^53 - 1: a reply's integers stay exact\n", spec.MaxLimit)
	fmt.Fprintf(&b, "local MAX_ARGS = %d -- a command's arguments, its name included\n", engine.MaxArgs)
	fmt.Fprintf(&b, "local MAX_KEYS = %d -- RL.ALL's numkeys\n", spec.MaxKeys)
	fmt.Fprintf(&b, "local MAX_ONE_KEY_ARGS = %d -- a command of one key's arguments, its name included\n", spec.MaxOneKeyArgs)
	fmt.Fprintf(&b, "local MAX_LOG_ADD = %d -- the sliding-log entries one RL.ALL adds\n", spec.MaxLogAdd)
	fmt.Fprintf(&b, "local MAX_ID = %d -- a holder id's bytes\n", spec.MaxID)
	fmt.Fprintf(&b, "local CONC_SWEEP = %d -- the most lapsed holders one concurrency write removes\n\n", engine.ConcSweep)

	var names []string
	for f, fam := range spec.Families {
		if spec.FamilyNamed(fam.Name) == f {
			names = append(names, luaString(fam.Name))
		}
	}
	fmt.Fprintf(&b, "-- The families RL.ALL's limiters name (LB only to say it is not one).\nlocal FAMILIES = {%s}\n", strings.Join(names, ", "))
	fmt.Fprintf(&b, "local LIMITERS = %s\n\n", luaString(spec.Limiters()))

	for f, name := range luaStates {
		fmt.Fprintf(&b, "local %s = %s\n", name, luaString(spec.Families[f].State))
	}
	b.WriteString("\n")
	for _, e := range luaErrors {
		fmt.Fprintf(&b, "local %s = %s\n", e.name, luaString("ERR "+e.err.Error()))
	}

	b.WriteString(`
-- syntax is a family's arguments: positional ones, the optional cost, its
-- default, whether RESERVE n is taken, the options' names and what the
-- limiter admits at once (RESERVE's bound); built for the one family a call
-- runs, since every table costs on every call.
local function syntax(kind)
`)
	for i, f := range spec.Families {
		kw := "elseif"
		if i == 0 {
			kw = "if"
		}
		fmt.Fprintf(&b, "  %s kind == %s then\n    return {\n      positional = {\n", kw, luaString(f.Kind))
		for _, a := range f.Args {
			fmt.Fprintf(&b, "        %s,\n", luaArg(a))
		}
		b.WriteString("      },\n")
		if f.Cost.Name != "" {
			fmt.Fprintf(&b, "      optional = %s,\n      def = %d,\n", luaArg(f.Cost), f.Def)
		}
		options := "MS"
		if f.Reserve {
			options = "MS and RESERVE n"
		}
		fmt.Fprintf(&b, "      reserve = %v, options = %s,\n", f.Reserve, luaString(options))
		if f.Reserve {
			if f.LimitPlus != 0 {
				fmt.Fprintf(&b, "      limit = function(v) return add(v[1], %d) end,\n", f.LimitPlus)
			} else {
				b.WriteString("      limit = function(v) return v[1] end,\n")
			}
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  end\nend\n")
	return []byte(b.String())
}

// A recipe is how one script is made: its flags line, the shared parts and
// its family's, then the call that runs its command. A script must hold
// everything it uses, since EVAL loads no libraries.
type recipe struct {
	file  string
	peek  bool
	parts []string
	call  string
}

// The shared parts, in order: spec.lua is made here, the rest are files of
// lua/src.
var common = []string{"int.lua", "spec.lua", "common.lua"}

// recipeOf is command c's recipe: the part that runs its family, and what
// that part needs.
func recipeOf(c *spec.Command) recipe {
	run, kind := "", ""
	var parts []string
	switch {
	case c.NumKeys:
		run, kind, parts = "all_command", "all", []string{"instant.lua", "window.lua", "log.lua", "all.lua"}
	case c.Family == spec.CONC:
		run, parts = "conc_command", []string{"log.lua", "conc.lua"}
		kind = strings.ToLower(c.Name[strings.IndexByte(c.Name, '.')+1:]) // acquire, peek, release
	default:
		f := &spec.Families[c.Family]
		kind = f.Kind
		switch c.Family {
		case spec.SW, spec.FW:
			run, parts = "window_command", []string{"window.lua"}
		case spec.SL:
			run, parts = "log_command", []string{"log.lua"}
		default:
			run, parts = "instant_command", []string{"instant.lua"}
		}
	}
	return recipe{
		file:  c.File() + ".lua",
		peek:  c.Peek,
		parts: append(common[:len(common):len(common)], parts...),
		call:  fmt.Sprintf("return %s(%q, %q, %v)", run, kind, strings.ToLower(c.Name), c.Peek),
	}
}

// luaScripts assembles every command's script from the sources in dir and
// spec.lua's text.
func luaScripts(dir string, specText []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	for i := range spec.Commands {
		r := recipeOf(&spec.Commands[i])
		var b strings.Builder
		if r.peek {
			b.WriteString("#!lua flags=no-writes\n")
		} else {
			b.WriteString("#!lua\n")
		}
		fmt.Fprintf(&b, "-- %s: Code generated by go generate (internal/gen) from lua/src and internal/spec; DO NOT EDIT.\n", r.file)
		for _, p := range r.parts {
			src := specText
			if p != "spec.lua" {
				var err error
				if src, err = os.ReadFile(filepath.Join(dir, p)); err != nil {
					return nil, err
				}
			}
			b.WriteString("\n")
			b.Write(src)
		}
		b.WriteString("\n" + r.call + "\n")
		out[r.file] = []byte(b.String())
	}
	return out, nil
}
