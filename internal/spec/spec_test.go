package spec

import (
	"strings"
	"testing"
)

func TestRange(t *testing.T) {
	for _, c := range []struct {
		arg  Arg
		want string
	}{
		{Families[GCRA].Args[2], "(1 to 9223372036)"},
		{Families[GCRA].Args[0], "(0 to 9007199254740990)"},
		{Families[GCRA].Cost, ""},
		{Families[SW].Cost, ""}, // a negative cost gives back
		{Families[LB].Cost, "(0 or more)"},
		{Families[CONC].Args[2], "(1 to 128 bytes)"},
		{NumKeysArg, "(1 to 16)"},
	} {
		if got := c.arg.Range(); got != c.want {
			t.Errorf("%s: Range %q, want %q", c.arg.Name, got, c.want)
		}
	}
}

func TestFamilyNamed(t *testing.T) {
	for name, want := range map[string]int{
		"GCRA": GCRA, "gcra": GCRA, "Tb": TB, "sw": SW, "FW": FW, "sl": SL,
		"lb":   LB, // named, to be refused as not one of RL.ALL's
		"conc": -1, "": -1, "gcrax": -1, "GCR": -1,
	} {
		if got := FamilyNamed(name); got != want {
			t.Errorf("FamilyNamed(%q) = %d, want %d", name, got, want)
		}
	}
	if got := Limiters(); got != "GCRA, TB, SW, FW and SL" {
		t.Errorf("Limiters() = %q", got)
	}
}

func TestEqualFold(t *testing.T) {
	for _, c := range []struct {
		s, word string
		want    bool
	}{{"ms", "MS", true}, {"Reserve", "RESERVE", true}, {"RESERV", "RESERVE", false}, {"M5", "MS", false}, {"eachx", "EACH", false}, {"", "", true}} {
		if got := EqualFold(c.s, c.word); got != c.want {
			t.Errorf("EqualFold(%q, %q) = %v", c.s, c.word, got)
		}
	}
}

// TestTable holds the table to its own rules: every operation has one
// command (and CL.THROTTLE, the one alias, shares GCRA.THROTTLE's); Of
// finds it; peeks are named *.PEEK and flagged; the RL. commands, and
// only they, take numkeys (RL.ALL, RL.PEEK) or a hold key (RL.HOLD,
// RL.SETTLE) and no family; every command's family is one of the table's; every
// command of one key has a file name of its own.
func TestTable(t *testing.T) {
	ops := map[Op]int{}
	files := map[string]bool{}
	for _, c := range Commands {
		if c.Alias {
			if c.Name != "CL.THROTTLE" || c.Op != OpGCRAThrottle {
				t.Errorf("%s: an alias, of op %d", c.Name, c.Op)
			}
			continue
		}
		ops[c.Op]++
		if got := Of(c.Op); got.Name != c.Name {
			t.Errorf("Of(%d) = %s, want %s", c.Op, got.Name, c.Name)
		}
		if c.Peek != strings.HasSuffix(c.Name, ".PEEK") {
			t.Errorf("%s: peek %v", c.Name, c.Peek)
		}
		if rl := strings.HasPrefix(c.Name, "RL."); rl != (c.Family == -1) || rl != (c.NumKeys || c.Hold) || c.NumKeys && c.Hold {
			t.Errorf("%s: numkeys %v, hold %v, family %d", c.Name, c.NumKeys, c.Hold, c.Family)
		}
		if c.Family >= NumFamilies || c.Family < -1 {
			t.Errorf("%s: family %d", c.Name, c.Family)
		}
		if files[c.File()] {
			t.Errorf("%s: file %s twice", c.Name, c.File())
		}
		files[c.File()] = true
	}
	for op := range NumOps {
		if ops[op] != 1 {
			t.Errorf("op %d has %d commands", op, ops[op])
		}
	}
	if MaxSeconds != 9223372036 {
		t.Errorf("MaxSeconds = %d", MaxSeconds)
	}
}
