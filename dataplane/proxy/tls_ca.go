package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// The Redis CA bundle is a mounted Secret too, and rotates like the client
// certificate (secretfiles.go): it is read at each handshake, parsed again
// only when its bytes changed, and a file that cannot be read or holds no
// certificate leaves the last good bundle in use. Every connection to Redis
// sees the current bundle: those the proxy dials (dialTLS: sessions, the
// event loop, slot-map loads, readiness) and the engine's, which dial with
// TLSDialer. go-redis' own TLS (Options.TLSConfig) would not do: without a
// fixed server name each connection is checked against the host it dials,
// which crypto/tls sets on its own copy of the configuration and never
// passes to a verification callback (for an IP address not even as SNI), so
// a callback could check the chain but not the name. With a fixed name
// (--tls-server-name) ClientTLS's VerifyConnection checks both, for
// go-redis clients given the configuration itself (the go-redis hook's).

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
// bundle, for dialTLS. A configuration lives as long as the process (or the
// test) that made it.
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
