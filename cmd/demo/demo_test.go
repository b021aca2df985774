package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests run the demo against a real redis-server with the module and
// the clock tool, as make demo does (make test builds both). Where either
// is missing (`go test ./...` on a bare machine) they skip, saying why;
// with RATELIMIT_FULL_TESTS set (make test sets it) they fail instead.
var (
	demo    *Demo
	missing string // why the tests cannot run here, or ""
)

// full reports that every test must run: nothing may be skipped.
var full = os.Getenv("RATELIMIT_FULL_TESTS") != ""

func TestMain(m *testing.M) {
	srv, err := startServer()
	if err != nil && full {
		fmt.Fprintln(os.Stderr, "demo tests:", err)
		os.Exit(1)
	}
	if err != nil {
		missing = err.Error()
	} else {
		demo = NewDemo(srv)
	}
	code := m.Run()
	if srv != nil {
		srv.Stop()
	}
	os.Exit(code)
}

func startServer() (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("no redis-server: install Debian's (make test does)")
	}
	return StartServer("redis-server", "../../build/ratelimit.so", "../../build/clockshift.so")
}

// needServer skips a test that needs the demo's server where there is none.
func needServer(t *testing.T) {
	t.Helper()
	if demo == nil {
		t.Skip("the demo's server cannot start here: " + missing)
	}
}

