//go:build linux

package capture

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/netns"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// TestSamplingInNamespaces: with one connection in 4 sampled in the
// kernel, the counts of a real redis-server's clients are exactly 4 × what
// the sampled connections sent (each is seen whole), and the connections
// sampled are those Sampled names.
func TestSamplingInNamespaces(t *testing.T) {
	n := netns.ForTest(t, "redis-server")
	netns.Redis(t, n.Server, netns.ServerIP, 6379)
	server := netip.MustParseAddrPort(netns.ServerIP + ":6379")

	const every = 4
	var c *Capture
	if err := netns.Do(n.Observer, func() (err error) {
		c, err = Open(Config{Interface: n.ClientIf, SampleEvery: every})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetScope(Scope{
		Targets: []Target{{Policy: "shop/p", Namespace: "shop", Endpoints: []netip.AddrPort{server}}},
		Pods:    map[netip.Addr]string{netip.MustParseAddr(netns.ClientIP): "shop"},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	reads := map[string]uint32{}
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(_ string, es []sidecarlink.Entry) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range es {
				reads[string(e.Key)] += e.Reads
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	eventually.True(t, 20*time.Second, "the scope in force", func() bool { return c.Stats().Targets == 1 })

	const conns, per = 64, 20
	dial := netns.Dialer(n.Client, netns.ClientIP)
	sampled := 0
	req := []byte("*2\r\n$3\r\nGET\r\n$14\r\nproduct:sample\r\n")
	for range conns {
		conn, err := dial(ctx, "tcp", server.String())
		if err != nil {
			t.Fatal(err)
		}
		if Sampled(netip.MustParseAddrPort(conn.LocalAddr().String()), every) {
			sampled++
		}
		r := bufio.NewReader(conn)
		for range per {
			if _, err := conn.Write(req); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close()
	}
	want := uint32(every * per * sampled)
	eventually.True(t, 20*time.Second, "the sampled connections counted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reads["product:sample"] >= want
	})
	flushes := c.Stats().Flushes
	eventually.True(t, 20*time.Second, "two more flushes", func() bool { return c.Stats().Flushes >= flushes+2 })
	mu.Lock()
	got := reads["product:sample"]
	mu.Unlock()
	t.Logf("%d of %d connections sampled; estimate %d reads, sent %d", sampled, conns, got, conns*per)
	if got != want {
		t.Errorf("estimate %d, want %d × %d × %d sampled connections", got, every, per, sampled)
	}
	// 64 connections at 1 in 4: 16 expected, sd 3.5; far outside that
	// the hash is not spreading ephemeral ports.
	if sampled < 4 || sampled > 30 {
		t.Errorf("%d of %d connections sampled at 1 in %d", sampled, conns, every)
	}
}

// TestIPv6InNamespaces: a client and redis-server talking IPv6 are
// captured as over IPv4 (the filter's IPv6 half, the IPv6 decoder).
func TestIPv6InNamespaces(t *testing.T) {
	n := netns.ForTest(t, "redis-server")
	netns.Redis(t, n.Server, netns.ServerIP6, 6379)
	server := netip.AddrPortFrom(netip.MustParseAddr(netns.ServerIP6), 6379)
	var c *Capture
	if err := netns.Do(n.Observer, func() (err error) {
		c, err = Open(Config{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetScope(Scope{
		Targets: []Target{{Policy: "shop/p", Namespace: "shop", Endpoints: []netip.AddrPort{server}}},
		Pods:    map[netip.Addr]string{netip.MustParseAddr(netns.ClientIP6): "shop"},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tl := runTally(t, ctx, cancel, c)
	eventually.True(t, 20*time.Second, "the scope in force", func() bool { return c.Stats().Targets == 1 })
	var conn net.Conn
	eventually.Succeeds(t, 20*time.Second, func() error {
		cn, err := netns.Dialer(n.Client, "")(ctx, "tcp", server.String())
		if err == nil {
			conn = cn
		}
		return err
	})
	defer conn.Close()
	req := []byte("*3\r\n$3\r\nSET\r\n$6\r\nv6:key\r\n$1\r\nx\r\n*2\r\n$3\r\nGET\r\n$6\r\nv6:key\r\n")
	for range 25 {
		if _, err := conn.Write(req); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, 20*time.Second, "25 reads and 25 writes of v6:key", func() bool {
		g := tl.get("v6:key")
		return g.Reads == 25 && g.Writes == 25
	})
}

// tally sums what a running capture counts, per key.
type tally struct {
	mu  sync.Mutex
	got map[string]sidecarlink.Entry
}

// runTally runs c until the test ends (cancel stops it) and sums its counts.
func runTally(t *testing.T, ctx context.Context, cancel context.CancelFunc, c *Capture) *tally {
	tl := &tally{got: map[string]sidecarlink.Entry{}}
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(_ string, es []sidecarlink.Entry) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			for _, e := range es {
				g := tl.got[string(e.Key)]
				g.Reads += e.Reads
				g.Writes += e.Writes
				g.Size = max(g.Size, e.Size)
				tl.got[string(e.Key)] = g
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return tl
}

// get is the sums of key so far.
func (tl *tally) get(key string) sidecarlink.Entry {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.got[key]
}
