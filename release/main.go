// Command release builds what a release needs that git cannot: a Go module
// proxy on disk, holding the project's modules at a version as the public
// proxy would serve them from their tags (the @v/list, .info, .mod and .zip
// layout; each zip made by golang.org/x/mod/zip from git's tree, so it
// hashes as the public proxy's will).
//
//	go run . proxy -repo DIR -version v0.1.0 -out DIR [-rev REV] [-modules root,prom,rls]
//
// Each module is read at its tag (v0.1.0, prom/v0.1.0, rls/v0.1.0), or at
// REV for all. A nested module that replaces the library, or requires
// another version of it, is refused: users could not build it. make release
// serves the library from such a proxy to the nested modules while it pins
// them (release.sh); the integration tests install from one
// (TestInstallFromTags). It lives in a module of its own so that
// golang.org/x/mod stays out of the library's users' module graphs.
//
// It also writes a release's SBOM (sbom.go), from the files make dist
// wrote.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// Library is the root module's path; the nested modules are under it.
const Library = "github.com/seed-6b3823f5/ratelimit"

// released are the modules tagged together, by the folder they live in
// ("" for the root).
var released = map[string]string{"root": "", "prom": "prom", "rls": "rls"}

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "sbom" {
		sbomMain(os.Args[2:])
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "proxy" {
		fmt.Fprintln(os.Stderr, "usage: release proxy -repo DIR -version vX.Y.Z -out DIR [-rev REV] [-modules root,prom,rls]")
		fmt.Fprintln(os.Stderr, "       release sbom -dist DIR -version X.Y.Z -readme README.md -created RFC3339 -out FILE")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	repo := fs.String("repo", ".", "the git work tree of the project")
	version := fs.String("version", "", "the version, vX.Y.Z")
	out := fs.String("out", "", "the proxy's directory (GOPROXY=file://DIR)")
	rev := fs.String("rev", "", "read every module at this revision instead of at its tag")
	modules := fs.String("modules", "root,prom,rls", "which modules: root, prom, rls")
	fs.Parse(os.Args[2:])
	if err := proxy(*repo, *version, *out, *rev, strings.Split(*modules, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "release proxy:", err)
		os.Exit(1)
	}
}

// proxy writes each module of names at version into the proxy at out.
func proxy(repo, version, out, rev string, names []string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Prerelease(version) != "" {
		return fmt.Errorf("-version %q: want vMAJOR.MINOR.PATCH", version)
	}
	if out == "" {
		return errors.New("-out: the proxy's directory is required")
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	for _, name := range names {
		dir, ok := released[name]
		if !ok {
			return fmt.Errorf("-modules: %q is not root, prom or rls", name)
		}
		at := rev
		if at == "" {
			at = path.Join(dir, version) // the module's tag
		}
		if err := write(repo, out, dir, version, at); err != nil {
			return fmt.Errorf("%s at %s: %w", name, at, err)
		}
	}
	return nil
}

// write adds the module in folder dir of repo, read at revision at, to the
// proxy as version.
func write(repo, out, dir, version, at string) error {
	modPath := Library
	if dir != "" {
		modPath += "/" + dir
	}
	gomod, err := git(repo, "show", at+":"+path.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	f, err := modfile.Parse("go.mod", gomod, nil)
	if err != nil {
		return err
	}
	if f.Module == nil || f.Module.Mod.Path != modPath {
		return fmt.Errorf("go.mod declares %v, want module %s", f.Module, modPath)
	}
	if dir != "" {
		if err := pinned(f, version); err != nil {
			return err
		}
	}
	when, err := git(repo, "log", "-1", "--format=%cI", at)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(when)))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return err
	}
	esc, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	base := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return err
	}
	z, err := os.Create(filepath.Join(base, version+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromVCS(z, module.Version{Path: modPath, Version: version}, repo, at, dir); err != nil {
		z.Close()
		return err
	}
	if err := z.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(base, version+".mod"), gomod, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(base, version+".info"), info, 0o644); err != nil {
		return err
	}
	return addToList(filepath.Join(base, "list"), version)
}

// pinned refuses a nested module's go.mod that its users could not build
// from the tag: one that replaces the library, or requires another version.
func pinned(f *modfile.File, version string) error {
	for _, r := range f.Replace {
		if r.Old.Path == Library {
			return fmt.Errorf("go.mod replaces %s with %s: users would not get it", Library, r.New.Path)
		}
	}
	for _, r := range f.Require {
		if r.Mod.Path == Library {
			if r.Mod.Version != version {
				return fmt.Errorf("go.mod requires %s %s, want %s", Library, r.Mod.Version, version)
			}
			return nil
		}
	}
	return fmt.Errorf("go.mod does not require %s", Library)
}

// addToList adds version to a proxy's @v/list once.
func addToList(list, version string) error {
	old, err := os.ReadFile(list)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, v := range strings.Fields(string(old)) {
		if v == version {
			return nil
		}
	}
	return os.WriteFile(list, append(old, version+"\n"...), 0o644)
}

// git runs git in repo and returns its output.
func git(repo string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("git %s: %v", strings.Join(args, " "), err)
	}
	return out, nil
}
