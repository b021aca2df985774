package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed-6b3823f5/ratelimit"
)

// libraryRequires is what the library's go.mod may bring a user's module
// graph: go-redis and what it needs, golang-lru for FailLocal, and the go
// line; never the tests', the benchmarks', the linter's or the metrics
// adapter's dependencies.
var libraryRequires = []string{"github.com/cespare/xxhash/v2", "github.com/hashicorp/golang-lru/v2",
	"github.com/redis/go-redis/v9", "go", "go.uber.org/atomic", "golang.org/x/sys"}

// requiresOf lists the modules a go mod graph says lib requires.
func requiresOf(graph, lib string) []string {
	var ours []string
	for _, line := range strings.Split(strings.TrimSpace(graph), "\n") {
		from, to, _ := strings.Cut(line, " ")
		if from == lib {
			ours = append(ours, strings.Split(to, "@")[0])
		}
	}
	slices.Sort(ours)
	return ours
}

// run runs a command in dir with more environment variables and returns
// its output; a failure fails the test.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

const userProgram = `package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[1], ContextTimeoutEnabled: true})
	res, err := client.New(rdb).Take(context.Background(), os.Args[2]+":take", client.PerMinute(10), 1)
	if err != nil {
		panic(err)
	}
	lim, err := httplimit.New(rdb, httplimit.Options{Prefix: os.Args[2] + ":http:"},
		httplimit.Policy{Name: "all", Limit: client.GCRA(0, 1, time.Minute), Key: httplimit.Global()})
	if err != nil {
		panic(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	var codes []int
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		codes = append(codes, rec.Code)
	}
	fmt.Printf("limited=%v remaining=%d codes=%v\n", res.Limited, res.Remaining, codes)
}
`

const promProgram = `package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
	"github.com/seed-6b3823f5/ratelimit/prom"
)

func main() {
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[1], ContextTimeoutEnabled: true})
	lim, err := httplimit.New(rdb, httplimit.Options{Event: m.Event},
		httplimit.Policy{Name: "all", Limit: client.PerMinute(1), Key: httplimit.Global()})
	if err != nil {
		panic(err)
	}
	m.Watch(lim)
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	fmt.Println(strings.Join(names, " "))
}
`

