package main

import (
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// handshakeListener bounds the gRPC connections in handshake: accepted,
// and not yet through TLS (where served) and HTTP/2's preface and first
// SETTINGS, which grpc.ConnectionTimeout bounds in time. With max of them
// open, Accept waits until one finishes or is closed: the connections
// past it wait in the kernel's listen backlog (somaxconn), holding no
// goroutine and no memory of the process's, and are taken in turn, so a
// herd of real clients (every Envoy reconnecting after a restart) is
// served late rather than refused. Connections already established are
// not counted and never wait.
//
// A connection's handshake ends when gRPC clears the deadline it set at
// accept (grpc.Server does so once its HTTP/2 transport is up, or has
// failed), or when it is closed: TestHandshakeBound holds grpc-go to that.
type handshakeListener struct {
	net.Listener
	slots chan struct{} // one per connection in handshake, and one for an Accept waiting in the kernel
	done  chan struct{} // closed by Close
	once  sync.Once

	inHandshake prometheus.Gauge
	waits       prometheus.Counter // Accepts that found every slot taken
	failed      prometheus.Counter // connections closed in handshake
}

// newHandshakeListener wraps l, its metrics registered on reg.
func newHandshakeListener(l net.Listener, max int, reg prometheus.Registerer) *handshakeListener {
	h := &handshakeListener{
		Listener: l,
		slots:    make(chan struct{}, max),
		done:     make(chan struct{}),
		inHandshake: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_service_grpc_handshakes",
			Help: "gRPC connections in handshake (accepted, TLS and HTTP/2's preface not yet through).",
		}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_grpc_handshake_waits_total",
			Help: "Times accepting a gRPC connection waited because -grpc-handshakes connections were in handshake.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_grpc_handshakes_failed_total",
			Help: "gRPC connections closed before their handshake finished: past -grpc-handshake-timeout, refused by TLS, or closed by the client.",
		}),
	}
	reg.MustRegister(h.inHandshake, h.waits, h.failed)
	return h
}

// Accept takes a slot, waiting for one while every slot is taken, then
// the next connection.
func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		l.waits.Inc()
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	l.inHandshake.Inc()
	return &handshakeConn{Conn: c, l: l}, nil
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *handshakeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// handshakeConn is a connection that holds a slot until its handshake
// ends.
type handshakeConn struct {
	net.Conn
	l    *handshakeListener
	once sync.Once
}

// release gives back the slot, once; closed tells that the connection
// was closed in handshake.
func (c *handshakeConn) release(closed bool) {
	c.once.Do(func() {
		<-c.l.slots
		c.l.inHandshake.Dec()
		if closed {
			c.l.failed.Inc()
		}
	})
}

// SetDeadline with the zero time is gRPC's end of the handshake.
func (c *handshakeConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.release(false)
	}
	return c.Conn.SetDeadline(t)
}

func (c *handshakeConn) Close() error {
	c.release(true)
	return c.Conn.Close()
}
