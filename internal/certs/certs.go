// Package certs gives the manager's webhook server a certificate without
// cert-manager: a self-signed CA and a serving certificate, kept in one Secret
// so that every manager replica serves the same chain, renewed before they
// expire, with the CA bundle patched into the manager's own webhook
// configurations.
//
// The decisions (what to renew, when, which CAs to trust) are the pure
// function Next; Rotator applies them to the cluster on a clock.
package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Secret keys. tls.crt and tls.key follow the kubernetes.io/tls convention so
// the Secret can be inspected with the usual tools.
const (
	KeyCACert   = "ca.crt"
	KeyCAKey    = "ca.key"
	KeyCert     = "tls.crt"
	KeyKey      = "tls.key"
	KeyCABundle = "ca-bundle.crt"
)

// Config says what to issue and for how long.
type Config struct {
	// DNSNames of the webhook Service, e.g. svc.ns.svc and svc.ns.svc.cluster.local.
	DNSNames []string
	// CAValidity is the lifetime of a new CA. Default: 5 years.
	CAValidity time.Duration
	// CertValidity is the lifetime of a new serving certificate, capped at its
	// CA's expiry. Default: 90 days.
	CertValidity time.Duration
	// RenewFraction is the fraction of a certificate's lifetime left at which
	// it is renewed. Default: 1/3.
	RenewFraction float64
	// Grace is how long a new CA is trusted (in the bundle) before a serving
	// certificate signed by it is served, so that the API server has the new
	// bundle before any replica serves the new chain. Default: 10 minutes.
	Grace time.Duration
}

func (c Config) withDefaults() Config {
	if c.CAValidity <= 0 {
		c.CAValidity = 5 * 365 * 24 * time.Hour
	}
	if c.CertValidity <= 0 {
		c.CertValidity = 90 * 24 * time.Hour
	}
	if c.RenewFraction <= 0 || c.RenewFraction >= 1 {
		c.RenewFraction = 1.0 / 3
	}
	if c.Grace <= 0 {
		c.Grace = 10 * time.Minute
	}
	return c
}

// Bundle is the PEM material of the Secret.
type Bundle struct {
	CACert   []byte // the current CA
	CAKey    []byte
	Cert     []byte // the serving certificate
	Key      []byte
	CABundle []byte // CAs the API server trusts: the current one and older ones not yet expired
}

// FromData reads a Bundle from Secret data; missing keys are empty.
func FromData(data map[string][]byte) *Bundle {
	return &Bundle{CACert: data[KeyCACert], CAKey: data[KeyCAKey], Cert: data[KeyCert], Key: data[KeyKey], CABundle: data[KeyCABundle]}
}

// Data is the Bundle as Secret data.
func (b *Bundle) Data() map[string][]byte {
	return map[string][]byte{KeyCACert: b.CACert, KeyCAKey: b.CAKey, KeyCert: b.Cert, KeyKey: b.Key, KeyCABundle: b.CABundle}
}

// Equal reports whether two bundles hold the same material.
func (b *Bundle) Equal(o *Bundle) bool {
	return o != nil && bytes.Equal(b.CACert, o.CACert) && bytes.Equal(b.CAKey, o.CAKey) &&
		bytes.Equal(b.Cert, o.Cert) && bytes.Equal(b.Key, o.Key) && bytes.Equal(b.CABundle, o.CABundle)
}

// TLSCertificate is the serving certificate for a tls.Config.
func (b *Bundle) TLSCertificate() (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &c, nil
}

// Reason says why Next changed a bundle; empty when it did not.
type Reason string

const (
	ReasonNone       Reason = ""
	ReasonNew        Reason = "Created"        // nothing usable: new CA and certificate
	ReasonRotateCA   Reason = "CARotated"      // the CA nears expiry: a new CA is trusted alongside the old one
	ReasonRenewCert  Reason = "CertRenewed"    // the serving certificate nears expiry or lacks a name
	ReasonReissue    Reason = "CertReissued"   // the serving certificate moves to the new CA after the grace period
	ReasonPruneTrust Reason = "BundlePruned"   // expired CAs leave the bundle
	ReasonRepair     Reason = "BundleRepaired" // the bundle lacked the current CA
)

