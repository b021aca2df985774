package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// sbom describes a Go binary by its build information and any other file
// as made from the project: here the test binary itself, which links
// golang.org/x/mod, and a Lua file.
func TestSBOM(t *testing.T) {
	dist := t.TempDir()
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, "tool-1.2.3-linux-amd64"), self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, "ratelimit-1.2.3.lua"), []byte("return 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, skipped := range []string{"SHA256SUMS", "old.spdx.json"} {
		if err := os.WriteFile(filepath.Join(dist, skipped), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc, err := sbom(dist, "1.2.3", "2026-11-29T00:00:00Z", map[string]string{"golang.org/x/mod": "BSD-3-Clause and MIT"})
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Files) != 2 {
		t.Fatalf("files %+v, want the binary and the Lua file alone", doc.Files)
	}
	ids := map[string]spdxPackage{}
	for _, p := range doc.Packages {
		ids[p.SPDXID] = p
	}
	rel := map[string][]string{} // file: "TYPE name version license"
	for _, r := range doc.Relationships {
		if p, ok := ids[r.Related]; ok {
			rel[r.Element] = append(rel[r.Element], r.Type+" "+p.Name+" "+p.VersionInfo+" "+p.LicenseDeclared)
		}
	}
	xmod := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "golang.org/x/mod" {
				xmod = d.Version
			}
		}
	}
	bin := strings.Join(rel["SPDXRef-File-tool-1.2.3-linux-amd64"], "\n")
	for _, want := range []string{"CONTAINS golang.org/x/mod " + xmod + " BSD-3-Clause AND MIT", "CONTAINS stdlib go1."} {
		if !strings.Contains(bin, want) {
			t.Errorf("the binary's relationships lack %q:\n%s", want, bin)
		}
	}
	if got := rel["SPDXRef-File-ratelimit-1.2.3.lua"]; len(got) != 1 || got[0] != "GENERATED_FROM "+Library+" v1.2.3 Apache-2.0" {
		t.Errorf("the Lua file: %v", got)
	}
	for _, bad := range [][2]string{{"v1.2.3", "2026-11-29T00:00:00Z"}, {"1.2.3", "yesterday"}} {
		if _, err := sbom(dist, bad[0], bad[1], nil); err == nil {
			t.Errorf("sbom -version %s -created %s: no error", bad[0], bad[1])
		}
	}
	if _, err := sbom(t.TempDir(), "1.2.3", "2026-11-29T00:00:00Z", nil); err == nil {
		t.Error("an empty folder: no error")
	}
}
