package sidecar

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestEjectingDialerFailsFastAfterAFailedDial: after a dial to an address
// is refused (a real port nobody listens on), dials to it fail at once
// with that failure for ejectFor, without dialing; then the address is
// dialed again, and once something listens there, dials succeed. Other
// addresses are dialed meanwhile.
func TestEjectingDialerFailsFastAfterAFailedDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var dials atomic.Int32
	var d net.Dialer
	now := time.Unix(1_000_000, 0)
	e := &ejector{failed: map[string]ejection{}, now: func() time.Time { return now }}
	dial := e.wrap(func(ctx context.Context, network, a string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, a)
	})
	ctx := context.Background()
	if _, err := dial(ctx, "tcp", addr); err == nil {
		t.Fatal("dial to a closed port succeeded")
	}
	for range 100 {
		_, err := dial(ctx, "tcp", addr)
		if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "not dialed again") {
			t.Fatalf("dial while ejected: %v, want the refusal, not dialed again", err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials while ejected, want only the first", n)
	}
	if c, err := dial(ctx, "tcp", other.Addr().String()); err != nil {
		t.Fatalf("another address while one is ejected: %v", err)
	} else {
		c.Close()
	}
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer ln2.Close()
	now = now.Add(ejectFor)
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("after ejectFor, with the node listening: %v", err)
	}
	c.Close()
	if n := dials.Load(); n != 3 {
		t.Fatalf("%d dials in all, want 3", n)
	}
}
