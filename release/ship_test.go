package main

import (
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// What ships beside the code: the GitHub workflows and deploy/'s files,
// read as GitHub and Kubernetes read them, and checked against the
// Makefile, the Dockerfiles and version.go.

// makefile is the Makefile's targets and the values of its simple
// variables (NAME := value or NAME ?= value).
func makefile(t *testing.T) (targets map[string]bool, vars map[string]string) {
	t.Helper()
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	targets, vars = map[string]bool{}, map[string]string{}
	target := regexp.MustCompile(`^([A-Za-z0-9_./-]+):([^=]|$)`)
	variable := regexp.MustCompile(`^([A-Z_]+) *[:?]?= *(.*)$`)
	for _, line := range strings.Split(string(b), "\n") {
		if m := target.FindStringSubmatch(line); m != nil {
			targets[m[1]] = true
		}
		if m := variable.FindStringSubmatch(line); m != nil {
			vars[m[1]] = m[2]
		}
	}
	return targets, vars
}

// version is version.go's.
func version(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../version.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^const Version = "([0-9.]+)"$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("version.go declares no Version")
	}
	return string(m[1])
}

// workflow is the part of a GitHub workflow file these tests read.
type workflow struct {
	Name        string
	On          map[string]map[string][]string
	Permissions map[string]string
	Concurrency any
	Jobs        map[string]struct {
		RunsOn  string `yaml:"runs-on"`
		Timeout int    `yaml:"timeout-minutes"`
		Env     map[string]string
		Steps   []struct {
			Name string
			Uses string
			Run  string
			With map[string]any
			Env  map[string]string
		}
	}
}

func readWorkflow(t *testing.T, name string) workflow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", ".github", "workflows", name))
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&w); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return w
}

// The setup steps a workflow may use; every other step runs the Makefile
// (or .ci/run, which runs make test).
var setupActions = []string{"actions/checkout@v4", "actions/setup-go@v5"}

// commands are a workflow's run steps, each split into its commands.
func commands(t *testing.T, w workflow) [][]string {
	t.Helper()
	var cmds [][]string
	for job, j := range w.Jobs {
		if j.RunsOn == "" || j.Timeout == 0 {
			t.Errorf("job %s: runs-on %q, timeout-minutes %d", job, j.RunsOn, j.Timeout)
		}
		for _, s := range j.Steps {
			switch {
			case s.Uses != "" && s.Run == "":
				if !slices.Contains(setupActions, s.Uses) {
					t.Errorf("job %s uses %s: only %v set up; the rest is the Makefile's", job, s.Uses, setupActions)
				}
			case s.Uses == "" && s.Run != "":
				for _, line := range strings.Split(strings.TrimSpace(s.Run), "\n") {
					for _, c := range strings.Split(line, "&&") {
						cmds = append(cmds, strings.Fields(c))
					}
				}
			default:
				t.Errorf("job %s: a step with uses %q and run %q", job, s.Uses, s.Run)
			}
		}
	}
	return cmds
}

// The release workflow runs on a vX.Y.Z tag only (not on prom/ and rls/'s
// tags, nor on branches), may write the release and the packages, and
// calls the Makefile's targets, each of which exists: emulation, dist and
// images, then publish, which make release-dry runs dry.
func TestReleaseWorkflow(t *testing.T) {
	w := readWorkflow(t, "release.yml")
	targets, _ := makefile(t)
	if len(w.On) != 1 || len(w.On["push"]) != 1 || !slices.Equal(w.On["push"]["tags"], []string{"v*"}) {
		t.Fatalf("on: %v, want a push of a v* tag alone", w.On)
	}
	// GitHub's filter: * matches any characters but /.
	glob := func(tag string) bool { ok, _ := path.Match(w.On["push"]["tags"][0], tag); return ok }
	for tag, want := range map[string]bool{"v0.1.0": true, "v1.20.3": true, "prom/v0.1.0": false, "rls/v0.1.0": false} {
		if glob(tag) != want {
			t.Errorf("tag %s starts the release: %v, want %v", tag, glob(tag), want)
		}
	}
	if w.Permissions["contents"] != "write" || w.Permissions["packages"] != "write" || len(w.Permissions) != 2 {
		t.Errorf("permissions %v, want contents and packages write alone", w.Permissions)
	}
	var called []string
	for _, c := range commands(t, w) {
		if len(c) < 2 || c[0] != "make" {
			t.Fatalf("the release runs %q: only make's targets", c)
		}
		for _, target := range c[1:] {
			if !targets[target] {
				t.Errorf("make %s: the Makefile has no such target", target)
			}
			called = append(called, target)
		}
	}
	if !slices.Equal(called, []string{"emulation", "dist", "images", "publish"}) {
		t.Errorf("the release runs make %v, want emulation dist images publish", called)
	}
	if !targets["release-dry"] {
		t.Error("the Makefile has no release-dry")
	}
	// publish pushes and creates the release with the workflow's token.
	for _, j := range w.Jobs {
		for _, s := range j.Steps {
			if strings.Contains(s.Run, "publish") {
				for _, k := range []string{"REGISTRY_USER", "REGISTRY_PASSWORD", "GH_TOKEN"} {
					if s.Env[k] == "" {
						t.Errorf("make publish without %s", k)
					}
				}
			}
		}
	}
}