// Next decides the bundle to keep at now: it returns cur unchanged (and
// ReasonNone) when nothing is due. It is pure apart from key generation.
//
// Order of a CA rotation, so that no replica ever serves a chain the API
// server does not trust: (1) a new CA joins the bundle while the old serving
// certificate is still served; (2) after Grace, a serving certificate from
// the new CA is issued; (3) the old CA leaves the bundle when it expires.
func Next(now time.Time, cur *Bundle, cfg Config) (*Bundle, Reason, error) {
	cfg = cfg.withDefaults()
	ca, caKey, err := parseCA(cur)
	if err != nil || now.After(ca.NotAfter) {
		// Nothing usable (or an expired CA, which nothing can bridge).
		return fresh(now, cfg)
	}
	next := &Bundle{CACert: cur.CACert, CAKey: cur.CAKey, Cert: cur.Cert, Key: cur.Key}
	reason := ReasonNone
	trust := parseAll(cur.CABundle)

	if due(now, ca, cfg.RenewFraction) {
		newCA, newKey, caPEM, keyPEM, err := newCA(now, cfg.CAValidity)
		if err != nil {
			return nil, ReasonNone, err
		}
		trust = append(trust, ca)
		ca, caKey = newCA, newKey
		next.CACert, next.CAKey = caPEM, keyPEM
		reason = ReasonRotateCA
	}

	leaf := parseLeaf(cur)
	switch {
	case leaf == nil || leaf.NotAfter.Before(now) || !coversNames(leaf, cfg.DNSNames):
		// Unusable now: issue from the current CA at once; the API server
		// cannot verify an expired or misnamed certificate anyway.
		if reason == ReasonNone {
			reason = ReasonRenewCert
		}
		if err := issueInto(next, now, ca, caKey, cfg); err != nil {
			return nil, ReasonNone, err
		}
	case reason == ReasonRotateCA:
		// Keep serving the old chain until the new CA is in every bundle.
	case leaf.CheckSignatureFrom(ca) != nil && now.Sub(ca.NotBefore) >= cfg.Grace+time.Hour:
		// NotBefore is backdated by an hour (clock skew), hence +1h.
		reason = ReasonReissue
		if err := issueInto(next, now, ca, caKey, cfg); err != nil {
			return nil, ReasonNone, err
		}
	case due(now, leaf, cfg.RenewFraction):
		reason = ReasonRenewCert
		if err := issueInto(next, now, ca, caKey, cfg); err != nil {
			return nil, ReasonNone, err
		}
	}

	next.CABundle = bundlePEM(now, ca, trust)
	if reason == ReasonNone && !bytes.Equal(next.CABundle, cur.CABundle) {
		reason = ReasonPruneTrust
		if !containsCert(parseAll(cur.CABundle), ca) {
			reason = ReasonRepair
		}
	}
	if reason == ReasonNone {
		return cur, ReasonNone, nil
	}
	return next, reason, nil
}

// due reports whether less than frac of c's lifetime is left at now.
func due(now time.Time, c *x509.Certificate, frac float64) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Sub(now) < time.Duration(float64(life)*frac)
}

func fresh(now time.Time, cfg Config) (*Bundle, Reason, error) {
	ca, key, caPEM, keyPEM, err := newCA(now, cfg.CAValidity)
	if err != nil {
		return nil, ReasonNone, err
	}
	b := &Bundle{CACert: caPEM, CAKey: keyPEM}
	if err := issueInto(b, now, ca, key, cfg); err != nil {
		return nil, ReasonNone, err
	}
	b.CABundle = bundlePEM(now, ca, nil)
	return b, ReasonNew, nil
}

// bundlePEM is the current CA followed by the other trusted CAs that have
// not expired, without duplicates.
func bundlePEM(now time.Time, ca *x509.Certificate, trust []*x509.Certificate) []byte {
	var buf bytes.Buffer
	seen := []*x509.Certificate{ca}
	_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	for _, c := range trust {
		if c.NotAfter.Before(now) || containsCert(seen, c) {
			continue
		}
		seen = append(seen, c)
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

func containsCert(list []*x509.Certificate, c *x509.Certificate) bool {
	for _, x := range list {
		if bytes.Equal(x.Raw, c.Raw) {
			return true
		}
	}
	return false
}

func coversNames(leaf *x509.Certificate, names []string) bool {
	for _, n := range names {
		if leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

func parseCA(b *Bundle) (*x509.Certificate, crypto.Signer, error) {
	if b == nil {
		return nil, nil, errors.New("no bundle")
	}
	cert, err := parseCert(b.CACert)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, nil, errors.New("CA certificate is not a CA")
	}
	key, err := parseKey(b.CAKey)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, nil, errors.New("CA key does not match the CA certificate")
	}
	return cert, key, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// parseLeaf returns the serving certificate when it and its key form a pair.
func parseLeaf(b *Bundle) *x509.Certificate {
	if _, err := tls.X509KeyPair(b.Cert, b.Key); err != nil {
		return nil
	}
	c, err := parseCert(b.Cert)
	if err != nil {
		return nil
	}
	return c
}

func parseCert(p []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(p)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseAll(p []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, p = pem.Decode(p)
		if block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && block.Type == "CERTIFICATE" {
			out = append(out, c)
		}
	}
}

func parseKey(p []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(p)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", k)
	}
	return s, nil
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// newCA issues a self-signed CA valid from an hour before now (clock skew
// between replicas and the API server).
func newCA(now time.Time, validity time.Duration) (*x509.Certificate, crypto.Signer, []byte, []byte, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("heatsink-webhook-ca@%d", now.Unix()), Organization: []string{"heatsink"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// issueInto issues a serving certificate for cfg.DNSNames signed by ca into b.
func issueInto(b *Bundle, now time.Time, ca *x509.Certificate, caKey crypto.Signer, cfg Config) error {
	if len(cfg.DNSNames) == 0 {
		return errors.New("no DNS names to issue a serving certificate for")
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return err
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	notAfter := now.Add(cfg.CertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cfg.DNSNames[0], Organization: []string{"heatsink"}},
		DNSNames:     cfg.DNSNames,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	b.Cert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	b.Key = keyPEM
	return nil
}
