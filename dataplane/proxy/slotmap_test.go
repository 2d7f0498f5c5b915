package proxy_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	up "github.com/heatsink-dev/heatsink/dataplane/upstream"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestOneSlotMap wires a go-redis ClusterClient to the proxy's slot map
// the way the sidecar wires the engine's client: both use one
// upstream.Nodes (ClusterOptions.ClusterSlots, and ReloadState on its
// OnChange), built before either. After a slot migrates and the proxy
// follows the MOVED, the go-redis client names the new owner of the slot
// without having asked Redis itself.
func TestOneSlotMap(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	ctx := context.Background()
	nodes := up.NewNodes(cl.Addrs()[:1], &up.Dialer{}, 5*time.Second)
	var changes, loads atomic.Int32
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs()[:1],
		ClusterSlots: func(ctx context.Context) ([]redis.ClusterSlot, error) {
			loads.Add(1)
			return nodes.ClusterSlots(ctx)
		},
	})
	defer cc.Close()
	nodes.OnChange(func() {
		changes.Add(1)
		cc.ReloadState(context.Background())
	})
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true, Nodes: nodes})
	pc := redis.NewClient(&redis.Options{Addr: addr})
	defer pc.Close()

	const key = "one-map"
	if err := pc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	owner := func() string {
		rs, err := nodes.ClusterSlots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := int(routing.Slot(key))
		for _, r := range rs {
			if r.Start <= s && s <= r.End {
				return r.Nodes[0].Addr
			}
		}
		t.Fatalf("slot %d not in the proxy's map", s)
		return ""
	}
	// go-redis drops a loopback host from a ClusterSlots address (it
	// expects the origin's host there): compare ports.
	port := func(addr string) string {
		_, p, _ := net.SplitHostPort(addr)
		return p
	}
	master := func() string {
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return port(n.Options().Addr)
	}
	before := owner()
	if got := master(); got != port(before) {
		t.Fatalf("go-redis names %s for the key, the proxy %s", got, before)
	}
	loadsBefore := loads.Load()
	redistest.MigrateSlot(t, cl.Addrs(), int(routing.Slot(key)))
	// The proxy meets the MOVED and reloads its map.
	if v, err := pc.Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("GET through the proxy after the migration: %q, %v", v, err)
	}
	eventually.Succeeds(t, 10*time.Second, func() error {
		if o := owner(); o == before {
			return fmt.Errorf("the proxy's map still names %s", o)
		}
		if m, o := master(), port(owner()); m != o {
			return fmt.Errorf("go-redis names %s, the proxy %s", m, o)
		}
		return nil
	})
	if changes.Load() == 0 || loads.Load() == loadsBefore {
		t.Fatalf("OnChange called %d times, go-redis loads %d -> %d: the go-redis client did not follow the proxy's map",
			changes.Load(), loadsBefore, loads.Load())
	}
}
