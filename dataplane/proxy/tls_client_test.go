package proxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/testpki"
)

// mtlsRedis starts a real redis-server with tls-auth-clients yes and
// returns its TLS address and a plaintext client for checks around the
// proxy.
func mtlsRedis(t *testing.T, dir string, serverCA, clientCA *testpki.CA) (string, *redis.Client) {
	t.Helper()
	tlsAddr, srv := testpki.MTLSRedis(t, dir, serverCA, clientCA, "--requirepass", "s3cret")
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "s3cret"})
	t.Cleanup(func() { direct.Close() })
	return tlsAddr, direct
}

// TestTLSClientCertificate: against a Redis with tls-auth-clients yes, a
// proxy without a client certificate is refused and one with it works; a
// new pair written to the files (a renewed Secret) is presented by new
// connections without a restart, while a connection opened before keeps
// working.
func TestTLSClientCertificate(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	serverCA, clientCA := testpki.NewCA(t, dir, "server-ca"), testpki.NewCA(t, dir, "client-ca")
	tlsAddr, direct := mtlsRedis(t, dir, serverCA, clientCA)
	ctx := context.Background()

	noCert, err := proxy.ClientTLS(proxy.TLSOptions{CAFile: serverCA.File})
	if err != nil {
		t.Fatal(err)
	}
	_, p := start(t, proxy.Config{Upstreams: []string{tlsAddr}, Password: "s3cret", TLS: noCert, Timeout: 2 * time.Second})
	if err := readyOnceServing(t, p); err == nil {
		t.Fatal("a proxy without a client certificate was accepted by a Redis with tls-auth-clients yes")
	}

	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	clientCA.Issue(t, "heatsink-1", false, certFile, keyFile)
	withCert, err := proxy.ClientTLS(proxy.TLSOptions{CAFile: serverCA.File, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	addr, p := start(t, proxy.Config{Upstreams: []string{tlsAddr}, Password: "s3cret", TLS: withCert})
	if err := readyOnceServing(t, p); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Set(ctx, "k", "mtls", 0).Err(); err != nil {
		t.Fatalf("SET through the proxy with a client certificate: %v", err)
	}
	// A connection with state of its own has a dedicated upstream
	// connection, opened now with the first certificate.
	before := c.Conn()
	defer before.Close()
	if err := before.Select(ctx, 1).Err(); err != nil {
		t.Fatal(err)
	}

	// Rotation: a certificate from a new client CA replaces the files, and
	// Redis is told to trust only the new CA. A connection presenting the
	// old certificate is now refused, so a new connection that works
	// proves the proxy read the new pair.
	oldPair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientCA2 := testpki.NewCA(t, dir, "client-ca-2")
	clientCA2.Issue(t, "heatsink-2", false, certFile, keyFile)
	if err := direct.ConfigSet(ctx, "tls-ca-cert-file", clientCA2.File).Err(); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.Cert)
	stale := redis.NewClient(&redis.Options{Addr: tlsAddr, Password: "s3cret", MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{oldPair}, MinVersion: tls.VersionTLS12}})
	defer stale.Close()
	if err := stale.Ping(ctx).Err(); err == nil {
		t.Fatal("Redis still accepts the old client certificate: the rotation below would prove nothing")
	}
	// The proxy keeps a few upstream connections dialled ahead (the warm
	// pool, opened with the old pair and still accepted, like any open
	// connection), so more sessions than that are opened: the last ones
	// reach Redis on connections dialled after the rotation.
	// A warm connection dialled between the files' rotation and Redis
	// trusting the new CA presented the new pair too early: Redis refuses
	// it after the handshake, and the one client that gets it sees one
	// error. So each session may take a bounded few tries, and at most the
	// warm pool's connections may fail.
	failed := 0
	for i := range 4 {
		var err error
		for range 3 {
			after := c.Conn()
			defer after.Close()
			if err = after.Select(ctx, 2).Err(); err != nil {
				failed++
				continue
			}
			if err = after.Set(ctx, "k2", "rotated", 0).Err(); err != nil {
				t.Fatalf("SET on connection %d opened after the rotation: %v", i, err)
			}
			break
		}
		if err != nil {
			t.Fatalf("connection %d opened after the certificate was rotated: %v", i, err)
		}
	}
	if failed > 2 {
		t.Errorf("%d sessions after the rotation failed, more than the warm pool holds (2)", failed)
	}
	if err := before.Set(ctx, "k1", "still", 0).Err(); err != nil {
		t.Fatalf("a connection opened before the rotation stopped working: %v", err)
	}
	direct.Do(ctx, "SELECT", 2)
	if got, err := direct.Get(ctx, "k2").Result(); err != nil || got != "rotated" {
		t.Fatalf("value written after the rotation: %q, %v", got, err)
	}
}

// TestTLSClientCertificateFiles: ClientTLS refuses half a pair and a pair
// that does not match, and a pair later broken on disk (a hand rotation
// caught between the certificate and its key) leaves the last good pair in
// use.
func TestTLSClientCertificateFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Issue(t, "a", false, certFile, keyFile)
	if _, err := proxy.ClientTLS(proxy.TLSOptions{CertFile: certFile}); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	otherCert, otherKey := filepath.Join(dir, "o.crt"), filepath.Join(dir, "o.key")
	ca.Issue(t, "b", false, otherCert, otherKey)
	if _, err := proxy.ClientTLS(proxy.TLSOptions{CertFile: certFile, KeyFile: otherKey}); err == nil || !strings.Contains(err.Error(), "client certificate") {
		t.Errorf("a certificate with another's key: %v", err)
	}
	cfg, err := proxy.ClientTLS(proxy.TLSOptions{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	first, err := cfg.GetClientCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Only the certificate renewed: the pair on disk does not match.
	ca.Issue(t, "c", false, certFile, filepath.Join(dir, "unused.key"))
	if got, err := cfg.GetClientCertificate(nil); err != nil || got != first {
		t.Errorf("mismatched pair on disk: got %v, %v; want the last good pair", got, err)
	}
	ca.Issue(t, "d", false, certFile, keyFile)
	got, err := cfg.GetClientCertificate(nil)
	if err != nil || got == first {
		t.Fatalf("renewed pair: got %v, %v", got, err)
	}
	if cn := leafCN(t, got.Certificate[0]); cn != "d" {
		t.Errorf("renewed pair presents CN %q, want d", cn)
	}
}

func leafCN(t *testing.T, der []byte) string {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c.Subject.CommonName
}
