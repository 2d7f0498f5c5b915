package redistest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestStandaloneStartsAndStops(t *testing.T) {
	s := Standalone(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("GET k = %q, want v", got)
	}
	s.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("server still answers after Stop")
	}
}

func TestClusterHasThreeMastersCoveringAllSlots(t *testing.T) {
	cl := Cluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer c.Close()
	ctx := context.Background()
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	covered, owners := 0, map[string]bool{}
	for _, s := range slots {
		covered += s.End - s.Start + 1
		owners[s.Nodes[0].Addr] = true
	}
	if covered != 16384 || len(owners) != 3 {
		t.Fatalf("slots covered %d by %d masters, want 16384 by 3", covered, len(owners))
	}
	// Keys on every master are reachable through the cluster client.
	for i := 0; i < 100; i++ {
		if err := c.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// ForEachMaster calls fn from one goroutine per master.
	var mu sync.Mutex
	perMaster := map[string]int64{}
	err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		mu.Lock()
		perMaster[m.Options().Addr] = n
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for addr, n := range perMaster {
		if n == 0 {
			t.Errorf("master %s holds no key of 100", addr)
		}
	}
	cl.Stop()
	for _, s := range cl.Servers {
		r := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		if r.Ping(ctx).Err() == nil {
			t.Errorf("node %s still answers after Stop", s.Addr)
		}
		r.Close()
	}
}
