package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
)

// TLSOptions describe TLS to Redis. The injector fills CAFile and ServerName
// from a HotKeyPolicy's spec.target.tls (caSecretRef, mounted as a file, and
// serverName).
type TLSOptions struct {
	// CAFile is a PEM bundle of the CAs that sign Redis' certificate; empty
	// means the system roots. It is read again when it changes (see
	// caBundle for which connections see a new bundle).
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
	// (see credentials.go), so a renewed certificate needs no restart.
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

// handshake completes TLS over raw (wrapped by wrap, if set) with cfg,
// checking Redis' certificate against the configured server name or else
// addr's host, as tls.Dialer does, against the CA bundle as it is now.
func handshake(ctx context.Context, raw net.Conn, cfg *tls.Config, addr string, wrap func(net.Conn) net.Conn) (*tls.Conn, error) {
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		roots := currentRoots(cfg)
		cfg = cfg.Clone() // GetClientCertificate survives it
		cfg.ServerName, cfg.RootCAs = host, roots
	}
	under := raw
	if wrap != nil {
		under = wrap(raw)
	}
	tc := tls.Client(under, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tc, nil
}

// The Redis CA bundle is a mounted Secret, and rotates like the client
// certificate (credentials.go): it is read at each handshake, parsed again
// only when its bytes changed, and a file that cannot be read or holds no
// certificate leaves the last good bundle in use. Every connection to Redis
// sees the current bundle, since every one is dialed here (Dialer): the
// proxy's (sessions, the event loop, slot-map loads, readiness) and the
// engine's (its go-redis clients, replicas, raw reads, tracking). go-redis'
// own TLS (Options.TLSConfig) would not do: without a fixed server name
// each connection is checked against the host it dials, which crypto/tls
// sets on its own copy of the configuration and never passes to a
// verification callback (for an IP address not even as SNI), so a callback
// could check the chain but not the name. With a fixed name
// (--tls-server-name) ClientTLS's VerifyConnection checks both, for go-redis
// clients given the configuration itself (the go-redis hook's).

// caBundle is the CA bundle in a file.
type caBundle struct {
	file string

	mu   sync.Mutex
	pem  []byte
	pool *x509.CertPool
}

func newCABundle(file string) (*caBundle, error) {
	b := &caBundle{file: file}
	if _, err := b.get(); err != nil {
		return nil, err
	}
	return b, nil
}

// get returns the bundle in the file, or the last good one if the file
// cannot be read or holds no certificate (with no last good one, the error).
func (b *caBundle) get() (*x509.CertPool, error) {
	pem, err := os.ReadFile(b.file)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil && b.pool != nil && bytes.Equal(pem, b.pem) {
		return b.pool, nil
	}
	if err == nil {
		pool := x509.NewCertPool()
		if pool.AppendCertsFromPEM(pem) {
			b.pem, b.pool = pem, pool
			return pool, nil
		}
		err = fmt.Errorf("no PEM certificate in %s", b.file)
	}
	if b.pool != nil {
		return b.pool, nil
	}
	return nil, fmt.Errorf("redis TLS CA: %w", err)
}

// caBundles maps each configuration ClientTLS made with a CA file to its
// bundle, for handshake. A configuration lives as long as the process (or
// the test) that made it.
var caBundles sync.Map // *tls.Config → *caBundle

// currentRoots is the current bundle of cfg, a configuration ClientTLS
// made, or cfg's own roots.
func currentRoots(cfg *tls.Config) *x509.CertPool {
	if b, ok := caBundles.Load(cfg); ok {
		if pool, err := b.(*caBundle).get(); err == nil {
			return pool
		}
	}
	return cfg.RootCAs
}

// verifyWith checks a server's certificate chain against roots and name as
// crypto/tls does: the standard verification, with roots read now.
func verifyWith(cs tls.ConnectionState, roots *x509.CertPool, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("redis TLS: the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: name})
	return err
}
