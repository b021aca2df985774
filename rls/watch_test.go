package rls

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// version is a config whose one limit is n a day, and whose last
// descriptor, "end", tells a complete file from a truncated one.
func version(n int) string {
	return fmt.Sprintf("domain: w\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: %d}\n  - key: end\n    rate_limit: {unit: day, requests_per_unit: 1}\n", n)
}

// watched is a service (no Redis) watching a directory holding
// version(first) as w.yaml, and every config it has installed, looked at
// every millisecond until the test ends.
type watched struct {
	s    *Service
	dir  string
	mu   sync.Mutex
	seen []*Config
}

func watch(t *testing.T, first int, load func(string) (*Config, error)) *watched {
	t.Helper()
	return watchLogged(t, first, load, slog.New(slog.DiscardHandler))
}

// watchLogged is watch with the service's log going to log.
func watchLogged(t *testing.T, first int, load func(string) (*Config, error), log *slog.Logger) *watched {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.yaml"), []byte(version(first)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	w := &watched{s: New(rdb, cfg, Options{Logger: log}), dir: dir}
	t.Cleanup(w.s.Close)
	if load != nil {
		w.s.loadDir = load
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	if err := w.s.Watch(ctx, dir); err != nil {
		t.Fatal(err)
	}
	w.seen = []*Config{cfg}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w.mu.Lock()
			if c := w.s.Config(); c != w.seen[len(w.seen)-1] {
				w.seen = append(w.seen, c)
			}
			w.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	return w
}

// limit is the config's limit for k, or -1 when the config lacks "end"
// (a file loaded half-written).
func limit(c *Config) int64 {
	if r, _ := c.lookup("w", descriptor("end", "x")); r == nil {
		return -1
	}
	r, _ := c.lookup("w", descriptor("k", "x"))
	return r.perUnit
}

// installed is the limits of every config installed so far.
func (w *watched) installed() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.s.Config(); c != w.seen[len(w.seen)-1] {
		w.seen = append(w.seen, c) // installed since the last look
	}
	var out []int64
	for _, c := range w.seen {
		out = append(out, limit(c))
	}
	return out
}

func (w *watched) loads(result string) float64 {
	return testutil.ToFloat64(w.s.m.configLoads.WithLabelValues(result))
}