func post(t *testing.T, h http.Handler, path string, body any) (int, map[string]any, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	if s, ok := body.(string); ok {
		b = []byte(s)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", path, bytes.NewReader(b)))
	var m map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return rec.Code, m, rec.Body.Bytes()
}

func simulate(t *testing.T, s Scenario) SimulateResponse {
	t.Helper()
	code, m, raw := post(t, demo.Handler(), "/api/simulate", s)
	if code != http.StatusOK {
		t.Fatalf("simulate %+v: %d %v", s, code, m)
	}
	var r SimulateResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Every pattern: each algorithm answers every request, the buckets add up
// to the totals, and a second run replays the first exactly (the clock is
// virtual, so nothing depends on when the test runs).
func TestSimulate(t *testing.T) {
	needServer(t)
	for _, p := range Patterns {
		s := DefaultScenario(p)
		a, b := simulate(t, s), simulate(t, s)
		if len(a.Series) != len(Algorithms) || a.Requests == 0 {
			t.Fatalf("%s: %d series, %d requests", p, len(a.Series), a.Requests)
		}
		offered := 0
		for _, n := range a.Offered {
			offered += n
		}
		if offered != a.Requests {
			t.Fatalf("%s: %d offered in buckets, %d requests", p, offered, a.Requests)
		}
		for _, se := range a.Series {
			adm, ref := 0, 0
			for i := range se.Admitted {
				adm, ref = adm+se.Admitted[i], ref+se.Refused[i]
			}
			if se.Total != [2]int{adm, ref} || adm+ref != a.Requests || len(se.Replies) != a.Requests {
				t.Fatalf("%s %s: totals %v, buckets %d/%d, %d replies, %d requests", p, se.Name, se.Total, adm, ref, len(se.Replies), a.Requests)
			}
			if se.Bound > 0 && int64(se.MostIn) > se.Bound {
				t.Fatalf("%s %s: %d admitted in one window, the promise is %d (%s)", p, se.Name, se.MostIn, se.Bound, se.Expected)
			}
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Fatalf("%s: two runs of one scenario differ", p)
		}
	}
}

// Clients that retry, and several clients: every reply is counted once,
// the retries are what the replies say, none comes after the traffic's
// end or beyond MaxRetries, the clients' counts add up to the totals, the
// promises hold (on each key), and a second run replays the first.
func TestSimulateClosedLoop(t *testing.T) {
	needServer(t)
	for _, s := range []Scenario{
		{Pattern: "boundary", Rate: 2, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Retry: "nojitter", Clients: 1, Keys: "shared"},
		{Pattern: "random", Rate: 1.5, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 7, Retry: "full", Clients: 4, Keys: "per-client"},
		{Pattern: "bursts", Rate: 1, Duration: 45, Limit: 8, Window: 5, Hold: 2, Seed: 2, Retry: "spread", Clients: 3, Keys: "shared"},
		{Pattern: "onoff", Rate: 4, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Retry: "nojitter", Clients: 2, Keys: "per-client"},
	} {
		a, b := simulate(t, s), simulate(t, s)
		name := fmt.Sprintf("%s/%s/%d %s", s.Pattern, s.Retry, s.Clients, s.Keys)
		if a.Scenario != s.withDefaults() || a.Scenario.Engine != "module" || len(a.Series) != len(Algorithms) || a.Requests == 0 {
			t.Fatalf("%s: scenario %+v, %d series, %d requests", name, a.Scenario, len(a.Series), a.Requests)
		}
		retried := 0
		for _, se := range a.Series {
			adm, ref, off := 0, 0, 0
			for i := range se.Admitted {
				adm, ref, off = adm+se.Admitted[i], ref+se.Refused[i], off+se.Offered[i]
			}
			n := len(se.Replies)
			if se.Total != [2]int{adm, ref} || adm+ref != n || off != n || n != a.Requests+se.Retries || n > MaxRequests {
				t.Fatalf("%s %s: totals %v, buckets %d/%d/%d, %d replies, %d requests + %d retries", name, se.Name, se.Total, adm, ref, off, n, a.Requests, se.Retries)
			}
			for _, r := range se.Replies {
				if r.Try > MaxRetries || r.At >= int64(s.Duration)*1000 || r.Client >= s.Clients {
					t.Fatalf("%s %s: a reply %+v (at most %d retries, before %d s, %d clients)", name, se.Name, r, MaxRetries, s.Duration, s.Clients)
				}
			}
			if se.Bound > 0 && int64(se.MostIn) > se.Bound {
				t.Fatalf("%s %s: %d admitted in one window, the promise is %d (%s)", name, se.Name, se.MostIn, se.Bound, se.Expected)
			}
			if s.Clients > 1 {
				demand, served := 0, 0
				for _, c := range se.Clients {
					demand, served = demand+c.Offered, served+c.Admitted
				}
				if len(se.Clients) != s.Clients || demand != a.Requests || served != se.Total[0] || se.Jain < 1/float64(s.Clients) || se.Jain > 1 {
					t.Fatalf("%s %s: clients %+v, Jain %v; %d requests, %d admitted", name, se.Name, se.Clients, se.Jain, a.Requests, se.Total[0])
				}
			}
			retried += se.Retries
		}
		if retried == 0 {
			t.Fatalf("%s: no algorithm's clients retried", name)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Fatalf("%s: two runs of one scenario differ", name)
		}
	}
}

// The boundary attack shows what the README's table promises: the fixed
// window admits twice its limit across a boundary, the sliding log exactly
// its limit, GCRA and the token bucket their burst and then their rate.
func TestBoundaryAttack(t *testing.T) {
	needServer(t)
	r := simulate(t, DefaultScenario("boundary"))
	most := map[string]int{}
	for _, se := range r.Series {
		most[se.Command] = se.MostIn
	}
	L := int(r.Scenario.Limit)
	if most["FW.HIT"] != 2*L || most["SL.HIT"] != L || most["GCRA.THROTTLE"] != L || most["TB.TAKE"] != L {
		t.Fatalf("most admitted in a window: %v (limit %d)", most, L)
	}
	if sw := most["SW.HIT"]; sw <= L || sw >= 2*L {
		t.Fatalf("the sliding window counter admitted %d in a window, want between the limit %d and twice it", sw, L)
	}
}

// admittedAt is how many requests an algorithm admitted, by the instant
// (ms) they arrived at.
func admittedAt(se Series) map[int64]int {
	n := map[int64]int{}
	for _, r := range se.Replies {
		if !r.Limited {
			n[r.At]++
		}
	}
	return n
}

// Burst: "10 tokens refilling 5 a second" (limit 5 per 1 s, burst 10),
// under bursts of 20 at each whole second. The token bucket and GCRA admit
// the burst at t = 0, then the limit at each later second (the refill),
// where with burst = limit they admit the limit at t = 0 too; the shaper
// lets one go and burst − 1 wait, the last W / limit × (burst − 1) later.
// Burst changes nothing else: the windows, the log and the concurrency
// limiter reply alike, and burst = limit replies as leaving it out.
func TestBurst(t *testing.T) {
	needServer(t)
	s := Scenario{Pattern: "bursts", Rate: 20, Duration: 4, Limit: 5, Window: 1, Hold: 0.5, Seed: 1, Burst: 10}
	big := simulate(t, s)
	s.Burst = s.Limit
	same := simulate(t, s)
	s.Burst = 0
	def := simulate(t, s)
	for i := range def.Series {
		jd, _ := json.Marshal(def.Series[i])
		js, _ := json.Marshal(same.Series[i])
		if !bytes.Equal(jd, js) {
			t.Fatalf("%s: burst = limit replies otherwise than burst left out", def.Series[i].Name)
		}
	}
	for i, se := range big.Series {
		switch se.Command {
		case "GCRA.THROTTLE", "TB.TAKE":
			for _, c := range []struct {
				r     SimulateResponse
				burst int64
			}{{big, 10}, {def, s.Limit}} {
				n := admittedAt(c.r.Series[i])
				for sec := int64(0); sec < int64(s.Duration); sec++ {
					want := int(s.Limit) // the refill: limit per window
					if sec == 0 {
						want = int(c.burst)
					}
					if n[sec*1000] != want {
						t.Fatalf("%s, burst %d: %d admitted at %d s of 20 sent, want %d (admitted by instant: %v)", se.Name, c.burst, n[sec*1000], sec, want, n)
					}
				}
				if b := c.r.Series[i].Bound; int64(c.r.Series[i].MostIn) > b || b != c.burst+s.Limit {
					t.Fatalf("%s, burst %d: %d in a window, the promise %d", se.Name, c.burst, c.r.Series[i].MostIn, b)
				}
			}
			t.Logf("%s: admitted by instant, burst 10: %v; burst left out (5): %v", se.Name, admittedAt(se), admittedAt(def.Series[i]))
		case "LB.ENQUEUE":
			for _, c := range []struct {
				r     SimulateResponse
				burst int64
			}{{big, 10}, {def, s.Limit}} {
				var delays []int64
				for _, r := range c.r.Series[i].Replies {
					if r.At == 0 && !r.Limited {
						delays = append(delays, r.ResetAfter)
					}
				}
				last := 1000 * int64(s.Window) * (c.burst - 1) / s.Limit
				if int64(len(delays)) != c.burst || delays[0] != 0 || abs(delays[len(delays)-1]-last) > 1 {
					t.Fatalf("shaper, burst %d: at t = 0 delays %v, want %d of them, from 0 to %d ms", c.burst, delays, c.burst, last)
				}
				t.Logf("shaper, burst %d: %d admitted at t = 0, the last to go %d ms later", c.burst, len(delays), delays[len(delays)-1])
			}
		default:
			jb, _ := json.Marshal(se.Replies)
			jd, _ := json.Marshal(def.Series[i].Replies)
			if !bytes.Equal(jb, jd) {
				t.Fatalf("%s: burst changed its replies", se.Name)
			}
		}
	}
}

func abs(n int64) int64 { return max(n, -n) }

// TestBurstLua: the Lua library takes the burst as the module does (the
// bursts are on whole ms, so the replies are byte-identical).
func TestBurstLua(t *testing.T) {
	needServer(t)
	s := Scenario{Pattern: "bursts", Rate: 20, Duration: 4, Limit: 5, Window: 1, Hold: 0.5, Seed: 1, Burst: 10, Lease: 1}
	m := simulate(t, s)
	s.Engine = "lua"
	l := simulate(t, s)
	for i := range m.Series {
		jm, _ := json.Marshal(m.Series[i].Replies)
		jl, _ := json.Marshal(l.Series[i].Replies)
		if !bytes.Equal(jm, jl) {
			t.Fatalf("burst 10, lease 1 s, %s: the module's replies differ from the library's:\n%s\n%s", m.Series[i].Name, jm, jl)
		}
	}
}

// holdersByHold is the most admitted requests of a concurrency run that
// still worked at one instant: each from its arrival for hold ms.
func holdersByHold(se Series, hold int64) int {
	most := 0
	for _, a := range se.Replies {
		if a.Limited {
			continue
		}
		n := 0
		for _, b := range se.Replies {
			if !b.Limited && b.At <= a.At && a.At < b.At+hold {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// Lease: the concurrency limiter (limit 3, each request working 3 s,
// steady 2/s) with the default lease (4 s) never has more than 3 at work
// at once; with a lease of 1 s a slot lapses 1 s after it was taken, while
// its holder still works, so the replies admit more than 3 at work at once,
// though the module never reports more than 3 holders.
func TestLease(t *testing.T) {
	needServer(t)
	s := Scenario{Pattern: "steady", Rate: 2, Duration: 20, Limit: 3, Window: 10, Hold: 3, Seed: 1}
	def := seriesOf(t, simulate(t, s), "CONC.ACQUIRE")
	s.Lease = 1
	short := seriesOf(t, simulate(t, s), "CONC.ACQUIRE")
	hold := int64(s.Hold * 1000)
	d, sh := holdersByHold(def, hold), holdersByHold(short, hold)
	t.Logf("at work at once: %d with the default lease (%d admitted), %d with a 1 s lease (%d admitted)", d, def.Total[0], sh, short.Total[0])
	if d > int(s.Limit) || d == 0 {
		t.Fatalf("default lease: %d at work at once, the limit is %d", d, s.Limit)
	}
	if sh <= int(s.Limit) || short.Total[0] <= def.Total[0] {
		t.Fatalf("a 1 s lease under a 3 s hold: %d at work at once (limit %d), %d admitted against %d; want slots to lapse", sh, s.Limit, short.Total[0], def.Total[0])
	}
	for _, r := range short.Replies {
		if r.Limit-r.Remaining > s.Limit || r.Limit != s.Limit {
			t.Fatalf("a 1 s lease: the module reports %d holders of %d at %d ms", r.Limit-r.Remaining, r.Limit, r.At)
		}
	}
}

func TestBadInput(t *testing.T) {
	needServer(t)
	h := demo.Handler()
	for _, c := range []struct {
		path string
		body any
		want string
	}{
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 0, Duration: 60, Limit: 10, Window: 10, Hold: 1}, "rate"},
		{"/api/simulate", Scenario{Pattern: "sideways", Rate: 1, Duration: 60, Limit: 10, Window: 10, Hold: 1}, "pattern"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 200, Duration: 600, Limit: 10, Window: 10, Hold: 1}, "20000"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 60, Limit: 10, Window: 10, Hold: 1, Retry: "sometimes"}, "retry must be one of [none nojitter full spread]"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 60, Limit: 10, Window: 10, Hold: 1, Clients: 21}, "clients must be 1 to 20"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 60, Limit: 10, Window: 10, Hold: 1, Clients: -1}, "clients must be 1 to 20"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 60, Limit: 10, Window: 10, Hold: 1, Keys: "mine"}, "keys must be one of [shared per-client]"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 20, Duration: 600, Limit: 10, Window: 10, Hold: 1, Clients: 2}, "the noisy client sends 5 × the rate"},
		{"/api/simulate", Scenario{Pattern: "boundary", Rate: 1, Duration: 600, Limit: 10000, Window: 1, Hold: 1}, "boundary attack sends 2 × limit at each of its 300 window edges"},
		{"/api/simulate", Scenario{Pattern: "bursts", Rate: 0.01, Duration: 600, Limit: 10, Window: 1, Hold: 1, Clients: 20}, ""}, // 600 bursts of 1 from each client: 12000, allowed
		{"/api/simulate", Scenario{Pattern: "bursts", Rate: 1.5, Duration: 600, Limit: 10, Window: 1, Hold: 1, Clients: 15}, "the bursts pattern makes 21600 requests here"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 60, Limit: 10, Window: 10, Hold: 1, Burst: 10001}, "burst must be 1 to 10000"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 60, Limit: 10, Window: 10, Hold: 1, Burst: -1}, "burst must be 1 to 10000"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 60, Limit: 10, Window: 10, Hold: 1, Lease: 3601}, "lease must be 1 to 3600 seconds"},
		{"/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 60, Limit: 10, Window: 10, Hold: 1, Burst: 10000, Lease: 3600}, ""},
		{"/api/simulate", "{not json", "JSON"},
		{"/api/live", LiveRequest{Command: "DEL", Count: 1, Limit: 1, Window: 1, Hold: 1}, "GCRA.THROTTLE"},
		{"/api/live", LiveRequest{Command: "FW.HIT", Count: 0, Limit: 1, Window: 1, Hold: 1}, "count"},
	} {
		if c.want == "" {
			if err := c.body.(Scenario).withDefaults().Check(); err != nil {
				t.Errorf("%v: %v, want no error", c.body, err)
			}
			continue
		}
		code, m, _ := post(t, h, c.path, c.body)
		if e, _ := m["error"].(string); code != http.StatusBadRequest || !strings.Contains(e, c.want) {
			t.Errorf("%s %v: %d %v, want 400 naming %q", c.path, c.body, code, m, c.want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/chart.svg?rate=x", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "rate") {
		t.Errorf("chart with rate=x: %d %s", rec.Code, rec.Body)
	}
	for q, want := range map[string]string{"clients=x": `clients: \"x\" is not a number`, "retry=": "retry must be one of", "keys=per-key": "keys must be one of",
		"burst=x": `burst: \"x\" is not a number`, "burst=20000": "burst must be 1 to 10000", "lease=-2": "lease must be 1 to 3600"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/chart.svg?"+q, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("chart with %s: %d %s, want 400 saying %s", q, rec.Code, rec.Body, want)
		}
	}
}

