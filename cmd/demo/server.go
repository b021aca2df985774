package main

import (
	"context"
	"embed"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

//go:embed page
var page embed.FS

// Demo is the page's server: its JSON endpoints and the page itself.
type Demo struct {
	srv *Server
	// mu runs one simulation at a time, and keeps live calls out while the
	// clock is stopped.
	mu   sync.Mutex
	runs atomic.Int64
}

func NewDemo(srv *Server) *Demo { return &Demo{srv: srv} }

// Simulate runs a scenario (see the package Simulate) under keys of its own.
func (d *Demo) Simulate(ctx context.Context, s Scenario) (*Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.srv.C
	if s.withDefaults().Engine == "lua" {
		c = d.srv.Lua
	}
	return Simulate(ctx, c, d.srv.RDB, d.srv.SetClock, fmt.Sprintf("demo:run%d:", d.runs.Add(1)), s)
}

// SimulateResponse is /api/simulate's reply: the result and its chart.
type SimulateResponse struct {
	*Result
	SVG string `json:"svg"`
}

// LiveRequest asks for count calls of one algorithm at real time.
type LiveRequest struct {
	Command string  `json:"command"`
	Count   int     `json:"count"`
	Limit   int64   `json:"limit"`
	Window  int     `json:"window"`
	Hold    float64 `json:"hold"`
	Burst   int64   `json:"burst"` // as Scenario's: 0 is the limit
	Lease   int64   `json:"lease"` // as Scenario's: 0 is the hold rounded up, plus 1 s
}

// Handler serves the page and its endpoints:
//
//	GET  /                 the page
//	GET  /api/defaults     the default scenario, the patterns, the algorithms
//	POST /api/simulate     a Scenario -> SimulateResponse
//	GET  /api/chart.svg    the chart of the scenario in the query (pattern, rate, ..., retry, clients, keys, engine, burst, lease, compare)
//	GET  /api/result.csv   that scenario's replies, one row per request (see WriteCSV)
//	POST /api/live         a LiveRequest -> the replies, at real time
//	POST /api/live/reset   forget the live keys
func (d *Demo) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(mustSub(page, "page")))
	mux.HandleFunc("GET /api/defaults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"scenario": DefaultScenario("steady"), "patterns": Patterns, "algorithms": Algorithms,
			"retries": Retries, "keys": KeyModes, "engines": Engines, "max_clients": MaxClients, "noisy_factor": NoisyFactor,
			"max_burst": MaxBurst, "max_lease": MaxLease,
		})
	})
	mux.HandleFunc("POST /api/simulate", func(w http.ResponseWriter, r *http.Request) {
		var s Scenario
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&s); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the body must be a scenario in JSON: " + err.Error()})
			return
		}
		d.simulate(w, r, s.withDefaults(), "json")
	})
	mux.HandleFunc("GET /api/chart.svg", func(w http.ResponseWriter, r *http.Request) {
		s, err := scenarioFromQuery(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		d.simulate(w, r, s, "svg")
	})
	mux.HandleFunc("GET /api/result.csv", func(w http.ResponseWriter, r *http.Request) {
		s, err := scenarioFromQuery(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		d.simulate(w, r, s, "csv")
	})
	mux.HandleFunc("POST /api/live", d.live)
	mux.HandleFunc("POST /api/live/reset", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		keys, _ := d.srv.RDB.Keys(r.Context(), "demo:live:*").Result()
		if len(keys) > 0 {
			d.srv.RDB.Del(r.Context(), keys...)
		}
		writeJSON(w, http.StatusOK, map[string]int{"deleted": len(keys)})
	})
	return mux
}

