package sidecar_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// getCalls is how many GETs addr served since its last CONFIG RESETSTAT.
func getCalls(t *testing.T, addr, password string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password})
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

// replicaReadsTable is a routing file whose key "hot" is read from
// replicas.
func replicaReadsTable(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "routing.json")
	table := `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"replicas":{"checkMillis":100},"entries":[
		{"key":"hot","source":"detected","replicaReads":{"maxLagMillis":1000}}]}`
	if err := os.WriteFile(file, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func runReplicaSidecar(t *testing.T, cfg sidecar.Config) string {
	t.Helper()
	ln := listen(t)
	cfg.Listener, cfg.Policy, cfg.Namespace = ln, "p", "ns"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sidecar.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ln.Addr().String()
}

// readsFromReplicas reads "hot" through the sidecar until the engine
// serves it from replicas, then checks that 200 more reads all went to
// replicas (none to master) and return the value.
func readsFromReplicas(t *testing.T, sc *redis.Client, reg *prometheus.Registry, master, password string, replicas []string) {
	t.Helper()
	ctx := context.Background()
	if err := sc.Set(ctx, "hot", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Every replica acknowledged the write: a replica within the lag
	// bound may lack a write it has not applied yet, which is not what
	// this checks.
	mc := redis.NewClient(&redis.Options{Addr: master, Password: password})
	n, err := mc.Do(ctx, "WAIT", len(replicas), 5000).Int()
	mc.Close()
	if err != nil || n < len(replicas) {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	eventually.True(t, 20*time.Second, "reads served by replicas", func() bool {
		sc.Get(ctx, "hot")
		return counter(t, reg, "heatsink_engine_replica_reads_total") > 0
	})
	for _, a := range append([]string{master}, replicas...) {
		c := redis.NewClient(&redis.Options{Addr: a, Password: password})
		c.ConfigResetStat(ctx)
		c.Close()
	}
	for i := 0; i < 200; i++ {
		if v, err := sc.Get(ctx, "hot").Result(); err != nil || v != "v" {
			t.Fatalf("read %d: %q, %v", i, v, err)
		}
	}
	total := 0
	for _, a := range replicas {
		n := getCalls(t, a, password)
		if n < 50 {
			t.Errorf("replica %s served %d of 200 reads; want about an even share", a, n)
		}
		total += n
	}
	if m := getCalls(t, master, password); m != 0 || total != 200 {
		t.Fatalf("master served %d GETs and the replicas %d; want 0 and 200", m, total)
	}

	// A client reads its own writes even from behind a replica that
	// stopped applying them (and is still within the lag bound).
	p1 := redis.NewClient(&redis.Options{Addr: replicas[0], Password: password})
	defer p1.Close()
	if err := p1.Do(ctx, "CLIENT", "PAUSE", 20000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer p1.Do(ctx, "CLIENT", "UNPAUSE")
	for i := 0; i < 20; i++ {
		val := "w" + strconv.Itoa(i)
		if err := sc.Set(ctx, "hot", val, 0).Err(); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 5; j++ {
			if v, err := sc.Get(ctx, "hot").Result(); err != nil || v != val {
				t.Fatalf("write %d, read %d: %q, %v; want %q", i, j, v, err, val)
			}
		}
	}
}

func counter(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestSidecarReplicaReadsSentinel: behind a sidecar that follows a
// Sentinel set, a replicaReads key is read from the replicas Sentinel
// names (SENTINEL REPLICAS), with the data nodes' password.
func TestSidecarReplicaReadsSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	h := redistest.Sentinel(t, redisproc.SentinelOptions{Replicas: 2, Password: "data-pw"})
	reg := prometheus.NewRegistry()
	addr := runReplicaSidecar(t, sidecar.Config{Sentinels: h.SentinelAddrs(), SentinelMaster: h.Opts.MasterName,
		Password: h.Opts.Password, RoutingFile: replicaReadsTable(t), Registry: reg})
	sc := redis.NewClient(&redis.Options{Addr: addr})
	defer sc.Close()
	master, err := h.Master()
	if err != nil {
		t.Fatal(err)
	}
	var replicas []string
	for _, d := range h.Data {
		if d.Addr != master {
			replicas = append(replicas, d.Addr)
		}
	}
	readsFromReplicas(t, sc, reg, master, h.Opts.Password, replicas)
}

// TestSidecarReplicaReadsCluster: behind a sidecar in cluster mode, on a
// 3-master cluster with 2 replicas per master, a replicaReads key is read
// from its shard's replicas (READONLY connections), none from its master.
func TestSidecarReplicaReadsCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	c := redistest.ClusterReplicas(t, 2)
	reg := prometheus.NewRegistry()
	addr := runReplicaSidecar(t, sidecar.Config{Upstreams: c.Addrs()[:1], Cluster: true, RoutingFile: replicaReadsTable(t), Registry: reg})
	sc := redis.NewClient(&redis.Options{Addr: addr})
	defer sc.Close()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	slots, err := cc.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := int(redisSlot(t, cc, "hot"))
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End {
			if len(s.Nodes) != 3 {
				t.Fatalf("slot %d: nodes %v, want a master and 2 replicas (all slots %v)", slot, s.Nodes, slots)
			}
			readsFromReplicas(t, sc, reg, s.Nodes[0].Addr, "", []string{s.Nodes[1].Addr, s.Nodes[2].Addr})
			return
		}
	}
	t.Fatal("no shard serves the key's slot")
}

func redisSlot(t *testing.T, cc *redis.ClusterClient, key string) int64 {
	t.Helper()
	n, err := cc.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
