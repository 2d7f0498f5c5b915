//go:build linux

package capture

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/netns"
)

// TestMidwayConnectionsDatabaseInNamespaces: pooled go-redis clients
// connected before the capture starts (as every pooled connection is when
// a node agent restarts) are seen midway, their SELECT long gone. A
// database-3 client's keys are never counted for a database-0 policy; a
// midway connection is counted once it is seen selecting database 0; a
// database-0 client that connects while the capture runs is counted in
// full, and a database-3 one not at all.
func TestMidwayConnectionsDatabaseInNamespaces(t *testing.T) {
	n := netns.ForTest(t, "redis-server")
	netns.Redis(t, n.Server, netns.ServerIP, 6379)
	server := netip.MustParseAddrPort(netns.ServerIP + ":6379")
	ctx := context.Background()
	client := func(db int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: server.String(), DB: db, Dialer: netns.Dialer(n.Client, netns.ClientIP)})
		t.Cleanup(func() { c.Close() })
		return c
	}
	get := func(c redis.Cmdable, key string, times int) {
		t.Helper()
		for range times {
			if err := c.Get(ctx, key).Err(); err != nil && err != redis.Nil {
				t.Fatal(err)
			}
		}
	}

	// Connected, and their database selected, before the capture exists.
	// Two connections: one the test holds and selects on, one left in
	// the pool for the client's own use.
	db3 := client(3)
	sticky := db3.Conn()
	t.Cleanup(func() { sticky.Close() })
	eventually.Succeeds(t, 20*time.Second, func() error { return sticky.Ping(ctx).Err() })
	if err := db3.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	dials := db3.PoolStats().Misses

	var c *Capture
	if err := netns.Do(n.Observer, func() (err error) {
		c, err = Open(Config{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetScope(Scope{
		Targets: []Target{{Policy: "shop/p", Namespace: "shop", Database: 0, Endpoints: []netip.AddrPort{server}}},
		Pods:    map[netip.Addr]string{netip.MustParseAddr(netns.ClientIP): "shop"},
	}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	tl := runTally(t, cctx, cancel, c)
	eventually.True(t, 20*time.Second, "the scope in force", func() bool { return c.Stats().Targets == 1 })

	const per = 50
	get(db3, "db3:pooled", per)
	// The sticky connection selects database 0 where the capture sees it.
	if err := sticky.Select(ctx, 0).Err(); err != nil {
		t.Fatal(err)
	}
	get(sticky, "db0:after-select", per)
	if err := sticky.Select(ctx, 3).Err(); err != nil {
		t.Fatal(err)
	}
	get(sticky, "db3:after-select", per)
	if got := db3.PoolStats().Misses; got != dials {
		t.Fatalf("the database-3 client dialled %d new connections during the capture: not all its traffic was midway", got-dials)
	}
	// Connected while the capture runs: their SELECT (or its absence) is seen.
	get(client(0), "db0:new", per)
	get(client(3), "db3:new", per)

	eventually.True(t, 20*time.Second, "the database-0 reads counted", func() bool {
		return tl.get("db0:new").Reads >= per && tl.get("db0:after-select").Reads >= per
	})
	flushes := c.Stats().Flushes
	eventually.True(t, 20*time.Second, "two more flushes", func() bool { return c.Stats().Flushes >= flushes+2 })
	for key, want := range map[string]uint32{
		"db3:pooled": 0, "db3:after-select": 0, "db3:new": 0,
		"db0:after-select": per, "db0:new": per,
	} {
		if got := tl.get(key).Reads; got != want {
			t.Errorf("%s: %d reads counted for the database-0 policy, want %d", key, got, want)
		}
	}
}
