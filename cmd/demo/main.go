// Command demo serves a page that shows every limiter of the ratelimit
// module under the same traffic, side by side, from the module's own
// replies.
//
//	make demo                      # builds the module, serves http://127.0.0.1:8080
//	go run ./demo -addr 127.0.0.1:9000
//	go run ./demo -charts docs/charts  # writes one SVG per traffic pattern
//
// The simulation runs the real commands on a redis-server of its own at
// virtual instants (see Server), so a minute of traffic replays in well
// under a second; the live mode sends real commands at real time.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", envOr("DEMO_ADDR", "127.0.0.1:8080"), "the address to serve on (DEMO_ADDR)")
	bin := flag.String("redis-server", "redis-server", "the redis-server to start")
	module := flag.String("module", "build/ratelimit.so", "the module")
	shim := flag.String("clock", "build/clockshift.so", "the clock tool preloaded into the server")
	charts := flag.String("charts", "", "write one SVG per traffic pattern into this directory, and exit")
	flag.Parse()
	log.SetFlags(0)

	srv, err := StartServer(*bin, *module, *shim)
	if err != nil {
		log.Fatal("demo: ", err)
	}
	defer srv.Stop()
	d := NewDemo(srv)

	if *charts != "" {
		if err := writeCharts(d, *charts); err != nil {
			srv.Stop()
			log.Fatal("demo: ", err)
		}
		return
	}

	hs := &http.Server{Addr: *addr, Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(shut)
	}()
	log.Printf("demo: serving http://%s (redis-server with the module on %s); Ctrl-C stops", *addr, srv.Addr)
	if err := hs.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		srv.Stop()
		log.Fatal("demo: ", err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// writeCharts writes dir/<pattern>.svg for each pattern, with the default
// scenario.
func writeCharts(d *Demo, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range Patterns {
		res, err := d.Simulate(context.Background(), DefaultScenario(p))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		f, err := os.Create(filepath.Join(dir, p+".svg"))
		if err != nil {
			return err
		}
		if err := WriteSVG(f, res); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		log.Printf("demo: wrote %s", f.Name())
	}
	return nil
}
