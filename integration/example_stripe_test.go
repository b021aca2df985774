package integration

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// examples/stripe as its users run it: built from its module, started
// against a server with the module, then driven by its own -load mode,
// whose report says what each of Stripe's four limiters did. Counts, never
// times: the holds are seconds long, and the per-user rate refills one a
// second, so a slow machine changes no assertion.
func TestExampleStripe(t *testing.T) {
	s := startFor(t, flavors[1], opts{module: true})
	bin := buildExample(t, "stripe")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	// The limits, the same for the server and the load: a rate of one a
	// second keeps user A's refusals whatever the machine's pace; a
	// timeout of a second keeps a busy Redis from failing requests open.
	limits := []string{"-rate", "1", "-burst", "20", "-concurrency", "3", "-fleet-rate", "20", "-fleet-reserve", "0.2", "-max-in-flight", "20"}
	ex := startExample(t, bin, append([]string{"-listen", listen, "-redis", s.addr(), "-on-error", "open", "-timeout", "1s"}, limits...)...)
	base := "http://" + listen
	waitFor(t, 10*time.Second, "examples/stripe to serve", func() bool {
		resp, err := http.Get(base + "/v1/balance") // no API key: 401, and no user's quota spent
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusUnauthorized
	})

	// The per-user policies are stated, the fleet (quiet) is not.
	resp := get(t, base+"/v1/balance", "X-API-Key", "sk_live_headers")
	policy, state := resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit")
	if resp.StatusCode != 200 || !strings.Contains(policy, `"rate";q=20`) || !strings.Contains(policy, `"concurrency";q=3`) ||
		strings.Contains(policy+state, "fleet") || resp.Header.Get("X-RateLimit-Limit") != "20" {
		t.Fatalf("a request: %d %v", resp.StatusCode, resp.Header)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	load := exec.CommandContext(ctx, bin, append([]string{"-load", base}, limits...)...)
	out, err := load.CombinedOutput()
	t.Logf("examples/stripe -load:\n%s", out)
	if err != nil {
		t.Fatalf("-load: %v", err)
	}
	report := parseLoad(t, string(out))
	want := func(scenario, group string, ok func(c map[int]int) bool, what string) {
		t.Helper()
		c, found := report[scenario][group]
		if !found || !ok(c) {
			t.Errorf("%s, %s: %v; want %s", scenario, group, c, what)
		}
	}
	only := func(c map[int]int, statuses ...int) bool {
		n := 0
		for _, s := range statuses {
			n += c[s]
		}
		return n == total(c)
	}

	// 1. Request rate limiter: user A's burst passes, then 429; user B,
	// meanwhile, is served.
	want("rate", "user-a", func(c map[int]int) bool { return c[200] >= 20 && c[429] >= 10 && total(c) == 40 && only(c, 200, 429) },
		"its burst of 20 served, at least 10 of the 40 refused 429, nothing else")
	want("rate", "user-b", func(c map[int]int) bool { return c[200] == 5 && total(c) == 5 }, "all 5 served")
	// 2. Concurrent requests limiter: of 8 at once, some hold the slots,
	// the others are refused 429 (the user's share, not 503); once they
	// end, the user is served again.
	want("concurrency", "at-once", func(c map[int]int) bool {
		return c[200] >= 1 && c[200] <= 3 && c[429] >= 5 && total(c) == 8 && only(c, 200, 429)
	}, "at most 3 served, the rest refused 429")
	want("concurrency", "after", func(c map[int]int) bool { return c[200] == 1 && total(c) == 1 }, "served")
	// 4. Worker utilization load shedder: 16 of 20 in flight, test mode
	// and GETs are shed 503, other POSTs and critical ones served.
	want("workers", "holders", func(c map[int]int) bool { return c[200] == 16 && total(c) == 16 }, "16 in flight")
	want("workers", "critical", func(c map[int]int) bool { return c[200] == 3 && total(c) == 3 }, "all 3 served")
	want("workers", "default", func(c map[int]int) bool { return c[200] == 3 && total(c) == 3 }, "all 3 served")
	want("workers", "low", func(c map[int]int) bool { return c[503] == 3 && total(c) == 3 }, "all 3 shed 503")
	want("workers", "lowest", func(c map[int]int) bool { return c[503] == 4 && total(c) == 4 }, "all 4 shed 503")
	// 3. Fleet usage load shedder: down to the reserve, the others are
	// shed 503, critical requests still pass.
	want("fleet", "others", func(c map[int]int) bool { return c[200] >= 1 && c[503] >= 20 && only(c, 200, 503) },
		"served, then at least 20 shed 503, nothing else")
	want("fleet", "critical", func(c map[int]int) bool { return c[200] == 5 && total(c) == 5 }, "all 5 served")
	if t.Failed() {
		return
	}

	ex.stop(t)
}

// loadLine is one scenario's line of -load's report:
// "rate: user-a 200×20 429×20, user-b 200×5".
var (
	loadLine  = regexp.MustCompile(`^([a-z]+): (.+)$`)
	loadGroup = regexp.MustCompile(`^([a-z-]+) ((?:\d{3}×\d+ ?)+)$`)
	loadCount = regexp.MustCompile(`(\d{3})×(\d+)`)
)

// parseLoad reads -load's report: scenario, group, status: count.
func parseLoad(t *testing.T, out string) map[string]map[string]map[int]int {
	t.Helper()
	report := map[string]map[string]map[int]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := loadLine.FindStringSubmatch(line)
		if m == nil {
			continue // a note, as the fleet's refill wait
		}
		groups := map[string]map[int]int{}
		for _, g := range strings.Split(m[2], ", ") {
			gm := loadGroup.FindStringSubmatch(g)
			if gm == nil {
				t.Fatalf("-load: cannot read %q in %q", g, line)
			}
			c := map[int]int{}
			for _, sm := range loadCount.FindAllStringSubmatch(gm[2], -1) {
				status, _ := strconv.Atoi(sm[1])
				n, _ := strconv.Atoi(sm[2])
				c[status] = n
			}
			groups[gm[1]] = c
		}
		report[m[1]] = groups
	}
	for _, s := range []string{"rate", "concurrency", "workers", "fleet"} {
		if report[s] == nil {
			t.Fatalf("-load reported no %s scenario:\n%s", s, out)
		}
	}
	return report
}

// total is the responses counted.
func total(c map[int]int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}
