// Command gen writes the files made from the command table (internal/spec):
// the module's C registration and protocol header, the engine's typed
// parameters, and the Lua engine's FUNCTION library (lua/ratelimit.lua).
// `go generate ./...` (or `make generate`) runs it from beside each output
// (module, internal/engine, lua: -only names the directories whose files it
// writes); its tests fail when a file on disk is not what it writes.
//
// With -scripts DIR it also writes each command's EVAL script to DIR
// (`make lua`: build/lua), for other languages.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/seed-6b3823f5/ratelimit/lua"
)

func main() {
	scripts := flag.String("scripts", "", "also write each command's EVAL script to this directory")
	only := flag.String("only", "", "write only the files in these directories of the repository, comma-separated (module,lua); all when empty")
	flag.Parse()
	root, err := repoRoot()
	if err != nil {
		log.Fatal(err)
	}
	if *scripts != "" {
		if err := writeScripts(*scripts); err != nil {
			log.Fatal(err)
		}
	}
	files, err := outputs()
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range sortedNames(files) {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), path.Dir(name)) {
			continue
		}
		path := filepath.Join(root, filepath.FromSlash(name))
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, files[name]) {
			continue
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Println("wrote", name)
	}
}

// outputs is every generated file, by its path from the repository's root.
func outputs() (map[string][]byte, error) {
	library, _ := lua.Library()
	version, err := versionH()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"module/version_gen.h":          version,
		"module/commands_gen.c":         commandsC(),
		"module/protocol_gen.h":         protocolH(),
		"internal/engine/params_gen.go": paramsGo(),
		"lua/ratelimit.lua":             []byte(library),
	}, nil
}

// writeScripts writes every command's EVAL script into dir, as
// <command>.lua (gcra_throttle.lua).
func writeScripts(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range lua.Commands() {
		s := lua.Must(name)
		if err := os.WriteFile(filepath.Join(dir, s.Function+".lua"), []byte(s.Source), 0o644); err != nil {
			return err
		}
	}
	fmt.Println("wrote", len(lua.Commands()), "scripts to", dir)
	return nil
}

func sortedNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// repoRoot is the directory holding the module's go.mod, from the working
// directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.HasPrefix(b, []byte("module github.com/seed-6b3823f5/ratelimit\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("gen: no go.mod of github.com/seed-6b3823f5/ratelimit above the working directory")
		}
		dir = parent
	}
}
