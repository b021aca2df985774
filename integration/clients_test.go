package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/clients.md's examples, run as its readers run them — Python with
// Debian's python3-redis, Node with Debian's node-redis, Go with go-redis —
// against Redis 8.0 with the module and without it (through the FUNCTION
// library, which each example loads itself), each printing exactly what the
// page shows under it.
func TestClientExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/clients.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- run: (\\w+) (module|functions) -->\n```\\w+\n(.*?)\n```\n```text\n(.*?)\n```")
	examples := re.FindAllStringSubmatch(string(doc), -1)
	if len(examples) != 6 {
		t.Fatalf("docs/clients.md has %d runnable examples, want python, node and go, each with the module and the functions", len(examples))
	}
	lib, err := filepath.Abs("../lua/ratelimit.lua")
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]*server{
		"module":    startFor(t, flavors[1], opts{module: true}),
		"functions": startFor(t, flavors[1], opts{}),
	}
	for _, ex := range examples {
		lang, engine, code, want := ex[1], ex[2], ex[3], ex[4]
		t.Run(lang+"-"+engine, func(t *testing.T) {
			s := servers[engine]
			if err := s.rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.rdb.FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(), "REDIS_URL=redis://"+s.addr(), "RATELIMIT_LUA="+lib, "NODE_PATH=/usr/share/nodejs")
			var cmd *exec.Cmd
			switch lang {
			case "python":
				f := filepath.Join(t.TempDir(), "example.py")
				writeFile(t, f, code)
				cmd = exec.Command("/usr/bin/python3", f) // Debian's, which python3-redis installs into
			case "node":
				f := filepath.Join(t.TempDir(), "example.js")
				writeFile(t, f, code)
				cmd = exec.Command("node", f)
			case "go":
				// In this module, which has go-redis: a folder go's patterns skip.
				dir, err := os.MkdirTemp(".", "_example")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(dir) })
				writeFile(t, filepath.Join(dir, "main.go"), code)
				cmd = exec.Command("go", "run", "./"+dir)
			default:
				t.Fatalf("no way to run %s", lang)
			}
			cmd.Env = env
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v\n%s%s", err, out, stderr.String())
			}
			if got := strings.TrimRight(string(out), "\n"); got != want {
				t.Fatalf("printed\n%s\nwhere docs/clients.md shows\n%s", got, want)
			}
			if engine == "functions" {
				if n, err := s.rdb.Exists(ctx, "user123").Result(); err != nil || n != 1 {
					t.Fatalf("the key the library wrote: %d %v", n, err)
				}
			}
		})
	}
}
