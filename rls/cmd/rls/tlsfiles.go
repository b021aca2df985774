package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// tlsFiles is a certificate and its key, and the CA that signs the other
// side's certificates, read from files, and read again when one of them
// changes (a Kubernetes secret's files are replaced in place): each
// handshake looks at the files' sizes and times, at most once a second.
//
// A pair is held to the clock (its leaf's NotBefore and NotAfter) and,
// where it has one, to its issuer: the CA file named for the pair's own
// certificate (issuer; the gRPC server's GRPC_SERVER_TLS_CA_CERT), else
// the CA of its link (ca) when the pair it started with was signed by it
// (see start). A pair that fails at start is an error naming its setting;
// a changed one that fails (expired, not yet valid, of another CA, or not
// loading at all: a certificate written before its key) is refused: the
// pair in force stays, the refusal is logged and counted once, and a pair
// not yet valid is tried again once it is.
type tlsFiles struct {
	what          string // the setting, for errors and logs: "-grpc-tls (GRPC_SERVER_USE_TLS)"
	pair          string // the metrics' name of the pair: grpc_server, xds_client, redis_client
	cert, key, ca string // paths; cert and key "" for a client with no certificate
	certName      string // the certificate's setting, for errors: "-grpc-tls-cert (GRPC_SERVER_TLS_CERT)"
	caName        string // ca's setting
	issuer        string // the CA file the certificate must be signed by ("": none; start may set it to ca)
	issuerName    string // its setting
	san           string // the other side's certificate must name this ("": any)
	server        bool   // a server's files (a client certificate is asked when ca is set)
	log           *slog.Logger
	reloads       *prometheus.CounterVec // pair, result, reason (nil: none)
	now           func() time.Time       // time.Now; tests move it

	mu       sync.Mutex
	checked  time.Time
	stamp    string
	failed   string    // the stamp whose load was refused, logged and counted once
	why      string    // the reason it was refused
	retryAt  time.Time // when a refused stamp is tried again (zero: only once its files change)
	conf     *tls.Config
	notAfter time.Time // the leaf in force's
}

// Reasons a pair is refused, as the metric's reason label says them.
const (
	reasonUnreadable  = "unreadable"    // the files do not load: missing, not PEM, a key of another certificate
	reasonExpired     = "expired"       // the leaf (or a certificate of its chain) is past its NotAfter
	reasonNotYetValid = "not_yet_valid" // the leaf is before its NotBefore
	reasonUnknownCA   = "unknown_ca"    // the issuer did not sign it
	reasonBadChain    = "bad_chain"     // its chain does not verify for another reason
)

// refusal is why a pair was refused: the metric's reason, the error, and
// when trying it again may succeed (zero: never, until its files change).
type refusal struct {
	reason string
	err    error
	retry  time.Time
}

func (r *refusal) Error() string { return r.err.Error() }

// newTLSReloads is the counter of pairs read again, registered on reg.
func newTLSReloads(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_service_tls_reload_total",
		Help: "Changed TLS certificate files read again: loaded, or refused (the pair in force stays) with the reason.",
	}, []string{"pair", "result", "reason"})
	reg.MustRegister(c)
	return c
}

func (t *tlsFiles) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

// stampNow is the files' sizes and modification times (of what symlinks
// point to).
func (t *tlsFiles) stampNow() string {
	s := ""
	for _, p := range []string{t.cert, t.key, t.ca, t.issuer} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%d.%d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			s += "missing;"
		}
	}
	return s
}

// readPool reads a CA file.
func readPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", path)
	}
	return pool, nil
}

// load reads the files into a config of their own and holds the pair to
// the clock at now and to its issuer; a pair refused is a *refusal.
func (t *tlsFiles) load(now time.Time) (*tls.Config, *x509.Certificate, error) {
	unreadable := func(err error) error {
		return &refusal{reason: reasonUnreadable, err: fmt.Errorf("%s: %v", t.what, err)}
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	var leaf *x509.Certificate
	if t.cert != "" || t.key != "" {
		if t.cert == "" || t.key == "" {
			return nil, nil, unreadable(errors.New("a certificate needs its key and a key its certificate"))
		}
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, nil, unreadable(err)
		}
		if leaf = pair.Leaf; leaf == nil {
			if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return nil, nil, unreadable(err)
			}
		}
		var roots *x509.CertPool
		if t.issuer != "" {
			if roots, err = readPool(t.issuer); err != nil {
				return nil, nil, unreadable(fmt.Errorf("%s: %v", t.issuerName, err))
			}
		}
		if err := t.hold(&pair, leaf, roots, now); err != nil {
			return nil, nil, err
		}
		c.Certificates = []tls.Certificate{pair}
	} else if t.server {
		return nil, nil, unreadable(errors.New("a server needs a certificate and its key"))
	}
	if t.ca != "" {
		pool, err := readPool(t.ca)
		if err != nil {
			return nil, nil, unreadable(err)
		}
		if t.server {
			c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
		} else {
			c.RootCAs = pool
		}
	}
	if t.san != "" && t.server {
		san := t.san
		// Every connection, resumed ones too (VerifyConnection; a resumed
		// session skips VerifyPeerCertificate).
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			// As the peer holds a client to GRPC_CLIENT_TLS_SAN: a DNS name
			// (a wildcard of the certificate's matching it) or an IP address.
			chains := cs.VerifiedChains
			if len(chains) == 0 || len(chains[0]) == 0 {
				return errors.New("no verified client certificate to hold to " + san)
			}
			if err := chains[0][0].VerifyHostname(san); err != nil {
				return fmt.Errorf("the client's certificate: %v", err)
			}
			return nil
		}
	}
	return c, leaf, nil
}

