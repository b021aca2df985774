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
)

// tlsFiles is a certificate and its key, and the CA that signs the other
// side's certificates, read from files. A server's are read again when
// one of them changes (a Kubernetes secret's files are replaced in place):
// each handshake looks at the files' sizes and times, at most once a
// second. A change that does not load (a certificate written before its
// key) keeps the files in force until they load together, and is logged
// once. A client's certificate is read again the same way; its CA, as the
// peer's, only at start.
type tlsFiles struct {
	what          string // the setting, for errors and logs: "-grpc-tls (GRPC_SERVER_USE_TLS)"
	cert, key, ca string // paths; cert and key "" for a client with no certificate
	san           string // the other side's certificate must name this ("": any)
	server        bool   // a server's files (a client certificate is asked when ca is set)
	log           *slog.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   string
	failed  string // the stamp whose load failed, logged once
	conf    *tls.Config
}

// stampNow is the files' sizes and modification times (of what symlinks
// point to).
func (t *tlsFiles) stampNow() string {
	s := ""
	for _, p := range []string{t.cert, t.key, t.ca} {
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

// load reads the files into a config of their own.
func (t *tlsFiles) load() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if t.cert != "" || t.key != "" {
		if t.cert == "" || t.key == "" {
			return nil, fmt.Errorf("%s: a certificate needs its key and a key its certificate", t.what)
		}
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", t.what, err)
		}
		c.Certificates = []tls.Certificate{pair}
	} else if t.server {
		return nil, fmt.Errorf("%s: a server needs a certificate and its key", t.what)
	}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", t.what, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no certificate in %s", t.what, t.ca)
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
	return c, nil
}

// start loads the files, or says why they do not load.
func (t *tlsFiles) start() error {
	stamp := t.stampNow()
	c, err := t.load()
	if err != nil {
		return err
	}
	t.conf, t.stamp, t.checked = c, stamp, time.Now()
	return nil
}

// current is the config of the files as they are now, or as they last
// loaded.
func (t *tlsFiles) current() *tls.Config {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if now.Sub(t.checked) < time.Second {
		return t.conf
	}
	t.checked = now
	stamp := t.stampNow()
	if stamp == t.stamp || stamp == t.failed {
		return t.conf
	}
	c, err := t.load()
	if err != nil {
		t.failed = stamp
		t.log.Warn("rls: changed TLS files do not load; the previous ones stay in force", "what", t.what, "err", err)
		return t.conf
	}
	t.conf, t.stamp, t.failed = c, stamp, ""
	t.log.Info("rls: TLS files reloaded", "what", t.what)
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
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &t.current().Certificates[0], nil
		}
	}
	return c
}
