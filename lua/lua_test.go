package lua

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "write the scripts assembled from src/")

// TestScriptsUpToDate checks every script is what its sources assemble
// to (go test ./lua -update writes them).
func TestScriptsUpToDate(t *testing.T) {
	for _, r := range recipes {
		want, err := assemble("src", r)
		if err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.WriteFile(r.file, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(r.file)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what lua/src assembles to: run `make lua`", r.file)
		}
	}
	if *update {
		return
	}
	if len(Commands()) != len(recipes) {
		t.Errorf("%d scripts embedded, %d recipes", len(Commands()), len(recipes))
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
