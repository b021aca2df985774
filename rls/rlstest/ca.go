package rlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority, as Envoy Gateway makes one for its rate
// limit service, and the certificates it signs, in PEM files in Dir:
// ca.crt, and name.crt and name.key for each certificate issued.
type CA struct {
	Dir    string
	Cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

// NewCA makes a CA named name, its files in a directory of the test's.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	p, err := MakeCA(t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// MakeCA makes a CA named name, its files in dir, for a program rather
// than a test (a benchmark's).
func MakeCA(dir, name string) (*CA, error) {
	p := &CA{Dir: dir, serial: 1}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if p.Cert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	p.key = key
	return p, writePEM(p.Path("ca.crt"), "CERTIFICATE", der)
}

// Path is a file's path in Dir.
func (p *CA) Path(name string) string { return filepath.Join(p.Dir, name) }

// writePEM writes a file whole, by a rename: a reader never sees it half
// written.
func writePEM(path, kind string, der []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Issue writes name.crt and name.key: a certificate the CA signs for these
// subject alternative names (DNS names, or IP addresses), with no extended
// key usage (as Envoy Gateway's), and returns its serial. The files are
// readable by all (a container's user), the key written first.
func (p *CA) Issue(t testing.TB, name string, sans ...string) int64 {
	t.Helper()
	serial, err := p.IssueFiles(name, sans...)
	if err != nil {
		t.Fatal(err)
	}
	return serial
}

// IssueFiles is Issue for a program.
func (p *CA) IssueFiles(name string, sans ...string) (int64, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return 0, err
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: "*"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.Cert, &key.PublicKey, p.key)
	if err != nil {
		return 0, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return 0, err
	}
	if err := writePEM(p.Path(name+".key"), "PRIVATE KEY", kder); err != nil {
		return 0, err
	}
	return p.serial, writePEM(p.Path(name+".crt"), "CERTIFICATE", der)
}

// ClientTLS is a client's config that trusts this CA for a server named
// serverName and shows the certificate name of issuer (nil: none).
func (p *CA) ClientTLS(t testing.TB, serverName string, issuer *CA, name string) *tls.Config {
	t.Helper()
	c, err := p.ClientConfig(serverName, issuer, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ClientConfig is ClientTLS for a program.
func (p *CA) ClientConfig(serverName string, issuer *CA, name string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	pool.AddCert(p.Cert)
	c := &tls.Config{RootCAs: pool, ServerName: serverName}
	if issuer != nil {
		pair, err := tls.LoadX509KeyPair(issuer.Path(name+".crt"), issuer.Path(name+".key"))
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// ServerTLS is a server's config as Envoy Gateway's xDS server's: TLS 1.3,
// the certificate name, and clients must show one this CA signed.
func (p *CA) ServerTLS(t testing.TB, name string) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(p.Path(name+".crt"), p.Path(name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.Cert)
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
}
