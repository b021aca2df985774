package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	fenceRE   = regexp.MustCompile("(?ms)^```.*?^```")
)

// slug is the anchor GitHub gives a heading: lower case, spaces as
// hyphens, every character but letters, digits, '-' and '_' dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists a Markdown file's heading anchors (a repeated heading gets
// -1, -2, ... as on GitHub).
func anchors(text string) map[string]bool {
	m := map[string]bool{}
	seen := map[string]int{}
	for _, h := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		s := slug(h[1])
		if n := seen[s]; n > 0 {
			m[s+"-"+string(rune('0'+n))] = true
		} else {
			m[s] = true
		}
		seen[s]++
	}
	return m
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"TB.TAKE — token bucket":                          "tbtake--token-bucket",
		"No modules? Use the scripts":                     "no-modules-use-the-scripts",
		"Key names: what the module refuses to take over": "key-names-what-the-module-refuses-to-take-over",
		"`RESERVE` — leave room":                          "reserve--leave-room",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "bench", "BENCHMARKS.md"))
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := fenceRE.ReplaceAllString(string(b), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(link, "#")
			target := f
			if path != "" {
				target = filepath.Join(filepath.Dir(f), path)
			}
			tb, err := os.ReadFile(target)
			if err != nil {
				t.Errorf("%s: link %q: %v", f, link, err)
				continue
			}
			if frag != "" && !anchors(string(tb))[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", f, link, target, frag)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d links checked: is the pattern right?", checked)
	}
}