// The CI workflow runs .ci/run, and nothing else, on pull requests.
func TestCIWorkflow(t *testing.T) {
	w := readWorkflow(t, "ci.yml")
	if _, ok := w.On["pull_request"]; !ok {
		t.Fatalf("on: %v, want pull_request", w.On)
	}
	cmds := commands(t, w)
	if len(cmds) != 1 || !slices.Equal(cmds[0], []string{".ci/run"}) {
		t.Fatalf("ci runs %q, want .ci/run", cmds)
	}
	if fi, err := os.Stat("../.ci/run"); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf(".ci/run: %v, not executable", err)
	}
}

// yamlDocs parses every document of a YAML file into generic values.
func yamlDocs(t *testing.T, file string) []any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []any
	dec := yaml.NewDecoder(f)
	for {
		var d any
		if err := dec.Decode(&d); err != nil {
			if errors.Is(err, io.EOF) {
				return docs
			}
			t.Fatalf("%s: %v", file, err)
		}
		docs = append(docs, d)
	}
}

// walk calls f with every key and value under v, at any depth.
func walk(v any, f func(key string, v any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			f(k, x)
			walk(x, f)
		}
	case []any:
		for _, x := range v {
			walk(x, f)
		}
	}
}

// exposed are the ports a Dockerfile's EXPOSE lines name.
func exposed(t *testing.T, dockerfile string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "images", dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	for _, m := range regexp.MustCompile(`(?m)^EXPOSE ([0-9 ]+)$`).FindAllSubmatch(b, -1) {
		for _, p := range strings.Fields(string(m[1])) {
			n, err := strconv.Atoi(p)
			if err != nil {
				t.Fatal(err)
			}
			ports = append(ports, n)
		}
	}
	return ports
}

// deploy/'s files parse; every image they name is one make images builds
// and make publish pushes (the Makefile's IMAGE_REPO and IMAGES), at
// version.go's version; every port they name is one the image exposes; the
// charts' values load the module from the path the init container copies
// it to.
func TestDeploy(t *testing.T) {
	_, vars := makefile(t)
	v := version(t)
	images := map[string]bool{}
	for _, name := range strings.Fields(vars["IMAGES"]) {
		images[vars["IMAGE_REPO"]+"/ratelimit-"+name+":"+v] = true
	}
	if len(images) != 4 || vars["IMAGE_REPO"] != "ghcr.io/seed-6b3823f5" {
		t.Fatalf("the Makefile's IMAGE_REPO %q and IMAGES %q", vars["IMAGE_REPO"], vars["IMAGES"])
	}
	files, _ := filepath.Glob("../deploy/*.yaml")
	if len(files) != 3 {
		t.Fatalf("deploy/ holds %v, want the two charts' values and rls.yaml", files)
	}
	for _, file := range files {
		docs := yamlDocs(t, file)
		if len(docs) == 0 {
			t.Fatalf("%s: empty", file)
		}
		var named []string
		var ports []int
		var flags []string
		for _, d := range docs {
			walk(d, func(k string, x any) {
				switch k {
				case "image":
					named = append(named, x.(string))
				case "containerPort", "port", "targetPort":
					if n, ok := x.(int); ok {
						ports = append(ports, n)
					}
				case "extraFlags", "valkeyConfig":
					flags = append(flags, strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(flatten(x), "\n", " "), "--", "")))
				}
			})
		}
		if len(named) == 0 {
			t.Errorf("%s names no image", file)
		}
		for _, n := range named {
			if !images[n] {
				t.Errorf("%s: image %s is not one make images builds at %s (%v)", file, n, v, images)
			}
		}
		switch filepath.Base(file) {
		case "rls.yaml":
			for _, p := range ports {
				if !slices.Contains(exposed(t, "rls.Dockerfile"), p) {
					t.Errorf("%s: port %d, but the rls image exposes %v", file, p, exposed(t, "rls.Dockerfile"))
				}
			}
			if !slices.Contains(ports, 8081) || !slices.Contains(ports, 8080) {
				t.Errorf("%s: ports %v, want gRPC 8081 and HTTP 8080", file, ports)
			}
		default:
			if len(flags) == 0 {
				t.Fatalf("%s loads no module", file)
			}
			for _, f := range flags {
				if f != "loadmodule /modules/ratelimit.so" {
					t.Errorf("%s: %q, want loadmodule /modules/ratelimit.so, where the module image copies it", file, f)
				}
			}
		}
	}
}

// flatten is a YAML value's strings joined by new lines.
func flatten(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var s []string
		for _, x := range v {
			s = append(s, flatten(x))
		}
		return strings.Join(s, "\n")
	}
	return ""
}
