package main

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/certs"
)

// TestReloadingTLS: the agent accepts the manager's certificate only if it
// chains to the CA file as it is at the handshake, for the expected name.
func TestReloadingTLS(t *testing.T) {
	now := time.Now()
	bundle := func() *certs.Bundle {
		b, _, err := certs.Next(now, nil, certs.Config{DNSNames: []string{"heatsink-fleet.heatsink-system.svc"}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	served, other := bundle(), bundle()
	cert, err := served.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	write := func(b *certs.Bundle) {
		if err := os.WriteFile(caFile, b.CACert, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dial := func(name string) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), reloadingTLS(caFile, name))
		if err == nil {
			c.Close()
		}
		return err
	}
	write(served)
	if err := dial("heatsink-fleet.heatsink-system.svc"); err != nil {
		t.Fatalf("the manager's certificate with its CA: %v", err)
	}
	if dial("evil.example") == nil {
		t.Fatal("a certificate for another name was accepted")
	}
	write(other) // the file now holds another CA: refused at the next handshake
	if dial("heatsink-fleet.heatsink-system.svc") == nil {
		t.Fatal("a certificate not signed by the CA in the file was accepted")
	}
	write(served)
	if err := dial("heatsink-fleet.heatsink-system.svc"); err != nil {
		t.Fatalf("after the file got the CA back: %v", err)
	}
}
