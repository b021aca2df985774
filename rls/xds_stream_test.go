package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlcfg "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seed-6b3823f5/ratelimit/internal/fakeredis"
	"github.com/seed-6b3823f5/ratelimit/rls/rlstest"
)

// xdsService is a service on a fake Redis, its log going to log, and a
// connection to an xDS server at addr made with opts.
func xdsService(t *testing.T, log *slog.Logger, addr string, opts ...grpc.DialOption) (*Service, *grpc.ClientConn) {
	t.Helper()
	f := fakeredis.New()
	f.Clock = func() time.Time { return t0 }
	rdb := f.Client()
	t.Cleanup(func() { rdb.Close() })
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := New(rdb, nil, Options{Registerer: prometheus.NewRegistry(), Logger: log})
	s.now = f.Now
	t.Cleanup(s.Close)
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, conn
}

// watchXDS watches x until the test ends.
func watchXDS(t *testing.T, s *Service, x XDS) <-chan struct{} {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return s.WatchXDS(ctx, x)
}

// eagerServer is a go-control-plane cache that, unlike its snapshot cache,
// does not wait for an answer before it sends the next version: each push
// goes at once to the stream's open watch (the xDS protocol lets a server
// send a response before the last is answered), and go-control-plane's
// server sends it. It records the requests the server gets and the
// version of each response it sends.
type eagerServer struct {
	mu     sync.Mutex
	watch  chan cachev3.Response
	req    *discoverypb.DiscoveryRequest
	reqs   []*discoverypb.DiscoveryRequest
	nonces map[string]string // each response's nonce: its version
}

func (p *eagerServer) CreateWatch(req *cachev3.Request, _ cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watch, p.req = ch, req
	return func() {}, nil
}

func (p *eagerServer) CreateDeltaWatch(*cachev3.DeltaRequest, cachev3.Subscription, chan cachev3.DeltaResponse) (func(), error) {
	return nil, errors.New("no delta xDS here")
}

func (p *eagerServer) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("no fetch here")
}

// startEager serves an eagerServer on a loopback port until the test ends.
func startEager(t *testing.T) (*eagerServer, string) {
	t.Helper()
	p := &eagerServer{nonces: map[string]string{}}
	srv := serverv3.NewServer(context.Background(), p, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoverypb.DiscoveryRequest) error {
			p.mu.Lock()
			p.reqs = append(p.reqs, r)
			p.mu.Unlock()
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoverypb.DiscoveryRequest, r *discoverypb.DiscoveryResponse) {
			p.mu.Lock()
			p.nonces[r.GetNonce()] = r.GetVersionInfo()
			p.mu.Unlock()
		},
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discoverypb.RegisterAggregatedDiscoveryServiceServer(g, srv)
	go g.Serve(l)
	t.Cleanup(g.Stop)
	return p, l.Addr().String()
}

// push sends version, with rcs, on the open watch (waiting up to 10 s for
// the first request to open one).
func (p *eagerServer) push(t *testing.T, version string, rcs ...*rlcfg.RateLimitConfig) {
	t.Helper()
	waitUntil(t, "a watch", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.watch != nil
	})
	p.mu.Lock()
	ch, req := p.watch, p.req
	p.mu.Unlock()
	ch <- &cachev3.PassthroughResponse{Request: req, DiscoveryResponse: response(t, version, rcs...)}
}

// answers is the versions the requests after the first answered, in order
// ("!" after a NACK's).
func (p *eagerServer) answers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, r := range p.reqs {
		if r.GetResponseNonce() == "" {
			continue
		}
		v := p.nonces[r.GetResponseNonce()]
		if r.GetErrorDetail() != nil {
			v += "!"
		}
		out = append(out, v)
	}
	return out
}

