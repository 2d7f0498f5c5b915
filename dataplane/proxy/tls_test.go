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
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// testPKI writes a CA and a server certificate for 127.0.0.1 and
// "redis.test" signed by it, and returns the CA, cert and key file paths.
func testPKI(t testing.TB) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "heatsink test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"redis.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.crt", "CERTIFICATE", caDER), write("tls.crt", "CERTIFICATE", der), write("tls.key", "EC PRIVATE KEY", keyDER)
}

// tlsRedis starts a real redis-server serving TLS (and, for checks made
// around the proxy, plaintext) with a password; it returns the TLS address,
// the plaintext address and the CA file.
func tlsRedis(t *testing.T) (tlsAddr, plainAddr, caFile string) {
	t.Helper()
	caFile, certFile, keyFile := testPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := redistest.Standalone(t, "--requirepass", "s3cret",
		"--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), srv.Addr, caFile
}

func TestTLSUpstream(t *testing.T) {
	skipShort(t)
	tlsAddr, plainAddr, caFile := tlsRedis(t)
	cfg, err := proxy.ClientTLS(proxy.TLSOptions{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	addr, p := start(t, proxy.Config{Upstreams: []string{tlsAddr}, Password: "s3cret", TLS: cfg})
	ctx := context.Background()
	if err := readyOnceServing(t, p); err != nil {
		t.Fatalf("Ready over TLS: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Set(ctx, "k", "over tls", 0).Err(); err != nil {
		t.Fatalf("SET through the proxy over TLS: %v", err)
	}
	// A dedicated connection (connection state) dials over TLS too.
	conn := c.Conn()
	defer conn.Close()
	if err := conn.Select(ctx, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Set(ctx, "k1", "db1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	direct := redis.NewClient(&redis.Options{Addr: plainAddr, Password: "s3cret"})
	defer direct.Close()
	if got, err := direct.Get(ctx, "k").Result(); err != nil || got != "over tls" {
		t.Fatalf("value written through the TLS proxy: %q, %v", got, err)
	}

	// Pub/sub pipes the TLS connection raw (and half-closes it at the end).
	sub := c.Subscribe(ctx, "news")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := direct.Publish(ctx, "news", "hello").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := sub.ReceiveMessage(ctx); err != nil || msg.Payload != "hello" {
		t.Fatalf("message through the TLS proxy: %v, %v", msg, err)
	}
}

func TestTLSUpstreamVerifiesTheServer(t *testing.T) {
	skipShort(t)
	tlsAddr, _, caFile := tlsRedis(t)
	ready := func(o proxy.TLSOptions) error {
		cfg, err := proxy.ClientTLS(o)
		if err != nil {
			t.Fatal(err)
		}
		_, p := start(t, proxy.Config{Upstreams: []string{tlsAddr}, Password: "s3cret", TLS: cfg})
		return readyOnceServing(t, p)
	}
	if err := ready(proxy.TLSOptions{CAFile: caFile, ServerName: "redis.test"}); err != nil {
		t.Errorf("server name in the certificate: %v", err)
	}
	if err := ready(proxy.TLSOptions{CAFile: caFile, ServerName: "other.test"}); err == nil {
		t.Error("a server name not in the certificate was accepted")
	}
	if err := ready(proxy.TLSOptions{}); err == nil {
		t.Error("a certificate from an unknown CA was accepted with the system roots")
	}
	if err := ready(proxy.TLSOptions{InsecureSkipVerify: true}); err != nil {
		t.Errorf("insecureSkipVerify: %v", err)
	}
	// Plaintext to the TLS port fails rather than pretending to work.
	_, p := start(t, proxy.Config{Upstreams: []string{tlsAddr}, Password: "s3cret", Timeout: time.Second})
	if err := readyOnceServing(t, p); err == nil {
		t.Error("plaintext to a TLS port was ready")
	}
}

// readyOnceServing waits for Serve to start (Ready says "not serving"
// before), then returns Ready's verdict on the upstream.
func readyOnceServing(t *testing.T, p *proxy.Proxy) error {
	t.Helper()
	var verdict error
	eventually.Succeeds(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if verdict = p.Ready(ctx); verdict != nil && verdict.Error() == "not serving" {
			return verdict
		}
		return nil
	})
	return verdict
}

func TestClientTLSRejectsBadCAFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(bad, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, o := range []proxy.TLSOptions{{CAFile: bad}, {CAFile: filepath.Join(t.TempDir(), "missing")}} {
		if _, err := proxy.ClientTLS(o); err == nil {
			t.Errorf("ClientTLS(%+v) accepted a bad CA file", o)
		}
	}
	cfg, err := proxy.ClientTLS(proxy.TLSOptions{ServerName: "r"})
	if err != nil || cfg.MinVersion != tls.VersionTLS12 || cfg.ServerName != "r" {
		t.Fatalf("ClientTLS = %+v, %v", cfg, err)
	}
}
