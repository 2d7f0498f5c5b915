package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	up "github.com/heatsink-dev/heatsink/dataplane/upstream"
)

// TLSOptions describe TLS to Redis (upstream.TLSOptions): the proxy's
// name for them, which the sidecar's flags and the tests use.
type TLSOptions = up.TLSOptions

// ClientTLS builds the client TLS configuration for connections to Redis
// (upstream.ClientTLS).
func ClientTLS(o TLSOptions) (*tls.Config, error) { return up.ClientTLS(o) }

// TLSDialer is a go-redis Options.Dialer that connects over TLS with cfg (a
// configuration ClientTLS made) as the proxy does: each connection checks
// Redis' certificate against the CA bundle as it is at its handshake
// (upstream.Dialer.Dial).
func TLSDialer(cfg *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return (&up.Dialer{TLS: cfg, Timeout: timeout}).Dial
}

// loopTransport puts a tlsTransport under a TLS connection, so that the
// event loop can take it over.
func loopTransport(c net.Conn) net.Conn { return &tlsTransport{Conn: c, fd: -1} }

// tlsTransport is the connection under a TLS connection to Redis. For a
// session it is the TCP connection, as it is. The event loop takes its
// descriptor (fd) and runs crypto/tls on its own goroutine, with reads and
// writes that never block (tlsloop_linux.go): a read that finds nothing
// returns a temporary error, which crypto/tls does not keep (the record
// read so far stays buffered), and a write the socket does not take is
// held in out, because crypto/tls treats any write error as fatal.
type tlsTransport struct {
	net.Conn
	// fd is the event loop's descriptor, or -1 (Conn serves).
	fd int
	// drained: a read since the loop's last readable event found the
	// socket empty, so a read returns at once without a system call.
	drained bool
	// out[ooff:] is what the socket did not take yet.
	out  []byte
	ooff int
}

func (t *tlsTransport) Read(b []byte) (int, error) {
	if t.fd < 0 {
		return t.Conn.Read(b)
	}
	return t.readFD(b)
}

func (t *tlsTransport) Write(b []byte) (int, error) {
	if t.fd < 0 {
		return t.Conn.Write(b)
	}
	return t.writeFD(b)
}

// Close closes the TCP connection; the event loop closes its descriptor
// itself.
func (t *tlsTransport) Close() error {
	if t.fd < 0 {
		return t.Conn.Close()
	}
	return nil
}

func (t *tlsTransport) SetDeadline(d time.Time) error {
	if t.fd < 0 {
		return t.Conn.SetDeadline(d)
	}
	return nil
}

func (t *tlsTransport) SetReadDeadline(d time.Time) error {
	if t.fd < 0 {
		return t.Conn.SetReadDeadline(d)
	}
	return nil
}

func (t *tlsTransport) SetWriteDeadline(d time.Time) error {
	if t.fd < 0 {
		return t.Conn.SetWriteDeadline(d)
	}
	return nil
}

// pending reports bytes held for the socket.
func (t *tlsTransport) pending() bool { return t.ooff < len(t.out) }

// toBlocking gives the connection to a session, over c (the descriptor's
// duplicate, in Go's netpoller): what the socket had not taken is written
// first.
func (t *tlsTransport) toBlocking(c net.Conn) error {
	t.Conn, t.fd, t.drained = c, -1, false
	out := t.out[t.ooff:]
	t.out, t.ooff = nil, 0
	if len(out) > 0 {
		_, err := c.Write(out)
		return err
	}
	return nil
}
