// Command gen writes the files made from the command table (internal/spec):
// the module's C registration and protocol header, the Lua engine's syntax
// and texts, and the assembled Lua scripts. Run it with
// `go generate ./internal/spec` (or `make generate`); its tests fail when a
// file on disk is not what it writes.
package main

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
)

func main() {
	root, err := repoRoot()
	if err != nil {
		log.Fatal(err)
	}
	files, err := outputs(root)
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range sortedNames(files) {
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
func outputs(root string) (map[string][]byte, error) {
	files := map[string][]byte{
		"module/commands_gen.c":         commandsC(),
		"module/protocol_gen.h":         protocolH(),
		"lua/src/spec.lua":              specLua(),
		"internal/engine/params_gen.go": paramsGo(),
	}
	scripts, err := luaScripts(filepath.Join(root, "lua", "src"), files["lua/src/spec.lua"])
	if err != nil {
		return nil, err
	}
	for name, b := range scripts {
		files["lua/"+name] = b
	}
	return files, nil
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
