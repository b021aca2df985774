package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/credentials"
)

// datedCA is a CA that issues certificates valid over any span, to hold
// rls to their dates; its files are in dir: ca.crt, and name.crt and
// name.key for each certificate.
type datedCA struct {
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

func newDatedCA(t *testing.T, name string) *datedCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial := big.NewInt(time.Now().UnixNano()) // serials of different CAs differ
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c := &datedCA{dir: t.TempDir(), key: key, serial: serial.Int64()}
	if c.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	writeFile(t, c.path("ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return c
}

func (c *datedCA) path(name string) string { return filepath.Join(c.dir, name) }

// writeFile replaces path whole (a rename), as a secret's files change.
func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// issue writes a certificate for localhost valid from notBefore to
// notAfter, and its key, to certPath and keyPath (the key first), and
// returns its serial.
func (c *datedCA) issue(t *testing.T, certPath, keyPath string, notBefore, notAfter time.Time) int64 {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(c.serial), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	writeFile(t, certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return c.serial
}

// metricValue is the value of the series whose line starts with prefix in
// the /metrics at addr, or -1 when there is none.
func metricValue(t *testing.T, addr, prefix string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

// TestTLSReloadRefused: rls serving Envoy Gateway's TLS (GRPC_SERVER_TLS_CA_CERT
// the CA of its certificate) is given, in turn, a pair that has expired, one
// not valid for two seconds more, one of another CA and a good one. Each
// refused pair leaves the one in force served to Envoy's client, and is
// counted once with its reason; the one not yet valid is taken once it is.
// Unfixed, rls served the expired pair and every handshake failed.
func TestTLSReloadRefused(t *testing.T) {
	p, other := newDatedCA(t, "envoy-gateway"), newDatedCA(t, "other")
	crt, key := p.path("tls.crt"), p.path("tls.key")
	now := time.Now()
	first := p.issue(t, crt, key, now.Add(-time.Hour), now.Add(24*time.Hour))
	grpcAddr, httpAddr := startRLSArgs(t, map[string]string{
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": crt, "GRPC_SERVER_TLS_KEY": key, "GRPC_SERVER_TLS_CA_CERT": p.path("ca.crt"),
	}, true)
	waitListening(t, httpAddr)
	p.issue(t, p.path("envoy.crt"), p.path("envoy.key"), now.Add(-time.Hour), now.Add(24*time.Hour))
	envoy, err := tls.LoadX509KeyPair(p.path("envoy.crt"), p.path("envoy.key"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.cert)
	// Envoy's: it trusts the CA and shows a certificate of it (the CA is
	// also the clients' CA, as Envoy Gateway's).
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{envoy}})
	served := func() int64 {
		t.Helper()
		var serial int64
		if code, err := check(grpcAddr, creds, "k", &serial); err != nil || code != "OVER_LIMIT" {
			t.Fatalf("over TLS: %s %v", code, err)
		}
		return serial
	}
	reloads := func(result, reason string) float64 {
		return metricValue(t, httpAddr, fmt.Sprintf(`ratelimit_service_tls_reload_total{pair="grpc_server",reason=%q,result=%q}`, reason, result))
	}
	if s := served(); s != first {
		t.Fatalf("certificate %d served, want %d", s, first)
	}
	// refused writes a pair and asks until rls has looked at it (the
	// refusal counted), twice more a second apart: the pair in force is
	// served throughout and the refusal counted once.
	refused := func(what, reason string, write func()) {
		t.Helper()
		before := reloads("refused", reason)
		write()
		deadline := time.Now().Add(20 * time.Second)
		for reloads("refused", reason) <= before && time.Now().Before(deadline) {
			if s := served(); s != first {
				t.Fatalf("%s: certificate %d served, want %d still", what, s, first)
			}
			time.Sleep(100 * time.Millisecond)
		}
		for range 2 {
			time.Sleep(1100 * time.Millisecond)
			if s := served(); s != first {
				t.Fatalf("%s: certificate %d served, want %d still", what, s, first)
			}
		}
		if n := reloads("refused", reason); n != max(before, 0)+1 {
			t.Fatalf("%s: refused{reason=%q} is %v, want %v", what, reason, n, max(before, 0)+1)
		}
	}
	refused("an expired pair", "expired", func() { p.issue(t, crt, key, now.Add(-48*time.Hour), now.Add(-time.Hour)) })
	refused("a pair of another CA", "unknown_ca", func() { other.issue(t, crt, key, now.Add(-time.Hour), now.Add(24*time.Hour)) })

	// Not valid for a few seconds more: refused, then taken once valid.
	// (A certificate's times are whole seconds.)
	soon := time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
	before := reloads("refused", "not_yet_valid")
	later := p.issue(t, crt, key, soon, soon.Add(24*time.Hour))
	var s int64
	for s = served(); s != later && time.Now().Before(soon.Add(30*time.Second)); s = served() {
		if s != first {
			t.Fatalf("a pair not yet valid: certificate %d served, want %d, then %d", s, first, later)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s != later {
		t.Fatalf("once valid: certificate %d served, want %d", s, later)
	}
	if seen := time.Now(); seen.Before(soon) {
		t.Fatalf("certificate %d, valid from %v, was served at %v", later, soon, seen)
	}
	if n := reloads("refused", "not_yet_valid"); n != max(before, 0)+1 {
		t.Fatalf("refused{reason=not_yet_valid} is %v, want %v", n, max(before, 0)+1)
	}
	if n := reloads("loaded", ""); n != 1 {
		t.Fatalf("loaded is %v, want 1", n)
	}
}

// TestTLSPairRefusedAtStart: a pair that has expired, is not yet valid, or
// was not signed by the CA named for it stops rls at start, naming the
// variable: the gRPC server's, the xDS client's and Redis's.
func TestTLSPairRefusedAtStart(t *testing.T) {
	p, other := newDatedCA(t, "envoy-gateway"), newDatedCA(t, "other")
	now := time.Now()
	p.issue(t, p.path("good.crt"), p.path("good.key"), now.Add(-time.Hour), now.Add(24*time.Hour))
	p.issue(t, p.path("expired.crt"), p.path("expired.key"), now.Add(-48*time.Hour), now.Add(-time.Hour))
	p.issue(t, p.path("later.crt"), p.path("later.key"), now.Add(time.Hour), now.Add(24*time.Hour))
	other.issue(t, p.path("other.crt"), p.path("other.key"), now.Add(-time.Hour), now.Add(24*time.Hour))
	server := func(name string, ca string) map[string]string {
		m := map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.path(name + ".crt"), "GRPC_SERVER_TLS_KEY": p.path(name + ".key")}
		if ca != "" {
			m["GRPC_SERVER_TLS_CA_CERT"] = ca
		}
		return m
	}
	xds := func(name string) map[string]string {
		return map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:1", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": p.path(name + ".crt"), "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": p.path(name + ".key"), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": p.path("ca.crt")}
	}
	redisPair := func(name string) map[string]string {
		return map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": p.path(name + ".crt"), "REDIS_TLS_CLIENT_KEY": p.path(name + ".key")}
	}
	for _, c := range []struct {
		env  map[string]string
		want []string
	}{
		{server("expired", ""), []string{"-grpc-tls-cert (GRPC_SERVER_TLS_CERT)", "expired at"}},
		{server("later", p.path("ca.crt")), []string{"-grpc-tls-cert (GRPC_SERVER_TLS_CERT)", "not valid before"}},
		{server("other", p.path("ca.crt")), []string{"-grpc-tls-cert (GRPC_SERVER_TLS_CERT)", "not signed by the CA of -grpc-tls-ca (GRPC_SERVER_TLS_CA_CERT)"}},
		{xds("expired"), []string{"-xds-tls-cert (CONFIG_GRPC_XDS_CLIENT_TLS_CERT)", "expired at"}},
		{redisPair("expired"), []string{"-redis-tls-cert (REDIS_TLS_CLIENT_CERT)", "expired at"}},
	} {
		t.Run(c.want[0]+" "+c.want[1], func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // it would serve if the settings passed
			defer cancel()
			err := serve(ctx, []string{"-config", t.TempDir(), "-log-level", "error", "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-force-start"}, io.Discard)
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("%v: %v, want it to say %q", c.env, err, w)
				}
			}
		})
	}
	// The good pair of the same CA starts, and one of another CA where no CA
	// is named for the server's certificate (clients' CA only) too.
	for i, env := range []map[string]string{server("good", p.path("ca.crt")), server("other", ""), {"GRPC_SERVER_USE_TLS": "true",
		"GRPC_SERVER_TLS_CERT": p.path("other.crt"), "GRPC_SERVER_TLS_KEY": p.path("other.key"), "GRPC_CLIENT_TLS_CACERT": p.path("ca.crt")}} {
		t.Run(fmt.Sprint("starts ", i), func(t *testing.T) { startRLS(t, env, true) })
	}
}

// TestTLSFilesHeld: what each pair is held to when its files change (a
// clock moved by hand, the log and the metric read). A client's pair that
// the CA of its link signed at start (Envoy Gateway's xDS client: one CA
// for all) is held to it: one of another CA is refused, logged and counted
// once, however often it is looked at; a client's pair of another CA than
// its link's at start is held to its dates alone.
func TestTLSFilesHeld(t *testing.T) {
	p, other, third := newDatedCA(t, "envoy-gateway"), newDatedCA(t, "other"), newDatedCA(t, "third")
	now := time.Now()
	valid := func(c *datedCA, crt, key string) int64 {
		return c.issue(t, crt, key, now.Add(-time.Hour), now.Add(24*time.Hour))
	}
	files := func(signer *datedCA) (*tlsFiles, *bytes.Buffer, *prometheus.CounterVec, *time.Time) {
		dir := t.TempDir()
		crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		valid(signer, crt, key)
		var log bytes.Buffer
		reloads := newTLSReloads(prometheus.NewRegistry())
		clock := now
		f := &tlsFiles{what: "-xds-tls (CONFIG_GRPC_XDS_SERVER_USE_TLS)", pair: "xds_client", cert: crt, key: key, ca: p.path("ca.crt"),
			certName: "-xds-tls-cert (CONFIG_GRPC_XDS_CLIENT_TLS_CERT)", caName: "-xds-tls-ca (CONFIG_GRPC_XDS_SERVER_TLS_CACERT)",
			log: slog.New(slog.NewTextHandler(&log, nil)), reloads: reloads, now: func() time.Time { return clock }}
		if err := f.start(); err != nil {
			t.Fatal(err)
		}
		return f, &log, reloads, &clock
	}
	serial := func(f *tlsFiles) int64 { return f.current().Certificates[0].Leaf.SerialNumber.Int64() }
	// look moves the clock past the once-a-second check and looks n times.
	look := func(f *tlsFiles, clock *time.Time, n int) int64 {
		var s int64
		for range n {
			*clock = clock.Add(1500 * time.Millisecond)
			s = serial(f)
		}
		return s
	}

	t.Run("held to its link's CA", func(t *testing.T) {
		f, log, reloads, clock := files(p)
		first := serial(f)
		other.issue(t, f.cert, f.key, now.Add(-time.Hour), now.Add(24*time.Hour))
		if s := look(f, clock, 3); s != first {
			t.Fatalf("a pair of another CA: certificate %d in force, want %d", s, first)
		}
		if n := testutil.ToFloat64(reloads.WithLabelValues("xds_client", "refused", "unknown_ca")); n != 1 {
			t.Errorf("refused{unknown_ca} %v, want 1", n)
		}
		lines := regexp.MustCompile(`(?m)^.*changed TLS files refused.*$`).FindAllString(log.String(), -1)
		if len(lines) != 1 || !strings.Contains(lines[0], "reason=unknown_ca") || !strings.Contains(lines[0], "CONFIG_GRPC_XDS_CLIENT_TLS_CERT") || !strings.Contains(lines[0], "CONFIG_GRPC_XDS_SERVER_TLS_CACERT") {
			t.Errorf("the log says %q, want one line naming the reason and the variables", lines)
		}
		// Expired: refused for that reason, logged and counted too.
		p.issue(t, f.cert, f.key, now.Add(-48*time.Hour), now.Add(-time.Hour))
		if s := look(f, clock, 3); s != first {
			t.Fatalf("an expired pair: certificate %d in force, want %d", s, first)
		}
		if n := testutil.ToFloat64(reloads.WithLabelValues("xds_client", "refused", "expired")); n != 1 {
			t.Errorf("refused{expired} %v, want 1", n)
		}
		next := valid(p, f.cert, f.key)
		if s := look(f, clock, 1); s != next {
			t.Fatalf("a good pair: certificate %d in force, want %d", s, next)
		}
		if n := testutil.ToFloat64(reloads.WithLabelValues("xds_client", "loaded", "")); n != 1 {
			t.Errorf("loaded %v, want 1", n)
		}
	})

	t.Run("another CA than its link's at start", func(t *testing.T) {
		f, log, reloads, clock := files(other)
		if !strings.Contains(log.String(), "not signed by the CA of its link") {
			t.Errorf("the start's log says %q", log.String())
		}
		next := valid(third, f.cert, f.key)
		if s := look(f, clock, 1); s != next {
			t.Fatalf("a pair of a third CA: certificate %d in force, want %d (held to its dates alone)", s, next)
		}
		p.issue(t, f.cert, f.key, now.Add(time.Hour), now.Add(24*time.Hour))
		if s := look(f, clock, 2); s != next {
			t.Fatalf("a pair not yet valid: certificate %d in force, want %d", s, next)
		}
		*clock = now.Add(time.Hour + time.Second) // and now it is
		if s := look(f, clock, 1); s == next {
			t.Fatal("a pair once valid is still not in force")
		}
		if n := testutil.ToFloat64(reloads.WithLabelValues("xds_client", "refused", "not_yet_valid")); n != 1 {
			t.Errorf("refused{not_yet_valid} %v, want 1", n)
		}
	})
}

// TestRedisClientCertReload: the client certificate rls shows Redis is
// read again when its files change, for the connections made after, and
// a changed pair that has expired is refused (the one in force shown
// still). A TLS listener that asks for a client certificate stands for
// Redis and tells which one each handshake showed.
func TestRedisClientCertReload(t *testing.T) {
	p := newDatedCA(t, "redis")
	now := time.Now()
	p.issue(t, p.path("server.crt"), p.path("server.key"), now.Add(-time.Hour), now.Add(24*time.Hour))
	server, err := tls.LoadX509KeyPair(p.path("server.crt"), p.path("server.key"))
	if err != nil {
		t.Fatal(err)
	}
	shown := make(chan int64, 100)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{server}, ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if c, err := x509.ParseCertificate(raw[0]); err == nil {
				select {
				case shown <- c.SerialNumber.Int64():
				default:
				}
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close() // not Redis: the call fails once the certificate is seen
		}
	}()
	crt, key := p.path("client.crt"), p.path("client.key")
	first := p.issue(t, crt, key, now.Add(-time.Hour), now.Add(24*time.Hour))
	reloads := newTLSReloads(prometheus.NewRegistry())
	rdb, err := redisClient(&flags{redisAddr: l.Addr().String(), redisType: "single", redisTLS: true, redisSkipVerify: true, redisCert: crt, redisKey: key},
		slog.New(slog.DiscardHandler), reloads)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	// last pings Redis after the once-a-second look and returns the
	// certificate the last handshake showed.
	last := func() int64 {
		t.Helper()
		time.Sleep(1100 * time.Millisecond)
		for len(shown) > 0 {
			<-shown
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rdb.Ping(ctx)
		cancel()
		var s int64 = -1
		for len(shown) > 0 {
			s = <-shown
		}
		if s == -1 {
			t.Fatal("no handshake showed a certificate")
		}
		return s
	}
	if s := last(); s != first {
		t.Fatalf("certificate %d shown, want %d", s, first)
	}
	second := p.issue(t, crt, key, now.Add(-time.Hour), now.Add(24*time.Hour))
	if s := last(); s != second {
		t.Fatalf("after the files changed: certificate %d shown, want %d", s, second)
	}
	p.issue(t, crt, key, now.Add(-48*time.Hour), now.Add(-time.Hour))
	if s := last(); s != second {
		t.Fatalf("after an expired pair was written: certificate %d shown, want %d still", s, second)
	}
	if n := testutil.ToFloat64(reloads.WithLabelValues("redis_client", "refused", "expired")); n != 1 {
		t.Errorf("refused{expired} %v, want 1", n)
	}
}