// The chart carries the numbers the JSON has, and the server's clock runs
// again after a simulation.
func TestChart(t *testing.T) {
	needServer(t)
	r := simulate(t, DefaultScenario("bursts"))
	rec := httptest.NewRecorder()
	demo.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/chart.svg?pattern=bursts", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "image/svg+xml" {
		t.Fatalf("chart: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	got := chartNumbers(rec.Body.String())
	if want := seriesNumbers(r.Series); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("chart shows %v, the JSON has %v", got, want)
	}
	tm, err := demo.srv.RDB.Time(context.Background()).Result()
	if err != nil || time.Since(tm).Abs() > time.Minute {
		t.Fatalf("the server's clock reads %v after a simulation (%v)", tm, err)
	}
}

var groupRE = regexp.MustCompile(`data-algorithm="([^"]+)" data-admitted="(\d+)" data-refused="(\d+)" data-most="(\d+)" data-pass="([\d.]+)"`)

// chartNumbers reads each algorithm's totals, most in a window and pass
// rate from a chart's attributes.
func chartNumbers(svg string) [][5]string {
	var out [][5]string
	for _, m := range groupRE.FindAllStringSubmatch(svg, -1) {
		out = append(out, [5]string{m[1], m[2], m[3], m[4], m[5]})
	}
	return out
}

func seriesNumbers(series []Series) [][5]string {
	var out [][5]string
	for _, se := range series {
		out = append(out, [5]string{se.Name, strconv.Itoa(se.Total[0]), strconv.Itoa(se.Total[1]), strconv.Itoa(se.MostIn),
			strconv.FormatFloat(se.PassRate, 'f', 1, 64)})
	}
	return out
}

// Live calls run at real time: 10 at once are admitted, the 11th refused;
// a concurrency slot is given back when its hold ends.
func TestLive(t *testing.T) {
	needServer(t)
	h := demo.Handler()
	post(t, h, "/api/live/reset", nil)
	code, m, _ := post(t, h, "/api/live", LiveRequest{Command: "GCRA.THROTTLE", Count: 11, Limit: 10, Window: 60, Hold: 1})
	replies, _ := m["replies"].([]any)
	if code != http.StatusOK || len(replies) != 11 {
		t.Fatalf("live: %d %v", code, m)
	}
	for i, r := range replies {
		if limited := r.(map[string]any)["limited"].(bool); limited != (i == 10) {
			t.Fatalf("live call %d: %v", i, r)
		}
	}
	_, m, _ = post(t, h, "/api/live", LiveRequest{Command: "CONC.ACQUIRE", Count: 2, Limit: 1, Window: 1, Hold: 0.2})
	replies = m["replies"].([]any)
	if replies[0].(map[string]any)["limited"].(bool) || !replies[1].(map[string]any)["limited"].(bool) {
		t.Fatalf("concurrency 1: %v", replies)
	}
	time.Sleep(400 * time.Millisecond)
	_, m, _ = post(t, h, "/api/live", LiveRequest{Command: "CONC.ACQUIRE", Count: 1, Limit: 1, Window: 1, Hold: 0.2})
	if m["replies"].([]any)[0].(map[string]any)["limited"].(bool) {
		t.Fatalf("the slot was not given back after its hold: %v", m)
	}
}

// browser is the headless browser the page tests run: Debian's chromium
// where it is installed.
func browser(t *testing.T) string {
	t.Helper()
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	if full {
		t.Fatal("no browser: install Debian's chromium (make chromium)")
	}
	t.Skip("no browser: install Debian's chromium (make test does: make chromium)")
	return ""
}

// pageServer serves the demo, and at /test/harness.html a page of the
// test's that drives the demo's page in a frame (see harness).
func pageServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/", demo.Handler())
	mux.HandleFunc("GET /test/harness.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(harness))
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

// screenshots is the directory the browser tests save screenshots of what
// they check into, from DEMO_SCREENSHOTS (make screenshots: docs), or "".
var screenshots = os.Getenv("DEMO_SCREENSHOTS")

// dumpDOM loads url in headless Chromium and returns its DOM once the
// page has settled: virtual time runs budget ms with nothing to wait for
// (time spent waiting for the server does not count), so a busy machine
// makes it slower, not different. With DEMO_SCREENSHOTS set and a name,
// the same run saves the window, 1100 px wide and height tall, as the DOM
// is dumped, into simulator-<name>.png there.
func dumpDOM(t *testing.T, url string, budget int, name string, height int) string {
	t.Helper()
	b := browser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir=" + t.TempDir(), fmt.Sprintf("--virtual-time-budget=%d", budget)}
	png := ""
	if screenshots != "" && name != "" {
		if err := os.MkdirAll(screenshots, 0o755); err != nil {
			t.Fatal(err)
		}
		png = filepath.Join(screenshots, "simulator-"+name+".png")
		args = append(args, "--hide-scrollbars", "--force-device-scale-factor=1", fmt.Sprintf("--window-size=1100,%d", height), "--screenshot="+png)
	}
	cmd := exec.CommandContext(ctx, b, append(args, "--dump-dom", url)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", b, url, err, errOut.String())
	}
	if png != "" {
		if data, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
			t.Fatalf("no screenshot %s (%v):\n%s", png, err, errOut.String())
		}
		t.Logf("screenshot: %s", png)
	}
	return out.String()
}

var rowRE = regexp.MustCompile(`<tr data-algorithm="([^"]+)"><td>[^<]*</td><td class="num admitted" data-field="admitted">(\d+)</td><td class="num refused" data-field="refused">(\d+)</td><td class="num" data-field="pass">([\d.]+) %</td><td class="num" data-field="most">(\d+)</td>`)

// tableNumbers reads the page's table as chartNumbers reads the chart.
func tableNumbers(dom string) [][5]string {
	var rows [][5]string
	for _, m := range rowRE.FindAllStringSubmatch(dom, -1) {
		rows = append(rows, [5]string{m[1], m[2], m[3], m[5], m[4]})
	}
	return rows
}

// barsRE is a bucket's bar of admitted requests in a chart.
var barsRE = regexp.MustCompile(`class="admitted" data-bucket="(\d+)" data-n="(\d+)"`)

// rowBars is the admitted bars of one algorithm's row of a chart, as
// bucket counts.
func rowBars(t *testing.T, svg, name string, buckets int) []int {
	t.Helper()
	at := strings.Index(svg, `data-algorithm="`+name+`"`)
	if at < 0 {
		t.Fatalf("the chart has no row for %s", name)
	}
	row := svg[at:]
	row = row[:strings.Index(row, "</g>")]
	bars := make([]int, buckets)
	for _, m := range barsRE.FindAllStringSubmatch(row, -1) {
		i, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		if i >= buckets {
			t.Fatalf("%s: a bar in bucket %d of %d", name, i, buckets)
		}
		bars[i] = n
	}
	return bars
}

func seriesOf(t *testing.T, r SimulateResponse, command string) Series {
	t.Helper()
	for _, se := range r.Series {
		if se.Command == command {
			return se
		}
	}
	t.Fatalf("no %s in the result", command)
	return Series{}
}

