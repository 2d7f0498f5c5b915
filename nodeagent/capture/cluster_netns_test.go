//go:build linux

package capture

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/netns"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestClusterRedirectsInNamespaces: a real 3-master, 3-replica Redis
// Cluster in the server namespace, go-redis cluster clients in the client
// namespace, the capture in the observer with the cluster's slot map. Each
// command is counted once, reads and writes apart, whether it was sent to
// its node at once, redirected by MOVED (a client whose slot map puts
// every slot on one master), redirected by ASK (a slot being migrated), or
// read from a replica (READONLY).
func TestClusterRedirectsInNamespaces(t *testing.T) {
	n := netns.ForTest(t, "redis-server", "redis-cli")
	dir := t.TempDir()
	var addrs []string
	for i := range 6 {
		port := 7000 + i
		stop, err := netns.StartRedis(n.Server, netns.ServerIP, port, "--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port), "--dir", dir,
			"--repl-ping-replica-period", "1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		addrs = append(addrs, fmt.Sprintf("%s:%d", netns.ServerIP, port))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The test's own commands leave from an address that is no pod: not counted.
	admin := netns.Dialer(n.Client, netns.ClientIP3)
	node := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Dialer: admin, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, a := range addrs {
		eventually.Succeeds(t, 20*time.Second, func() error { return node(a).Ping(ctx).Err() })
	}
	out, err := netns.Command(ctx, n.Server, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	slotsOf := func() []redis.ClusterSlot {
		var got []redis.ClusterSlot
		eventually.Succeeds(t, 30*time.Second, func() error {
			for _, a := range addrs {
				info, err := node(a).ClusterInfo(ctx).Result()
				if err != nil || !strings.Contains(info, "cluster_state:ok") {
					return fmt.Errorf("node %s not ok: %v", a, err)
				}
			}
			s, err := node(addrs[0]).ClusterSlots(ctx).Result()
			if err != nil {
				return err
			}
			for _, r := range s {
				if len(r.Nodes) != 2 {
					return fmt.Errorf("slots %d-%d list %d nodes", r.Start, r.End, len(r.Nodes))
				}
			}
			got = s
			return nil
		})
		return got
	}
	ranges := func(s []redis.ClusterSlot) []SlotRange {
		var out []SlotRange
		for _, r := range s {
			sr := SlotRange{Start: uint16(r.Start), End: uint16(r.End), Master: netip.MustParseAddrPort(r.Nodes[0].Addr)}
			for _, rep := range r.Nodes[1:] {
				sr.Replicas = append(sr.Replicas, netip.MustParseAddrPort(rep.Addr))
			}
			out = append(out, sr)
		}
		return out
	}
	slots := slotsOf()

	var c *Capture
	if err := netns.Do(n.Observer, func() (err error) {
		c, err = Open(Config{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pods := map[netip.Addr]string{netip.MustParseAddr(netns.ClientIP): "shop"}
	// No endpoint listed: the slot map's nodes are the endpoints.
	if err := c.SetScope(Scope{Targets: []Target{{Policy: "shop/p", Namespace: "shop", Slots: ranges(slots)}}, Pods: pods}); err != nil {
		t.Fatal(err)
	}
	tl := runTally(t, ctx, cancel, c)
	eventually.True(t, 20*time.Second, "the scope in force", func() bool { return c.Stats().Endpoints == 6 })
	// expect waits until every key of want has the reads and writes wanted,
	// then two more flushes, and checks that they stayed exact.
	expect := func(what string, want map[string][2]uint32) {
		t.Helper()
		check := func() error {
			for k, w := range want {
				if g := tl.get(k); g.Reads != w[0] || g.Writes != w[1] {
					return fmt.Errorf("%s: %d reads, %d writes counted, sent %d and %d", k, g.Reads, g.Writes, w[0], w[1])
				}
			}
			return nil
		}
		eventually.Succeeds(t, 20*time.Second, check)
		f := c.Stats().Flushes
		eventually.True(t, 20*time.Second, "two more flushes", func() bool { return c.Stats().Flushes >= f+2 })
		if err := check(); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	pod := netns.Dialer(n.Client, netns.ClientIP)
	const rounds = 5

	// MOVED: the client's map puts every slot on the first master, so
	// two commands in three are sent there, answered MOVED and sent again
	// at their node (go-redis follows up to 3 redirects).
	first := slots[0].Nodes[0].Addr
	stale := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{first}, Dialer: pod,
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: routing.SlotCount - 1, Nodes: []redis.ClusterNode{{Addr: first}}}}, nil
		}})
	t.Cleanup(func() { stale.Close() })
	before := c.Stats().NotServed
	want := map[string][2]uint32{}
	for i := range 30 {
		k := fmt.Sprintf("moved:%d", i)
		for range rounds {
			if err := stale.Set(ctx, k, "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := stale.Get(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		want[k] = [2]uint32{rounds, rounds}
	}
	expect("MOVED", want)
	moved := c.Stats().NotServed - before
	t.Logf("MOVED: %d commands sent to a node that does not serve them, not counted", moved)
	if moved == 0 {
		t.Errorf("no command was redirected: the test did not exercise MOVED")
	}

	// Reads from replicas, with READONLY: counted once, at the replica.
	ro := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs[:3], Dialer: pod, ReadOnly: true})
	t.Cleanup(func() { ro.Close() })
	want = map[string][2]uint32{}
	for i := range 30 {
		k := fmt.Sprintf("replica:%d", i)
		if err := ro.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		// Each replica copies asynchronously: wait until it has the key (the
		// replica's answers are the test's, from the admin address).
		eventually.Succeeds(t, 10*time.Second, func() error {
			for _, r := range slots {
				if int(routing.Slot(k)) >= int(r.Start) && int(routing.Slot(k)) <= int(r.End) {
					rc := node(r.Nodes[1].Addr)
					if err := rc.ReadOnly(ctx).Err(); err != nil {
						return err
					}
					return rc.Get(ctx, k).Err()
				}
			}
			return fmt.Errorf("no slot range for %s", k)
		})
		for range rounds {
			if err := ro.Get(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		want[k] = [2]uint32{rounds, 1}
	}
	expect("replica reads", want)
	var replicaGets int
	for _, r := range slots {
		info, err := node(r.Nodes[1].Addr).Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "cmdstat_get:") {
			replicaGets++
		}
	}
	if replicaGets == 0 {
		t.Errorf("no replica served a GET: the test did not exercise replica reads")
	}

	// ASK: the slot of ask:{a} is being migrated from its master to
	// another; the key itself has moved, its neighbour in the slot not.
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs[:3], Dialer: pod})
	t.Cleanup(func() { cl.Close() })
	moving, staying := "ask:{a}", "stay:{a}"
	for _, k := range []string{moving, staying} {
		if err := cl.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := int(routing.Slot(moving))
	var src, dst string
	for i, r := range slots {
		if slot >= int(r.Start) && slot <= int(r.End) {
			src, dst = r.Nodes[0].Addr, slots[(i+1)%len(slots)].Nodes[0].Addr
		}
	}
	id := func(addr string) string {
		s, err := node(addr).Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	srcID, dstID := id(src), id(dst)
	dstAP := netip.MustParseAddrPort(dst)
	for _, step := range []struct {
		addr string
		args []any
	}{
		{dst, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", srcID}},
		{src, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dstID}},
		{src, []any{"MIGRATE", dstAP.Addr().String(), dstAP.Port(), moving, 0, 5000}},
	} {
		if err := node(step.addr).Do(ctx, step.args...).Err(); err != nil {
			t.Fatalf("%v at %s: %v", step.args, step.addr, err)
		}
	}
	before = c.Stats().NotServed
	for range rounds {
		for _, k := range []string{moving, staying} {
			if err := cl.Get(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	expect("ASK", map[string][2]uint32{moving: {rounds, 1}, staying: {rounds, 1}})
	if asked := c.Stats().NotServed - before; asked != rounds {
		t.Errorf("%d commands not counted during the migration, want the %d sent again after ASK", asked, rounds)
	}

	// A stale map: the cluster changes and the capture keeps the map it
	// had. Commands are never counted twice, and every one not counted is
	// in NotServed; once the map is current again, they count exactly.
	reads := func(k string) (uint32, uint32) {
		f := c.Stats().Flushes
		eventually.True(t, 20*time.Second, "two more flushes", func() bool { return c.Stats().Flushes >= f+2 })
		g := tl.get(k)
		return g.Reads, g.Writes
	}
	staleThenFresh := func(what, k string, write bool) {
		t.Helper()
		op := func() error {
			if write {
				return cl.Set(ctx, k, "v", 0).Err()
			}
			return cl.Get(ctx, k).Err()
		}
		r0, w0 := reads(k)
		ns0 := c.Stats().NotServed
		for range rounds {
			if err := op(); err != nil {
				t.Fatal(err)
			}
		}
		r1, w1 := reads(k)
		counted := (r1 - r0) + (w1 - w0)
		notServed := c.Stats().NotServed - ns0
		t.Logf("%s, stale map: %d of %d counted, %d not served", what, counted, rounds, notServed)
		if counted > rounds || uint64(counted)+notServed < rounds {
			t.Errorf("%s, stale map: %d counted and %d not served of %d sent", what, counted, notServed, rounds)
		}
		slots = slotsOf()
		if err := c.SetScope(Scope{Targets: []Target{{Policy: "shop/p", Namespace: "shop", Slots: ranges(slots)}}, Pods: pods}); err != nil {
			t.Fatal(err)
		}
		f := c.Stats().Flushes
		eventually.True(t, 20*time.Second, "the new scope in force", func() bool { return c.Stats().Flushes >= f+2 })
		for range rounds {
			if err := op(); err != nil {
				t.Fatal(err)
			}
		}
		if r2, w2 := reads(k); (r2-r1)+(w2-w1) != rounds {
			t.Errorf("%s, current map: %d counted of %d sent", what, (r2-r1)+(w2-w1), rounds)
		}
	}

	// The migration finished: the slot's last key moved, the slot is the
	// importing node's.
	if err := node(src).Do(ctx, "MIGRATE", dstAP.Addr().String(), dstAP.Port(), staying, 0, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{src, dst, slots[(slices.IndexFunc(slots, func(r redis.ClusterSlot) bool {
		return r.Nodes[0].Addr != src && r.Nodes[0].Addr != dst
	}))].Nodes[0].Addr} {
		if err := node(a).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			t.Fatalf("SETSLOT NODE at %s: %v", a, err)
		}
	}
	staleThenFresh("resharding finished", moving, false)

	// A failover: the replica of the master serving failover:{b} takes over.
	fk := "failover:{b}"
	var oldMaster, replica string
	for _, r := range slots {
		if int(routing.Slot(fk)) >= int(r.Start) && int(routing.Slot(fk)) <= int(r.End) {
			oldMaster, replica = r.Nodes[0].Addr, r.Nodes[1].Addr
		}
	}
	if err := node(replica).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	eventually.Succeeds(t, 30*time.Second, func() error {
		s, err := node(addrs[0]).ClusterSlots(ctx).Result()
		if err != nil {
			return err
		}
		for _, r := range s {
			if int(routing.Slot(fk)) >= r.Start && int(routing.Slot(fk)) <= r.End && r.Nodes[0].Addr == replica {
				return nil
			}
		}
		return fmt.Errorf("%s not yet the master of %s's slot (was %s)", replica, fk, oldMaster)
	})
	staleThenFresh("failover", fk, true)
}
