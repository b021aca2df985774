package integration

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/seed-6b3823f5/ratelimit"
)

// What a release publishes, published for real to a registry of the test's
// own (go-containerregistry's, on 127.0.0.1) by the script make publish
// runs, and compared with what make release-dry says it publishes.

// elfMachines is each architecture's ELF machine.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// imageFiles is the regular files of an image's file system (docker create,
// docker export), by path; each of paths among them.
func imageFiles(t *testing.T, ref, arch string, paths ...string) map[string][]byte {
	t.Helper()
	id := docker(t, "create", "--platform", "linux/"+arch, ref)
	defer exec.Command("docker", "rm", "-f", id).Run()
	out, err := exec.Command("docker", "export", id).Output()
	if err != nil {
		t.Fatalf("docker export %s: %v", ref, err)
	}
	files := tarFiles(t, bytes.NewReader(out))
	for _, p := range paths {
		if files[p] == nil {
			t.Fatalf("%s holds no file %s", ref, p)
		}
	}
	return files
}

// assertLabels: the image carries the OCI labels: its source, version,
// a revision that is a commit of this repository, its license.
func assertLabels(t *testing.T, ref string) {
	t.Helper()
	var labels map[string]string
	if err := json.Unmarshal([]byte(docker(t, "image", "inspect", "-f", "{{json .Config.Labels}}", ref)), &labels); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/seed-6b3823f5/ratelimit",
		"org.opencontainers.image.version":  ratelimit.Version,
		"org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if labels[k] != want {
			t.Errorf("%s: label %s %q, want %q", ref, k, labels[k], want)
		}
	}
	rev := labels["org.opencontainers.image.revision"]
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(rev) || exec.Command("git", "cat-file", "-e", rev+"^{commit}").Run() != nil {
		t.Errorf("%s: label org.opencontainers.image.revision %q is not a commit of this repository", ref, rev)
	}
}

// The module and rls images exist for linux/amd64 and linux/arm64, each
// holding that architecture's build of make dist's files (the busybox too);
// the server images for those this machine runs; all carry the OCI labels.
func TestImageArchitectures(t *testing.T) {
	for _, name := range []string{"module", "rls", "redis", "valkey"} {
		archs := []string{"amd64", "arm64"}
		if name == "redis" || name == "valkey" {
			archs = serverArchs()
			if len(archs) == 1 {
				// Not built where this machine cannot run them (make
				// images said so).
				if ref := imageRef(name, ratelimit.Version+"-"+otherArch()); exec.Command("docker", "image", "inspect", ref).Run() == nil {
					t.Errorf("%s exists, though this machine does not run linux/%s programs", ref, otherArch())
				}
			}
		}
		for _, arch := range archs {
			ref := imageRef(name, ratelimit.Version+"-"+arch)
			if got := docker(t, "image", "inspect", "-f", "{{.Os}}/{{.Architecture}}", ref); got != "linux/"+arch {
				t.Errorf("%s is %s", ref, got)
			}
			assertLabels(t, ref)
			var want map[string]string // path in the image: dist's file, or "" for any of that architecture
			switch name {
			case "module":
				want = map[string]string{"ratelimit/ratelimit.so": "ratelimit-V-linux-" + arch + ".so", "bin/busybox": ""}
			case "rls":
				want = map[string]string{"bin/rls": "rls-V-linux-" + arch}
			default:
				want = map[string]string{"usr/lib/ratelimit/ratelimit.so": "ratelimit-V-linux-" + arch + ".so"}
			}
			files := imageFiles(t, ref, arch, slices.Collect(maps.Keys(want))...)
			for p, dist := range want {
				f, err := elf.NewFile(bytes.NewReader(files[p]))
				if err != nil || f.Machine != elfMachines[arch] {
					t.Errorf("%s: %s is not an ELF file for %s (%v)", ref, p, arch, err)
					continue
				}
				if dist == "" {
					continue
				}
				if b, err := os.ReadFile(distFile(t, dist)); err != nil || !bytes.Equal(b, files[p]) {
					t.Errorf("%s: %s is not build/dist's %s (%v)", ref, p, dist, err)
				}
			}
		}
	}
}

// publishPlan runs make release-dry's script (release/publish.sh
// --dry-run) with env, and returns what it printed.
func publishPlan(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command("./release/publish.sh", "--dry-run")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("release/publish.sh --dry-run: %v\n%s", err, out)
	}
	return string(out)
}

// make release-dry writes the files the release attaches, exactly make
// dist's (the SBOM and SHA256SUMS among them), the release's text from
// CHANGELOG.md, and the commands; a tag that is not version.go's is
// refused.
func TestReleaseDry(t *testing.T) {
	plan := publishPlan(t)
	dir := filepath.Join("..", "build", "publish")
	entries, err := os.ReadDir(filepath.Join(dir, "assets"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
		a, _ := os.ReadFile(filepath.Join(dir, "assets", e.Name()))
		d, err := os.ReadFile(distFile(t, e.Name()))
		if err != nil || !bytes.Equal(a, d) {
			t.Errorf("the release's %s is not build/dist's (%v)", e.Name(), err)
		}
	}
	want := []string{"SHA256SUMS"}
	for _, n := range distNames {
		want = append(want, strings.ReplaceAll(n, "V", ratelimit.Version))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the release attaches %v, want %v", got, want)
	}
	notes, _ := os.ReadFile(filepath.Join(dir, "notes.md"))
	changelog, _ := os.ReadFile("../CHANGELOG.md")
	if len(bytes.TrimSpace(notes)) == 0 || !bytes.Contains(changelog, []byte("## ["+ratelimit.Version+"]")) ||
		!bytes.Contains(changelog, notes) || bytes.Contains(notes, []byte("\n## [")) {
		t.Errorf("notes.md is not CHANGELOG.md's section for %s alone:\n%.300s", ratelimit.Version, notes)
	}
	tag := "v" + ratelimit.Version
	if !strings.Contains(plan, "+ gh release create "+tag+" --verify-tag") {
		t.Errorf("the dry run does not create release %s:\n%s", tag, plan)
	}
	cmd := exec.Command("./release/publish.sh", "--dry-run")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GITHUB_REF_NAME=v9.9.9")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "the tag is v9.9.9 but version.go declares "+ratelimit.Version) {
		t.Errorf("a release from tag v9.9.9: %v\n%s", err, out)
	}
}

