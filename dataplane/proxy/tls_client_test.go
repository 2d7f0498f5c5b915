package proxy_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // its certificate, PEM
}

var serial atomic.Int64

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	file := filepath.Join(dir, name+".crt")
	writePEM(t, file, "CERTIFICATE", der)
	return &testCA{cert: cert, key: key, file: file}
}

// issue writes a certificate for cn signed by ca (a server certificate for
// 127.0.0.1 when server is true, a client one otherwise) to certFile and
// keyFile, replacing what they held.
func (ca *testCA) issue(t *testing.T, cn string, server bool, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	// Written next to the file and renamed over it, as the kubelet swaps a
	// Secret's files: a reader never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// mtlsRedis starts a real redis-server whose TLS port verifies clients
// (tls-auth-clients yes) against clientCA; the server certificate is signed
// by serverCA. It returns the TLS address and a plaintext client for
// checks made around the proxy.
func mtlsRedis(t *testing.T, dir string, serverCA, clientCA *testCA) (string, *redis.Client) {
	t.Helper()
	certFile, keyFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	serverCA.issue(t, "redis.test", true, certFile, keyFile)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := redistest.Standalone(t, "--requirepass", "s3cret",
		"--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", clientCA.file, "--tls-auth-clients", "yes")
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "s3cret"})
	t.Cleanup(func() { direct.Close() })
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), direct
}

// TestTLSClientCertificate: against a Redis with tls-auth-clients yes, a
// proxy without a client certificate is refused and one with it works; a
// new pair written to the files (a renewed Secret) is presented by new
// connections without a restart, while a connection opened before keeps
// working.
func TestTLSClientCertificate(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	serverCA, clientCA := newTestCA(t, dir, "server-ca"), newTestCA(t, dir, "client-ca")
	tlsAddr, direct := mtlsRedis(t, dir, serverCA, clientCA)
	ctx := context.Background()

	noCert, err := proxy.ClientTLS(proxy.TLSOptions{CAFile: serverCA.file})
	if err != nil {
		t.Fatal(err)
	}
	_, p := start(t, proxy.Config{Upstreams: []string{tlsAddr}, Password: "s3cret", TLS: noCert, Timeout: 2 * time.Second})
	if err := readyOnceServing(t, p); err == nil {
		t.Fatal("a proxy without a client certificate was accepted by a Redis with tls-auth-clients yes")
	}

	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	clientCA.issue(t, "heatsink-1", false, certFile, keyFile)
	withCert, err := proxy.ClientTLS(proxy.TLSOptions{CAFile: serverCA.file, CertFile: certFile, KeyFile: keyFile})
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
	clientCA2 := newTestCA(t, dir, "client-ca-2")
	clientCA2.issue(t, "heatsink-2", false, certFile, keyFile)
	if err := direct.ConfigSet(ctx, "tls-ca-cert-file", clientCA2.file).Err(); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)
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
	for i := range 4 {
		after := c.Conn()
		defer after.Close()
		if err := after.Select(ctx, 2).Err(); err != nil {
			t.Fatalf("connection %d opened after the certificate was rotated: %v", i, err)
		}
		if err := after.Set(ctx, "k2", "rotated", 0).Err(); err != nil {
			t.Fatalf("SET on connection %d opened after the rotation: %v", i, err)
		}
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
	ca := newTestCA(t, dir, "ca")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.issue(t, "a", false, certFile, keyFile)
	if _, err := proxy.ClientTLS(proxy.TLSOptions{CertFile: certFile}); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	otherCert, otherKey := filepath.Join(dir, "o.crt"), filepath.Join(dir, "o.key")
	ca.issue(t, "b", false, otherCert, otherKey)
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
	ca.issue(t, "c", false, certFile, filepath.Join(dir, "unused.key"))
	if got, err := cfg.GetClientCertificate(nil); err != nil || got != first {
		t.Errorf("mismatched pair on disk: got %v, %v; want the last good pair", got, err)
	}
	ca.issue(t, "d", false, certFile, keyFile)
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
