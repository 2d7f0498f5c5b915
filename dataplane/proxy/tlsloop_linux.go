//go:build linux

package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"

	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/rawsys"
	up "github.com/heatsink-dev/heatsink/dataplane/upstream"
)

// TLS upstreams in the event loop. The handshake (and AUTH and HELLO) run
// on the dialling goroutine with blocking I/O, as for a session; then the
// loop takes the TCP descriptor into its epoll set, as for a plaintext
// connection, and runs crypto/tls itself over it: a round's commands are
// encrypted in one tls.Conn.Write and go out in as many writes as records
// (one for up to 16 KiB), replies are decrypted as the loop reads them.
// No goroutine or system call is added per command: TLS costs the loop
// its crypto only (docs/proxy.md gives the throughput against plaintext).
//
// Why not the kernel's TLS (kTLS), which would leave the loop's reads and
// writes unchanged: it needs the kernel's tls module (not loaded on every
// node, nor here), crypto/tls cannot hand it the session's keys, and the
// records Redis sends after the handshake (session tickets, key updates)
// would then need handling outside crypto/tls.
//
// crypto/tls buffers: a read from the socket may bring several records,
// and a reply shorter than the reader's buffer leaves the rest of its
// record decrypted and held. The socket is then empty and epoll reports
// nothing, so after a readable event the loop reads the connection until
// crypto/tls needs the socket again and finds it empty (readUp), and a
// connection that was paused (a large reply streamed to a slow client)
// is read again on resuming.

// errWouldBlock is the transport's "nothing to read now". It is a
// temporary net.Error, so crypto/tls keeps the connection usable and the
// part of a record read so far.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "tls transport: would block" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

func (t *tlsTransport) readFD(b []byte) (int, error) {
	if t.drained {
		return 0, errWouldBlock
	}
	for {
		n, err := rawsys.Read(t.fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			t.drained = true
			return 0, errWouldBlock
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		if n < len(b) {
			// The socket is empty now; what comes later is a new event.
			t.drained = true
		}
		return n, nil
	}
}

// writeFD writes b, holding what the socket does not take (to be written
// by flush, before anything else). Only a broken connection is an error.
func (t *tlsTransport) writeFD(b []byte) (int, error) {
	n := len(b)
	for !t.pending() && len(b) > 0 {
		w, err := rawsys.Write(t.fd, b)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			return 0, err
		}
		b = b[w:]
	}
	t.out = append(t.out, b...)
	return n, nil
}

// flush writes what writeFD held, until the socket is full.
func (t *tlsTransport) flush() error {
	for t.pending() {
		w, err := rawsys.Write(t.fd, t.out[t.ooff:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return nil
		}
		if err != nil {
			return err
		}
		t.ooff += w
	}
	if cap(t.out) > 256<<10 {
		t.out = nil // a burst is over: give its memory back
	} else {
		t.out = t.out[:0]
	}
	t.ooff = 0
	return nil
}

// tlsIO is the loop's reader of a TLS connection: "nothing now" is EAGAIN,
// as for a raw descriptor.
type tlsIO struct{ c *tls.Conn }

func (r tlsIO) Read(b []byte) (int, error) {
	n, err := r.c.Read(b)
	if n > 0 {
		return n, nil // an error after data comes again at the next read
	}
	if errors.Is(err, errWouldBlock) {
		return 0, unix.EAGAIN
	}
	return 0, err
}

// loopTLS returns the TLS connection c is (or wraps), taken out of the
// master-switch registry (the loop closes its own connections on a
// switch), or nil for plaintext.
func loopTLS(c net.Conn) *tls.Conn {
	inner := c
	tr, tracked := c.(*up.Conn)
	if tracked {
		inner = tr.Conn
	}
	tc, ok := inner.(*tls.Conn)
	if !ok {
		return nil
	}
	if tracked {
		tr.Untrack()
	}
	return tc
}

// takeTLS makes the descriptor of tc's TCP connection the loop's (takeFD)
// and switches tc's transport to it.
func takeTLS(tc *tls.Conn) (int, error) {
	t := tc.NetConn().(*tlsTransport)
	fd, err := takeFD(t.Conn)
	if err != nil {
		t.Conn.Close()
		return -1, err
	}
	t.fd = fd
	return fd, nil
}

// flushTLS writes what u's TLS connection holds, then, once the socket
// took it all, encrypts and writes u's commands; it reports false when the
// connection failed (failUp). What the socket leaves is held by the
// transport, and u waits to be writable.
func (l *loop) flushTLS(u *lupstream) bool {
	if err := u.tio.flush(); err != nil {
		l.failUp(u, err)
		return false
	}
	if !u.tio.pending() && u.woff < len(u.wbuf) {
		if _, err := u.tls.Write(u.wbuf[u.woff:]); err != nil {
			l.failUp(u, err)
			return false
		}
		u.woff = len(u.wbuf)
	}
	u.wblocked = u.tio.pending()
	return true
}