// The shaper's output is smooth: each admitted request departs at its
// arrival plus the delay of its reply, consecutive departures are
// W / limit apart (to the ms the replies carry), and that is what its row
// counts, so it differs from GCRA's, which counts arrivals.
func TestShaperDepartures(t *testing.T) {
	needServer(t)
	for _, s := range []Scenario{DefaultScenario("steady"), DefaultScenario("bursts"),
		{Pattern: "random", Rate: 7.3, Duration: 120, Limit: 7, Window: 3, Hold: 1, Seed: 3}} {
		r := simulate(t, s)
		lb, gcra := seriesOf(t, r, "LB.ENQUEUE"), seriesOf(t, r, "GCRA.THROTTLE")
		if lb.Drawn != "departure" || gcra.Drawn != "arrival" {
			t.Fatalf("%s: the shaper drawn at %q, GCRA at %q", s.Pattern, lb.Drawn, gcra.Drawn)
		}
		var want []int64
		for _, rep := range lb.Replies {
			if !rep.Limited {
				want = append(want, rep.At+rep.ResetAfter)
			}
		}
		if fmt.Sprint(lb.Departures) != fmt.Sprint(want) || len(want) != lb.Total[0] {
			t.Fatalf("%s: departures %v, the replies say %v", s.Pattern, lb.Departures, want)
		}
		gap := float64(s.Window) * 1000 / float64(s.Limit) // ms between departures at the shaper's rate
		for i := 1; i < len(want); i++ {
			if d := float64(want[i] - want[i-1]); d < gap-1 {
				t.Fatalf("%s: departures %d and %d are %g ms apart, the rate allows one every %g ms", s.Pattern, i-1, i, d, gap)
			}
		}
		if last := want[len(want)-1]; r.SpanMs <= last || r.SpanMs < int64(s.Duration)*1000 {
			t.Fatalf("%s: the time axis ends at %d ms, the last departure is at %d", s.Pattern, r.SpanMs, last)
		}
		if lb.MostIn > int(s.Limit) {
			t.Fatalf("%s: %d departures in one window of %d s, the limit is %d", s.Pattern, lb.MostIn, s.Window, s.Limit)
		}
		if fmt.Sprint(lb.Admitted) == fmt.Sprint(gcra.Admitted) {
			t.Fatalf("%s: the shaper's row is GCRA's: %v", s.Pattern, lb.Admitted)
		}
	}
}

// mostIn counts instants in half-open intervals [t, t+w).
func TestMostIn(t *testing.T) {
	for _, c := range []struct {
		at   []int64
		w    int64
		want int
	}{
		{nil, 1000, 0},
		{[]int64{5}, 1000, 1},
		{[]int64{0, 0, 0}, 1, 3},                                // one instant, many requests
		{[]int64{0, 999}, 1000, 2},                              // inside one window
		{[]int64{0, 1000}, 1000, 1},                             // exactly W apart: never together
		{[]int64{0, 1000, 2000}, 1001, 2},                       // a step more than W: two at a time
		{[]int64{0, 500, 1000, 1500, 2000}, 1000, 2},            // steady at twice per W
		{[]int64{0, 100, 200, 5000, 5001, 5002, 5003}, 1000, 4}, // the later burst is the larger
		{[]int64{9950, 9950, 10050, 10050}, 10000, 4},           // a boundary attack: both sides of a window's edge
		{[]int64{0, 0, 10000, 10000}, 10000, 2},                 // bursts a window apart
	} {
		if got := mostIn(c.at, c.w); got != c.want {
			t.Errorf("mostIn(%v, %d) = %d, want %d", c.at, c.w, got, c.want)
		}
	}
}

// The page as a person opens it: the address make demo prints, with
// nothing pressed, shows the default scenario's chart with a row for every
// algorithm, and a table with each one's admitted, refused, pass rate and
// most in any window, all as the endpoint returns them; the shaper's row
// holds at most one departure a second (its rate, 10 per 10 s), where
// GCRA's admits two in a second of the same traffic; the caption is the
// endpoint's. With DEMO_SCREENSHOTS set, it saves the page as
// simulator-default.png.
func TestPageInChromium(t *testing.T) {
	needServer(t)
	ts := pageServer(t)
	dom := dumpDOM(t, ts.URL+"/", 20000, "default", 2300)
	if !strings.Contains(dom, `data-ran="yes"`) {
		t.Fatalf("the page did not run the default scenario on load:\n%.2000s", dom)
	}
	r := simulate(t, DefaultScenario("steady"))
	want := seriesNumbers(r.Series)
	got := chartNumbers(dom)
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(Algorithms) {
		t.Fatalf("the page's chart shows %v, the endpoint %v", got, want)
	}
	if rows := tableNumbers(dom); fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("the page's table shows %v, the endpoint %v", rows, want)
	}
	lb := rowBars(t, dom, "Leaky bucket (shaper)", r.Buckets)
	gcra := rowBars(t, dom, "GCRA", r.Buckets)
	if fmt.Sprint(lb) != fmt.Sprint(seriesOf(t, r, "LB.ENQUEUE").Admitted) || fmt.Sprint(gcra) != fmt.Sprint(seriesOf(t, r, "GCRA.THROTTLE").Admitted) {
		t.Fatalf("the page's bars: shaper %v, GCRA %v; the endpoint's buckets differ", lb, gcra)
	}
	if r.BucketMs != 1000 || slices.Max(lb) != 1 || slices.Max(gcra) != 2 {
		t.Fatalf("per %d ms the shaper's row shows at most %d, GCRA's %d; want 1 and 2", r.BucketMs, slices.Max(lb), slices.Max(gcra))
	}
	for _, se := range r.Series { // each row draws its state as a line, with the endpoint's values
		row := between(t, dom, `data-algorithm="`+se.Name+`"`, `</g>`)
		m := stateRE.FindStringSubmatch(row)
		if m == nil || m[1] != se.StateOf || m[2] != strings.Trim(strings.ReplaceAll(fmt.Sprint(se.State), " ", ","), "[]") || len(m[3]) == 0 {
			t.Fatalf("%s: the page's chart has no state line with the endpoint's %s %v: %v", se.Name, se.StateOf, se.State, m)
		}
	}
	checkCaption(t, dom, r)
	for _, link := range []string{`id="csv"[^>]*href="api/result\.csv\?pattern=steady&amp;rate=2&amp;duration=60`, `id="svg"[^>]*href="api/chart\.svg\?pattern=steady&amp;rate=2&amp;duration=60`} {
		if !regexp.MustCompile(link).MatchString(dom) || strings.Contains(dom, `<p id="downloads" hidden`) {
			t.Fatalf("the page has no download link shown matching %s", link)
		}
	}
}

// The downloads: the CSV has the header and one row per request each
// algorithm decided, retries included, with the replies' numbers; the SVG
// is the chart the page shows.
func TestDownloads(t *testing.T) {
	needServer(t)
	s := Scenario{Pattern: "bursts", Rate: 2, Duration: 30, Limit: 10, Window: 10, Hold: 3, Seed: 1, Retry: "nojitter", Clients: 2, Keys: "shared"}
	q := "pattern=bursts&rate=2&duration=30&limit=10&window=10&hold=3&seed=1&retry=nojitter&clients=2&keys=shared"
	r := simulate(t, s)
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		demo.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body.String())
		}
		return rec
	}
	rec := get("/api/result.csv?" + q)
	if ct := rec.Header().Get("Content-Type"); ct != "text/csv; charset=utf-8" {
		t.Fatalf("csv: Content-Type %q", ct)
	}
	rows, err := csv.NewReader(rec.Body).ReadAll()
	if err != nil || len(rows) == 0 {
		t.Fatalf("csv: %v, %d rows", err, len(rows))
	}
	if h := strings.Join(rows[0], ","); h != "algorithm,client,arrival_ms,decision,remaining,retry_after_ms,departure_ms" {
		t.Fatalf("csv header %q", h)
	}
	decided, k := 0, 1
	for _, se := range r.Series {
		decided += se.Total[0] + se.Total[1]
		for _, rep := range se.Replies {
			if k >= len(rows) {
				t.Fatalf("csv: %d rows, fewer than the replies", len(rows)-1)
			}
			dep := ""
			if se.Drawn == "departure" && !rep.Limited {
				dep = fmt.Sprint(rep.At + rep.ResetAfter)
			}
			want := fmt.Sprint([]string{se.Name, fmt.Sprint(rep.Client + 1), fmt.Sprint(rep.At), map[bool]string{false: "admitted", true: "refused"}[rep.Limited],
				fmt.Sprint(rep.Remaining), fmt.Sprint(rep.RetryAfter), dep})
			if got := fmt.Sprint(rows[k]); got != want {
				t.Fatalf("csv row %d: %s, want %s", k, got, want)
			}
			k++
		}
	}
	if len(rows)-1 != decided || decided == 0 {
		t.Fatalf("csv: %d rows, %d requests decided", len(rows)-1, decided)
	}
	rec = get("/api/chart.svg?" + q)
	if rec.Header().Get("Content-Type") != "image/svg+xml" || rec.Body.String() != r.SVG {
		t.Fatalf("svg: %s, and it differs from the page's chart", rec.Header().Get("Content-Type"))
	}
	t.Logf("csv: %d rows for %d requests decided (the traffic's %d to each of %d algorithms, and the retries)", len(rows)-1, decided, r.Requests, len(r.Series))
}

// stateRE is a row's state line in a chart.
var stateRE = regexp.MustCompile(`<polyline class="state" data-state="([a-z]+)" data-values="([-\d,]*)" points="([^"]*)"`)

