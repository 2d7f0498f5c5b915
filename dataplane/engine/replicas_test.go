package engine_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// getCalls is how many GETs addr served since its last CONFIG RESETSTAT.
func getCalls(t *testing.T, addr string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

func resetStats(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		if _, err := redisproc.Command(a, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
}

func replicaTable(db int32, addrs []string, keys ...string) *routing.Table {
	t := &routing.Table{SchemaVersion: routing.SchemaVersionFor(db), Database: db, EpochMillis: 60000,
		Replicas: &routing.ReplicaSettings{Addresses: addrs, CheckMillis: 100}}
	for _, k := range keys {
		t.Entries = append(t.Entries, routing.Entry{Key: k, Source: routing.SourceDetected, ReplicaReads: &routing.ReplicaReads{MaxLagMillis: 1000}})
	}
	return t
}

// usable waits until the engine has measured want replicas within the
// bound.
func usable(t *testing.T, e *engine.Engine, want int) {
	t.Helper()
	eventually.True(t, 20*time.Second, fmt.Sprintf("%d replicas measured usable", want), func() bool {
		n := 0
		for _, l := range e.ReplicaLags() {
			if l >= 0 && l <= time.Second {
				n++
			}
		}
		return n == want
	})
}

func readN(t *testing.T, e *engine.Engine, key, want string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		v, found, err := e.Get(context.Background(), key)
		if err != nil || !found || string(v) != want {
			t.Fatalf("read %d: %q, %v, %v; want %q", i, v, found, err, want)
		}
	}
}

// TestReplicaReadsStandalone: with a standalone master and two replicas
// the policy lists, reads of a replicaReads key go to the replicas, evenly,
// and none to the master; a replica that stops applying the replication
// stream (CLIENT PAUSE WRITE on it: it still answers, with old values) is
// skipped once its lag passes the bound, and the master serves when every
// replica is over it or down.
func TestReplicaReadsStandalone(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	r := redistest.Replicated(t, 2)
	ctx := context.Background()
	mc := redis.NewClient(&redis.Options{Addr: r.Master.Addr})
	defer mc.Close()
	e := engine.New(mc, engine.Options{})
	defer e.Close()
	if err := mc.Set(ctx, "hot", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Both replicas acknowledged v1: a replica within the bound may lack
	// a write it has not applied yet, which is not what this checks.
	if n, err := mc.Do(ctx, "WAIT", 2, 5000).Int(); err != nil || n != 2 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	e.SetTable(replicaTable(0, r.ReplicaAddrs(), "hot"))
	usable(t, e, 2)
	r1, r2 := r.ReplicaAddrs()[0], r.ReplicaAddrs()[1]
	all := []string{r.Master.Addr, r1, r2}

	resetStats(t, all...)
	readN(t, e, "hot", "v1", 300)
	if m, a, b := getCalls(t, r.Master.Addr), getCalls(t, r1), getCalls(t, r2); m != 0 || a < 100 || b < 100 || a+b != 300 {
		t.Fatalf("GETs: master %d, replicas %d and %d; want 0 and about 150 each", m, a, b)
	}
	// A key the table does not list is read from the master.
	resetStats(t, all...)
	if _, _, err := e.Get(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if m := getCalls(t, r.Master.Addr); m != 1 {
		t.Fatalf("an unlisted key: %d GETs on the master, want 1", m)
	}

	// r1 stops applying what the master sends; the next write leaves it
	// behind, and once it is a second behind it serves no read.
	if _, err := redisproc.Command(r1, "CLIENT", "PAUSE", "20000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	defer redisproc.Command(r1, "CLIENT", "UNPAUSE")
	if err := mc.Set(ctx, "hot", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Over the bound, then behind every offset the history keeps: not
	// measurable, so negative.
	eventually.True(t, 10*time.Second, "the paused replica measured over the bound", func() bool {
		l := e.ReplicaLags()[r1]
		return l > time.Second || l < 0
	})
	eventually.True(t, 10*time.Second, "the other replica has v2", func() bool {
		v, _ := redisproc.Command(r2, "GET", "hot")
		return v == "v2"
	})
	resetStats(t, all...)
	readN(t, e, "hot", "v2", 100)
	if m, a, b := getCalls(t, r.Master.Addr), getCalls(t, r1), getCalls(t, r2); m != 0 || a != 0 || b != 100 {
		t.Fatalf("GETs with r1 lagging: master %d, r1 %d, r2 %d; want 0, 0, 100", m, a, b)
	}

	// r2 down too: the master serves every read, without an error.
	r.Replicas[1].Stop()
	eventually.True(t, 10*time.Second, "the stopped replica measured down", func() bool {
		return e.ReplicaLags()[r2] < 0
	})
	resetStats(t, r.Master.Addr, r1)
	readN(t, e, "hot", "v2", 100)
	if m, a := getCalls(t, r.Master.Addr), getCalls(t, r1); m != 100 || a != 0 {
		t.Fatalf("GETs with no usable replica: master %d, r1 %d; want 100, 0", m, a)
	}

	// r1 catches up and serves again.
	if _, err := redisproc.Command(r1, "CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	usable(t, e, 1)
	resetStats(t, r.Master.Addr, r1)
	readN(t, e, "hot", "v2", 50)
	if m, a := getCalls(t, r.Master.Addr), getCalls(t, r1); m != 0 || a != 50 {
		t.Fatalf("GETs after r1 caught up: master %d, r1 %d; want 0, 50", m, a)
	}

	// The key leaves the table: its reads go back to the master.
	e.SetTable(nil)
	resetStats(t, r.Master.Addr, r1)
	readN(t, e, "hot", "v2", 10)
	if m := getCalls(t, r.Master.Addr); m != 10 {
		t.Fatalf("GETs after the entry left: master %d, want 10", m)
	}
}

// TestReplicaReadsCluster: on a 3-master cluster with 2 replicas per
// master, the replicas come from CLUSTER SLOTS and are read with READONLY:
// a replicaReads key's reads go to its own shard's two replicas, evenly,
// none to its master or any other node, and no read is redirected; after a
// failover in a shard the new roles are found and followed.
func TestReplicaReadsCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	c := redistest.ClusterReplicas(t, 2)
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	e := engine.New(cc, engine.Options{})
	defer e.Close()
	keys := []string{"hot:a", "hot:b", "hot:c"}
	for _, k := range keys {
		if err := cc.Set(ctx, k, "v-"+k, 0).Err(); err != nil {
			t.Fatal(err)
		}
		// Both replicas of the key's shard acknowledged it.
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := m.Do(ctx, "WAIT", 2, 5000).Int(); err != nil || n != 2 {
			t.Fatalf("WAIT: %d replicas, %v", n, err)
		}
	}
	e.SetTable(replicaTable(0, nil, keys...))
	usable(t, e, 6)
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		slot := int(routing.Slot(k))
		var shard []redis.ClusterNode
		for _, s := range slots {
			if s.Start <= slot && slot <= s.End {
				shard = s.Nodes
			}
		}
		if len(shard) != 3 {
			t.Fatalf("%s: shard %v, want a master and 2 replicas", k, shard)
		}
		resetStats(t, c.Addrs()...)
		readN(t, e, k, "v-"+k, 200)
		calls := map[string]int{}
		for _, a := range c.Addrs() {
			calls[a] = getCalls(t, a)
		}
		m, a, b := calls[shard[0].Addr], calls[shard[1].Addr], calls[shard[2].Addr]
		if m != 0 || a+b != 200 || a < 50 || b < 50 {
			t.Fatalf("%s: GETs master %d, replicas %d and %d (all nodes %v); want 0 and about 100 each", k, m, a, b, calls)
		}
	}

	// A failover in the first key's shard: one of its replicas becomes the
	// master. Every read meanwhile answers the value, and once the engine
	// has found the new roles the new master serves none of the key's
	// reads and its two replicas (one of them the old master) all of them.
	k := keys[0]
	var shard []redis.ClusterNode
	for _, s := range slots {
		if slot := int(routing.Slot(k)); s.Start <= slot && slot <= s.End {
			shard = s.Nodes
		}
	}
	promoted := shard[1].Addr
	if _, err := redisproc.Command(promoted, "CLUSTER", "FAILOVER"); err != nil {
		t.Fatal(err)
	}
	pc := redis.NewClient(&redis.Options{Addr: promoted})
	defer pc.Close()
	eventually.True(t, 30*time.Second, "the replica promoted", func() bool {
		role, err := pc.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
	eventually.True(t, 30*time.Second, "the key's reads on the new replicas only", func() bool {
		resetStats(t, shard[0].Addr, shard[1].Addr, shard[2].Addr)
		readN(t, e, k, "v-"+k, 100)
		return getCalls(t, promoted) == 0 && getCalls(t, shard[0].Addr)+getCalls(t, shard[2].Addr) == 100 &&
			getCalls(t, shard[0].Addr) > 0 && getCalls(t, shard[2].Addr) > 0
	})
}

// TestReplicaReadsReadYourWrites: a replica that is behind but within the
// lag bound serves reads, so a write made around the engine may read old
// for up to the bound; a write made through the engine (or reported to it
// with Invalidate, as the proxy and the hook do after a raw write) is
// never read old: until a check shows a replica holding it, the key's
// reads skip that replica, and the master or an up-to-date replica answers.
func TestReplicaReadsReadYourWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	r := redistest.Replicated(t, 2)
	ctx := context.Background()
	mc := redis.NewClient(&redis.Options{Addr: r.Master.Addr})
	defer mc.Close()
	e := engine.New(mc, engine.Options{})
	defer e.Close()
	if err := mc.Set(ctx, "hot", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	tbl := replicaTable(0, r.ReplicaAddrs(), "hot")
	tbl.Entries[0].ReplicaReads.MaxLagMillis = 60_000 // the paused replica stays within the bound
	e.SetTable(tbl)
	usable(t, e, 2)
	r1, r2 := r.ReplicaAddrs()[0], r.ReplicaAddrs()[1]
	eventually.True(t, 10*time.Second, "both replicas have v1", func() bool {
		a, _ := redisproc.Command(r1, "GET", "hot")
		b, _ := redisproc.Command(r2, "GET", "hot")
		return a == "v1" && b == "v1"
	})
	if _, err := redisproc.Command(r1, "CLIENT", "PAUSE", "30000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	defer redisproc.Command(r1, "CLIENT", "UNPAUSE")

	// A write around the engine: r1 answers the old value within the bound.
	if err := mc.Set(ctx, "hot", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := 0
	for i := 0; i < 20; i++ {
		v, _, err := e.Get(ctx, "hot")
		if err != nil {
			t.Fatal(err)
		}
		if string(v) == "v1" {
			old++
		}
	}
	if old == 0 {
		t.Fatal("no read saw the paused replica's old value: the test does not exercise a lagging replica")
	}

	// A write through the engine: never read old, by any read after it.
	for i, val := range []string{"v3", "v4", "v5"} {
		if _, err := e.Set(ctx, "hot", []byte(val)); err != nil {
			t.Fatal(err)
		}
		resetStats(t, r.Master.Addr, r1, r2)
		readN(t, e, "hot", val, 100)
		if n := getCalls(t, r1); n != 0 {
			t.Fatalf("write %d: the replica that lacks it served %d reads", i, n)
		}
	}
	// Once a check shows r2 holding the write, it serves the key again.
	eventually.True(t, 10*time.Second, "the up-to-date replica serves again", func() bool {
		resetStats(t, r2)
		readN(t, e, "hot", "v5", 10)
		return getCalls(t, r2) > 0
	})
	if n := getCalls(t, r1); n != 0 {
		t.Fatalf("the replica that lacks the write served %d reads", n)
	}
}