// hold holds a pair to the clock at now and, with roots, to them: its
// leaf within its NotBefore and NotAfter, and signed (through the chain's
// other certificates) by one of roots. The leaf is held to no key usage:
// Envoy Gateway's certificates have none.
func (t *tlsFiles) hold(pair *tls.Certificate, leaf *x509.Certificate, roots *x509.CertPool, now time.Time) error {
	refuse := func(reason string, retry time.Time, format string, a ...any) error {
		return &refusal{reason: reason, retry: retry, err: fmt.Errorf("%s %s: "+format, append([]any{t.certName, t.cert}, a...)...)}
	}
	switch {
	case now.Before(leaf.NotBefore):
		return refuse(reasonNotYetValid, leaf.NotBefore, "not valid before %s (now %s)", leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case now.After(leaf.NotAfter):
		return refuse(reasonExpired, time.Time{}, "expired at %s (now %s)", leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case roots == nil:
		return nil
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return refuse(reasonBadChain, time.Time{}, "%v", err)
		}
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &unknown):
		return refuse(reasonUnknownCA, time.Time{}, "not signed by the CA of %s (%s): %v", t.issuerName, t.issuer, err)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return refuse(reasonExpired, time.Time{}, "its chain to %s (%s): %v", t.issuerName, t.issuer, err)
	}
	return refuse(reasonBadChain, time.Time{}, "its chain to %s (%s): %v", t.issuerName, t.issuer, err)
}

// start loads the files, or says why they do not load. A client's pair
// (or a server's with no issuer of its own) that the CA of its link
// signed is held to that CA from then on (Envoy Gateway signs every
// certificate of its control plane with one CA); one it did not sign is
// held to the clock alone, as the link's server may trust another CA.
func (t *tlsFiles) start() error {
	now := t.clock()
	stamp := t.stampNow()
	c, leaf, err := t.load(now)
	if err != nil {
		return err
	}
	if t.issuer == "" && t.ca != "" && leaf != nil {
		pool, err := readPool(t.ca)
		if err != nil {
			return fmt.Errorf("%s: %v", t.what, err)
		}
		t.issuer, t.issuerName = t.ca, t.caName
		if err := t.hold(&c.Certificates[0], leaf, pool, now); err != nil {
			t.issuer, t.issuerName = "", ""
			t.log.Info("rls: TLS certificate not signed by the CA of its link: changes are held to their dates alone", "what", t.what, "ca", t.ca, "err", err)
		}
	}
	t.conf, t.stamp, t.checked = c, stamp, now
	if leaf != nil {
		t.notAfter = leaf.NotAfter
	}
	if t.reloads != nil {
		t.reloads.WithLabelValues(t.pair, "loaded", "")
	}
	return nil
}

// current is the config of the files as they are now, or as they last
// loaded.
func (t *tlsFiles) current() *tls.Config {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock()
	if now.Sub(t.checked) < time.Second {
		return t.conf
	}
	t.checked = now
	stamp := t.stampNow()
	if stamp == t.stamp || (stamp == t.failed && (t.retryAt.IsZero() || now.Before(t.retryAt))) {
		return t.conf
	}
	c, leaf, err := t.load(now)
	if err != nil {
		r := &refusal{reason: reasonUnreadable, err: err}
		errors.As(err, &r)
		if stamp != t.failed || r.reason != t.why {
			t.log.Warn("rls: changed TLS files refused; the pair in force stays", "what", t.what, "reason", r.reason, "err", err, "in_force_until", t.notAfter)
			if t.reloads != nil {
				t.reloads.WithLabelValues(t.pair, "refused", r.reason).Inc()
			}
		}
		t.failed, t.why, t.retryAt = stamp, r.reason, r.retry
		return t.conf
	}
	t.conf, t.stamp, t.failed, t.why, t.retryAt = c, stamp, "", "", time.Time{}
	if leaf != nil {
		t.notAfter = leaf.NotAfter
	}
	t.log.Info("rls: TLS files reloaded", "what", t.what, "not_after", t.notAfter)
	if t.reloads != nil {
		t.reloads.WithLabelValues(t.pair, "loaded", "").Inc()
	}
	return t.conf
}

// serverConfig is a server's config that takes each connection's
// certificate and CA from the files as they are then.
func (t *tlsFiles) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.current(), nil
		},
	}
}

// clientConfig is a client's config: the CA (else the system's) verifies
// the server, which must be named serverName (the SAN, where set, stands
// for it), and the client's certificate, where set, is the files' as they
// are at each handshake.
func (t *tlsFiles) clientConfig(serverName string) *tls.Config {
	c := t.current().Clone()
	c.ServerName = serverName
	if t.san != "" {
		c.ServerName = t.san
	}
	if t.cert != "" {
		c.Certificates = nil
		c.GetClientCertificate = t.clientCertificate
	}
	return c
}

// clientCertificate is the client's certificate as the files are now.
func (t *tlsFiles) clientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return &t.current().Certificates[0], nil
}
