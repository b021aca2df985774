package integration

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/lua"
)

// The release files make dist writes in build/dist, as a user downloads
// them.

// glibcFloor is the newest glibc the module may need, as the README and
// docs/install.md state it: 2.17 (RHEL 7, Amazon Linux 2, Ubuntu 14.04,
// Debian 8 and every later one).
var glibcFloor = []int{2, 17}

// distFile is the path of build/dist's file of that name, with the
// version in place of V.
func distFile(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "build", "dist", strings.ReplaceAll(name, "V", ratelimit.Version)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run `make dist` (make test does)", err)
	}
	return p
}

// distNames are the files make dist writes, SHA256SUMS aside.
var distNames = []string{
	"ratelimit-V-linux-amd64.so", "ratelimit-V-linux-arm64.so", "rls-V-linux-amd64", "rls-V-linux-arm64",
	"ratelimit-V.lua", "ratelimit-V-scripts.tar.gz", "ratelimit-V.spdx.json",
}

// SHA256SUMS lists every file once with its digest, and sha256sum -c
// agrees.
func TestDistChecksums(t *testing.T) {
	sums := distFile(t, "SHA256SUMS")
	dir := filepath.Dir(sums)
	f, err := os.Open(sums)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 || listed[name] != "" {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		listed[name] = sum
	}
	var want []string
	for _, n := range distNames {
		want = append(want, strings.ReplaceAll(n, "V", ratelimit.Version))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" {
			have = append(have, e.Name())
		}
	}
	slices.Sort(want)
	if !slices.Equal(have, want) {
		t.Fatalf("build/dist holds %v, want %v", have, want)
	}
	for _, name := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256Hex(b); listed[name] != got {
			t.Errorf("%s: SHA256SUMS says %s, the file's is %s", name, listed[name], got)
		}
	}
	cmd := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), ": OK\n") != len(want) {
		t.Fatalf("sha256sum --check: %v\n%s", err, out)
	}
}

// sha256Hex is b's SHA-256 as sha256sum prints it.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// glibcVersion reads "GLIBC_2.17" as [2 17]; nil for another library's.
func glibcVersion(v string) []int {
	rest, ok := strings.CutPrefix(v, "GLIBC_")
	if !ok {
		return nil
	}
	var n []int
	for _, p := range strings.Split(rest, ".") {
		d, err := strconv.Atoi(p)
		if err != nil {
			return nil
		}
		n = append(n, d)
	}
	return n
}

// The modules are shared objects of their architecture that export the
// module's entry point and need glibc 2.17 at most; rls is a static
// executable of its architecture.
func TestDistBinaries(t *testing.T) {
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		t.Run(arch, func(t *testing.T) {
			so, err := elf.Open(distFile(t, "ratelimit-V-linux-"+arch+".so"))
			if err != nil {
				t.Fatal(err)
			}
			defer so.Close()
			if so.Machine != machine || so.Class != elf.ELFCLASS64 || so.Type != elf.ET_DYN {
				t.Fatalf("module: %v %v %v, want %v ELFCLASS64 ET_DYN", so.Machine, so.Class, so.Type, machine)
			}
			syms, err := so.DynamicSymbols()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(syms, func(s elf.Symbol) bool {
				return s.Name == "RedisModule_OnLoad" && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF
			}) {
				t.Fatal("module: RedisModule_OnLoad is not exported")
			}
			imported, err := so.ImportedSymbols()
			if err != nil {
				t.Fatal(err)
			}
			var newest []int
			newestSym := ""
			for _, s := range imported {
				if v := glibcVersion(s.Version); v != nil && slices.Compare(v, newest) > 0 {
					newest, newestSym = v, s.Name+"@"+s.Version
				}
			}
			if newest == nil || slices.Compare(newest, glibcFloor) > 0 {
				t.Fatalf("module: needs %s, newer than glibc %v", newestSym, glibcFloor)
			}
			t.Logf("module: the newest glibc symbol it needs is %s", newestSym)

			bin, err := elf.Open(distFile(t, "rls-V-linux-"+arch))
			if err != nil {
				t.Fatal(err)
			}
			defer bin.Close()
			if bin.Machine != machine || bin.Class != elf.ELFCLASS64 || bin.Type != elf.ET_EXEC {
				t.Fatalf("rls: %v %v %v, want %v ELFCLASS64 ET_EXEC", bin.Machine, bin.Class, bin.Type, machine)
			}
			for _, p := range bin.Progs {
				if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
					t.Fatalf("rls: has %v: not static", p.Type)
				}
			}
		})
	}
}

