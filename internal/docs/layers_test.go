package docs

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// modulePath is the project's import path; its nested modules' paths are
// their directories under it.
const modulePath = "github.com/seed-6b3823f5/ratelimit"

// levels reads the table of docs/design.md's "Layers": each package
// pattern ("client", "bench/...", "." for the root) and its level.
func levels(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "## Layers\n")
	if start < 0 {
		t.Fatal("docs/design.md has no Layers section")
	}
	text = text[start:]
	if end := strings.Index(text[1:], "\n## "); end > 0 {
		text = text[:end+1]
	}
	row := regexp.MustCompile(`(?m)^\| (\d+) \| ([^|]+) \|`)
	pkg := regexp.MustCompile("`([^`]+)`")
	m := map[string]int{}
	for _, r := range row.FindAllStringSubmatch(text, -1) {
		level, _ := strconv.Atoi(r[1])
		for _, p := range pkg.FindAllStringSubmatch(r[2], -1) {
			if _, dup := m[p[1]]; dup {
				t.Fatalf("docs/design.md: %s is on two levels", p[1])
			}
			m[p[1]] = level
		}
	}
	if len(m) == 0 {
		t.Fatal("docs/design.md: the Layers table lists no package")
	}
	return m
}

// levelOf is the level of the package in dir (relative to the repository,
// "." for the root): its own row, else the longest "x/..." row above it.
func levelOf(table map[string]int, dir string) (int, bool) {
	if l, ok := table[dir]; ok {
		return l, true
	}
	best, level := -1, 0
	for p, l := range table {
		prefix, ok := strings.CutSuffix(p, "/...")
		if ok && (dir == prefix || strings.HasPrefix(dir, prefix+"/")) && len(prefix) > best {
			best, level = len(prefix), l
		}
	}
	return level, best >= 0
}

// TestLayers fails when a package imports one of the project's packages
// on its own level or above, or is missing from docs/design.md's table.
func TestLayers(t *testing.T) {
	table := levels(t)
	var dirs []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != "../.." && (strings.HasPrefix(name, ".") || name == "build" || name == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			dir, _ := filepath.Rel("../..", filepath.Dir(path))
			if !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, dir := range dirs {
		pkg, err := build.ImportDir(filepath.Join("../..", dir), 0)
		if err != nil {
			continue // no Go files for this platform
		}
		level, ok := levelOf(table, dir)
		if !ok {
			t.Errorf("%s is not in docs/design.md's Layers table", dir)
			continue
		}
		checked++
		for _, imp := range pkg.Imports {
			if imp != modulePath && !strings.HasPrefix(imp, modulePath+"/") {
				continue
			}
			target := "."
			if imp != modulePath {
				target = strings.TrimPrefix(imp, modulePath+"/")
			}
			tl, ok := levelOf(table, target)
			switch {
			case !ok:
				t.Errorf("%s imports %s, which is not in docs/design.md's Layers table", dir, target)
			case tl >= level:
				t.Errorf("%s (level %d) imports %s (level %d): a package imports only lower levels", dir, level, target, tl)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d packages: the walk missed the repository", checked)
	}
}

// TestLevelOf: a package takes its own row, else the longest "x/..." above it.
func TestLevelOf(t *testing.T) {
	table := map[string]int{".": 1, "client": 5, "bench/...": 8, "bench/internal/...": 7}
	for dir, want := range map[string]int{".": 1, "client": 5, "bench": 8, "bench/rls": 8, "bench/internal/machine": 7} {
		if got, ok := levelOf(table, dir); !ok || got != want {
			t.Errorf("levelOf(%s) = %d, %v; want %d", dir, got, ok, want)
		}
	}
	if _, ok := levelOf(table, "clientx"); ok {
		t.Error("levelOf(clientx) found a level")
	}
}
