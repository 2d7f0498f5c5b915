// Package proxytest serves a heatsink sidecar in process for a test: on a free
// loopback port, drained when the test ends, its Serve error reported.
package proxytest

import (
	"context"
	"net"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
)

// Start serves a proxy built from cfg until t ends and returns its address
// and the proxy. At the end the proxy drains as on SIGTERM, and an error
// from Serve fails the test: a drain that is not graceful is a bug.
func Start(t testing.TB, cfg proxy.Config) (string, *proxy.Proxy) {
	t.Helper()
	p, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy Serve: %v", err)
		}
	})
	return ln.Addr().String(), p
}
