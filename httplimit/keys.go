package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A KeyFunc names what a policy counts a request against: the client's
// address, an API key, the route. An empty key with a nil error means the
// policy does not apply to the request (no API key: no per-key limit); an
// error refuses it with 400.
type KeyFunc func(r *http.Request) (string, error)

// IPOptions says how ClientIP finds the client's address.
type IPOptions struct {
	// TrustedProxies are the proxies (CIDRs, "10.0.0.0/8") allowed to say
	// who the client is in X-Forwarded-For. With none, the address is the
	// connection's (RemoteAddr) and X-Forwarded-For is ignored: anyone can
	// write it.
	TrustedProxies []netip.Prefix
	// IPv6Prefix is how many leading bits of an IPv6 address name one
	// client: 64 by default, since one host is given a whole /64 and can
	// pick any address in it. 128 keys each address.
	IPv6Prefix int
}

// ErrNoClientIP means the request carries no usable client address.
var ErrNoClientIP = errors.New("httplimit: no client address")

// ClientIP keys a request by its client's address. The connection's peer
// is the client unless it is a trusted proxy; then X-Forwarded-For is read
// from right to left, skipping trusted proxies, and the first address not
// trusted is the client (whatever a client writes to the left of it gains
// nothing). IPv4-mapped IPv6 addresses are IPv4; IPv6 addresses are cut to
// their /64 (IPv6Prefix), except NAT64 addresses (64:ff9b::/96, RFC 6052),
// which are the IPv4 client they embed: 64:ff9b::cb00:7109 is
// 203.0.113.9. The key is the address or prefix as text: "203.0.113.9",
// "2001:db8:1:2::/64".
func ClientIP(o IPOptions) KeyFunc {
	bits := o.IPv6Prefix
	if bits <= 0 || bits > 128 {
		bits = 64
	}
	return func(r *http.Request) (string, error) {
		addr, ok := clientAddr(r, o.TrustedProxies)
		if !ok {
			return "", ErrNoClientIP
		}
		if nat64.Contains(addr) {
			b := addr.As16()
			addr = netip.AddrFrom4([4]byte(b[12:]))
		}
		if addr.Is4() || bits == 128 {
			return addr.String(), nil
		}
		p, err := addr.Prefix(bits)
		if err != nil {
			return "", ErrNoClientIP
		}
		return p.String(), nil
	}
}

// nat64 is the well-known NAT64 prefix: an IPv6 address in it is an IPv4
// client behind a NAT64 gateway, its address in the last 32 bits.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// clientAddr walks from the connection's peer through trusted proxies.
func clientAddr(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !isTrusted(peer, trusted) {
		return peer, true
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, ok := parseAddr(strings.TrimSpace(parts[j]))
			if !ok {
				return peer, true // garbage from here on: the last trusted hop's peer is all we know
			}
			if !isTrusted(a, trusted) {
				return a, true
			}
			peer = a
		}
	}
	return peer, true // every hop trusted: the leftmost one is the client
}

// parseAddr reads "ip", "ip:port", "[ipv6]:port", unmapping IPv4-in-IPv6.
func parseAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Header keys a request by a header's value (an API key, a tenant id),
// hashed (see Hash): a header may carry a secret, which must not become
// part of a Redis key name. A request without it is not counted by the
// policy.
func Header(name string) KeyFunc {
	return func(r *http.Request) (string, error) { return Hash(r.Header.Get(name)), nil }
}

// APIKey keys a request by its bearer token (Authorization: Bearer <key>),
// or by the header named when there is none (X-API-Key, say; "" for none),
// hashed (see Hash): a token is a secret, and anyone who can list Redis's
// keys (a replica, a backup, MONITOR) would otherwise read it.
func APIKey(header string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && v != "" {
			return Hash(v), nil
		}
		if header == "" {
			return "", nil
		}
		return Hash(r.Header.Get(header)), nil
	}
}

// Hash is how Header and APIKey hide a value before it becomes part of a
// Redis key: "h:" and the first 16 bytes (128 bits) of its SHA-256, in
// hex; "" stays "" (no key: the policy does not apply). Hash("k-123") is
// "h:3605a9e4358da4302f8acea41f0f52ce": 34 bytes whatever the value.
// A secret of high entropy (a token, an API key) cannot be recovered from
// it; a value of a few bits (a tenant id among ten) can be guessed, as it
// could be from any unkeyed hash. Use it in a KeyFunc of your own that
// reads a secret.
func Hash(v string) string {
	if v == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(v))
	return "h:" + hex.EncodeToString(sum[:16])
}

// Route keys a request by the pattern that matched it in an
// http.ServeMux ("GET /orders/{id}"), or by its path when there is none:
// one limit per endpoint, whatever the ids in the path.
func Route() KeyFunc { return routeKey }

// routeKey is Route's KeyFunc: a named function, so that a policy keyed by
// it is known to be shared (see concStatus).
func routeKey(r *http.Request) (string, error) {
	if r.Pattern != "" {
		return r.Pattern, nil
	}
	return r.URL.Path, nil
}

