package rls

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestJSON: /json answers a request in JSON as ShouldRateLimit does, 200
// when OK and 429 when over the limit, and 400 to a body that is no
// request or a request the service refuses, as the peer's; 503 when Redis
// could not decide.
func TestJSON(t *testing.T) {
	s, _ := onFake(t, stepsConfig, Options{})
	srv := httptest.NewServer(JSONHandler(s))
	defer srv.Close()
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.Join(strings.Fields(string(b)), " ")
	}
	req := `{"domain": "d", "descriptors": [{"entries": [{"key": "fw", "value": "j"}]}]}`
	for i, want := range []struct {
		code int
		body string
	}{
		{200, `"limitRemaining":1`},
		{200, `"overallCode":"OK"`},
		{429, `"overallCode":"OVER_LIMIT"`},
	} {
		code, body := post(req)
		if code != want.code || !strings.Contains(strings.ReplaceAll(body, " ", ""), want.body) {
			t.Errorf("request %d: %d %s, want %d and %s", i, code, body, want.code, want.body)
		}
	}
	// Redis refusing connections: 503, where the peer answers 400.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	down := httptest.NewServer(JSONHandler(onClient(t, rdb, stepsConfig, Options{Timeout: time.Second}, time.Now)))
	defer down.Close()
	resp, err := http.Post(down.URL, "application/json", strings.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("Redis down: %d, want 503", resp.StatusCode)
	}
	for _, bad := range []string{`{"domain": `, `{"domain": "d", "descriptors": []}`, `{"domain": "d", "nonsense": 1}`} {
		if code, body := post(bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", bad, code, body)
		}
	}
}
