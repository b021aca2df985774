package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/httplimit"
)

// A login form keyed by the account it targets: two spellings of one
// address are one key, another address is another, and a GET carries no
// account. Paired with a per-IP policy, as Account says.
func ExampleAccount() {
	account := httplimit.Account("email")
	login := func(email string) string {
		r := httptest.NewRequest("POST", "/login", strings.NewReader("email="+email+"&password=hunter2"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		k, err := account(r)
		if err != nil {
			return err.Error()
		}
		return k
	}
	fmt.Println(login("Alice@Example.com+")) // "Alice@Example.com "
	fmt.Println(login("alice@example.com"))
	fmt.Println(login("bob@example.com"))
	k, err := account(httptest.NewRequest("GET", "/login?email=alice@example.com", nil))
	fmt.Printf("a GET: %q %v\n", k, err)

	_ = []httplimit.Policy{
		{Name: "login-account", Limit: client.SlidingWindow(10, 15*time.Minute), Key: account},
		{Name: "login-ip", Limit: client.SlidingWindow(100, 15*time.Minute), Key: httplimit.ClientIP(httplimit.IPOptions{})},
	}
	// Output:
	// h:ff8d9819fc0e12bf0d24892e45987e24
	// h:ff8d9819fc0e12bf0d24892e45987e24
	// h:5ff860bf1190596c7188ab851db691f0
	// a GET: "" <nil>
}

// Form reads the form into the request; the handler, passed the same
// request, reads it there. A body over 64 KiB is an error: the middleware
// answers 400.
func ExampleForm() {
	user := httplimit.Form("username")
	r := httptest.NewRequest("POST", "/login", strings.NewReader("username=abc&password=hunter2"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	k, err := user(r)
	fmt.Println(k, err)
	fmt.Println(k == httplimit.Hash("abc"))
	fmt.Println("the handler reads:", r.FormValue("username"), r.FormValue("password"))

	big := httptest.NewRequest("POST", "/login", strings.NewReader("username=abc&pad="+strings.Repeat("x", 64<<10)))
	big.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	_, err = user(big)
	fmt.Println(err)
	// Output:
	// h:ba7816bf8f01cfea414140de5dae2223 <nil>
	// true
	// the handler reads: abc hunter2
	// httplimit: form body over 64 KiB: http: request body too large
}

// A session cookie, hashed; no cookie, no key.
func ExampleCookie() {
	session := httplimit.Cookie("sid")
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(&http.Cookie{Name: "sid", Value: "abc"})
	show := func(k string, err error) { fmt.Printf("%q %v\n", k, err) }
	show(session(r))
	show(session(httptest.NewRequest("GET", "/", nil)))
	// Output:
	// "h:ba7816bf8f01cfea414140de5dae2223" <nil>
	// "" <nil>
}

// An API key in the query string, hashed, as r.URL.Query().Get reads it.
func ExampleQuery() {
	key := httplimit.Query("api_key")
	show := func(k string, err error) { fmt.Printf("%q %v\n", k, err) }
	show(key(httptest.NewRequest("GET", "/v1/orders?api_key=k-123", nil)))
	show(key(httptest.NewRequest("GET", "/v1/orders?api%5Fkey=k%2D123&api_key=other", nil))) // the first, unescaped
	show(key(httptest.NewRequest("GET", "/v1/orders?page=2", nil)))
	// Output:
	// "h:3605a9e4358da4302f8acea41f0f52ce" <nil>
	// "h:3605a9e4358da4302f8acea41f0f52ce" <nil>
	// "" <nil>
}
