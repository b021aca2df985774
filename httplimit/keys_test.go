package httplimit

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
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

func TestCookieKey(t *testing.T) {
	abc := Hash("abc")
	if abc != "h:ba7816bf8f01cfea414140de5dae2223" { // printf %s abc | sha256sum
		t.Fatalf("Hash(abc) = %q", abc)
	}
	for _, c := range []struct {
		what   string
		cookie string // the Cookie header, none when ""
		want   string
	}{
		{"the session id, hashed", "sid=abc", abc},
		{"among others", "theme=dark; sid=abc; lang=en", abc},
		{"the first of two", "sid=abc; sid=def", abc},
		{"quoted", `sid="abc"`, abc},
		{"no cookie", "", ""},
		{"another cookie only", "theme=dark", ""},
		{"empty", "sid=", ""},
		{"a name that only starts alike", "sidx=abc", ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.cookie != "" {
			r.Header.Set("Cookie", c.cookie)
		}
		if got, err := Cookie("sid")(r); err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.what, got, err, c.want)
		}
	}
}

func TestQueryKey(t *testing.T) {
	for _, c := range []struct {
		what  string
		query string
		want  string // before Hash
	}{
		{"the value", "api_key=abc", "abc"},
		{"among others", "page=2&api_key=abc&sort=id", "abc"},
		{"the first of two", "api_key=abc&api_key=def", "abc"},
		{"absent", "page=2", ""},
		{"no query", "", ""},
		{"empty", "api_key=&page=2", ""},
		{"a name alone", "api_key", ""},
		{"an empty first, then one", "api_key=&api_key=abc", ""},
		{"a value unescaped", "api_key=a%2Bb+c%3D", "a+b c="},
		{"a name unescaped", "api%5Fkey=abc", "abc"},
		{"a '+' in the name is a space", "api+key=abc", ""},
		{"a value holding '='", "api_key=a=b", "a=b"},
		{"a pair with ';' skipped", "api_key=abc;x=1&api_key=def", "def"},
		{"a bad escape skipped", "api_key=%zz&api_key=abc", "abc"},
		{"a bad escape in a name skipped", "api_key%=x&api_key=abc", "abc"},
		{"empty pairs", "&&api_key=abc&", "abc"},
		{"a longer name", "api_keys=abc", ""},
		{"names are case sensitive", "API_KEY=abc", ""},
		{"past net/url's 10000 parameters, none", strings.Repeat("a=1&", 10000) + "api_key=abc", ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.URL.RawQuery = c.query
		got, err := Query("api_key")(r)
		if err != nil || got != Hash(c.want) {
			t.Errorf("%s: %q %v, want Hash(%q) = %q", c.what, got, err, c.want, Hash(c.want))
		}
		if std := Hash(r.URL.Query().Get("api_key")); got != std {
			t.Errorf("%s: %q, but r.URL.Query().Get gives %q", c.what, got, std)
		}
	}
	r := httptest.NewRequest("GET", "/v1/orders?api_key=k-123", nil)
	if got, _ := Query("api_key")(r); got != "h:3605a9e4358da4302f8acea41f0f52ce" {
		t.Errorf("k-123: %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { queryValue("page=2&sort=id&api_key=k-123&x=y", "api_key") }); n != 0 {
		t.Errorf("an unescaped value: %v allocations, want none", n)
	}
}

// FuzzQueryValue: queryValue reads what url.ParseQuery(raw).Get does.
func FuzzQueryValue(f *testing.F) {
	for _, s := range []string{"k=v", "k=a&k=b", "k;=v&k=w", "%6b=v", "k=%zz&k=v", "k+=v", "k=%", "=v&k", "&k=v&"} {
		f.Add(s, "k")
	}
	f.Fuzz(func(t *testing.T, raw, param string) {
		q, _ := url.ParseQuery(raw)
		if got, want := queryValue(raw, param), q.Get(param); got != want {
			t.Errorf("queryValue(%q, %q) = %q, want %q", raw, param, got, want)
		}
	})
}

// multipartBody is a multipart/form-data body of fields, and its
// Content-Type.
func multipartBody(t *testing.T, fields ...string) (string, string) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := w.WriteField(fields[i], fields[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String(), w.FormDataContentType()
}

const formType = "application/x-www-form-urlencoded"

func TestFormKey(t *testing.T) {
	mp, mpType := multipartBody(t, "username", "abc", "password", "pw")
	bigMP, bigMPType := multipartBody(t, "username", "abc", "bio", strings.Repeat("x", 64<<10))
	atLimit := "username=abc&pad=" + strings.Repeat("x", 64<<10-len("username=abc&pad="))
	for _, c := range []struct {
		what     string
		method   string
		target   string
		ctype    string
		body     string
		unsized  bool   // sent chunked: no Content-Length
		want     string // before Hash
		tooLarge bool   // an error wrapping *http.MaxBytesError
		bad      bool   // another error
	}{
		{"a login form", "POST", "/login", formType, "username=abc&password=pw", false, "abc", false, false},
		{"with a charset", "POST", "/login", formType + "; charset=utf-8", "username=abc", false, "abc", false, false},
		{"escaped", "POST", "/login", formType, "username=a%40b+c", false, "a@b c", false, false},
		{"the first of two", "POST", "/login", formType, "username=abc&username=def", false, "abc", false, false},
		{"PUT", "PUT", "/login", formType, "username=abc", false, "abc", false, false},
		{"PATCH", "PATCH", "/login", formType, "username=abc", false, "abc", false, false},
		{"multipart", "POST", "/login", mpType, mp, false, "abc", false, false},
		{"multipart, chunked", "POST", "/login", mpType, mp, true, "abc", false, false},
		{"absent", "POST", "/login", formType, "password=pw", false, "", false, false},
		{"empty", "POST", "/login", formType, "username=&password=pw", false, "", false, false},
		{"an empty body", "POST", "/login", formType, "", false, "", false, false},
		{"a GET without body", "GET", "/login", "", "", false, "", false, false},
		{"the query string does not count", "GET", "/login?username=abc", "", "", false, "", false, false},
		{"nor next to a body", "POST", "/login?username=abc", formType, "password=pw", false, "", false, false},
		{"the body wins over the query", "POST", "/login?username=evil", formType, "username=abc", false, "abc", false, false},
		{"a bad query string is not the policy's", "POST", "/login?%zz", formType, "username=abc", false, "abc", false, false},
		{"nor with multipart", "POST", "/login?%zz", mpType, mp, false, "abc", false, false},
		{"a DELETE's form is not read", "DELETE", "/login", formType, "username=abc", false, "", false, false},
		{"a JSON body is not a form", "POST", "/login", "application/json", `{"username":"abc"}`, false, "", false, false},
		{"no Content-Type is not a form", "POST", "/login", "", "username=abc", false, "", false, false},
		{"64 KiB", "POST", "/login", formType, atLimit, false, "abc", false, false},
		{"64 KiB, chunked", "POST", "/login", formType, atLimit, true, "abc", false, false},
		{"over 64 KiB", "POST", "/login", formType, atLimit + "x", false, "", true, false},
		{"over 64 KiB, chunked", "POST", "/login", formType, atLimit + "x", true, "", true, false},
		{"multipart over 64 KiB", "POST", "/login", bigMPType, bigMP, false, "", true, false},
		{"multipart over 64 KiB, chunked", "POST", "/login", bigMPType, bigMP, true, "", true, false},
		{"a bad escape", "POST", "/login", formType, "username=%zz", false, "", false, true},
		{"a bad media parameter", "POST", "/login", formType + "; charset", "username=abc", false, "", false, true},
		{"multipart without its boundary", "POST", "/login", "multipart/form-data", mp, false, "", false, true},
		{"multipart cut short", "POST", "/login", mpType, mp[:len(mp)-10], false, "", false, true},
	} {
		r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
		if c.unsized {
			r.ContentLength = -1
			r.Body = io.NopCloser(strings.NewReader(c.body)) // not a *strings.Reader: read to its end to know its size
		}
		if c.ctype != "" {
			r.Header.Set("Content-Type", c.ctype)
		}
		got, err := Form("username")(r)
		var mbe *http.MaxBytesError
		switch {
		case c.tooLarge:
			if !errors.As(err, &mbe) || mbe.Limit != 64<<10 || got != "" {
				t.Errorf("%s: %q %v, want a *http.MaxBytesError of 64 KiB", c.what, got, err)
			} else if !strings.Contains(err.Error(), "form body over 64 KiB") {
				t.Errorf("%s: %v", c.what, err)
			}
		case c.bad:
			if err == nil || errors.As(err, &mbe) || got != "" || !strings.HasPrefix(err.Error(), "httplimit: unreadable form: ") {
				t.Errorf("%s: %q %v, want an unreadable form", c.what, got, err)
			}
		default:
			if err != nil || got != Hash(c.want) {
				t.Errorf("%s: %q %v, want Hash(%q) = %q", c.what, got, err, c.want, Hash(c.want))
			}
		}
	}
}

// TestFormKeyLeavesTheFormToTheHandler: after Form has run, the handler
// reads the form as it would have without it: r.FormValue,
// r.PostFormValue and r.Form (query and body, in net/http's order) alike.
func TestFormKeyLeavesTheFormToTheHandler(t *testing.T) {
	mp, mpType := multipartBody(t, "username", "abc", "password", "pw", "next", "/home")
	for _, c := range []struct {
		what, target, ctype, body string
	}{
		{"a form", "/login?next=/q", formType, "username=abc&password=pw&next=/home"},
		{"multipart", "/login?next=/q", mpType, mp},
		{"a bad query string", "/login?next=/q&%zz", formType, "username=abc&password=pw&next=/home"},
		{"a JSON body", "/login?next=/q", "application/json", `{"username":"abc"}`},
	} {
		newReq := func() *http.Request {
			r := httptest.NewRequest("POST", c.target, strings.NewReader(c.body))
			r.Header.Set("Content-Type", c.ctype)
			return r
		}
		r, plain := newReq(), newReq()
		if _, err := Form("username")(r); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if _, err := Account("username")(r); err != nil { // a second policy reads the parsed form
			t.Fatalf("%s: %v", c.what, err)
		}
		if c.ctype == "application/json" {
			if b, err := io.ReadAll(r.Body); err != nil || string(b) != c.body {
				t.Errorf("%s: the handler reads %q %v", c.what, b, err)
			}
			continue
		}
		for _, f := range []string{"username", "password", "next"} {
			if got, want := r.FormValue(f), plain.FormValue(f); got != want || got == "" {
				t.Errorf("%s: FormValue(%s) %q, want %q", c.what, f, got, want)
			}
			if got, want := r.PostFormValue(f), plain.PostFormValue(f); got != want || got == "" {
				t.Errorf("%s: PostFormValue(%s) %q, want %q", c.what, f, got, want)
			}
		}
		if next := r.Form["next"]; r.FormValue("username") != "abc" || len(next) != 2 || !slices.Contains(next, "/q") || r.PostFormValue("next") != "/home" {
			t.Errorf("%s: username %q, next %q, in the body %q", c.what, r.FormValue("username"), next, r.PostFormValue("next"))
		}
		if !reflect.DeepEqual(r.Form, plain.Form) || !reflect.DeepEqual(r.PostForm, plain.PostForm) {
			t.Errorf("%s: Form %v PostForm %v, want %v %v", c.what, r.Form, r.PostForm, plain.Form, plain.PostForm)
		}
	}
}

func TestAccountKey(t *testing.T) {
	key := func(body string) string {
		t.Helper()
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		r.Header.Set("Content-Type", formType)
		k, err := Account("email")(r)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return k
	}
	alice := Hash("alice@example.com")
	for _, c := range []struct {
		body, want string
	}{
		{"email=alice@example.com", alice},
		{"email=Alice@Example.com+", alice}, // "Alice@Example.com "
		{"email=%20%09ALICE@EXAMPLE.COM%0A", alice},
		{"email=%C2%A0alice@example.com", alice}, // a leading no-break space
		{"email=bob@example.com", Hash("bob@example.com")},
		{"email=alice%40example.com&email=bob", alice}, // the first
		{"email=", ""},
		{"email=+++", ""}, // spaces only
		{"password=pw", ""},
	} {
		if got := key(c.body); got != c.want {
			t.Errorf("%s: %q, want %q", c.body, got, c.want)
		}
	}
	if key("email=alice@example.com") == key("email=bob@example.com") {
		t.Error("two accounts, one key")
	}
	if key("email=alice@example.com") == key("email=alice@example.org") {
		t.Error("two accounts differing in the domain, one key")
	}
	// Unicode simple folding: the Kelvin sign is a 'k', the long s an 's',
	// Greek sigma in its three forms one letter; "ß" is not "ss".
	for _, same := range [][2]string{
		{"email=mi%E2%84%AAe", "email=mike"},                     // miKe with U+212A
		{"email=%C5%BFam", "email=SAM"},                          // ſam
		{"email=%CE%A3%CE%BF%CF%82", "email=%CF%83%CE%BF%CF%83"}, // Σος, σοσ
		{"email=STRASSE", "email=strasse"},
		{"email=%C3%89MILE", "email=%C3%A9mile"}, // Émile, émile
	} {
		if a, b := key(same[0]), key(same[1]); a != b || a == "" {
			t.Errorf("%s and %s: %q and %q, want one key", same[0], same[1], a, b)
		}
	}
	for _, differ := range [][2]string{
		{"email=stra%C3%9Fe", "email=strasse"},    // straße
		{"email=e%CC%81mile", "email=%C3%A9mile"}, // decomposed é: no normalization
		{"email=alice", "email=al+ice"},
	} {
		if a, b := key(differ[0]), key(differ[1]); a == b {
			t.Errorf("%s and %s: one key %q", differ[0], differ[1], a)
		}
	}
	// Account reads the body as Form does: errors alike.
	r := httptest.NewRequest("POST", "/login", strings.NewReader("email="+strings.Repeat("a", 64<<10)))
	r.Header.Set("Content-Type", formType)
	var mbe *http.MaxBytesError
	if k, err := Account("email")(r); !errors.As(err, &mbe) || k != "" {
		t.Errorf("over 64 KiB: %q %v", k, err)
	}
	if k, err := Account("email")(httptest.NewRequest("GET", "/login?email=alice", nil)); err != nil || k != "" {
		t.Errorf("a GET: %q %v", k, err)
	}
}

// TestAccountFoldRune: foldRune folds two runes alike exactly when
// strings.EqualFold takes them for one, over all of Unicode.
func TestAccountFoldRune(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if 0xD800 <= r && r <= 0xDFFF {
			continue // surrogates: never a rune of a string
		}
		f := foldRune(r)
		if !strings.EqualFold(string(r), string(f)) {
			t.Fatalf("%U folds to %U, not EqualFold", r, f)
		}
		for o := unicode.SimpleFold(r); o != r; o = unicode.SimpleFold(o) {
			if foldRune(o) != f {
				t.Fatalf("%U folds to %U, %U of its orbit to %U", r, f, o, foldRune(o))
			}
		}
		if r < 0x80 && f != unicode.ToLower(r) {
			t.Fatalf("ASCII %q folds to %q", r, f)
		}
	}
}

// TestAccountOnFake: through the middleware, on the fake Redis: two
// spellings of one account share its budget of 2, another account has
// its own, the handler reads the form the policy read, no Redis key holds
// the e-mail address, and a body over 64 KiB is answered 400 naming the
// policy without reaching the handler.
func TestAccountOnFake(t *testing.T) {
	f := fakeredis.New()
	t0 := time.Unix(1_700_000_000, 0)
	f.Clock = func() time.Time { return t0 }
	lim, err := New(f.Client(), Options{OnError: FailClosed, Logger: slog.New(slog.DiscardHandler)},
		Policy{Name: "login-account", Limit: client.FixedWindow(2, time.Minute), Key: Account("email")},
		Policy{Name: "login-ip", Limit: client.FixedWindow(100, time.Minute), Key: ClientIP(IPOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.FormValue("email")+"/"+r.FormValue("password"))
	})))
	defer srv.Close()
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/login", formType, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i, c := range []struct {
		body string
		code int
	}{
		{"email=Alice@Example.com+&password=1", 200},
		{"email=alice@example.com&password=2", 200},
		{"email=ALICE@example.com&password=3", 429},
		{"email=bob@example.com&password=4", 200},
	} {
		if code, body := post(c.body); code != c.code {
			t.Fatalf("attempt %d (%s): %d %s, want %d", i+1, c.body, code, body, c.code)
		}
	}
	if want := []string{"Alice@Example.com /1", "alice@example.com/2", "bob@example.com/4"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("the handler read %q, want %q", seen, want)
	}
	for _, k := range f.Keys() {
		if strings.Contains(strings.ToLower(k), "example.com") {
			t.Errorf("Redis key %q holds the address", k)
		}
	}
	code, body := post("email=carol@example.com&pad=" + strings.Repeat("x", 64<<10))
	if code != 400 || !strings.Contains(body, "login-account") || !strings.Contains(body, "64 KiB") {
		t.Errorf("over 64 KiB: %d %s", code, body)
	}
	if len(seen) != 3 {
		t.Errorf("the handler ran for the request over 64 KiB: %q", seen)
	}
}
