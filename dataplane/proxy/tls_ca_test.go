package proxy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/testpki"
)

// TestTLSCARotation: Redis' certificate is replaced by one a new CA
// signed, and the CA bundle file (a mounted Secret) is replaced by that
// CA's: connections opened after that, through the proxy (no server name:
// each node's address is checked), from a go-redis client with a fixed
// server name, and from one dialling with TLSDialer as the sidecar's engine
// does (no server name), verify against the new bundle without a restart;
// one opened before keeps working until Redis cuts every connection, which
// leaves the proxy only ones it dials after the rotation. The bundle is
// swapped the way a CA rotation goes (old and new CA, then the new one
// alone), so no connection has to fail in between.
func TestTLSCARotation(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	ca1, clientCA := testpki.NewCA(t, dir, "server-ca-1"), testpki.NewCA(t, dir, "client-ca")
	tlsAddr, direct := mtlsRedis(t, dir, ca1, clientCA)
	ctx := context.Background()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	clientCA.Issue(t, "heatsink", false, certFile, keyFile)
	bundle := filepath.Join(dir, "ca.crt")
	pemOf := func(ca *testpki.CA) []byte {
		b, err := os.ReadFile(ca.File)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	testpki.WriteFile(t, bundle, pemOf(ca1))

	perAddress, err := proxy.ClientTLS(proxy.TLSOptions{CAFile: bundle, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	named, err := proxy.ClientTLS(proxy.TLSOptions{CAFile: bundle, ServerName: "redis.test", CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	addr, p := start(t, proxy.Config{Upstreams: []string{tlsAddr}, Password: "s3cret", TLS: perAddress})
	if err := readyOnceServing(t, p); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	before := c.Conn() // a dedicated upstream connection, dialled now
	defer before.Close()
	if err := before.Select(ctx, 1).Err(); err != nil {
		t.Fatal(err)
	}
	engineLike := func() error {
		e := redis.NewClient(&redis.Options{Addr: tlsAddr, Password: "s3cret", TLSConfig: named})
		defer e.Close()
		if err := e.Ping(ctx).Err(); err != nil {
			return err
		}
		// The sidecar's engine dials with TLSDialer (no server name:
		// the host it dials is checked), not with TLSConfig. The client
		// keeps go-redis' default retries: the dialer is what is tested,
		// and a refused handshake fails the same with or without them.
		d := redis.NewClient(&redis.Options{Addr: tlsAddr, Password: "s3cret", Dialer: proxy.TLSDialer(perAddress, 5*time.Second)})
		defer d.Close()
		return d.Ping(ctx).Err()
	}
	if err := engineLike(); err != nil {
		t.Fatalf("go-redis with the named configuration before the rotation: %v", err)
	}

	// The rotation: the bundle gains the new CA, Redis switches to a
	// certificate it signed, the bundle loses the old CA.
	ca2 := testpki.NewCA(t, dir, "server-ca-2")
	testpki.WriteFile(t, bundle, bytes.Join([][]byte{pemOf(ca1), pemOf(ca2)}, nil))
	serverCert, serverKey := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	ca2.Issue(t, "redis.test", true, serverCert, serverKey)
	if err := direct.ConfigSet(ctx, "tls-cert-file", serverCert).Err(); err != nil {
		t.Fatal(err)
	}
	testpki.WriteFile(t, bundle, pemOf(ca2))
	// Redis now presents the new CA's certificate: a client that still
	// trusts only the old CA is refused, so what works below read the new
	// bundle.
	clientPair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	oldRoots := x509.NewCertPool()
	oldRoots.AddCert(ca1.Cert)
	stale := redis.NewClient(&redis.Options{Addr: tlsAddr, Password: "s3cret",
		TLSConfig: &tls.Config{RootCAs: oldRoots, Certificates: []tls.Certificate{clientPair}, MinVersion: tls.VersionTLS12}})
	defer stale.Close()
	if err := stale.Ping(ctx).Err(); err == nil {
		t.Fatal("a client trusting only the old CA still connects: the rotation below would prove nothing")
	}

	if err := before.Set(ctx, "k", "still", 0).Err(); err != nil {
		t.Fatalf("a connection opened before the rotation stopped working: %v", err)
	}
	// Every connection Redis has is cut, the proxy's warm and event-loop
	// ones too: what works from now on was dialled after the rotation.
	if err := direct.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	// A session may first meet a cut connection the proxy has not noticed.
	eventually.Succeeds(t, 10*time.Second, func() error {
		s := c.Conn()
		defer s.Close()
		if err := s.Select(ctx, 2).Err(); err != nil {
			return err
		}
		return s.Set(ctx, "k", "rotated", 0).Err()
	})
	for i := range 4 {
		after := c.Conn()
		defer after.Close()
		if err := after.Select(ctx, 2).Err(); err != nil {
			t.Fatalf("proxy session %d opened after the CA rotation: %v", i, err)
		}
		if err := after.Set(ctx, "k", "rotated", 0).Err(); err != nil {
			t.Fatalf("SET on session %d opened after the CA rotation: %v", i, err)
		}
	}
	if err := engineLike(); err != nil {
		t.Fatalf("go-redis with the named configuration after the CA rotation: %v", err)
	}
	// A bundle file broken on disk leaves the last good one in use.
	testpki.WriteFile(t, bundle, []byte("not pem"))
	if err := engineLike(); err != nil {
		t.Fatalf("with a broken bundle on disk: %v", err)
	}
	after := c.Conn()
	defer after.Close()
	if err := after.Select(ctx, 3).Err(); err != nil {
		t.Fatalf("proxy session with a broken bundle on disk: %v", err)
	}
}