// Combine keys a request by several keys at once ("per API key per
// route"), joined by "|"; when one of them does not apply, the combination
// does not either.
func Combine(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, f := range fns {
			k, err := f(r)
			if err != nil || k == "" {
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(k)
		}
		return b.String(), nil
	}
}

// Global keys every request alike: one limit shared by every route and
// client, such as a cap on the requests running at once in the whole
// service (a concurrency policy keyed by Global).
func Global() KeyFunc { return globalKey }

// globalKey is Global's KeyFunc, named as routeKey is.
func globalKey(*http.Request) (string, error) { return "global", nil }

// Cookie keys a request by a cookie's value, a session id say, as
// r.Cookie(name) reads it, hashed (see Hash): a session id is a bearer
// secret. Cookie("sid") keys "Cookie: sid=abc" as Hash("abc"),
// "h:ba7816bf8f01cfea414140de5dae2223". A request without the cookie, or
// with it empty, is not counted by the policy; since a client can drop or
// rotate its cookie at will, a per-session limit paces well-behaved
// sessions, and a per-IP policy next to it is what holds back a client
// that sends none.
func Cookie(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		c, err := r.Cookie(name)
		if err != nil {
			return "", nil // http.ErrNoCookie: the policy does not apply
		}
		return Hash(c.Value), nil
	}
}

// Query keys a request by a URL query parameter's value as
// r.URL.Query().Get(param) reads it: the first one, unescaped, its name
// unescaped too ("?api%5Fkey=k%2D123" is api_key "k-123"); hashed (see
// Hash), since a query parameter may carry an API key. Query("api_key")
// keys "/v1/orders?api_key=k-123" as "h:3605a9e4358da4302f8acea41f0f52ce";
// without the parameter, or with it empty ("?api_key="), the policy does
// not apply. It scans the raw query rather than building the whole map:
// no allocation unless the value is escaped.
func Query(param string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.URL == nil {
			return "", nil
		}
		return Hash(queryValue(r.URL.RawQuery, param)), nil
	}
}

// queryMaxParams is net/url's default cap on a query's parameters: past
// it, url.ParseQuery (and so r.URL.Query) returns none.
const queryMaxParams = 10000

// queryValue is url.ParseQuery(raw).Get(param) without the map: pairs
// split at '&', one holding a ';' skipped, name and value split at the
// first '=', each query-unescaped, a pair failing to unescape skipped.
func queryValue(raw, param string) string {
	if strings.Count(raw, "&") >= queryMaxParams {
		v, _ := url.ParseQuery(raw) // the cap (and its GODEBUG) is net/url's to apply
		return v.Get(param)
	}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, err := url.QueryUnescape(k) // returns k itself, unallocated, when it holds no '%' or '+'
		if err != nil || k != param {
			continue
		}
		if v, err = url.QueryUnescape(v); err == nil {
			return v
		}
	}
	return ""
}

// maxFormBody bounds the form body that Form and Account read: 64 KiB,
// plenty for a login form.
const maxFormBody = 64 << 10

// Form keys a request by a field of its form body, the user name of a
// login form say, hashed (see Hash): as r.PostFormValue(field) reads it,
// the first value, from the body only, never the query string: the body
// of a POST, PUT or PATCH sent as application/x-www-form-urlencoded, or a
// multipart/form-data body. Form("username") keys a POST of
// "username=abc&password=…" as Hash("abc"),
// "h:ba7816bf8f01cfea414140de5dae2223". No form, no field, or an empty one
// (a GET, a JSON body, which Form leaves unread): the policy does not
// apply.
//
// The handler still reads the form: Form parses it into the request with
// net/http's own parser (r.PostForm, and r.MultipartForm for multipart)
// and the middleware passes that same *http.Request on, so the handler's
// r.FormValue, r.PostFormValue or r.ParseForm find it there; only the body
// itself is consumed, as it would be by the handler's first r.FormValue.
// A form parsed before the policy runs (an outer middleware, another
// policy's Form or Account) is read, not parsed again.
//
// The body is bounded: one not yet parsed is read through
// http.MaxBytesReader at 64 KiB, and a larger one, or a form that does not
// parse (a bad %-escape, a multipart body without its boundary), is an
// error: the middleware answers 400 naming the policy (Options.BadRequest;
// the error wraps an *http.MaxBytesError when the body was too large, for
// a BadRequest that would answer 413). The bound holds for the handler
// too, so keep Form to routes whose forms are small (a login, a
// sign-up), not to an upload's multipart body. Files in a multipart form
// under the bound stay in memory.
func Form(field string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v, err := postFormValue(r, field)
		return Hash(v), err
	}
}

