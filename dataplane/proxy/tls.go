package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSOptions describe TLS to Redis. The injector fills CAFile and ServerName
// from a HotKeyPolicy's spec.target.tls (caSecretRef, mounted as a file, and
// serverName).
type TLSOptions struct {
	// CAFile is a PEM bundle of the CAs that sign Redis' certificate; empty
	// means the system roots.
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
// broken. A client certificate is loaded once here, so that a bad pair
// fails at start, and then again whenever its files change.
func ClientTLS(o TLSOptions) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         o.ServerName,
		InsecureSkipVerify: o.InsecureSkipVerify, //nolint:gosec // opt-in by flag only, never from a policy
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis TLS CA: no PEM certificate in %s", o.CAFile)
		}
		cfg.RootCAs = pool
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
	if cfg.InsecureSkipVerify && cfg.RootCAs != nil {
		return nil, errors.New("redis TLS: a CA file and insecureSkipVerify exclude each other")
	}
	return cfg, nil
}
