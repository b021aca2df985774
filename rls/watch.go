package rls

import (
	"context"
	"fmt"
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
	cfg, err := LoadDir(dir)
	s.m.configLoad(err == nil)
	if err != nil {
		s.log.Error("rls: config not loaded; the previous one stays in use", "dir", dir, "err", err)
		return err
	}
	s.SetConfig(cfg)
	s.log.Info("rls: config loaded", "dir", dir, "files", cfg.Files(), "domains", cfg.Domains())
	return nil
}

// settle is how long a burst of file events is let run before a reload: an
// editor's save or a ConfigMap's symlink swap is several events.
const settle = 200 * time.Millisecond

// Watch reloads dir whenever a file in it, or dir itself, changes (a file
// written, created, removed or renamed; the directory swapped for another,
// as a symlink swap does), until ctx ends. A change is applied within
// about a fifth of a second of the last event of its burst. A symlink
// swapped higher up the path (the peer's RUNTIME_ROOT, a "current" link
// to a new directory) sends no event here: a check each second of what
// the path resolves to, and of the files' names, sizes and times, finds
// it.
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
	last := fingerprint(dir)
	tick := time.NewTicker(time.Second)
	go func() {
		defer w.Close()
		defer tick.Stop()
		var timer <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if fp := fingerprint(dir); fp != last && timer == nil {
					last = fp
					_ = s.Reload(dir)
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
				timer = time.After(settle)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				s.log.Warn("rls: watching the config", "dir", dir, "err", err)
			case <-timer:
				timer = nil
				last = fingerprint(dir)
				_ = s.Reload(dir)
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
