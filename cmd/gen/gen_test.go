package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/bucket"
	"github.com/seed-6b3823f5/ratelimit/gcra"
	"github.com/seed-6b3823f5/ratelimit/internal/spec"
	"github.com/seed-6b3823f5/ratelimit/window"
)

// TestGeneratedFilesAreCurrent fails when a file made from the table is
// not what go generate writes now: the table, an error text of an
// algorithm package or a Lua source changed without `make generate`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := outputs()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedNames(files) {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, files[name]) {
			t.Errorf("%s is not what internal/spec and lua/src make: run `make generate`", name)
		}
		if !bytes.Contains(bytes.SplitN(files[name], []byte("\n"), 3)[0], []byte("Code generated")) &&
			!bytes.Contains(bytes.SplitN(files[name], []byte("\n"), 3)[1], []byte("Code generated")) {
			t.Errorf("%s does not say it is generated", name)
		}
	}
	// The library is the one Lua file generated: no script is committed.
	scripts, _ := filepath.Glob(filepath.Join(root, "lua", "*.lua"))
	for _, s := range scripts {
		if _, ok := files["lua/"+filepath.Base(s)]; !ok {
			t.Errorf("lua/%s is not generated: the scripts are assembled by package lua", filepath.Base(s))
		}
	}
}

// The table's bounds are the algorithm packages' own.
func TestBoundsMatchPackages(t *testing.T) {
	for name, v := range map[string]int64{"gcra.MaxPeriod": gcra.MaxPeriod, "bucket.MaxPeriod": bucket.MaxPeriod, "window.MaxWindow": window.MaxWindow} {
		if v != spec.MaxSeconds {
			t.Errorf("%s = %d, spec.MaxSeconds = %d", name, v, spec.MaxSeconds)
		}
	}
}

// Summaries state each argument's range as the parser accepts it.
func TestSummaries(t *testing.T) {
	for _, c := range []struct {
		a    spec.Arg
		want string
	}{
		{spec.Families[spec.GCRA].Args[0], "extra requests allowed at once: the limit is max_burst + 1 (0 to 9007199254740990)"},
		{spec.Families[spec.GCRA].Args[1], "requests admitted per period (1 or more)"},
		{spec.Families[spec.GCRA].Cost, "the cost of this call"},
		{spec.Families[spec.CONC].Args[2], "the holder (a request id); acquiring again renews its lease (1 to 128 bytes)"},
	} {
		if got := argSummary(c.a); got != c.want {
			t.Errorf("argSummary(%s) = %q, want %q", c.a.Name, got, c.want)
		}
	}
	if got := limiterSummary(); got != "one per key, in order: GCRA max_burst count period quantity | "+
		"TB capacity refill_tokens refill_period tokens | SW limit window cost [SPREAD] | FW limit window cost [SPREAD] [SPAN start end next] | SL limit window cost" {
		t.Errorf("limiterSummary() = %q", got)
	}
	if got := costSummary(&spec.Families[spec.LB]); !strings.HasPrefix(got, "the cost of this request (0 or more), default 1;") {
		t.Errorf("costSummary(LB) = %q", got)
	}
}

// MODULE LIST's integer for a version, and the versions it cannot express.
func TestModuleVersion(t *testing.T) {
	for v, want := range map[string]int{"0.1.0": 100, "1.0.0": 10000, "2.6.6": 20606, "0.10.99": 1099, "12.0.3": 120003} {
		if got, err := moduleVersion(v); err != nil || got != want {
			t.Errorf("moduleVersion(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"", "1", "1.2", "1.2.3.4", "0.100.0", "0.1.100", "v0.1.0", "0.1.0-rc.1", "01.2.3", "-1.2.3", "0.1.+1"} {
		if got, err := moduleVersion(v); err == nil {
			t.Errorf("moduleVersion(%q) = %d, want an error", v, got)
		}
	}
	if _, err := moduleVersion(ratelimit.Version); err != nil {
		t.Errorf("the declared version: %v", err)
	}
}
