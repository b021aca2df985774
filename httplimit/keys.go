package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
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
func Route() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern != "" {
			return r.Pattern, nil
		}
		return r.URL.Path, nil
	}
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
func Global() KeyFunc {
	return func(*http.Request) (string, error) { return "global", nil }
}