// The Lua files are the library and the scripts package lua assembles.
func TestDistLua(t *testing.T) {
	lib, err := os.ReadFile(distFile(t, "ratelimit-V.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if src, _ := lua.Library(); string(lib) != src {
		t.Fatal("ratelimit-V.lua is not the library package lua assembles")
	}
	f, err := os.Open(distFile(t, "ratelimit-V-scripts.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for name, b := range tarFiles(t, z) {
		got[name] = string(b)
	}
	if len(got) != len(lua.Commands()) {
		t.Errorf("the tarball holds %d scripts, want %d", len(got), len(lua.Commands()))
	}
	for _, name := range lua.Commands() {
		s := lua.Must(name)
		if got["scripts/"+s.Function+".lua"] != s.Source {
			t.Errorf("scripts/%s.lua is not %s's script", s.Function, name)
		}
	}
}

// The amd64 module, as downloaded, loads and answers every family in each
// server, reporting the version.
func TestDistModuleServers(t *testing.T) {
	so := distFile(t, "ratelimit-V-linux-amd64.so")
	eachFlavor(t, func(t *testing.T, f flavor) {
		s := startFor(t, f, opts{module: true, moduleFile: so})
		assertVersion(t, s)
		for _, l := range limiters {
			got := mustCall(t, s.rdb, l.cmd, append([]any{key(t, l.name)}, l.params(5, slow)...)...)
			if got[0] != 0 || (l.name != "lb" && got[2] != got[1]-1) {
				t.Errorf("%s: %v, want admitted with one taken", l.cmd, got)
			}
		}
		k := key(t, "conc")
		assertReply(t, "CONC.ACQUIRE", mustCall(t, s.rdb, "CONC.ACQUIRE", k, 2, 60, "a"), 0, 2, 1, -1, 60)
	})
}

// moduleVersionOf is MODULE LIST's ver for a version X.Y.Z: X×10000 +
// Y×100 + Z.
func moduleVersionOf(t *testing.T, v string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)$`).FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("version %q is not X.Y.Z", v)
	}
	var n int64
	for _, p := range m[1:] {
		d, _ := strconv.ParseInt(p, 10, 64)
		n = n*100 + d
	}
	return n
}

// assertVersion: MODULE LIST and INFO ratelimit report version.go's
// version.
func assertVersion(t *testing.T, s *server) {
	t.Helper()
	mods, err := s.rdb.Do(ctx, "MODULE", "LIST").Slice()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range mods {
		fields := map[string]any{}
		switch m := m.(type) {
		case []any:
			for i := 0; i+1 < len(m); i += 2 {
				fields[fmt.Sprint(m[i])] = m[i+1]
			}
		case map[any]any:
			for k, v := range m {
				fields[fmt.Sprint(k)] = v
			}
		}
		if fields["name"] == "ratelimit" {
			found = true
			if fields["ver"] != moduleVersionOf(t, ratelimit.Version) {
				t.Errorf("MODULE LIST: ver %v, want %d for %s", fields["ver"], moduleVersionOf(t, ratelimit.Version), ratelimit.Version)
			}
		}
	}
	if !found {
		t.Fatalf("MODULE LIST has no ratelimit: %v", mods)
	}
	if v := infoField(t, s.rdb, "ratelimit", "ratelimit_version"); v != ratelimit.Version {
		t.Errorf("INFO ratelimit: ratelimit_version %q, want %q", v, ratelimit.Version)
	}
}

// One version everywhere: the module (MODULE LIST, INFO), the FUNCTION
// library on a server without the module, and rls -version.
func TestVersionEverywhere(t *testing.T) {
	each(t, func(t *testing.T, s *server) { assertVersion(t, s) })
	t.Run("library", func(t *testing.T) {
		s := startFor(t, flavors[1], opts{})
		src, _ := lua.Library()
		if _, err := s.rdb.FunctionLoad(ctx, src).Result(); err != nil {
			t.Fatal(err)
		}
		v, err := s.rdb.FCallRO(ctx, lua.VersionFunction, nil).Text()
		if err != nil || !regexp.MustCompile(`^`+regexp.QuoteMeta(ratelimit.Version)+`\+[0-9a-f]{16}$`).MatchString(v) {
			t.Fatalf("FCALL_RO %s: %q %v, want %s+<digest>", lua.VersionFunction, v, err, ratelimit.Version)
		}
	})
	t.Run("rls", func(t *testing.T) {
		out, err := exec.Command(rlsBinary(t), "-version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "rls "+ratelimit.Version+" (go") {
			t.Fatalf("rls -version: %q %v", out, err)
		}
	})
}

// The amd64 module loads where glibc is 2.31 (Debian bullseye, the build
// image): dlopen resolves every symbol it needs there and runs its
// initialisers (the Go runtime's). Redis itself is too old there (6.0) to
// run it, so a small C program loads it.
func TestDistModuleOnGlibc231(t *testing.T) {
	so := distFile(t, "ratelimit-V-linux-amd64.so")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "load.c"), `#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    if (dlsym(h, "RedisModule_OnLoad") == NULL) { fprintf(stderr, "dlsym: %s\n", dlerror()); return 1; }
    printf("loaded %s\n", argv[1]);
    return 0;
}
`)
	out := docker(t, "run", "--rm", "--network", "none", "-v", dir+":/t:ro", "-v", so+":/opt/ratelimit.so:ro",
		"local/build:bullseye", "sh", "-c", "ldd --version | head -1 && gcc -o /tmp/load /t/load.c -ldl && /tmp/load /opt/ratelimit.so")
	if !strings.Contains(out, "2.31") || !strings.Contains(out, "loaded /opt/ratelimit.so") {
		t.Fatalf("on glibc 2.31:\n%s", out)
	}
}

// The SBOM (ratelimit-V.spdx.json) is SPDX 2.3 describing every other
// file of the release with its SHA-256, and each binary CONTAINS exactly
// the modules its build information lists (what `go version -m` prints),
// at their versions, with the licenses the README's table gives them, as
// SPDX expressions ("MIT and Apache-2.0" is "MIT AND Apache-2.0").
func TestDistSBOM(t *testing.T) {
	b, err := os.ReadFile(distFile(t, "ratelimit-V.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SPDXVersion string
		Packages    []struct {
			SPDXID, Name, VersionInfo, LicenseDeclared string
			ExternalRefs                               []struct{ ReferenceLocator string }
		}
		Files []struct {
			FileName, SPDXID string
			Checksums        []struct{ Algorithm, ChecksumValue string }
		}
		Relationships []struct{ SpdxElementID, RelationshipType, RelatedSpdxElement string }
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("spdxVersion %q", doc.SPDXVersion)
	}
	pkgs := map[string]string{} // SPDXID: "name version license purl"
	for _, p := range doc.Packages {
		purl := ""
		if len(p.ExternalRefs) == 1 {
			purl = p.ExternalRefs[0].ReferenceLocator
		}
		pkgs[p.SPDXID] = p.Name + " " + p.VersionInfo + " " + p.LicenseDeclared + " " + purl
	}
	licenses := map[string]string{}
	readme, _ := os.ReadFile("../README.md")
	_, table, _ := strings.Cut(string(readme), "| module | license | in |\n|---|---|---|\n")
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		licenses[cells[0]] = strings.ReplaceAll(cells[1], " and ", " AND ") // an SPDX expression
	}
	described := map[string]bool{}
	for _, f := range doc.Files {
		name := strings.TrimPrefix(f.FileName, "./")
		data, err := os.ReadFile(distFile(t, name))
		if err != nil || len(f.Checksums) != 1 || f.Checksums[0].Algorithm != "SHA256" || f.Checksums[0].ChecksumValue != sha256Hex(data) {
			t.Errorf("%s: checksums %v (%v)", name, f.Checksums, err)
		}
		described[name] = true
		var contains []string
		for _, r := range doc.Relationships {
			if r.SpdxElementID == f.SPDXID && r.RelationshipType == "CONTAINS" {
				contains = append(contains, pkgs[r.RelatedSpdxElement])
			}
		}
		out, err := exec.Command("go", "version", "-m", distFile(t, name)).Output()
		if err != nil { // not a Go binary: the Lua files
			if len(contains) != 0 {
				t.Errorf("%s contains %v", name, contains)
			}
			continue
		}
		var want []string
		for _, line := range strings.Split(string(out), "\n") {
			fields := strings.Fields(line)
			switch {
			case len(fields) == 0:
			case !strings.HasPrefix(line, "\t"): // FILE: goVERSION
				goVersion := fields[len(fields)-1]
				want = append(want, "stdlib "+goVersion+" BSD-3-Clause pkg:golang/stdlib@"+goVersion)
			case len(fields) >= 3 && (fields[0] == "mod" || fields[0] == "dep"):
				path, v, license := fields[1], fields[2], licenses[fields[1]]
				if strings.HasPrefix(path, "github.com/seed-6b3823f5/ratelimit") {
					v, license = "v"+ratelimit.Version, "Apache-2.0"
				}
				if license == "" {
					t.Errorf("%s links %s, which the README's license table lacks", name, path)
				}
				want = append(want, path+" "+v+" "+license+" pkg:golang/"+path+"@"+v)
			}
		}
		slices.Sort(want)
		slices.Sort(contains)
		if !slices.Equal(contains, want) {
			t.Errorf("%s: the SBOM says it contains\n%s\ngo version -m says\n%s", name, strings.Join(contains, "\n"), strings.Join(want, "\n"))
		}
	}
	for _, n := range distNames {
		if n = strings.ReplaceAll(n, "V", ratelimit.Version); !described[n] && !strings.HasSuffix(n, ".spdx.json") {
			t.Errorf("the SBOM does not describe %s", n)
		}
	}
}

// tarFiles is the regular files of a tar stream, by name.
func tarFiles(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
}
