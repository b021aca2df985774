package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's last table lists every module linked into the library, prom
// and rls — no more, no fewer, as `go list -deps` finds them — and each
// one's license as its own license file states it.

// licensePhrases are what a license file of each kind says (lower case,
// white space collapsed); absent are what it must not say.
var licensePhrases = map[string]struct{ present, absent []string }{
	"Apache-2.0":   {present: []string{"apache license", "version 2.0"}},
	"MIT":          {present: []string{"permission is hereby granted, free of charge"}},
	"BSD-3-Clause": {present: []string{"redistribution and use in source and binary forms", "neither the name"}},
	"BSD-2-Clause": {present: []string{"redistribution and use in source and binary forms"}, absent: []string{"neither the name"}},
	"MPL-2.0":      {present: []string{"mozilla public license", "2.0"}},
}

func readmeLicenses(t *testing.T) []row {
	t.Helper()
	rows, err := readmeTable("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// linked lists the modules other than the project's own that the packages
// of the Go module in dir link.
func linked(t *testing.T, dir string, patterns ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}"}, patterns...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	var mods []string
	for _, m := range strings.Fields(string(out)) {
		if !strings.HasPrefix(m, Library) {
			mods = append(mods, m)
		}
	}
	slices.Sort(mods)
	return slices.Compact(mods)
}

func TestLicenses(t *testing.T) {
	rows := readmeLicenses(t)
	listed := map[string][]string{} // scope -> modules
	for _, r := range rows {
		if _, ok := licensePhrases[strings.Split(r.license, " and ")[0]]; !ok {
			t.Errorf("%s: license %q is not one this test knows", r.module, r.license)
		}
		if r.in == "everything" {
			continue // the standard library: no module
		}
		for _, scope := range strings.Split(r.in, ", ") {
			listed[scope] = append(listed[scope], r.module)
		}
	}
	for scope, dir := range map[string]string{"the library": "..", "prom": "../prom", "rls": "../rls"} {
		got := linked(t, dir, "./...")
		want := listed[scope]
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s links %v; README.md lists %v", scope, got, want)
		}
	}
	if got := linked(t, "..", "./module"); len(got) != 0 {
		t.Errorf("the module links %v; README.md says only the standard library", got)
	}

	space := regexp.MustCompile(`\s+`)
	for _, r := range rows {
		if r.in == "everything" {
			continue
		}
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", r.module)
		cmd.Dir = "../rls" // it links every module of the table
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", r.module, err)
		}
		files, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "LICENSE*"))
		var text strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text.WriteString(strings.ToLower(space.ReplaceAllString(string(b), " ")))
		}
		if text.Len() == 0 {
			t.Errorf("%s: no LICENSE file", r.module)
			continue
		}
		for _, id := range strings.Split(r.license, " and ") {
			p := licensePhrases[id]
			for _, s := range p.present {
				if !strings.Contains(text.String(), s) {
					t.Errorf("%s: README.md says %s, its license file does not say %q", r.module, r.license, s)
				}
			}
			for _, s := range p.absent {
				if !strings.Contains(r.license, " and ") && strings.Contains(text.String(), s) {
					t.Errorf("%s: README.md says %s, its license file says %q", r.module, r.license, s)
				}
			}
		}
	}
}