// TestXDSCoalesced: responses that arrive while one is parsed are not
// parsed one by one: only the newest is, and answered, against
// go-control-plane's server sending versions without waiting for answers.
// Versions 2 (valid), 3 (invalid) and 4 arrive while version 1 is parsed:
// 1 is made the config but not answered (the server has sent newer since,
// and ignores an answer bearing an older nonce), 2 and 3 are never parsed,
// counted or answered, and 4 is parsed and acknowledged.
func TestXDSCoalesced(t *testing.T) {
	p, addr := startEager(t)
	s, conn := xdsService(t, nil, addr)
	var (
		mu     sync.Mutex
		parsed []string
		hold   = make(chan struct{})
		held   string // what went wrong holding version 1, if anything
	)
	x := XDS{Conn: conn, Node: &corev3.Node{Id: rlstest.Node}, Backoff: Backoff{Initial: 20 * time.Millisecond},
		parsed: func(version string, newest func() string) {
			mu.Lock()
			parsed = append(parsed, version)
			mu.Unlock()
			if version != "1" {
				return
			}
			close(hold)
			// Hold version 1 until 2, 3 and 4 have all arrived.
			for deadline := time.Now().Add(10 * time.Second); newest() != "4"; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					mu.Lock()
					held = fmt.Sprintf("version 4 not received in 10 s while 1 was parsed (newest %q)", newest())
					mu.Unlock()
					return
				}
			}
		}}
	loaded := watchXDS(t, s, x)
	p.push(t, "1", xdsLimit("l", 2, nil))
	select {
	case <-hold:
	case <-time.After(10 * time.Second):
		t.Fatal("version 1 never parsed")
	}
	p.push(t, "2", xdsLimit("l", 3, nil))
	p.push(t, "3", xdsLimit("l", 3, map[string]any{"algorithm": "leaky"}))
	p.push(t, "4", xdsLimit("l", 5, nil))
	waitUntil(t, "the answer to version 4", func() bool { return len(p.answers()) > 0 })
	<-loaded
	mu.Lock()
	defer mu.Unlock()
	if held != "" {
		t.Fatal(held)
	}
	if got := p.answers(); !slices.Equal(got, []string{"4"}) {
		t.Fatalf("answers %v, want only version 4's ACK", got)
	}
	if !slices.Equal(parsed, []string{"1", "4"}) {
		t.Fatalf("versions parsed %v, want 1 and 4", parsed)
	}
	if got := admits(t, s, "a"); got != 5 {
		t.Fatalf("version 4 (5 a minute) in force admitted %d of 10", got)
	}
	if ok, bad := testutil.ToFloat64(s.m.configLoads.WithLabelValues("success")), testutil.ToFloat64(s.m.configLoads.WithLabelValues("error")); ok != 2 || bad != 0 {
		t.Fatalf("loads counted: %v success, %v error; want 2 (1 and 4), 0 (3 never parsed)", ok, bad)
	}
}

// TestXDSReconnect: a server back after an outage is read within rls's
// backoff, however long gRPC's own wait between connection attempts has
// grown. The connection here waits a minute after a failed attempt (as
// gRPC's defaults do after a long outage: 1 s, growing 1.6 times to 2
// minutes); rls's backoff is 200 ms. Unfixed, a stream asked for while gRPC
// waited failed at once, and the restarted server was read only once gRPC
// connected again by itself: a minute later here, 19.6 s after a 60 s
// outage with the defaults (docs: 10 s). The bound asserted, 5 s, is the
// backoff and a margin for a loaded machine, far below gRPC's minute.
func TestXDSReconnect(t *testing.T) {
	x := rlstest.StartXDS(t, "127.0.0.1:0", nil)
	s, conn := xdsService(t, nil, x.Addr, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: time.Minute, Multiplier: 1.6, MaxDelay: 2 * time.Minute},
		MinConnectTimeout: 20 * time.Second,
	}))
	const wait = 200 * time.Millisecond
	loaded := watchXDS(t, s, XDS{Conn: conn, Node: &corev3.Node{Id: rlstest.Node}, Backoff: Backoff{Initial: wait, Max: wait}})
	x.Push(t, "1", xdsLimit("l", 2, nil))
	x.Answered(t, "1", false)
	<-loaded

	addr := x.Addr
	x.GRPC.Stop()
	// Several of rls's attempts fail on the stopped server, and gRPC's wait
	// after each failed connection is a minute from the first.
	time.Sleep(1500 * time.Millisecond)
	y := rlstest.StartXDS(t, addr, nil)
	y.Push(t, "1", xdsLimit("l", 7, nil))
	start := time.Now()
	y.Answered(t, "1", false) // up to 5 s
	t.Logf("the restarted server read %v after it started (rls's backoff %v)", time.Since(start).Round(time.Millisecond), wait)
	if got := admits(t, s, "a"); got != 7 {
		t.Fatalf("after the server came back with 7 a minute, admitted %d of 10", got)
	}
}