// harness is the test's page: it opens the page at its src in a frame,
// waits for its result, then changes the limit control as a person typing
// "12" does (two input events), waits for the rerun, and writes what it saw
// into #out: each time, the address, the controls, the chart, the table and
// how many runs the page finished, and 150 ms (of the page's virtual time)
// after the keystrokes, whether a run had started. Given more addresses
// (then, repeated), it opens each in the frame afresh and writes what it
// shows in out.then. When done, the frame fills the window.
const harness = `<!doctype html>
<meta charset="utf-8">
<body>
<iframe id="f" style="width:1100px;height:900px"></iframe>
<pre id="out"></pre>
<script>
'use strict';
const f = document.getElementById('f');
const out = {snaps: []};
const show = () => { document.getElementById('out').textContent = JSON.stringify(out); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const doc = () => f.contentDocument;
const runs = () => Number(doc().body.dataset.runs || 0);
async function until(what, cond) {
  for (let i = 0; i < 400; i++) {
    try { if (cond()) return; } catch (e) {}
    await sleep(50);
  }
  throw new Error('waited in vain for ' + what + '; the page says: ' + doc().getElementById('status').textContent);
}
function take(name) {
  const d = doc();
  return {name, runs: runs(), search: f.contentWindow.location.search,
    form: Object.fromEntries(new FormData(d.getElementById('scenario'))),
    chart: d.getElementById('chart').innerHTML, table: d.querySelector('#totals tbody').innerHTML,
    caption: d.getElementById('caption').textContent};
}
function snap(name) {
  out.snaps.push(take(name));
  show();
}
function type(name, ...values) {
  const input = doc().querySelector('#scenario [name="' + name + '"]');
  for (const v of values) {
    input.value = v;
    input.dispatchEvent(new Event('input', {bubbles: true}));
  }
}
async function main() {
  f.src = new URLSearchParams(location.search).get('src');
  await until('the first result', () => runs() >= 1);
  snap('loaded');
  type('limit', '1', '12');
  await sleep(150);
  out.early = {runs: runs(), status: doc().getElementById('status').textContent};
  await until('the rerun', () => runs() >= 2);
  await sleep(1500);
  snap('changed');
  out.then = [];
  for (const then of new URLSearchParams(location.search).getAll('then')) { // more addresses, each opened afresh in the frame
    const old = doc();
    f.src = then;
    await until('the result at ' + then, () => doc() !== old && runs() >= 1);
    out.then.push(take(then));
    show();
  }
  out.done = true;
}
main().catch((e) => { out.error = String(e); }).finally(() => {
  show();
  // The last page opened fills the window, over #out (a screenshot shows
  // it).
  f.style.cssText = 'position:fixed;top:0;left:0;width:100%;height:100%;border:0;background:#fff;z-index:1';
});
</script>
`

type snapshot struct {
	Name    string            `json:"name"`
	Runs    int               `json:"runs"`
	Search  string            `json:"search"`
	Form    map[string]string `json:"form"`
	Chart   string            `json:"chart"`
	Table   string            `json:"table"`
	Caption string            `json:"caption"`
}

