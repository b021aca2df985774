package lua

import (
	"testing"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// TestEveryCommand checks there is one script per command of the table,
// flagged no-writes exactly for the peeks (internal/gen's tests check
// each is what its sources assemble to).
func TestEveryCommand(t *testing.T) {
	if got := len(Commands()); got != len(spec.Commands) {
		t.Errorf("%d scripts embedded, %d commands", got, len(spec.Commands))
	}
	for _, c := range spec.Commands {
		s, ok := Get(c.Name)
		if !ok || s.ReadOnly != c.Peek {
			t.Errorf("%s: script %v, read-only %v", c.Name, ok, s.ReadOnly)
		}
	}
}

func TestGet(t *testing.T) {
	s, ok := Get("gcra.peek")
	if !ok || s.Command != "GCRA.PEEK" || !s.ReadOnly || len(s.SHA1) != 40 {
		t.Fatalf("Get(gcra.peek) = %+v, %v", s, ok)
	}
	if s, ok := Get("GCRA.THROTTLE"); !ok || s.ReadOnly {
		t.Fatalf("Get(GCRA.THROTTLE) = %+v, %v", s, ok)
	}
	if _, ok := Get("nope"); ok {
		t.Fatal("Get(nope) found a script")
	}
}