// TestXDSTooLarge: an update of more descriptors than the limit, nested
// ones counted, is refused with a NACK naming the limit, and the config in
// force stays; one within it loads.
func TestXDSTooLarge(t *testing.T) {
	x := rlstest.StartXDS(t, "127.0.0.1:0", nil)
	s, conn := xdsService(t, nil, x.Addr)
	watchXDS(t, s, XDS{Conn: conn, Node: &corev3.Node{Id: rlstest.Node}, Backoff: Backoff{Initial: 20 * time.Millisecond}, MaxDescriptors: 3})
	three := xdsLimit("a", 2, nil)
	three.Descriptors = append(three.Descriptors, &rlcfg.RateLimitDescriptor{Key: "p", Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "q"}}})
	x.Push(t, "1", three)
	x.Answered(t, "1", false)
	four := xdsLimit("b", 9, nil)
	four.Domain = "e"
	x.Push(t, "2", three, four)
	msg := x.Answered(t, "2", true)
	if !strings.Contains(msg, "more than 3 descriptors") || !strings.Contains(msg, "limit") {
		t.Fatalf("NACK %q: want it to name the limit, 3 descriptors", msg)
	}
	if got := admits(t, s, "a"); got != 2 {
		t.Fatalf("after the refused update, the config in force admitted %d of 10, want 2", got)
	}
}

// TestCountDescriptors: descriptors are counted at every depth, and the
// count stops past the most asked for.
func TestCountDescriptors(t *testing.T) {
	rc := &rlcfg.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlcfg.RateLimitDescriptor{
		{Key: "a", Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "b", Descriptors: []*rlcfg.RateLimitDescriptor{{Key: "c"}}}, {Key: "d"}}},
		{Key: "e", RateLimit: &rlcfg.RateLimitPolicy{Name: "x", Replaces: []*rlcfg.RateLimitReplace{{Name: "y"}}}},
	}}
	b := mustMarshal(t, rc)
	for _, c := range []struct{ most, want int }{{100, 5}, {5, 5}, {3, 3}, {1, 1}} {
		if got := countDescriptors(b, 3, c.most); got != c.want {
			t.Errorf("count up to %d: %d, want %d", c.most, got, c.want)
		}
	}
}

// TestXDSRefusalsLogged: a server sending one invalid version after
// another, each refused for the same reason, has each refusal counted and
// one log line per logEvery, the line carrying how many refusals it stands
// for.
func TestXDSRefusalsLogged(t *testing.T) {
	x := rlstest.StartXDS(t, "127.0.0.1:0", nil)
	l := &lines{}
	s, conn := xdsService(t, slog.New(l), x.Addr)
	watchXDS(t, s, XDS{Conn: conn, Node: &corev3.Node{Id: rlstest.Node}, Backoff: Backoff{Initial: 20 * time.Millisecond}})
	const n = 4
	start := time.Now()
	for v := range n {
		version := fmt.Sprint(v + 1)
		x.Push(t, version, xdsLimit("l", 3, map[string]any{"algorithm": "leaky"}))
		x.Answered(t, version, true)
	}
	elapsed := time.Since(start)
	if got := testutil.ToFloat64(s.m.configLoads.WithLabelValues("error")); got != n {
		t.Fatalf("%d versions refused, %v counted", n, got)
	}
	got := l.of("rls: xDS config refused; the config in force stays")
	if len(got) == 0 || got[0].occurrences != 1 || got[0].attrs["version"] != "1" || !strings.Contains(got[0].attrs["err"], "unknown algorithm 'leaky'") {
		t.Fatalf("lines %+v: want the first refusal logged at once, standing for itself", got)
	}
	if most := 1 + int(elapsed/logEvery); len(got) > most {
		t.Fatalf("%d refusals in %v logged in %d lines, want at most %d (one per %v)", n, elapsed, len(got), most, logEvery)
	}
}
