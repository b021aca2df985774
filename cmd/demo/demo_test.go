package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
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
		{"/api/simulate", "{not json", "JSON"},
		{"/api/live", LiveRequest{Command: "DEL", Count: 1, Limit: 1, Window: 1, Hold: 1}, "GCRA.THROTTLE"},
		{"/api/live", LiveRequest{Command: "FW.HIT", Count: 0, Limit: 1, Window: 1, Hold: 1}, "count"},
	} {
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

var groupRE = regexp.MustCompile(`data-algorithm="([^"]+)" data-admitted="(\d+)" data-refused="(\d+)" data-most="(\d+)"`)

// chartNumbers reads each algorithm's totals from a chart's attributes.
func chartNumbers(svg string) [][4]string {
	var out [][4]string
	for _, m := range groupRE.FindAllStringSubmatch(svg, -1) {
		out = append(out, [4]string{m[1], m[2], m[3], m[4]})
	}
	return out
}

func seriesNumbers(series []Series) [][4]string {
	var out [][4]string
	for _, se := range series {
		out = append(out, [4]string{se.Name, strconv.Itoa(se.Total[0]), strconv.Itoa(se.Total[1]), strconv.Itoa(se.MostIn)})
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

// The page in a real browser: headless Chromium loads it, runs the
// boundary scenario, and its table and chart show the numbers the
// endpoint returns for that scenario.
func TestPageInChromium(t *testing.T) {
	needServer(t)
	browser := ""
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			browser = p
			break
		}
	}
	if browser == "" && full {
		t.Fatal("no browser: install Debian's chromium (make chromium)")
	}
	if browser == "" {
		t.Skip("no browser: install Debian's chromium (make test does: make chromium)")
	}
	ts := httptest.NewServer(demo.Handler())
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir="+t.TempDir(), "--virtual-time-budget=20000", "--dump-dom",
		ts.URL+"/?autorun&pattern=boundary")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, errOut.String())
	}
	dom := out.String()
	if !strings.Contains(dom, `data-ran="yes"`) {
		t.Fatalf("the page did not run the scenario:\n%.2000s", dom)
	}
	want := seriesNumbers(simulate(t, DefaultScenario("boundary")).Series)
	if got := chartNumbers(dom); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the page's chart shows %v, the endpoint %v", got, want)
	}
	rowRE := regexp.MustCompile(`<tr data-algorithm="([^"]+)"><td>[^<]*</td><td class="num admitted" data-field="admitted">(\d+)</td><td class="num refused" data-field="refused">(\d+)</td><td class="num" data-field="most">([^<]+)</td>`)
	var rows [][4]string
	for _, m := range rowRE.FindAllStringSubmatch(dom, -1) {
		rows = append(rows, [4]string{m[1], m[2], m[3], m[4]})
	}
	for i := range want {
		if want[i][0] == "Concurrency" {
			want[i][3] = "—" // no per-window promise: the table shows a dash
		}
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("the page's table shows %v, the endpoint %v", rows, want)
	}
}
