package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// clusterMatrix is the standalone matrix without what a cluster does not
// have (SELECT, per-connection transactions, node-wide commands).
func clusterMatrix() []step {
	var out []step
	skip := map[string]bool{"MULTI": true, "EXEC": true, "DISCARD": true, "WATCH": true, "UNWATCH": true,
		"SELECT": true, "DBSIZE": true, "CLIENT": true}
	for _, s := range matrix {
		if !skip[s[0].(string)] {
			out = append(out, s)
		}
	}
	return out
}

func flushAll(t *testing.T, addrs []string) {
	t.Helper()
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		if err := c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
}

func TestCluster(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	reg := prometheus.NewRegistry()
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true, Registerer: reg})
	ctx := context.Background()
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer direct.Close()
	pc := redis.NewClient(&redis.Options{Addr: addr})
	defer pc.Close()

	t.Run("matrix", func(t *testing.T) {
		steps := clusterMatrix()
		want := make([]string, 0, len(steps))
		for _, s := range steps {
			v, err := direct.Do(ctx, s...).Result()
			want = append(want, fmt.Sprintf("%v -> %#v err=%v", s, v, err))
		}
		flushAll(t, cl.Addrs())
		conn := pc.Conn()
		defer conn.Close()
		got := run(t, conn, steps)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("replies through the proxy differ from direct (-direct +proxy):\n%s", diff)
		}
	})

	t.Run("keys spread over every node", func(t *testing.T) {
		pipe := pc.Pipeline()
		for i := range 300 {
			pipe.Set(ctx, fmt.Sprintf("spread:%d", i), i, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for _, a := range cl.Addrs() {
			c := redis.NewClient(&redis.Options{Addr: a})
			n, err := c.DBSize(ctx).Result()
			c.Close()
			if err != nil || n < 50 {
				t.Fatalf("node %s holds %d keys (%v): routing is not slot-aware", a, n, err)
			}
		}
		for i := range 300 {
			if v, err := direct.Get(ctx, fmt.Sprintf("spread:%d", i)).Int(); err != nil || v != i {
				t.Fatalf("spread:%d = %d, %v", i, v, err)
			}
		}
	})

	t.Run("transaction pinned to its slot", func(t *testing.T) {
		conn := pc.Conn()
		defer conn.Close()
		got := run(t, conn, []step{{"MULTI"}, {"SET", "{tx}a", "1"}, {"INCR", "{tx}b"}, {"GET", "{tx}a"}, {"EXEC"}, {"GET", "{tx}a"}, {"MULTI"}, {"EXEC"}})
		want := []string{
			"[MULTI] -> \"OK\" err=<nil>", "[SET {tx}a 1] -> \"QUEUED\" err=<nil>", "[INCR {tx}b] -> \"QUEUED\" err=<nil>",
			"[GET {tx}a] -> \"QUEUED\" err=<nil>", "[EXEC] -> []interface {}{\"OK\", 1, \"1\"} err=<nil>", "[GET {tx}a] -> \"1\" err=<nil>",
			"[MULTI] -> \"OK\" err=<nil>", "[EXEC] -> []interface {}{} err=<nil>",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})

	t.Run("SWAPDB refused", func(t *testing.T) {
		err := pc.Do(ctx, "SWAPDB", 0, 1).Err()
		if err == nil || !strings.Contains(err.Error(), "acts on every node") {
			t.Fatalf("SWAPDB through a cluster proxy: %v", err)
		}
	})

	t.Run("MOVED followed after a slot migrates", func(t *testing.T) {
		key := "moving"
		slot := routing.Slot(key)
		if err := pc.Set(ctx, key, "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
		redistest.MigrateSlot(t, cl.Addrs(), int(slot))
		if v, err := pc.Get(ctx, key).Result(); err != nil || v != "before" {
			t.Fatalf("GET after migration: %q, %v", v, err)
		}
		if err := pc.Set(ctx, key, "after", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v, _ := direct.Get(ctx, key).Result(); v != "after" {
			t.Fatalf("direct GET = %q, want after", v)
		}
		if n := counterSum(t, reg, "heatsink_proxy_redirects_total"); n < 1 {
			t.Fatalf("redirects_total = %v, want >= 1", n)
		}
	})
}

// counterSum sums every series of a counter family.
func counterSum(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
