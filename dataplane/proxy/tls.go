package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"
)

// TLSOptions describe TLS to Redis. The injector fills CAFile and ServerName
// from a HotKeyPolicy's spec.target.tls (caSecretRef, mounted as a file, and
// serverName).
type TLSOptions struct {
	// CAFile is a PEM bundle of the CAs that sign Redis' certificate; empty
	// means the system roots. It is read again when it changes (tls_ca.go
	// says which connections see a new bundle).
	CAFile string
	// ServerName overrides the name checked in Redis' certificate; empty
	// means the host of each address dialled (which in cluster mode differs
	// per node).
	ServerName string
	// InsecureSkipVerify accepts any certificate, forfeiting protection
	// against a man in the middle. It is for a proxy run by hand (the
	// --tls-insecure-skip-verify flag, e.g. against a test Redis with a
	// self-signed certificate): the policy API has no such field, so the
	// injector never sets it.
	InsecureSkipVerify bool
	// CertFile and KeyFile, if set, are the PEM client certificate and key
	// presented to a Redis that verifies clients (tls-auth-clients yes):
	// the injector mounts spec.target.tls.clientCertSecretRef there. They
	// are read at each handshake and a changed pair is used from then on
	// (see secretfiles.go), so a renewed certificate needs no restart.
	CertFile, KeyFile string
}

// ClientTLS builds the client TLS configuration for connections to Redis.
// TLS 1.2 is the floor: Redis supports 1.2 and 1.3, and older versions are
// broken. A client certificate and a CA bundle are loaded once here, so
// that a bad one fails at start, and then again whenever their files
// change.
func ClientTLS(o TLSOptions) (*tls.Config, error) {
	if o.InsecureSkipVerify && o.CAFile != "" {
		return nil, errors.New("redis TLS: a CA file and insecureSkipVerify exclude each other")
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         o.ServerName,
		InsecureSkipVerify: o.InsecureSkipVerify, //nolint:gosec // opt-in by flag only, never from a policy
	}
	if o.CAFile != "" {
		ca, err := newCABundle(o.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs, _ = ca.get()
		caBundles.Store(cfg, ca)
		if o.ServerName != "" {
			// The name is the same for every connection, so the check
			// can be made here, with the bundle as it is at each
			// handshake: the standard verification is replaced, not
			// skipped.
			cfg.InsecureSkipVerify = true
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				roots, err := ca.get()
				if err != nil {
					return err
				}
				return verifyWith(cs, roots, o.ServerName)
			}
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("redis TLS: a client certificate needs both a certificate and a key file")
	}
	if o.CertFile != "" {
		cc, err := newClientCert(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, err
		}
		// GetClientCertificate, not Certificates: it is called at each
		// handshake, and survives the Clone tls.Dialer makes per address.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cc.get() }
	}
	return cfg, nil
}

// TLSDialer is a go-redis Options.Dialer that connects over TLS with cfg (a
// configuration ClientTLS made) as dialTLS does: each connection checks
// Redis' certificate against the CA bundle as it is at its handshake, and
// against the configured server name or else the host it dials. The
// engine's clients dial with it rather than with Options.TLSConfig, with
// which go-redis keeps the bundle read at start whenever no server name
// is set (tls_ca.go).
func TLSDialer(cfg *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, _, addr string) (net.Conn, error) {
		return DialTLS(ctx, d, cfg, addr)
	}
}

// DialTLS connects to addr with d and completes the TLS handshake with cfg
// (see TLSDialer).
func DialTLS(ctx context.Context, d *net.Dialer, cfg *tls.Config, addr string) (net.Conn, error) {
	tc, err := dialTLS(ctx, d, cfg, addr)
	if err != nil {
		return nil, err
	}
	return tc, nil
}

// dialTLS connects to addr and completes the TLS handshake within the
// dialer's timeout, checking Redis' certificate against the configured
// server name or else addr's host, as tls.Dialer does, against the CA
// bundle as it is now. The TLS connection runs over a tlsTransport, so that
// the event loop can take it over.
func dialTLS(ctx context.Context, d *net.Dialer, cfg *tls.Config, addr string) (*tls.Conn, error) {
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			raw.Close()
			return nil, err
		}
		roots := currentRoots(cfg)
		cfg = cfg.Clone() // GetClientCertificate survives it
		cfg.ServerName, cfg.RootCAs = host, roots
	}
	tc := tls.Client(&tlsTransport{Conn: raw, fd: -1}, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return tc, nil
}

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