// simulate runs s and answers its result as format says: "json" (the
// result and its chart), "svg" (the chart) or "csv" (a row per decision).
func (d *Demo) simulate(w http.ResponseWriter, r *http.Request, s Scenario, format string) {
	if err := s.Check(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	res, err := d.Simulate(r.Context(), s)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	var b strings.Builder
	switch format {
	case "csv":
		_ = WriteCSV(&b, res)
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="ratelimit-%s.csv"`, s.Pattern))
		_, _ = w.Write([]byte(b.String()))
		return
	case "svg":
		_ = WriteSVG(&b, res)
		w.Header().Set("Content-Type", "image/svg+xml")
		_, _ = w.Write([]byte(b.String()))
		return
	}
	_ = WriteSVG(&b, res)
	writeJSON(w, http.StatusOK, SimulateResponse{Result: res, SVG: b.String()})
}

// scenarioFromQuery reads a scenario from a query: the default's values
// for what it leaves out.
func scenarioFromQuery(r *http.Request) (Scenario, error) {
	q := r.URL.Query()
	s := DefaultScenario(q.Get("pattern"))
	if s.Pattern == "" {
		s.Pattern = "steady"
	}
	for name, p := range map[string]*string{"retry": &s.Retry, "keys": &s.Keys, "engine": &s.Engine, "compare": &s.Compare} {
		if q.Has(name) {
			*p = q.Get(name)
		}
	}
	for name, p := range map[string]any{"rate": &s.Rate, "duration": &s.Duration, "limit": &s.Limit,
		"window": &s.Window, "hold": &s.Hold, "seed": &s.Seed, "clients": &s.Clients, "burst": &s.Burst, "lease": &s.Lease} {
		if v := q.Get(name); v != "" {
			if _, err := fmt.Sscan(v, p); err != nil {
				return s, fmt.Errorf("%s: %q is not a number", name, v)
			}
		}
	}
	return s, s.Check()
}

// CSVHeader is the first row of WriteCSV's table.
var CSVHeader = []string{"algorithm", "client", "arrival_ms", "decision", "remaining", "retry_after_ms", "departure_ms"}

// WriteCSV writes one row per request each algorithm decided, retries
// included, algorithm by algorithm in time order: its name, the client
// (1 the first, as the page numbers them), the arrival in ms from the
// start, admitted or refused, remaining and retry_after (ms, -1: none)
// as the module replied, and for the shaper's admitted requests the
// departure (arrival + the reply's delay), empty otherwise.
func WriteCSV(w io.Writer, res *Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader)
	for _, se := range res.Series {
		for _, r := range se.Replies {
			decision, departure := "admitted", ""
			if r.Limited {
				decision = "refused"
			} else if se.Drawn == "departure" {
				departure = fmt.Sprint(r.At + max(r.ResetAfter, 0))
			}
			_ = cw.Write([]string{se.Name, fmt.Sprint(r.Client + 1), fmt.Sprint(r.At), decision,
				fmt.Sprint(r.Remaining), fmt.Sprint(r.RetryAfter), departure})
		}
	}
	cw.Flush()
	return cw.Error()
}

// live sends the request's calls at real time, one after the other, and
// replies with the module's answers. A concurrency slot is released when
// its hold ends.
func (d *Demo) live(w http.ResponseWriter, r *http.Request) {
	var q LiveRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<12)).Decode(&q); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the body must be a live request in JSON: " + err.Error()})
		return
	}
	s := Scenario{Pattern: "steady", Rate: 1, Duration: 1, Limit: q.Limit, Window: q.Window, Hold: q.Hold, Burst: q.Burst, Lease: q.Lease}.withDefaults()
	var algo *Algorithm
	for i := range Algorithms {
		if Algorithms[i].Command == q.Command {
			algo = &Algorithms[i]
		}
	}
	switch err := s.Check(); {
	case algo == nil:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("command must be one of the algorithms' (%s)", commandNames())})
		return
	case q.Count < 1 || q.Count > 100:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "count must be 1 to 100"})
		return
	case err != nil:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	// Keys per algorithm and parameters, so that changing them starts afresh.
	key := fmt.Sprintf("demo:live:%s:%d:%d:%g:%d:%d", algo.Command, s.Limit, s.Window, s.Hold, s.burst(), s.lease())
	d.mu.Lock()
	defer d.mu.Unlock()
	replies := make([]Reply, 0, q.Count)
	for range q.Count {
		id := fmt.Sprint("live", d.runs.Add(1))
		b := d.srv.C.Batch()
		call := s.add(b, *algo, key, id)
		b.Exec(r.Context())
		res, err := call.Result()
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": fmt.Sprintf("%s: %v", algo.Command, err)})
			return
		}
		rep := reply(time.Now().UnixMilli(), res)
		replies = append(replies, rep)
		if algo.Command == "CONC.ACQUIRE" && !rep.Limited {
			time.AfterFunc(time.Duration(s.Hold*float64(time.Second)), func() {
				d.srv.C.Release(context.Background(), key, id)
			})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"command": algo.Command, "key": key, "replies": replies})
}

func commandNames() string {
	var names []string
	for _, a := range Algorithms {
		names = append(names, a.Command)
	}
	return strings.Join(names, ", ")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// mustSub is the embedded directory dir.
func mustSub(f embed.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return sub
}
