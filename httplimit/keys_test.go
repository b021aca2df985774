package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, c := range []struct {
		what    string
		remote  string
		xff     []string
		trusted []netip.Prefix
		bits    int
		want    string
	}{
		{"the peer", "203.0.113.9:5555", nil, nil, 0, "203.0.113.9"},
		{"an untrusted peer's X-Forwarded-For is ignored", "203.0.113.9:5555", []string{"198.51.100.1"}, trusted, 0, "203.0.113.9"},
		{"no proxies trusted: X-Forwarded-For is ignored", "10.0.0.1:5555", []string{"198.51.100.1"}, nil, 0, "10.0.0.1"},
		{"a trusted proxy names the client", "10.0.0.1:5555", []string{"198.51.100.1"}, trusted, 0, "198.51.100.1"},
		{"right to left, past trusted proxies", "10.0.0.1:5555", []string{"6.6.6.6, 198.51.100.1, 10.0.0.7"}, trusted, 0, "198.51.100.1"},
		{"a spoofed left part gains nothing", "10.0.0.1:5555", []string{"1.2.3.4", "198.51.100.1"}, trusted, 0, "198.51.100.1"},
		{"every hop trusted: the leftmost", "10.0.0.1:5555", []string{"10.0.0.9, 10.0.0.8"}, trusted, 0, "10.0.0.9"},
		{"garbage after the trusted hops", "10.0.0.1:5555", []string{"not-an-ip"}, trusted, 0, "10.0.0.1"},
		{"IPv4-mapped IPv6 is IPv4", "[::ffff:203.0.113.9]:5555", nil, nil, 0, "203.0.113.9"},
		{"IPv6 by its /64", "[2001:db8:1:2:3:4:5:6]:5555", nil, nil, 0, "2001:db8:1:2::/64"},
		{"IPv6 by its /48", "[2001:db8:1:2:3:4:5:6]:5555", nil, nil, 48, "2001:db8:1::/48"},
		{"IPv6 by address", "[2001:db8:1:2:3:4:5:6]:5555", nil, nil, 128, "2001:db8:1:2:3:4:5:6"},
		{"IPv6 behind a trusted proxy", "[::1]:5555", []string{"2001:db8:1:2::99"}, trusted, 0, "2001:db8:1:2::/64"},
		{"a zone is dropped", "[fe80::1%eth0]:5555", nil, nil, 128, "fe80::1"},
		{"NAT64 is the IPv4 client it embeds", "[64:ff9b::cb00:7109]:5555", nil, nil, 0, "203.0.113.9"},
		{"NAT64 behind a trusted proxy", "10.0.0.1:5555", []string{"64:ff9b::c633:6401"}, trusted, 0, "198.51.100.1"},
		{"next to NAT64's /96: an IPv6 client", "[64:ff9b:1::cb00:7109]:5555", nil, nil, 0, "64:ff9b:1::/64"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		got, err := ClientIP(IPOptions{TrustedProxies: c.trusted, IPv6Prefix: c.bits})(r)
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.what, got, err, c.want)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "pipe"
	if _, err := ClientIP(IPOptions{})(r); err != ErrNoClientIP {
		t.Errorf("no address: %v", err)
	}
}

func TestKeyFuncs(t *testing.T) {
	r := httptest.NewRequest("GET", "/orders/42", nil)
	r.Header.Set("Authorization", "Bearer k-123")
	r.Header.Set("X-Tenant", "acme")
	for _, c := range []struct {
		f    KeyFunc
		want string
	}{
		{Header("X-Tenant"), "h:822b33ad87c148a0a20a5ba7cd5ebcaa"},
		{Header("X-Missing"), ""},
		{APIKey("X-API-Key"), "h:3605a9e4358da4302f8acea41f0f52ce"}, // printf %s k-123 | sha256sum
		{Route(), "/orders/42"},
		{Combine(Header("X-Tenant"), APIKey("")), "h:822b33ad87c148a0a20a5ba7cd5ebcaa|h:3605a9e4358da4302f8acea41f0f52ce"},
		{Combine(Header("X-Tenant"), Header("X-Missing")), ""},
	} {
		if got, err := c.f(r); err != nil || got != c.want {
			t.Errorf("got %q %v, want %q", got, err, c.want)
		}
	}
	r2 := httptest.NewRequest("GET", "/", nil)
	r2.Header.Set("X-API-Key", "k-9")
	if got, _ := APIKey("X-API-Key")(r2); got != "h:fd39db8832fbb2b6befadd4f9046b971" {
		t.Errorf("X-API-Key: %q", got)
	}

	// Route reads the pattern that matched.
	mux := http.NewServeMux()
	var pattern string
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) { pattern, _ = Route()(r) })
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/orders/7", nil))
	if pattern != "GET /orders/{id}" {
		t.Errorf("route %q", pattern)
	}
}
