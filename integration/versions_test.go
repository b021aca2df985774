package integration

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// otherVersionMain is a program of another version of the client: it runs
// the FUNCTION library's engine against the server at os.Args[1], takes a
// unit from the key os.Args[2] os.Args[3] times, and prints its library's
// name, then each call's remaining.
const otherVersionMain = `package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[1], Protocol: 2})
	c := client.NewEngine(rdb, client.Functions)
	n, _ := strconv.Atoi(os.Args[3])
	fmt.Println(lua.Versioned().Name)
	for range n {
		r, err := c.Take(context.Background(), os.Args[2], client.SlidingWindow(1000, time.Hour), 1)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(r.Remaining)
	}
}
`

// buildOtherVersion builds otherVersionMain from a copy of this module
// whose version is 9.8.7: another version of the client, with its own
// edition of the library.
func buildOtherVersion(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	skip := map[string]bool{".git": true, "build": true, "integration": true, "bench": true, "rls": true, "prom": true,
		"release": true, "examples": true, "demo": true, "docs": true, "images": true, "module": true}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			if skip[rel] {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	version := filepath.Join(dir, "version.go")
	src, err := os.ReadFile(version)
	if err != nil {
		t.Fatal(err)
	}
	bumped := regexp.MustCompile(`const Version = "[^"]*"`).ReplaceAll(src, []byte(`const Version = "9.8.7"`))
	if string(bumped) == string(src) {
		t.Fatal("version.go declares no Version")
	}
	writeFile(t, version, string(bumped))
	if err := os.MkdirAll(filepath.Join(dir, "cmd", "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "cmd", "other", "main.go"), otherVersionMain)
	bin := filepath.Join(dir, "other")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/other")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the other version: %v\n%s", err, out)
	}
	return bin
}

// runOther runs the other version's program: n takes on key.
func runOther(t *testing.T, bin, addr, key string, n int) []string {
	t.Helper()
	out, err := exec.Command(bin, addr, key, fmt.Sprint(n)).CombinedOutput()
	if err != nil {
		t.Fatalf("the other version: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// Two versions of the client share a server without the module, as during
// a rolling deploy: each loads its own edition of the library once and
// runs its own code from then on, whichever started last; nothing replaces
// a library. DeleteLibraries removes the other version's, and the other
// version, still running, loads its own again.
func TestVersionsSideBySide(t *testing.T) {
	bin := buildOtherVersion(t)
	s := startFor(t, flavors[1], opts{})
	loads := func() int64 {
		var n int64
		fmt.Sscanf(infoField(t, s.rdb, "commandstats", "cmdstat_function|load"), "calls=%d", &n)
		return n
	}
	mine := lua.Versioned()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2})
	defer rdb.Close()
	c := client.NewEngine(rdb, client.Functions)
	take := func(key string) int64 {
		t.Helper()
		r, err := c.Take(ctx, key, client.SlidingWindow(1000, time.Hour), 1)
		if err != nil {
			t.Fatal(err)
		}
		return r.Remaining
	}
	if got := take("v:shared"); got != 999 {
		t.Fatalf("first take: remaining %d", got)
	}

	// The other version starts later and loads its own edition.
	out := runOther(t, bin, s.addr(), "v:shared", 3)
	other := out[0]
	if other == mine.Name || !strings.HasPrefix(other, "ratelimit_v9_8_7_") {
		t.Fatalf("the other version's library is %q (this one's %q)", other, mine.Name)
	}
	if got := strings.Join(out[1:], " "); got != "998 997 996" {
		t.Fatalf("the other version's takes on the shared key: %s", got)
	}

	// This version keeps running its own code: its library is still there,
	// unchanged, and its calls go to it.
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "ratelimit_v*", WithCode: true}).Result()
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]string{}
	for _, l := range libs {
		code[l.Name] = l.Code
	}
	if len(code) != 2 || code[mine.Name] != mine.Source || code[other] == "" {
		t.Fatalf("libraries after both versions ran: %d (this version's unchanged: %v)", len(code), code[mine.Name] == mine.Source)
	}
	before := loads()
	for i := range 50 {
		if got := take("v:shared"); got != int64(995-i) {
			t.Fatalf("take %d after the other version: remaining %d", i, got)
		}
		if i%10 == 0 {
			runOther(t, bin, s.addr(), "v:other", 1) // the other version keeps running too
		}
	}
	if n := loads() - before; n != 0 {
		t.Fatalf("%d FUNCTION LOADs while both versions ran: each must keep its own", n)
	}
	if n := loads(); n != 2 {
		t.Fatalf("%d FUNCTION LOADs in all, want 2 (one per version)", n)
	}

	// An operator removes the other version's edition; that version, if
	// still running, loads its own again.
	deleted, err := c.DeleteLibraries(ctx)
	if err != nil || len(deleted) != 1 || deleted[0] != s.addr()+" "+other {
		t.Fatalf("DeleteLibraries: %v %v", deleted, err)
	}
	if libs, _ := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "ratelimit_v*"}).Result(); len(libs) != 1 || libs[0].Name != mine.Name {
		t.Fatalf("after DeleteLibraries: %v", libs)
	}
	if got := take("v:shared"); got != 945 {
		t.Fatalf("this version after DeleteLibraries: remaining %d", got)
	}
	if out := runOther(t, bin, s.addr(), "v:shared", 1); out[1] != "944" {
		t.Fatalf("the other version after its library was deleted: %v", out)
	}
	if n := loads(); n != 3 {
		t.Fatalf("%d FUNCTION LOADs, want 3: the other version loaded its own again", n)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if libs, _ := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "ratelimit_v*"}).Result(); len(libs) != 2 {
		t.Fatalf("libraries at the end: %v", libs)
	}
}
