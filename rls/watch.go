package rls

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Reload loads dir again and, when it loads, makes it the service's
// config; when it does not, the config in use stays and the error is
// logged, counted (ratelimit_service_config_load{result="error"}) and
// returned.
func (s *Service) Reload(dir string) error {
	cfg, err := s.loadDir(dir)
	return s.apply(dir, cfg, err)
}

// apply makes cfg the config, or reports err.
func (s *Service) apply(dir string, cfg *Config, err error) error {
	s.m.configLoad(err == nil)
	if err != nil {
		s.log.Error("rls: config not loaded; the previous one stays in use", "dir", dir, "err", err)
		return err
	}
	s.SetConfig(cfg)
	s.log.Info("rls: config loaded", "dir", dir, "files", cfg.Files(), "domains", cfg.Domains())
	return nil
}

// When Watch reloads. A change (a file event, or a new fingerprint found
// by the check each second) is loaded once the directory has been still
// for settle, so that the several events of one save or one symlink swap
// make one reload. While changes keep coming (a config rewritten 20 to 50
// times a second never stays still for settle), it is loaded anyway once
// maxDelay has passed since the first: a reload is never much more than a
// second behind. Either way, a file still being written is waited for,
// never loaded half-written:
//
//   - on Linux, a file opened (inotify's IN_OPEN, queued before an O_TRUNC
//     empties it) and not yet closed (IN_CLOSE_WRITE, IN_CLOSE_NOWRITE) may
//     be being written, however long the writer pauses, for up to
//     writerWait after its last event; and a load during which a config
//     file was written, removed or renamed is thrown away and tried again
//     (see writers);
//   - everywhere, the files' names, sizes and modification times are taken
//     before and after they are read: a load during which they changed is
//     thrown away and tried again poll later;
//   - a config that does not load is reported (logged, counted) only once
//     its files have been still for settle: until then it may be a file
//     caught between its truncation and its write, and is tried again.
//
// While changes keep coming, a load is tried as soon as a writer closes a
// file (and every poll): a writer rewriting the file about every poll would
// otherwise keep meeting the tries in the middle of its writes.
const (
	settle     = 200 * time.Millisecond
	maxDelay   = time.Second
	poll       = 25 * time.Millisecond
	writerWait = 10 * time.Second
)

// Watch reloads dir whenever a file in it, or dir itself, changes (a file
// written, created, removed or renamed; the directory swapped for another,
// as a symlink swap does), until ctx ends: within about a fifth of a second
// of the last change, at most about a second after the first while changes
// keep coming, and never from a file still being written (see settle). A
// symlink swapped higher up the path (the peer's RUNTIME_ROOT, a "current"
// link to a new directory) sends no event here: a check each second of what
// the path resolves to, and of the files' names, sizes and times, finds it.
//
// A config that does not load is logged once per logEvery with the count of
// the failures the line stands for (a config rewritten with the same error
// again and again), and counted each time.
func (s *Service) Watch(ctx context.Context, dir string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		w.Close()
		return err
	}
	if err := w.Add(abs); err != nil {
		w.Close()
		return err
	}
	_ = w.Add(filepath.Dir(abs)) // the directory's own replacement; best effort
	real, _ := filepath.EvalSymlinks(abs)
	wr := newWriters(real)
	last := fingerprint(dir) // as last loaded
	tick := time.NewTicker(time.Second)
	failures := newRepeats(s.log, slog.LevelError, "rls: config not loaded; the previous one stays in use", logEvery)
	go func() {
		defer w.Close()
		defer wr.close()
		defer tick.Stop()
		defer failures.stop()
		var (
			pending       bool
			first, change time.Time // the first change not loaded yet, and the last seen
			seen          = last    // the fingerprint as last seen
			wake          <-chan time.Time
		)
		changed := func(now time.Time) {
			if !pending {
				pending, first = true, now
			}
			change = now
			if wake == nil {
				wake = time.After(poll)
			}
		}
		// try loads the config if it is time to, and tells whether it did
		// (or reported why it did not load).
		try := func() bool {
			now := time.Now()
			if r, err := filepath.EvalSymlinks(abs); err == nil {
				wr.follow(r) // the path may lead elsewhere now
			}
			if fp := fingerprint(dir); fp != seen {
				seen, change = fp, now
			}
			busy, gen := wr.state(now)
			still := now.Sub(change) >= settle
			if busy || !still && now.Sub(first) < maxDelay {
				return false
			}
			cfg, err := s.loadDir(dir)
			after := time.Now()
			busyAfter, genAfter := wr.state(after)
			if fp := fingerprint(dir); fp != seen || busyAfter || genAfter != gen {
				seen, change = fp, after // changed while read: again
				return false
			}
			if err != nil && !still {
				return false // maybe a file caught mid-write: report it once still
			}
			pending, last = false, seen
			s.m.configLoad(err == nil)
			if err != nil {
				failures.log(err.Error(), "dir", dir, "err", err)
				return true
			}
			s.SetConfig(cfg)
			s.log.Info("rls: config loaded", "dir", dir, "files", cfg.Files(), "domains", cfg.Domains())
			return true
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if fp := fingerprint(dir); !pending && fp != last {
					seen = fp
					changed(time.Now())
				}
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Dir(ev.Name) == filepath.Dir(abs) && ev.Name != abs {
					continue // a sibling of the directory
				}
				if ev.Name == abs {
					_ = w.Add(abs) // a new directory at the path: watch it
				}
				changed(time.Now())
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				s.log.Warn("rls: watching the config", "dir", dir, "err", err)
			case <-wr.closes():
				if pending && try() {
					wake = nil
				}
			case <-wake:
				wake = nil
				if !try() {
					wake = time.After(poll)
				}
			}
		}
	}()
	return nil
}

// fingerprint is what dir resolves to and its entries' names, sizes and
// modification times: it changes when the config may have.
func fingerprint(dir string) string {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "error: " + err.Error()
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	b.WriteString(real)
	for _, e := range entries {
		st, err := os.Stat(filepath.Join(real, e.Name()))
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "\n%s %d %d", e.Name(), st.Size(), st.ModTime().UnixNano())
	}
	return b.String()
}

// Health is /healthcheck: 200 "OK" while ready, 500 once stopping (so a
// load balancer stops sending before the gRPC server goes).
type Health struct{ down atomic.Bool }

// Stop makes the health check fail from now on.
func (h *Health) Stop() { h.down.Store(true) }

func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.down.Load() {
		http.Error(w, "stopping", http.StatusInternalServerError)
		return
	}
	w.Write([]byte("OK"))
}

// HTTPHandler serves /healthcheck and, from gatherer, /metrics in the
// Prometheus text format.
func HTTPHandler(h *Health, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthcheck", h)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	return mux
}
