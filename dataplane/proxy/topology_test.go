package proxy_test

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestOneNodeClusterTopology asks the proxy, with go-redis' parsers (RESP2
// and RESP3), every topology command a cluster client sends at start: the
// answer is one master at the address the client connected to, owning
// every slot, whether Redis behind is standalone or a cluster, on the
// event loop and on sessions. A second listener on another port advertises
// its own port.
func TestOneNodeClusterTopology(t *testing.T) {
	skipShort(t)
	s := redistest.Standalone(t)
	cl := redistest.Cluster(t)
	ups := []struct {
		name    string
		cluster bool
		addrs   []string
	}{{"standalone", false, []string{s.Addr}}, {"cluster", true, cl.Addrs()[:1]}}
	ctx := context.Background()
	for _, up := range ups {
		for _, noLoop := range []bool{false, true} {
			addr, _ := start(t, proxy.Config{Upstreams: up.addrs, Cluster: up.cluster, NoEventLoop: noLoop})
			for _, proto := range []int{2, 3} {
				t.Run(fmt.Sprintf("%s/noloop=%v/RESP%d", up.name, noLoop, proto), func(t *testing.T) {
					c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
					defer c.Close()
					checkOneNode(t, ctx, c, addr)
				})
			}
		}
	}
}

func checkOneNode(t *testing.T, ctx context.Context, c *redis.Client, addr string) {
	t.Helper()
	host, portS, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portS)
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	if len(slots) != 1 || slots[0].Start != 0 || slots[0].End != 16383 || len(slots[0].Nodes) != 1 || slots[0].Nodes[0].Addr != addr {
		t.Fatalf("CLUSTER SLOTS = %+v; want one range 0-16383 at %s", slots, addr)
	}
	id := slots[0].Nodes[0].ID
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(id) {
		t.Errorf("node id %q is not 40 hex digits", id)
	}
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	if len(shards) != 1 || len(shards[0].Slots) != 1 || shards[0].Slots[0] != (redis.SlotRange{Start: 0, End: 16383}) || len(shards[0].Nodes) != 1 {
		t.Fatalf("CLUSTER SHARDS = %+v", shards)
	}
	if n := shards[0].Nodes[0]; n.ID != id || n.IP != host || n.Endpoint != host || n.Port != int64(port) || n.Role != "master" || n.Health != "online" {
		t.Errorf("CLUSTER SHARDS node = %+v; want %s at %s", n, id, addr)
	}
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER NODES: %v", err)
	}
	if want := id + " " + addr + "@0 myself,master - 0 0 0 connected 0-16383\n"; nodes != want {
		t.Errorf("CLUSTER NODES = %q; want %q", nodes, want)
	}
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil || !strings.HasPrefix(info, "cluster_state:ok\r\n") || !strings.Contains(info, "cluster_known_nodes:1\r\n") {
		t.Errorf("CLUSTER INFO = %q, %v", info, err)
	}
	if got, err := c.Do(ctx, "CLUSTER", "MYID").Text(); err != nil || got != id {
		t.Errorf("CLUSTER MYID = %q, %v; want %s", got, err, id)
	}
	if got, err := c.ClusterKeySlot(ctx, "somekey").Result(); err != nil || got != 11058 {
		t.Errorf("CLUSTER KEYSLOT somekey = %d, %v; want 11058", got, err)
	}
	if got, err := c.Do(ctx, "CLUSTER", "REPLICAS", id).Slice(); err != nil || len(got) != 0 {
		t.Errorf("CLUSTER REPLICAS = %v, %v; want none", got, err)
	}
	for _, cmd := range []string{"READONLY", "READWRITE", "ASKING"} {
		if err := c.Do(ctx, cmd).Err(); err != nil {
			t.Errorf("%s: %v", cmd, err)
		}
	}
	// redis-py's RedisCluster checks INFO's cluster_enabled first.
	for _, section := range []string{"", "cluster", "everything"} {
		args := []any{"INFO"}
		if section != "" {
			args = append(args, section)
		}
		got, err := c.Do(ctx, args...).Text()
		if err != nil || !strings.Contains(got, "\r\ncluster_enabled:1\r\n") {
			t.Errorf("%v = %.80q..., %v; want cluster_enabled:1", args, got, err)
		}
	}
	// Pipelined, the local answers keep their place among forwarded ones.
	pipe := c.Pipeline()
	set := pipe.Set(ctx, "topo:k", "v", 0)
	my := pipe.Do(ctx, "CLUSTER", "MYID")
	inf := pipe.Info(ctx, "server")
	get := pipe.Get(ctx, "topo:k")
	if _, err := pipe.Exec(ctx); err != nil || set.Val() != "OK" || my.Val() != id || !strings.Contains(inf.Val(), "redis_version:") || get.Val() != "v" {
		t.Errorf("pipeline = %v %v %.20q %v, %v", set.Val(), my.Val(), inf.Val(), get.Val(), err)
	}
}

// TestClusterClientStaysOnProxy points go-redis' ClusterClient at the
// proxy in front of a cluster, moves a slot under it, and checks that
// every command went through the proxy: it follows MOVED itself, and the
// client, which holds one node, never learns another.
func TestClusterClientStaysOnProxy(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true})
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	defer cc.Close()
	for i := range 50 {
		if err := cc.Set(ctx, "stay:"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.MigrateSlot(t, cl.Addrs(), int(cc.ClusterKeySlot(ctx, "stay:0").Val()))
	for i := range 50 {
		if v, err := cc.Get(ctx, "stay:"+strconv.Itoa(i)).Int(); err != nil || v != i {
			t.Fatalf("GET stay:%d = %d, %v", i, v, err)
		}
	}
	var seen []string
	cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		seen = append(seen, c.Options().Addr)
		return nil
	})
	if len(seen) != 1 || seen[0] != addr {
		t.Errorf("the ClusterClient knows nodes %v; want only the proxy %s", seen, addr)
	}
}