// registryIndex is a manifest list (or OCI index) as a registry serves it.
type registryIndex struct {
	MediaType string `json:"mediaType"`
	Manifests []struct {
		Digest   string `json:"digest"`
		Platform struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform"`
	} `json:"manifests"`
}

// registryGet GETs a registry path, accepting manifest lists and images.
func registryGet(t *testing.T, base, path string, into any) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %s", path, resp.Status, b)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// make publish's pushes, to a registry on 127.0.0.1: each image's tags
// are exactly those make release-dry lists; the version and latest are
// manifest lists whose platforms are those it says (linux/amd64 and
// linux/arm64 for module and rls), each entry an image whose config is of
// that platform.
func TestPublishImages(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	reg := host + "/seed-6b3823f5"
	env := []string{"REGISTRY=" + reg}
	publishPlan(t, env...)
	listed, err := os.ReadFile("../build/publish/images.txt")
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("./images/push.sh")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() {
		// The tags push.sh made for the test's registry.
		refs, _ := exec.Command("docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", host+"/*/*").Output()
		for _, r := range strings.Fields(string(refs)) {
			exec.Command("docker", "rmi", r).Run()
		}
	})
	if err != nil {
		t.Fatalf("images/push.sh: %v\n%s", err, out)
	}

	want := map[string][]string{} // repository: tags, from the dry run
	lists := map[string]string{}  // ref: its platforms, from the dry run
	for _, line := range strings.Split(strings.TrimSpace(string(listed)), "\n") {
		ref, platforms, _ := strings.Cut(line, " ")
		repo, tag, _ := strings.Cut(strings.TrimPrefix(ref, reg+"/"), ":")
		if !strings.HasPrefix(ref, reg+"/ratelimit-") {
			t.Fatalf("images.txt: %q is not under %s", line, reg)
		}
		want[repo] = append(want[repo], tag)
		if platforms != "" {
			lists[ref] = platforms
		}
	}
	for _, name := range []string{"redis", "valkey", "module", "rls"} {
		repo := "ratelimit-" + name
		var tags struct{ Tags []string }
		registryGet(t, srv.URL, "/v2/seed-6b3823f5/"+repo+"/tags/list", &tags)
		slices.Sort(tags.Tags)
		w := slices.Clone(want[repo])
		slices.Sort(w)
		w = slices.Compact(w)
		if !slices.Equal(tags.Tags, w) {
			t.Errorf("%s: the registry has tags %v, make release-dry listed %v", repo, tags.Tags, w)
		}
		wantPlatforms := "linux/amd64,linux/arm64"
		if (name == "redis" || name == "valkey") && len(serverArchs()) == 1 {
			wantPlatforms = "linux/" + runtime.GOARCH
		}
		for _, tag := range []string{ratelimit.Version, "latest"} {
			ref := reg + "/" + repo + ":" + tag
			if lists[ref] != wantPlatforms {
				t.Errorf("make release-dry: %s joins %q, want %q", ref, lists[ref], wantPlatforms)
			}
			var idx registryIndex
			registryGet(t, srv.URL, "/v2/seed-6b3823f5/"+repo+"/manifests/"+tag, &idx)
			var platforms []string
			for _, m := range idx.Manifests {
				p := m.Platform.OS + "/" + m.Platform.Architecture
				platforms = append(platforms, p)
				var img struct{ Config struct{ Digest string } }
				registryGet(t, srv.URL, "/v2/seed-6b3823f5/"+repo+"/manifests/"+m.Digest, &img)
				var cfg struct {
					OS, Architecture string
					Config           struct{ Labels map[string]string }
				}
				registryGet(t, srv.URL, "/v2/seed-6b3823f5/"+repo+"/blobs/"+img.Config.Digest, &cfg)
				if got := cfg.OS + "/" + cfg.Architecture; got != p || cfg.Config.Labels["org.opencontainers.image.version"] != ratelimit.Version {
					t.Errorf("%s: the %s entry's image is %s, version label %q", ref, p, got, cfg.Config.Labels["org.opencontainers.image.version"])
				}
			}
			if !strings.Contains(idx.MediaType, "list") && !strings.Contains(idx.MediaType, "index") {
				t.Errorf("%s is %s, not a list", ref, idx.MediaType)
			}
			if got := strings.Join(platforms, ","); got != wantPlatforms {
				t.Errorf("%s joins %s, want %s", ref, got, wantPlatforms)
			}
		}
	}
	if t.Failed() {
		t.Logf("images/push.sh:\n%s", out)
	}
}
