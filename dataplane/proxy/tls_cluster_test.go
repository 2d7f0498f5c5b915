package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/testpki"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestTLSClusterUpstream: a Redis Cluster that serves verified TLS clients
// only on its client ports, its nodes speaking TLS among themselves
// (tls-cluster yes, tls-auth-clients yes: the shape of a managed TLS
// cluster). Through the event loop and through sessions alike, the proxy
// learns the slot map over TLS (which then names the nodes' TLS ports),
// writes each key to its slot's master, follows a MOVED to the new
// owner's TLS port, and a cluster-aware client pointed at it stays on it.
func TestTLSClusterUpstream(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	serverCA, clientCA := testpki.NewCA(t, dir, "server-ca"), testpki.NewCA(t, dir, "client-ca")
	cl, tlsAddrs := testpki.MTLSCluster(t, dir, serverCA, clientCA)
	tc := clientTLS(t, dir, serverCA, clientCA)
	ctx := context.Background()
	// Checks go to the nodes' plaintext ports, never through the proxy.
	nodes := make([]*redis.Client, len(cl.Servers))
	for i, s := range cl.Servers {
		nodes[i] = redis.NewClient(&redis.Options{Addr: s.Addr})
		defer nodes[i].Close()
	}
	sets := func() []int {
		out := make([]int, len(nodes))
		for i, n := range nodes {
			out[i] = commandCalls(t, n, "set")
		}
		return out
	}
	for _, noLoop := range []bool{false, true} {
		name := "loop"
		if noLoop {
			name = "sessions"
		}
		t.Run(name, func(t *testing.T) {
			addr, _ := start(t, proxy.Config{Upstreams: tlsAddrs[:1], Cluster: true, TLS: tc, NoEventLoop: noLoop})
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			before := sets()
			const keys = 300
			for i := range keys {
				if err := c.Set(ctx, fmt.Sprintf("%s:k%d", name, i), i, 0).Err(); err != nil {
					t.Fatalf("SET through the proxy to the TLS cluster: %v", err)
				}
			}
			after := sets()
			var total int
			for i := range nodes {
				d := after[i] - before[i]
				if d == 0 {
					t.Errorf("node %d got none of the %d SETs: its slots are not reached over TLS", i, keys)
				}
				total += d
			}
			if total != keys {
				t.Errorf("the masters counted %d SETs, want %d", total, keys)
			}
			for i := range keys {
				k := fmt.Sprintf("%s:k%d", name, i)
				if v, err := nodes[owner(t, nodes, k)].Get(ctx, k).Result(); err != nil || v != strconv.Itoa(i) {
					t.Fatalf("%s on its master: %q, %v; want %d", k, v, err, i)
				}
			}

			// The slot of a key moves (empty, so no key migrates): the
			// proxy's map is stale, its write is answered MOVED over TLS
			// and must land on the new owner.
			key := emptySlotKey(t, nodes, name)
			from := owner(t, nodes, key)
			to := (from + 1) % len(nodes)
			id, err := nodes[to].Do(ctx, "CLUSTER", "MYID").Text()
			if err != nil {
				t.Fatal(err)
			}
			slot := int(routing.Slot(key))
			for _, n := range nodes {
				if err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", id).Err(); err != nil {
					t.Fatalf("CLUSTER SETSLOT %d NODE: %v", slot, err)
				}
			}
			if err := c.Set(ctx, key, "moved", 0).Err(); err != nil {
				t.Fatalf("SET of a key whose slot moved: %v", err)
			}
			if v, err := nodes[to].Get(ctx, key).Result(); err != nil || v != "moved" {
				t.Fatalf("the new owner holds %q, %v; want \"moved\"", v, err)
			}
			if v, err := c.Get(ctx, key).Result(); err != nil || v != "moved" {
				t.Fatalf("GET through the proxy after the move: %q, %v", v, err)
			}

			// A cluster client through the sidecar: it sees one node, the
			// sidecar, and every command stays there.
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
			defer cc.Close()
			slots, err := cc.ClusterSlots(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range slots {
				for _, n := range s.Nodes {
					if n.Addr != addr {
						t.Fatalf("CLUSTER SLOTS through the sidecar names %s, not the sidecar %s", n.Addr, addr)
					}
				}
			}
			for i := range 100 {
				k := fmt.Sprintf("%s:cc%d", name, i)
				if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
					t.Fatalf("cluster client SET through the sidecar: %v", err)
				}
				if v, err := nodes[owner(t, nodes, k)].Get(ctx, k).Result(); err != nil || v != strconv.Itoa(i) {
					t.Fatalf("%s on its master: %q, %v", k, v, err)
				}
			}
		})
	}
}

// owner is the index of the node that serves key's slot now.
func owner(t *testing.T, nodes []*redis.Client, key string) int {
	t.Helper()
	slot := int64(routing.Slot(key))
	ranges, err := nodes[0].ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			for i, n := range nodes {
				if n.Options().Addr == r.Nodes[0].Addr {
					return i
				}
			}
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return -1
}

// emptySlotKey is a key whose slot holds no key yet.
func emptySlotKey(t *testing.T, nodes []*redis.Client, prefix string) string {
	t.Helper()
	for i := range 100 {
		k := fmt.Sprintf("%s:moved%d", prefix, i)
		n, err := nodes[owner(t, nodes, k)].ClusterCountKeysInSlot(context.Background(), int(routing.Slot(k))).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return k
		}
	}
	t.Fatal("no empty slot found in 100 keys")
	return ""
}