// TestWatchChurn: a config rewritten 40 times a second for 3 s (each
// write whole, with os.WriteFile) is reloaded while the writes go on,
// never half-written. Unfixed, each write put the reload off again: none
// happened until the writes stopped.
func TestWatchChurn(t *testing.T) {
	w := watch(t, 1, nil)
	path := filepath.Join(w.dir, "w.yaml")
	start := time.Now()
	n := 1
	for time.Since(start) < 3*time.Second {
		n++
		if err := os.WriteFile(path, []byte(version(n)), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	during := w.installed()
	t.Logf("%d writes in 3 s; configs installed meanwhile: %v; loads %v, errors %v", n-1, during, w.loads("success"), w.loads("error"))
	if len(during) < 3 { // the first, and at least two reloads during the writes
		t.Fatalf("%d reloads during 3 s of writes, want 2 or more", len(during)-1)
	}
	for _, l := range during {
		if l < 1 || l > int64(n) {
			t.Fatalf("a config installed with limit %d: a half-written file", l)
		}
	}
	if e := w.loads("error"); e != 0 {
		t.Fatalf("%v loads failed: a file read mid-write was reported", e)
	}
	waitUntil(t, "the last version", func() bool { return limit(w.s.Config()) == int64(n) })
}

// TestWatchSlowWriter: a file written in two parts 700 ms apart (more than
// the 200 ms a change settles in, as a writer pausing mid-file does) is
// not loaded until its writer closes it. The first part alone is a valid
// config without "end": unfixed, it was loaded 200 ms into the pause.
func TestWatchSlowWriter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("writers are followed on Linux only")
	}
	w := watch(t, 1, nil)
	text := version(2)
	half := text[:strings.Index(text, "  - key: end")]
	f, err := os.OpenFile(filepath.Join(w.dir, "w.yaml"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(half); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if _, err := f.WriteString(text[len(half):]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	waitUntil(t, "the new version", func() bool { return limit(w.s.Config()) == 2 })
	if got := w.installed(); strings.Contains(fmt.Sprint(got), "-1") {
		t.Fatalf("configs installed: %v (-1: the half-written file)", got)
	}
	if e := w.loads("error"); e != 0 {
		t.Fatalf("%v loads failed", e)
	}
}

// TestWatchOpenWriter: a file its writer has opened is not loaded until
// the writer closes it, even when the file changes with no write event: as
// when open(2) with O_TRUNC has emptied it and the writer is descheduled
// before the kernel queues the truncation's IN_MODIFY (the file then looks
// empty, and still, with nothing said of a write). Here the file is opened
// in the config directory and changed through a hard link in another, whose
// writes send the config directory no event. Unfixed (writes followed by
// IN_MODIFY alone), the empty file was reported as a failed load once it had
// been still for 200 ms.
func TestWatchOpenWriter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("writers are followed on Linux only")
	}
	w := watch(t, 1, nil)
	path := filepath.Join(w.dir, "w.yaml")
	link := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.Link(path, link); err != nil {
		t.Skip("no hard link across the test's directories:", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(link, 0); err != nil {
		t.Fatal(err)
	}
	// More than the check each second that finds the change, and settle.
	time.Sleep(1500 * time.Millisecond)
	if err := os.WriteFile(link, []byte(version(2)), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Close()
	waitUntil(t, "the new version", func() bool { return limit(w.s.Config()) == 2 })
	if got := w.installed(); strings.Contains(fmt.Sprint(got), "-1") {
		t.Fatalf("configs installed: %v (-1: the half-written file)", got)
	}
	if e := w.loads("error"); e != 0 {
		t.Fatalf("%v loads failed: the emptied file was loaded while open", e)
	}
}

// TestWatchRepeatedFailure: a config rewritten again and again with the
// same error is counted each time and logged once per logEvery, the line
// saying how many failures it stands for.
func TestWatchRepeatedFailure(t *testing.T) {
	l := &lines{}
	w := watchLogged(t, 1, nil, slog.New(l))
	path := filepath.Join(w.dir, "w.yaml")
	const bad = "domain: w\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
	const n = 4
	start := time.Now()
	for i := range n {
		// The same error each time; a comment longer each time makes each
		// write a change however coarse the file's modification time.
		if err := os.WriteFile(path, []byte(bad+"#"+strings.Repeat("x", i)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, fmt.Sprintf("failure %d counted", i+1), func() bool { return w.loads("error") == float64(i+1) })
	}
	elapsed := time.Since(start)
	got := l.of("rls: config not loaded; the previous one stays in use")
	if len(got) == 0 || got[0].occurrences != 1 || !strings.Contains(got[0].attrs["err"], "invalid rate limit unit 'fortnight'") {
		t.Fatalf("lines %+v: want the first failure logged at once, standing for itself", got)
	}
	if most := 1 + int(elapsed/logEvery); len(got) > most {
		t.Fatalf("%d failures in %v logged in %d lines, want at most %d (one per %v)", n, elapsed, len(got), most, logEvery)
	}
	if w.loads("success") != 0 {
		t.Fatalf("a bad config loaded")
	}
}

// TestWatchReadChanged: a load during which the file changed is thrown
// away and done again: the config installed is the file as it is after,
// never the one read before the change.
func TestWatchReadChanged(t *testing.T) {
	var once sync.Once
	w := watch(t, 1, func(dir string) (*Config, error) {
		c, err := LoadDir(dir)
		once.Do(func() { // the file changes while it is read
			time.Sleep(20 * time.Millisecond)
			os.WriteFile(filepath.Join(dir, "w.yaml"), []byte(version(3)), 0o644)
		})
		return c, err
	})
	path := filepath.Join(w.dir, "w.yaml")
	if err := os.WriteFile(path, []byte(version(2)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the third version", func() bool { return limit(w.s.Config()) == 3 })
	if got := w.installed(); fmt.Sprint(got) != "[1 3]" {
		t.Fatalf("configs installed: %v, want [1 3]", got)
	}
}

// waitUntil waits for ok, for 10 s at most: a bound for a slow machine, not
// a measure.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