// The address carries the settings: opening an address with settings (and
// the old ?autorun, now a no-op) restores them in the controls and shows
// their result, and the address then lists every setting; changing a
// control reruns once, not before 150 ms after the last keystroke (the
// page waits 300), shows the new result and puts the new setting in the
// address. Two more addresses, opened afresh: one with a burst and a lease
// (restored, run, listed in the address, named in the chart's title), and
// one comparing the fixed window and GCRA under the boundary attack, whose
// chart and table have just those two rows, in that order, and whose
// caption is the endpoint's. With DEMO_SCREENSHOTS set, it saves the
// comparison as simulator-compare.png.
func TestPageAddress(t *testing.T) {
	needServer(t)
	ts := pageServer(t)
	s := Scenario{Pattern: "boundary", Rate: 3, Duration: 40, Limit: 8, Window: 5, Hold: 2, Seed: 4, Retry: "full", Clients: 3, Keys: "per-client", Engine: "lua"}
	src := "/?autorun&pattern=boundary&rate=3&duration=40&limit=8&window=5&hold=2&seed=4&retry=full&clients=3&keys=per-client&engine=lua"
	// then: 10 tokens refilling 5 a second, against bursts of 20 a second,
	// and a concurrency lease of 1 s under a hold of 3 s.
	then := Scenario{Pattern: "bursts", Rate: 20, Duration: 4, Limit: 5, Window: 1, Burst: 10, Hold: 3, Lease: 1, Seed: 1, Retry: "none", Clients: 1, Keys: "shared", Engine: "module"}
	thenSrc := "/?pattern=bursts&rate=20&duration=4&limit=5&window=1&burst=10&hold=3&lease=1"
	// and two algorithms compared: the fixed window and GCRA under the
	// boundary attack.
	compare := DefaultScenario("boundary")
	compare.Compare = "fw,gcra"
	compareSrc := "/?pattern=boundary&compare=fw,gcra"
	// The screenshot is of the last address, the comparison, which the
	// harness shows in the whole window when it is done.
	dom := dumpDOM(t, ts.URL+"/test/harness.html?src="+url.QueryEscape(src)+"&then="+url.QueryEscape(thenSrc)+"&then="+url.QueryEscape(compareSrc), 60000, "compare", 1500)
	m := regexp.MustCompile(`(?s)<pre id="out">(.*?)</pre>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the harness wrote nothing:\n%.2000s", dom)
	}
	var out struct {
		Snaps []snapshot `json:"snaps"`
		Early struct {
			Runs   int    `json:"runs"`
			Status string `json:"status"`
		} `json:"early"`
		Then  []snapshot `json:"then"`
		Done  bool       `json:"done"`
		Error string     `json:"error"`
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &out); err != nil || !out.Done || len(out.Snaps) != 2 {
		t.Fatalf("the harness did not finish (%v): %s; %d snapshots", err, out.Error, len(out.Snaps))
	}
	check := func(snap snapshot, s Scenario, runs int) {
		t.Helper()
		form := map[string]string{"pattern": s.Pattern, "rate": fmt.Sprint(s.Rate), "duration": fmt.Sprint(s.Duration),
			"limit": fmt.Sprint(s.Limit), "window": fmt.Sprint(s.Window), "hold": fmt.Sprint(s.Hold), "seed": fmt.Sprint(s.Seed),
			"retry": s.Retry, "clients": fmt.Sprint(s.Clients), "keys": s.Keys, "engine": s.Engine,
			"burst": optional(s.Burst), "lease": optional(s.Lease), // burst and lease: empty when left out
			"compare-a": "", "compare-b": ""} // the two compared, or empty
		if ids := strings.Split(s.Compare, ","); len(ids) == 2 {
			form["compare-a"], form["compare-b"] = ids[0], ids[1]
		}
		if fmt.Sprint(snap.Form) != fmt.Sprint(form) {
			t.Fatalf("%s: the controls hold %v, want %v", snap.Name, snap.Form, form)
		}
		search := fmt.Sprintf("?pattern=%s&rate=%g&duration=%d&limit=%d&window=%d&hold=%g&seed=%d&retry=%s&clients=%d&keys=%s&engine=%s",
			s.Pattern, s.Rate, s.Duration, s.Limit, s.Window, s.Hold, s.Seed, s.Retry, s.Clients, s.Keys, s.Engine)
		if s.Burst != 0 || s.Lease != 0 { // listed only when set: burst after the window, lease after the hold
			search = fmt.Sprintf("?pattern=%s&rate=%g&duration=%d&limit=%d&window=%d%s&hold=%g%s&seed=%d&retry=%s&clients=%d&keys=%s&engine=%s",
				s.Pattern, s.Rate, s.Duration, s.Limit, s.Window, optionalParam("burst", s.Burst), s.Hold, optionalParam("lease", s.Lease),
				s.Seed, s.Retry, s.Clients, s.Keys, s.Engine)
		}
		if s.Compare != "" { // last, with a plain comma
			search += "&compare=" + s.Compare
		}
		if snap.Search != search {
			t.Fatalf("%s: the address is %q, want %q", snap.Name, snap.Search, search)
		}
		r := simulate(t, s)
		want := seriesNumbers(r.Series)
		if snap.Caption != r.Caption {
			t.Fatalf("%s: the caption reads %q, the endpoint's %q", snap.Name, snap.Caption, r.Caption)
		}
		if got := chartNumbers(snap.Chart); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the chart shows %v, the endpoint %v", snap.Name, got, want)
		}
		if got := tableNumbers(snap.Table); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the table shows %v, the endpoint %v", snap.Name, got, want)
		}
		if snap.Runs != runs {
			t.Fatalf("%s: the page ran %d times, want %d", snap.Name, snap.Runs, runs)
		}
	}
	check(out.Snaps[0], s, 1)
	if out.Early.Runs != 1 || strings.Contains(out.Early.Status, "running") {
		t.Fatalf("150 ms of the page's time after the keystrokes: %d runs, %q; the rerun should wait 300 ms", out.Early.Runs, out.Early.Status)
	}
	s.Limit = 12
	check(out.Snaps[1], s, 2)
	if len(out.Then) != 2 {
		t.Fatalf("the harness opened %d more addresses, want 2", len(out.Then))
	}
	check(out.Then[0], then, 1) // burst and lease restored in the controls, in the result, kept in the address
	if !strings.Contains(out.Then[0].Chart, "limit 5 per 1 s, burst 10 (concurrency: 5 at once, held 3 s, lease 1 s)") {
		t.Fatalf("the chart's title does not name the burst and the lease:\n%.600s", out.Then[0].Chart)
	}
	// Compared, the chart and the table have exactly the two rows, in the
	// order asked, and the caption is the endpoint's (check compares the
	// numbers and the caption).
	check(out.Then[1], compare, 1)
	for what, rows := range map[string][][5]string{"chart": chartNumbers(out.Then[1].Chart), "table": tableNumbers(out.Then[1].Table)} {
		if len(rows) != 2 || rows[0][0] != "Fixed window" || rows[1][0] != "GCRA" {
			t.Fatalf("compare=fw,gcra: the %s's rows %v, want the fixed window's and GCRA's only", what, rows)
		}
	}
	if strings.Count(out.Then[1].Table, "<tr") != 2 || strings.Count(out.Then[1].Chart, `class="algorithm"`) != 2 {
		t.Fatalf("compare=fw,gcra: %d rows in the table, %d in the chart", strings.Count(out.Then[1].Table, "<tr"), strings.Count(out.Then[1].Chart, `class="algorithm"`))
	}
	t.Logf("compare=fw,gcra, the page's caption: %s", out.Then[1].Caption)
}

// optional is a burst's or lease's control: empty when left out (0).
func optional(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

// optionalParam is a burst or lease in an address: nothing when left out.
func optionalParam(name string, n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("&%s=%d", name, n)
}

// On/off traffic sends at the rate in the first half of each window only;
// with several clients the noisy one sends NoisyFactor times as many as
// each polite one, no two clients' steady requests coincide, and clients
// take turns at an instant they share.
func TestArrivals(t *testing.T) {
	s := DefaultScenario("onoff")
	at := s.Arrivals()
	if len(at) != 60 {
		t.Fatalf("on/off at 2/s, 5 s on in each of 6 windows: %d requests, want 60", len(at))
	}
	for _, a := range at {
		if a.At%int64(10*time.Second) >= int64(5*time.Second) {
			t.Fatalf("on/off: a request at %v, in a window's silent half", time.Duration(a.At))
		}
	}
	s = DefaultScenario("steady")
	s.Rate, s.Clients = 0.5, 5
	count := map[int]int{}
	seen := map[int64]int{}
	for _, a := range s.Arrivals() {
		count[a.Client]++
		if c, ok := seen[a.At]; ok {
			t.Fatalf("steady: clients %d and %d both send at %v", c, a.Client, time.Duration(a.At))
		}
		seen[a.At] = a.Client
	}
	if fmt.Sprint(count) != "map[0:150 1:30 2:30 3:30 4:30]" {
		t.Fatalf("steady, 5 clients at 0.5/s: %v requests per client", count)
	}
	s = DefaultScenario("bursts")
	s.Rate, s.Clients = 0.2, 3 // a burst of 10 from the noisy client, 2 from each polite one
	var first []int
	for _, a := range s.Arrivals() {
		if a.At == 0 {
			first = append(first, a.Client)
		}
	}
	if fmt.Sprint(first) != "[0 1 2 0 1 2 0 0 0 0 0 0 0 0]" {
		t.Fatalf("the first bursts, in the order sent: clients %v", first)
	}
}

// retryWait: exactly retry_after without jitter; full jitter in whole ms
// from 0 to retry_after × 2^k; the middleware's spread in whole seconds
// from retry_after rounded up to a tenth of that more (at least 1).
func TestRetryWait(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, ra := range []time.Duration{0, time.Millisecond, 999 * time.Millisecond, time.Second, 9950 * time.Millisecond, 25 * time.Second, 123400 * time.Millisecond} {
		for k := range MaxRetries {
			if w := retryWait("nojitter", ra, k, r); w != ra {
				t.Fatalf("nojitter, retry_after %v: %v", ra, w)
			}
			top := ((ra + time.Millisecond - 1) / time.Millisecond * time.Millisecond) << k
			s := (ra + time.Second - 1) / time.Second * time.Second
			spread := max(time.Second, s/10/time.Second*time.Second)
			fullSeen, spreadSeen := map[bool]bool{}, map[time.Duration]bool{}
			for range 400 {
				w := retryWait("full", ra, k, r)
				if w < 0 || w > top || w%time.Millisecond != 0 {
					t.Fatalf("full, retry_after %v, %d retries before: %v, want whole ms in [0, %v]", ra, k, w, top)
				}
				fullSeen[w > top/2] = true
				w = retryWait("spread", ra, k, r)
				if w < s || w > s+spread || w%time.Second != 0 {
					t.Fatalf("spread, retry_after %v: %v, want whole seconds in [%v, %v]", ra, w, s, s+spread)
				}
				spreadSeen[w] = true
			}
			if top >= 2*time.Millisecond && len(fullSeen) != 2 || len(spreadSeen) != int(spread/time.Second)+1 {
				t.Fatalf("retry_after %v, %d before: full jitter never in one half of [0, %v] (%v), or the spread not every second (%v)", ra, k, top, fullSeen, spreadSeen)
			}
		}
	}
}

// Jain's index over admitted / max-min fair share: 1 when each client gets
// its fair share, whatever the demands; the noisy client taking most of a
// shared limit scores low; a client that asked nothing is left out.
func TestJain(t *testing.T) {
	for _, c := range []struct {
		demand, admitted []int
		fair             string
		jain             float64
	}{
		{[]int{150, 30, 30, 30, 30}, []int{69, 30, 30, 30, 30}, "[69 30 30 30 30]", 1},           // a key each: every polite client all it asked
		{[]int{150, 30, 30, 30, 30}, []int{64, 2, 1, 1, 1}, "[13.8 13.8 13.8 13.8 13.8]", 0.232}, // one key: the noisy client 64 of 69
		{[]int{150, 30, 30, 30, 30}, []int{38, 8, 8, 8, 7}, "[13.8 13.8 13.8 13.8 13.8]", 0.565}, // one key, each request alike: the noisy one 5 times a polite one's
		{[]int{10, 2, 50}, []int{10, 2, 18}, "[10 2 18]", 1},
		{[]int{10, 0, 50}, []int{5, 0, 5}, "[5 0 5]", 1},
		{[]int{10, 10}, []int{0, 0}, "[0 0]", 1},
		{[]int{10, 10}, []int{10, 0}, "[5 5]", 0.5},
	} {
		shares, jain := fairness(c.demand, c.admitted)
		var fair []float64
		for _, s := range shares {
			fair = append(fair, s.Fair)
		}
		if fmt.Sprint(fair) != c.fair || jain != c.jain {
			t.Errorf("fairness(%v, %v): fair shares %v, Jain %v; want %s, %v", c.demand, c.admitted, fair, jain, c.fair, c.jain)
		}
	}
}

// The herd: clients that retry exactly when the reply says come back
// together at the fixed window's edge, where full jitter spreads them.
// Steady 3/s against 10 per 10 s, windows aligned with the traffic's start:
// the fixed window's peak-to-mean ratio of requests sent per second,
// retries included, is measured for each retry mode; without jitter it is
// at least twice full jitter's (12.88 against 2.81 when written), with the
// busiest second at a window's edge, the middleware's small spread in
// between (6.75); GCRA's retry_after spaces retries at its rate, so no herd
// (1.11). Each retry without jitter comes exactly its refusal's
// retry_after later.
func TestRetryHerd(t *testing.T) {
	needServer(t)
	peak := map[string]float64{}
	var herd SimulateResponse
	for _, mode := range Retries {
		s := Scenario{Pattern: "steady", Rate: 3, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Retry: mode, Clients: 1, Keys: "shared"}
		r := simulate(t, s)
		fw := seriesOf(t, r, "FW.HIT")
		peak[mode] = fw.PeakMean
		t.Logf("retry %-8s fixed window: peak/mean %.2f, %d retries, %.1f%% served; GCRA %.2f, sliding log %.2f",
			mode, fw.PeakMean, fw.Retries, fw.Served, seriesOf(t, r, "GCRA.THROTTLE").PeakMean, seriesOf(t, r, "SL.HIT").PeakMean)
		if mode == "nojitter" {
			herd = r
		}
	}
	if peak["none"] != 1 {
		t.Fatalf("steady 3/s without retries: peak/mean %.2f, want 1", peak["none"])
	}
	if peak["nojitter"] < 2*peak["full"] || peak["nojitter"] < 1.5*peak["spread"] || peak["spread"] < 1.5*peak["full"] {
		t.Fatalf("fixed window peak/mean: no jitter %.2f, spread %.2f, full jitter %.2f; want no jitter ≥ 2 × full, and 1.5 × apart from spread",
			peak["nojitter"], peak["spread"], peak["full"])
	}
	if g := seriesOf(t, herd, "GCRA.THROTTLE").PeakMean; g >= 1.5 {
		t.Fatalf("GCRA without jitter: peak/mean %.2f, want below 1.5", g)
	}
	fw := seriesOf(t, herd, "FW.HIT")
	perSecond := make([]int, herd.Scenario.Duration)
	for _, r := range fw.Replies {
		perSecond[r.At/1000]++
	}
	if busiest := slices.Index(perSecond, slices.Max(perSecond)); busiest%herd.Scenario.Window != 0 {
		t.Fatalf("without jitter the fixed window's busiest second starts at %d s, not at a window's edge: %v", busiest, perSecond)
	}
	for _, se := range herd.Series {
		due := map[[3]int64]int{} // client, try, instant: retries a refusal calls for
		for _, r := range se.Replies {
			if r.Limited && r.RetryAfter >= 0 && r.Try < MaxRetries {
				due[[3]int64{int64(r.Client), int64(r.Try + 1), r.At + r.RetryAfter}]++
			}
		}
		for _, r := range se.Replies {
			if k := [3]int64{int64(r.Client), int64(r.Try), r.At}; r.Try > 0 {
				if due[k] == 0 {
					t.Fatalf("%s: a retry at %d ms (try %d) that no refusal's retry_after called for", se.Name, r.At, r.Try)
				}
				due[k]--
			}
		}
	}
}

// Fairness between a noisy client (5× the rate) and four polite ones at
// 0.5/s, against 10 per 10 s: with a key each, every polite client gets
// all it asks (steady traffic, every algorithm) and Jain's index is at
// least 0.9 (1.000 measured, Poisson traffic too); on one shared key,
// GCRA lets the noisy client take at least twice its fair share and the
// index is at most 0.7 and 0.3 below the per-client keys' (when written:
// Poisson 0.561, the noisy client 38 of 69 where its fair share is 13.8;
// steady 0.447, the noisy client 35 of 69, one polite client whose phase
// falls just after GCRA's emission interval each time 30 of its 30, the
// other three 1 or 2).
func TestFairness(t *testing.T) {
	needServer(t)
	for _, pattern := range []string{"steady", "random"} {
		s := Scenario{Pattern: pattern, Rate: 0.5, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Retry: "none", Clients: 5, Keys: "per-client"}
		own := simulate(t, s)
		s.Keys = "shared"
		shared := simulate(t, s)
		for _, se := range own.Series {
			if se.Jain < 0.9 {
				t.Fatalf("%s, a key each, %s: Jain's index %.3f, want ≥ 0.9 (%+v)", pattern, se.Name, se.Jain, se.Clients)
			}
			for c, cl := range se.Clients[1:] {
				if cl.Admitted != cl.Offered && (pattern == "steady" || se.Command == "GCRA.THROTTLE") {
					t.Fatalf("%s, a key each, %s: polite client %d admitted %d of %d", pattern, se.Name, c+2, cl.Admitted, cl.Offered)
				}
			}
		}
		g, gs := seriesOf(t, own, "GCRA.THROTTLE"), seriesOf(t, shared, "GCRA.THROTTLE")
		noisy := gs.Clients[0]
		t.Logf("%s: GCRA, a key each: Jain %.3f, clients %+v", pattern, g.Jain, g.Clients)
		t.Logf("%s: GCRA, one key: Jain %.3f, clients %+v", pattern, gs.Jain, gs.Clients)
		for _, se := range shared.Series {
			t.Logf("%s: one key, %-22s Jain %.3f, noisy %.1f%% of admitted", pattern, se.Name, se.Jain, se.Clients[0].Share)
		}
		if float64(noisy.Admitted) < 2*noisy.Fair || gs.Jain > 0.7 || gs.Jain > g.Jain-0.3 {
			t.Fatalf("%s, GCRA on one key: the noisy client admitted %d, its fair share %.1f; Jain %.3f (a key each: %.3f); want ≥ twice its share, the index ≤ 0.7 and 0.3 lower",
				pattern, noisy.Admitted, noisy.Fair, gs.Jain, g.Jain)
		}
	}
}

// peakRE and jainRE read the page's totals table: each algorithm's
// peak-to-mean figure and Jain's index.
var (
	peakRE = regexp.MustCompile(`<tr data-algorithm="([^"]+)">.*?<td class="num" data-field="peak">([^<]*)</td>`)
	jainRE = regexp.MustCompile(`<tr data-algorithm="([^"]+)">.*?<td class="num" data-field="jain">([^<]*)</td>`)
	// shareRE is a client's cell in the page's clients table.
	shareRE = regexp.MustCompile(`<td class="num" data-client="(\d+)"[^>]*>([\d.]+) %<br><small>(\d+)/(\d+)</small></td>`)
)

