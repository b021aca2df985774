package integration

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A user's module that imports the client and the middleware: its module
// graph gains go-redis and what it needs (and golang-lru, for FailLocal),
// nothing of the tests, the benchmarks, the linter or the metrics adapter.
func TestUsersModuleGraph(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.com/user\n\ngo 1.26.0\n\nrequire github.com/seed-6b3823f5/ratelimit v0.0.0\n\n"+
		"replace github.com/seed-6b3823f5/ratelimit => "+repo+"\n")
	writeFile(t, filepath.Join(dir, "main.go"), "package main\n\nimport (\n\t_ \"github.com/seed-6b3823f5/ratelimit/client\"\n"+
		"\t_ \"github.com/seed-6b3823f5/ratelimit/httplimit\"\n\t_ \"github.com/seed-6b3823f5/ratelimit/lua\"\n)\n\nfunc main() {}\n")
	// Through the Go module proxy the environment names: tidy reads the
	// go.mod of every module in the graph, and those of the library's
	// dependencies' own tests (go-redis's ginkgo and gomega) are in no cache
	// the library's build fills.
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	run(t, dir, env, "go", "mod", "tidy")
	graph := run(t, dir, env, "go", "mod", "graph")
	if got := requiresOf(graph, "github.com/seed-6b3823f5/ratelimit@v0.0.0"); !slices.Equal(got, libraryRequires) {
		t.Fatalf("the library requires %v, want %v", got, libraryRequires)
	}
	for _, banned := range []string{"testcontainers", "moby", "honnef.co", "prometheus", "docker"} {
		if strings.Contains(graph, banned) {
			t.Fatalf("a user's module graph holds %s:\n%s", banned, graph)
		}
	}
}
