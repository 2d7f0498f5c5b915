package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// stalled is a Redis that accepted the connection and then never answers:
// the failure mode of a wedged or partitioned node. It reports each
// accepted connection on the returned channel.
func stalled(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 16)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), accepted
}

func TestReadyGivesUpOnAStalledRedis(t *testing.T) {
	addr, accepted := stalled(t)
	p, err := New(Config{Upstreams: []string{addr}, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.ready.Store(true)

	// A context with a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Ready(ctx); err == nil {
		t.Fatal("Ready against a Redis that never answers succeeded")
	}

	// A context without one: the configured timeout bounds the PING.
	if err := p.Ready(context.Background()); err == nil {
		t.Fatal("Ready against a Redis that never answers succeeded")
	}

	// Cancellation alone ends the wait too.
	p.cfg.Timeout = time.Hour
	ctx, cancel = context.WithCancel(context.Background())
	go func() { <-accepted; <-accepted; <-accepted; cancel() }()
	if err := p.Ready(ctx); err == nil {
		t.Fatal("Ready against a Redis that never answers succeeded")
	}
}

func TestSlotRefreshGivesUpOnAStalledRedis(t *testing.T) {
	addr, _ := stalled(t)
	p, err := New(Config{Upstreams: []string{addr}, Cluster: true, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.topo.refresh(ctx); err == nil {
		t.Fatal("slot refresh against a Redis that never answers succeeded")
	}
	// The background refresh (started on MOVED) ends and lets the next one run.
	p.topo.refreshAsync()
	eventually.True(t, 30*time.Second, "the background slot refresh ends", func() bool { return !p.topo.Refreshing() })
}