// Account keys a login attempt by the account it targets: the form field
// naming it (a user name, an e-mail address), read as Form reads it, then
// normalized before it is hashed (see Hash): surrounding white space
// trimmed (strings.TrimSpace) and case folded, so "Alice@Example.com " and
// "alice@example.com" are one key, and the spellings a login would accept
// for one account share one budget. The folding is Unicode simple case
// folding, what strings.EqualFold compares by, rather than
// strings.ToLower: each rune becomes one representative of the runes
// EqualFold takes for it, its lower case where it has one, so 'K' (U+212A
// KELVIN SIGN) is 'k' and 'ſ' (U+017F LONG S) is 's', which ToLower
// leaves apart. It is not full case folding ("ß" is not "ss"), nor
// Unicode normalization (a decomposed "é" is not the composed one): a
// service that takes those for one account keys them with a KeyFunc of
// its own, normalizing and then calling Hash.
//
// It is the limit against credential stuffing. Pair it with a per-IP
// policy: an attacker spreading guesses at one account over many
// addresses (a botnet, 1000 addresses trying alice's password once each)
// is stopped by Account, whatever its addresses; one address trying many
// accounts once each (a list of leaked credentials), which no
// per-account budget sees twice, is stopped by the per-IP policy. For
// example, 10 attempts per account and 100 per address in 15 minutes:
//
//	httplimit.Policy{Name: "login-account", Limit: client.SlidingWindow(10, 15*time.Minute), Key: httplimit.Account("email")},
//	httplimit.Policy{Name: "login-ip", Limit: client.SlidingWindow(100, 15*time.Minute), Key: ip},
//
// With a Count charging only failures (1 for a 401, 0 otherwise), a user
// is not held back by their own successful logins. An attacker can still
// spend an account's budget and lock its owner out until the window ends:
// keep the limit generous, and Quiet, so it cannot be measured.
func Account(field string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v, err := postFormValue(r, field)
		return Hash(foldAccount(v)), err
	}
}

// foldAccount is how Account normalizes an account name: trimmed and
// simple-case-folded rune by rune (invalid UTF-8 becomes U+FFFD).
func foldAccount(s string) string {
	return strings.Map(foldRune, strings.TrimSpace(s))
}

// foldRune maps r to one representative of its case-folding orbit, the
// runes strings.EqualFold takes for it (unicode.SimpleFold's cycle): the
// orbit's least lower-case rune, or its least rune when none is lower case
// ('İ', U+0130, is alone in its orbit: not 'i'). So two runes fold alike
// exactly when EqualFold equates them; for ASCII that is the ASCII lower
// case.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	least, lower := r, rune(-1)
	for f := r; ; {
		least = min(least, f)
		if unicode.IsLower(f) && (lower < 0 || f < lower) {
			lower = f
		}
		if f = unicode.SimpleFold(f); f == r {
			break
		}
	}
	if lower >= 0 {
		return lower
	}
	return least
}

// postFormValue is r.PostFormValue(field) with the body bounded and the
// parse's errors reported: the form parsed by net/http into r (PostForm,
// MultipartForm), for the handler to read after.
func postFormValue(r *http.Request, field string) (string, error) {
	// Which body is a form is net/http's rule: the media type, its
	// parameters' errors aside (ParseForm reads a body of
	// "application/x-www-form-urlencoded; bad" too).
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/x-www-form-urlencoded":
		if r.Method != "POST" && r.Method != "PUT" && r.Method != "PATCH" {
			return "", nil // ParseForm reads no other method's body
		}
		if r.PostForm == nil {
			if r.Body == nil {
				return "", nil
			}
			if err := limitFormBody(r); err != nil {
				return "", err
			}
			// Only the body counts: with r.Form set, ParseForm parses the
			// body alone, and a bad query string is no error of the
			// policy's. r.Form is then put back as it was, so the
			// handler's ParseForm builds it from PostForm and the query
			// as it always does.
			form := r.Form
			if form == nil {
				r.Form = url.Values{}
			}
			err := r.ParseForm()
			r.Form = form
			if err != nil {
				return "", formError(err)
			}
		}
	case "multipart/form-data":
		// ParseMultipartForm reads a multipart body whatever the method,
		// and r.PostFormValue then finds its fields: so does Form.
		if r.MultipartForm == nil {
			if r.Body == nil {
				return "", nil
			}
			if err := limitFormBody(r); err != nil {
				return "", err
			}
			// An error with the form parsed is ParseForm's, about the
			// query string: not the policy's.
			if err := r.ParseMultipartForm(maxFormBody); err != nil && r.MultipartForm == nil {
				return "", formError(err)
			}
		}
	default:
		return "", nil // not a form: the body is the handler's, unread
	}
	return r.PostForm.Get(field), nil
}

// limitFormBody refuses a body declared over maxFormBody and bounds the
// rest: reading past maxFormBody fails with an *http.MaxBytesError.
func limitFormBody(r *http.Request) error {
	if r.ContentLength > maxFormBody {
		return formError(&http.MaxBytesError{Limit: maxFormBody})
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxFormBody)
	return nil
}

// formError says why a form could not be read: too large, or not a form.
func formError(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return fmt.Errorf("httplimit: form body over %d KiB: %w", maxFormBody>>10, err)
	}
	return fmt.Errorf("httplimit: unreadable form: %w", err)
}