// between is the part of s from the first from to the next to after it.
func between(t *testing.T, s, from, to string) string {
	t.Helper()
	i := strings.Index(s, from)
	if i < 0 {
		t.Fatalf("no %s in the page:\n%.3000s", from, s)
	}
	s = s[i:]
	return s[:strings.Index(s, to)+len(to)]
}

// The page, opened at an address with retries without jitter, shows each
// algorithm's peak-to-mean ratio as the endpoint measures it, in the table
// and in the chart, and the fixed window's herd; at an address with 5
// clients, it shows Jain's index for each algorithm and a table of each
// client's share; each time the caption is the endpoint's. With
// DEMO_SCREENSHOTS set, it saves the two as simulator-herd.png and
// simulator-fairness.png.
func TestPageRetriesAndClients(t *testing.T) {
	needServer(t)
	ts := pageServer(t)
	s := Scenario{Pattern: "steady", Rate: 3, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Retry: "nojitter", Clients: 1, Keys: "shared"}
	dom := dumpDOM(t, ts.URL+"/?pattern=steady&rate=3&duration=60&limit=10&window=10&hold=3&seed=1&retry=nojitter", 20000, "herd", 2400)
	r := simulate(t, s)
	var want, got []string
	for _, se := range r.Series {
		want = append(want, fmt.Sprintf("%s %.2f", se.Name, se.PeakMean))
	}
	for _, m := range peakRE.FindAllStringSubmatch(between(t, dom, `<table id="totals">`, `</table>`), -1) {
		got = append(got, m[1]+" "+m[2])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("retry=nojitter: the page's peak/mean %v, the endpoint's %v", got, want)
	}
	chart := regexp.MustCompile(`data-algorithm="([^"]+)"[^>]*data-peak-mean="([\d.]+)"`).FindAllStringSubmatch(between(t, dom, `<div id="chart">`, `</svg>`), -1)
	if len(chart) != len(Algorithms) || chart[4][1] != "Fixed window" || chart[4][2] != fmt.Sprintf("%.2f", seriesOf(t, r, "FW.HIT").PeakMean) {
		t.Fatalf("retry=nojitter: the chart's peak/mean %v, want the fixed window's %.2f", chart, seriesOf(t, r, "FW.HIT").PeakMean)
	}
	if fw := seriesOf(t, r, "FW.HIT").PeakMean; fw < 5 || !strings.Contains(dom, `<section id="clients" hidden="">`) {
		t.Fatalf("retry=nojitter: the fixed window's peak/mean %.2f, want a herd (≥ 5); the clients' table hidden with one client", fw)
	}
	t.Logf("retry=nojitter, the page: %v", got)
	checkCaption(t, dom, r)

	s = Scenario{Pattern: "random", Rate: 0.5, Duration: 60, Limit: 10, Window: 10, Hold: 3, Seed: 1, Retry: "none", Clients: 5, Keys: "shared"}
	dom = dumpDOM(t, ts.URL+"/?pattern=random&rate=0.5&duration=60&limit=10&window=10&hold=3&seed=1&clients=5", 20000, "fairness", 2950)
	r = simulate(t, s)
	want, got = nil, nil
	var wantShares, gotShares []string
	for _, se := range r.Series {
		want = append(want, fmt.Sprintf("%s %.3f", se.Name, se.Jain))
		for c, cl := range se.Clients {
			wantShares = append(wantShares, fmt.Sprintf("%d %.1f %d/%d", c, cl.Share, cl.Admitted, cl.Offered))
		}
	}
	for _, m := range jainRE.FindAllStringSubmatch(between(t, dom, `<table id="totals">`, `</table>`), -1) {
		got = append(got, m[1]+" "+m[2])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("clients=5: the page's Jain's index %v, the endpoint's %v", got, want)
	}
	clients := between(t, dom, `<section id="clients">`, `</section>`)
	got = nil
	for _, m := range jainRE.FindAllStringSubmatch(clients, -1) {
		got = append(got, m[1]+" "+m[2])
	}
	for _, m := range shareRE.FindAllStringSubmatch(clients, -1) {
		gotShares = append(gotShares, fmt.Sprintf("%s %s %s/%s", m[1], m[2], m[3], m[4]))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(gotShares) != fmt.Sprint(wantShares) || !strings.Contains(clients, "<th>Client 1 (noisy)</th>") {
		t.Fatalf("clients=5: the clients' table shows Jain %v and shares %v; the endpoint %v and %v", got, gotShares, want, wantShares)
	}
	t.Logf("clients=5, the page: %v", got)
	checkCaption(t, dom, r)
}

// checkCaption finds the page's caption the endpoint's.
func checkCaption(t *testing.T, dom string, r SimulateResponse) {
	t.Helper()
	if m := regexp.MustCompile(`<p id="caption">([^<]*)</p>`).FindStringSubmatch(dom); m == nil || html.UnescapeString(m[1]) != r.Caption {
		t.Fatalf("the page's caption %v, the endpoint's %q", m, r.Caption)
	}
}

// Each algorithm's state per second, against values worked out by hand
// from the module's replies to on/off traffic at 2/s (requests at 0, 0.5,
// 1, 1.5, 4, 4.5, 5, 5.5 s), limit 3 per 4 s, hold 1.5 s. The replies, in
// that order:
//
//	GCRA, TB     remaining 2 1 0 0 | 1 0 0(refused) 0
//	FW           remaining 2 1 0 0(refused) | 2 1 0 0(refused)
//	SW, SL       remaining 2 1 0 0(refused) ... 0 from then on
//	CONC         remaining 2 1 0 0 | 2 1 0 0 (holds end 1.5 s later)
//	LB (shaper)  departures 0, 1.334, 2.667, 4.001 | 5.334, 6.667, 8.001 (5 s refused)
//
// so at the end of second k (the last reply before k+1 s, carried on
// through the silent seconds 2 and 3, 6 and 7; the shaper's queue from
// arrivals and departures) the series are these. The axis runs to 9 s:
// the shaper's last departure is at 8.001 s.
func TestStateSeries(t *testing.T) {
	needServer(t)
	s := Scenario{Pattern: "onoff", Rate: 2, Duration: 8, Limit: 3, Window: 4, Hold: 1.5, Seed: 1}
	r := simulate(t, s)
	for _, c := range []struct {
		command, of string
		want        []int64
	}{
		{"GCRA.THROTTLE", "remaining", []int64{1, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"TB.TAKE", "remaining", []int64{1, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"LB.ENQUEUE", "queue", []int64{1, 2, 1, 1, 2, 2, 1, 1, 0}},
		{"SW.HIT", "count", []int64{2, 3, 3, 3, 3, 3, 3, 3, 3}},
		{"FW.HIT", "count", []int64{2, 3, 3, 3, 2, 3, 3, 3, 3}},
		{"SL.HIT", "log", []int64{2, 3, 3, 3, 3, 3, 3, 3, 3}},
		{"CONC.ACQUIRE", "holders", []int64{2, 3, 3, 3, 2, 3, 3, 3, 3}},
	} {
		se := seriesOf(t, r, c.command)
		if se.StateOf != c.of || fmt.Sprint(se.State) != fmt.Sprint(c.want) {
			t.Errorf("%s: %s %v, want %s %v", c.command, se.StateOf, se.State, c.of, c.want)
		}
	}
	if t.Failed() {
		for _, se := range r.Series {
			t.Logf("%s replies: %+v", se.Command, se.Replies)
		}
	}
}

// stateSeries on replies made up by hand: -1 before the first reply, the
// last reply of a second counts, a silent second carries the value on,
// and with a key per client the keys that have replied are summed.
func TestStateSeriesSteps(t *testing.T) {
	one := Scenario{Limit: 5, Clients: 1, Keys: "shared"}
	two := Scenario{Limit: 5, Clients: 2, Keys: "per-client"}
	for _, c := range []struct {
		name    string
		s       Scenario
		command string
		replies []Reply
		secs    int
		want    []int64
	}{
		{"remaining", one, "TB.TAKE", []Reply{{At: 1200, Limit: 5, Remaining: 4}, {At: 1999, Limit: 5, Remaining: 3}, {At: 4000, Limit: 5, Remaining: 5}},
			5, []int64{-1, 3, 3, 3, 5}},
		{"count", one, "FW.HIT", []Reply{{At: 0, Limit: 5, Remaining: 4}, {At: 999, Limit: 5, Remaining: 0, Limited: true}, {At: 1000, Limit: 5, Remaining: 4}},
			3, []int64{5, 1, 1}},
		{"a key each", two, "CONC.ACQUIRE", []Reply{{At: 0, Limit: 5, Remaining: 4}, {At: 1500, Limit: 5, Remaining: 3, Client: 1}, {At: 2500, Limit: 5, Remaining: 2}},
			3, []int64{1, 3, 5}},
		// queue: in it from arrival until departure (arrival + delay), at the end of second k if it arrived before (k+1) s and departs then or later
		{"queue", one, "LB.ENQUEUE", []Reply{{At: 0, ResetAfter: 0}, {At: 100, ResetAfter: 900}, {At: 200, ResetAfter: 1800}, {At: 300, Limited: true, ResetAfter: 0}, {At: 2500, ResetAfter: 600}},
			4, []int64{2, 1, 1, 0}},
	} {
		se := &Series{Command: c.command, Replies: c.replies}
		if _, got := stateSeries(se, c.s, c.secs); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// The engines: the default scenario of every pattern, run through the
// module's commands and through the Lua FUNCTION library on the same
// server, gets byte-identical replies (the library is the module's
// commands in Lua, by design); the page's address carries the engine
// (TestPageAddress runs the Lua one).
func TestEngines(t *testing.T) {
	needServer(t)
	for _, p := range Patterns {
		s := DefaultScenario(p)
		m := simulate(t, s)
		s.Engine = "lua"
		l := simulate(t, s)
		if l.Scenario.Engine != "lua" || m.Scenario.Engine != "module" {
			t.Fatalf("%s: engines %q and %q", p, m.Scenario.Engine, l.Scenario.Engine)
		}
		whole := true // every request on a whole ms
		for _, a := range s.Arrivals() {
			whole = whole && a.At%int64(time.Millisecond) == 0
		}
		for i := range m.Series {
			jm, _ := json.Marshal(m.Series[i].Replies)
			jl, _ := json.Marshal(l.Series[i].Replies)
			if whole && !bytes.Equal(jm, jl) {
				t.Fatalf("%s %s: the module's replies differ from the library's:\n%s\n%s", p, m.Series[i].Name, jm, jl)
			}
			if !whole && !bytes.Equal(jm, jl) {
				// Off whole ms, Redis 7.0's module reads the clock in ms and
				// Lua's TIME in µs (see package client): a time may read 1 ms
				// apart, and a decision at an edge go the other way.
				t.Logf("%s %s: off whole ms, the engines' replies differ", p, m.Series[i].Name)
			}
		}
		if p == "steady" && !whole {
			t.Fatal("the default scenario's requests are not on whole ms")
		}
	}
	libs, err := demo.srv.RDB.Do(context.Background(), "FUNCTION", "LIST").Slice()
	if err != nil || len(libs) == 0 {
		t.Fatalf("no FUNCTION library on the server after the Lua runs: %v %v", libs, err)
	}
	if code, m, _ := post(t, demo.Handler(), "/api/simulate", Scenario{Pattern: "steady", Rate: 1, Duration: 1, Limit: 1, Window: 1, Hold: 1, Engine: "eval"}); code != http.StatusBadRequest {
		t.Fatalf("engine eval: %d %v", code, m)
	}
}