// make release in a clone of this checkout (refused while the tree is
// dirty or for a version version.go does not declare), then a Go module
// proxy on disk from the three tags it made; in an empty module cache,
// with that proxy first and the usual one behind it, a user's program
// gets the library with go get and runs, another gets prom, and go install
// makes an rls that answers.
func TestInstallFromTags(t *testing.T) {
	v := ratelimit.Version
	repo := filepath.Join(t.TempDir(), "ratelimit")
	run(t, "", nil, "git", "clone", "-q", "..", repo)
	git := []string{"GIT_AUTHOR_NAME=Release Test", "GIT_AUTHOR_EMAIL=release@example.com",
		"GIT_COMMITTER_NAME=Release Test", "GIT_COMMITTER_EMAIL=release@example.com"}
	tags := func() string { return run(t, repo, nil, "git", "tag", "-l") }
	// Once this version is released, the clone has its tags: the test
	// releases this commit again, in the clone only.
	for _, tag := range strings.Fields(tags()) {
		run(t, repo, nil, "git", "tag", "-d", tag)
	}

	writeFile(t, filepath.Join(repo, "stray.txt"), "x")
	if out, err := runErr(repo, git, "make", "release", "VERSION="+v); err == nil || !strings.Contains(out, "not clean") || tags() != "" {
		t.Fatalf("make release with a dirty tree: %v\n%s\ntags: %q", err, out, tags())
	}
	os.Remove(filepath.Join(repo, "stray.txt"))
	if out, err := runErr(repo, git, "make", "release", "VERSION=99.0.0"); err == nil || !strings.Contains(out, "declares "+v) || tags() != "" {
		t.Fatalf("make release of another version: %v\n%s\ntags: %q", err, out, tags())
	}
	run(t, repo, git, "make", "release", "VERSION="+v)
	want := "prom/v" + v + "\nrls/v" + v + "\nv" + v + "\n"
	if got := tags(); got != want {
		t.Fatalf("tags %q, want %q", got, want)
	}
	commit := run(t, repo, nil, "git", "rev-parse", "v"+v+"^{commit}")
	for _, tag := range []string{"prom/v" + v, "rls/v" + v} {
		if c := run(t, repo, nil, "git", "rev-parse", tag+"^{commit}"); c != commit {
			t.Fatalf("%s is at %s, v%s at %s", tag, c, v, commit)
		}
	}
	for _, m := range []string{"prom", "rls"} {
		tagged := run(t, repo, nil, "git", "show", "v"+v+":"+m+"/go.mod")
		if strings.Contains(tagged, "replace") || !strings.Contains(tagged, "\tgithub.com/seed-6b3823f5/ratelimit v"+v+"\n") {
			t.Fatalf("%s/go.mod as tagged:\n%s", m, tagged)
		}
		if m == "rls" && !strings.Contains(tagged, "\tgithub.com/seed-6b3823f5/ratelimit/prom v"+v+"\n") {
			t.Fatalf("rls/go.mod as tagged does not require prom at v%s:\n%s", v, tagged)
		}
		dev, err := os.ReadFile(filepath.Join(repo, m, "go.mod"))
		if err != nil || !strings.Contains(string(dev), "replace github.com/seed-6b3823f5/ratelimit => ../") {
			t.Fatalf("%s/go.mod after the release (development goes on against the checkout): %v\n%s", m, err, dev)
		}
	}
	if st := run(t, repo, nil, "git", "status", "--porcelain"); st != "" {
		t.Fatalf("the tree after make release:\n%s", st)
	}

	proxy := filepath.Join(t.TempDir(), "proxy")
	release := filepath.Join(repo, "release")
	run(t, release, nil, "go", "run", ".", "proxy", "-repo", "..", "-version", "v"+v, "-out", proxy)
	// A module built against the checkout is not what users could install.
	if out, err := runErr(release, nil, "go", "run", ".", "proxy", "-repo", "..", "-version", "v"+v,
		"-out", t.TempDir(), "-rev", "HEAD", "-modules", "rls"); err == nil || !strings.Contains(out, "replaces") {
		t.Fatalf("a proxy of rls at HEAD (replace ../): %v\n%s", err, out)
	}

	upstream := run(t, "", nil, "go", "env", "GOPROXY")
	env := []string{"GOMODCACHE=" + filepath.Join(t.TempDir(), "modcache"), "GOFLAGS=-modcacherw", "GOWORK=off",
		"GOPROXY=file://" + proxy + "," + strings.TrimSpace(upstream), "GONOSUMDB=github.com/seed-6b3823f5/ratelimit"}
	addr := sharedOf(flavors[0]).addr()

	// userModule makes a user's module of program that go gets mod at v,
	// and builds it as ./main.
	userModule := func(t *testing.T, program, mod string) string {
		dir := t.TempDir()
		run(t, dir, env, "go", "mod", "init", "example.com/user")
		writeFile(t, filepath.Join(dir, "main.go"), program)
		run(t, dir, env, "go", "get", mod+"@v"+v)
		run(t, dir, env, "go", "mod", "tidy")
		run(t, dir, env, "go", "build", "-o", "main", ".")
		return dir
	}
	t.Run("library", func(t *testing.T) {
		dir := userModule(t, userProgram, "github.com/seed-6b3823f5/ratelimit")
		if out := run(t, dir, nil, "./main", addr, key(t, "user")); out != "limited=false remaining=9 codes=[200 429]\n" {
			t.Fatalf("the user's program printed %q", out)
		}
		if got := requiresOf(run(t, dir, env, "go", "mod", "graph"), "github.com/seed-6b3823f5/ratelimit@v"+v); !slices.Equal(got, libraryRequires) {
			t.Fatalf("the library at v%s requires %v, want %v", v, got, libraryRequires)
		}
	})
	t.Run("prom", func(t *testing.T) {
		dir := userModule(t, promProgram, "github.com/seed-6b3823f5/ratelimit/prom")
		if out := run(t, dir, env, "go", "list", "-m", "github.com/seed-6b3823f5/ratelimit"); out != "github.com/seed-6b3823f5/ratelimit v"+v+"\n" {
			t.Fatalf("prom brought the library at %q, want v%s", out, v)
		}
		out := run(t, dir, nil, "./main", addr)
		for _, name := range []string{"ratelimit_decisions_total", "ratelimit_breaker_open"} {
			if !strings.Contains(out, name) {
				t.Fatalf("the metrics program printed %q, without %s", out, name)
			}
		}
	})
	t.Run("rls", func(t *testing.T) {
		bin := t.TempDir()
		run(t, "", append(env, "GOBIN="+bin), "go", "install", "github.com/seed-6b3823f5/ratelimit/rls/cmd/rls@v"+v)
		rls := filepath.Join(bin, "rls")
		if out := run(t, "", nil, rls, "-version"); !strings.HasPrefix(out, "rls "+v+" ") {
			t.Fatalf("rls -version: %q", out)
		}
		expectDropIn(t, startRLSBinary(t, rls, nil, addr, map[string]string{"apis.yaml": dropInConfig}), "8.8.4.4")
	})
}
