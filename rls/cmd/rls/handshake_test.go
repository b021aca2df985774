package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// clientHello is the first record a TLS client sends, captured from
// crypto/tls.
func clientHello(t *testing.T) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	go tls.Client(b, &tls.Config{ServerName: "localhost", NextProtos: []string{"h2"}}).Handshake() // ends when a closes
	head := make([]byte, 5)
	if _, err := a.Read(head); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(head[3])<<8|int(head[4]))
	for n := 0; n < len(body); {
		m, err := a.Read(body[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	b.Close()
	return append(head, body...)
}

// askOn asks rls for d/k on conn and returns the overall code.
func askOn(conn *grpc.ClientConn, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{
		Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}},
	})
	if err != nil {
		return "", err
	}
	return resp.OverallCode.String(), nil
}

// TestHandshakeBound: as a hostile client, 300 TCP connections to rls
// that never finish a handshake (most send nothing; over TLS some send
// half a ClientHello, some a whole one and then nothing), with a deadline
// of 500 ms and at most 32 in handshake. Each is closed by rls, no sooner
// than the deadline; connections in handshake never pass 32 (rls's gauge,
// read throughout) and rls's goroutines grow by about the cap, not by the
// flood; meanwhile Envoy's client is answered on a connection it had and
// on one it opens during the flood. Then 40 real connections, more than
// the cap, are all established and answered: an established connection
// holds no slot (grpc-go clears its handshake deadline, which ends it).
// Unfixed, each was held 120 s, every one with a goroutine.
func TestHandshakeBound(t *testing.T) {
	const (
		flood    = 300
		capacity = 32
		deadline = 500 * time.Millisecond
	)
	hello := clientHello(t)
	for _, useTLS := range []bool{true, false} {
		name := "plaintext"
		if useTLS {
			name = "TLS"
		}
		t.Run(name, func(t *testing.T) {
			env := map[string]string{}
			creds := insecure.NewCredentials()
			if useTLS {
				p := rlstest.NewCA(t, "envoy-gateway")
				p.Issue(t, "tls", "localhost")
				env = map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.Path("tls.crt"), "GRPC_SERVER_TLS_KEY": p.Path("tls.key")}
				creds = credentials.NewTLS(p.ClientTLS(t, "localhost", nil, ""))
			}
			grpcAddr, httpAddr := startRLSArgs(t, env, true, "-grpc-handshake-timeout", deadline.String(), "-grpc-handshakes", "32")
			waitListening(t, httpAddr)
			inHandshake := func() float64 { return metricValue(t, httpAddr, "ratelimit_service_grpc_handshakes") }

			had, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer had.Close()
			if code, err := askOn(had, 5*time.Second); err != nil || code != "OVER_LIMIT" {
				t.Fatalf("before the flood: %s %v", code, err)
			}
			// waitListening's probes and the first connection are through.
			for end := time.Now().Add(20 * time.Second); inHandshake() != 0 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			goroutines := runtime.NumGoroutine()

			start := time.Now()
			conns := make([]net.Conn, 0, flood)
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for i := range flood {
				c, err := net.Dial("tcp", grpcAddr)
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				conns = append(conns, c)
				switch {
				case useTLS && i%6 == 1:
					c.Write(hello[:len(hello)/2]) // stalls mid-ClientHello
				case useTLS && i%6 == 2:
					c.Write(hello) // stalls after it: the server's flight answered by nothing
				case !useTLS && i%6 == 1:
					c.Write([]byte(http2.ClientPreface)[:10]) // stalls mid-preface
				}
			}
			// Every slot taken, the rest waiting in the listen backlog.
			most := 0.0
			for end := time.Now().Add(20 * time.Second); most < capacity && time.Now().Before(end); {
				most = max(most, inHandshake())
			}
			if most != capacity {
				t.Fatalf("in handshake during the flood: at most %v, want the cap, %d", most, capacity)
			}
			if g := runtime.NumGoroutine() - goroutines; g > capacity+40 {
				t.Errorf("%d connections pending, %d in handshake: %d goroutines more, want about the cap", flood, capacity, g)
			}
			if code, err := askOn(had, 5*time.Second); err != nil || code != "OVER_LIMIT" {
				t.Fatalf("on its connection, during the flood: %s %v", code, err)
			}

			// Envoy opens a connection during the flood: it waits its turn
			// in the backlog, then is answered.
			answered := make(chan error, 1)
			go func() {
				conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
				if err == nil {
					defer conn.Close()
					var code string
					if code, err = askOn(conn, 60*time.Second); err == nil && code != "OVER_LIMIT" {
						err = errors.New(code)
					}
				}
				answered <- err
			}()

			// Each hostile connection is closed (EOF or reset, not a
			// timeout of ours), never before the deadline, while the
			// gauge stays within the cap.
			var mu sync.Mutex
			stop := make(chan struct{})
			var sampled sync.WaitGroup
			sampled.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if n := inHandshake(); n > capacity {
						mu.Lock()
						t.Errorf("%v connections in handshake, over the cap %d", n, capacity)
						mu.Unlock()
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
			buf := make([]byte, 4096)
			for i, c := range conns {
				c.SetReadDeadline(start.Add(120 * time.Second))
				var err error
				for err == nil {
					_, err = c.Read(buf) // the server's flight, over TLS, then the close
				}
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("connection %d still open after 120 s", i)
				}
				if since := time.Since(start); since < deadline {
					t.Fatalf("connection %d closed %v after it was opened, before the deadline %v", i, since, deadline)
				}
			}
			close(stop)
			sampled.Wait()
			if err := <-answered; err != nil {
				t.Fatalf("a connection opened during the flood: %v", err)
			}
			for end := time.Now().Add(20 * time.Second); inHandshake() != 0 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			if n := inHandshake(); n != 0 {
				t.Fatalf("%v in handshake after the flood", n)
			}
			if n := metricValue(t, httpAddr, "ratelimit_service_grpc_handshakes_failed_total"); n < flood {
				t.Errorf("failed handshakes: %v, want at least %d", n, flood)
			}
			if n := metricValue(t, httpAddr, "ratelimit_service_grpc_handshake_waits_total"); n < 1 {
				t.Errorf("accept waits: %v, want some", n)
			}

			// More real connections than the cap, all held open.
			var real []*grpc.ClientConn
			defer func() {
				for _, c := range real {
					c.Close()
				}
			}()
			for i := range capacity + 8 {
				c, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
				if err != nil {
					t.Fatal(err)
				}
				real = append(real, c)
				if code, err := askOn(c, 20*time.Second); err != nil || code != "OVER_LIMIT" {
					t.Fatalf("real connection %d of %d: %s %v", i+1, capacity+8, code, err)
				}
			}
			if n := inHandshake(); n != 0 {
				t.Fatalf("%v in handshake with %d connections established", n, capacity+8)
			}
		})
	}
}

// TestHandshakeFlags: the two settings' defaults, variables and ranges.
func TestHandshakeFlags(t *testing.T) {
	f, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.handshakeTimeout != 10*time.Second || f.handshakes != 1024 {
		t.Fatalf("defaults: %v, %d", f.handshakeTimeout, f.handshakes)
	}
	t.Setenv("GRPC_HANDSHAKE_TIMEOUT", "2s")
	t.Setenv("GRPC_MAX_HANDSHAKES", "7")
	if f, err = parse(nil); err != nil || f.handshakeTimeout != 2*time.Second || f.handshakes != 7 {
		t.Fatalf("from the environment: %+v %v", f, err)
	}
	for _, bad := range [][]string{{"-grpc-handshakes", "0"}, {"-grpc-handshake-timeout", "0s"}} {
		if _, err := parse(bad); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
