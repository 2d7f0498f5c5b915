package faults

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// startClusterWithReplicas starts 3 masters with a replica each.
func startClusterWithReplicas(t *testing.T) []*server {
	t.Helper()
	var nodes []*server
	var addrs []string
	for range 6 {
		s := &server{t: t, port: freePort(t, true), dir: t.TempDir()}
		s.args = []string{"--cluster-enabled", "yes", "--cluster-config-file", s.dir + "/nodes.conf", "--cluster-node-timeout", "2000"}
		s.start()
		t.Cleanup(s.kill)
		nodes = append(nodes, s)
		addrs = append(addrs, s.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	eventually.Succeeds(t, 30*time.Second, func() error {
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n.addr()})
			info, err := c.ClusterInfo(context.Background()).Result()
			c.Close()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: %s", n.addr(), info)
			}
		}
		return nil
	})
	return nodes
}

// keyOn returns a key whose slot the master at addr serves.
func keysOf(t *testing.T, c *redis.ClusterClient, addr string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		k := "fo:" + strconv.Itoa(i)
		m, err := c.MasterForKey(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == addr {
			out = append(out, k)
		}
	}
	return out
}

// TestClusterFailoverUnderLoad fails a master over to its replica (CLUSTER
// FAILOVER) while clients write through the proxy and, beside it, through
// go-redis' own cluster client: the proxy's clients see no error a cluster
// client does not see.
func TestClusterFailoverUnderLoad(t *testing.T) {
	skipShort(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			nodes := startClusterWithReplicas(t)
			ctx := context.Background()
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr()}})
			defer cc.Close()
			// A master, its replica, and keys of its slots.
			master := ""
			for _, n := range nodes {
				c := redis.NewClient(&redis.Options{Addr: n.addr()})
				role, err := c.Do(ctx, "ROLE").Slice()
				c.Close()
				if err == nil && role[0] == "master" {
					master = n.addr()
					break
				}
			}
			mc := redis.NewClient(&redis.Options{Addr: master})
			defer mc.Close()
			myID, err := mc.Do(ctx, "CLUSTER", "MYID").Text()
			if err != nil {
				t.Fatal(err)
			}
			var replica string
			eventually.Succeeds(t, 30*time.Second, func() error {
				replicas, err := mc.Do(ctx, "CLUSTER", "REPLICAS", myID).StringSlice()
				if err != nil || len(replicas) == 0 {
					return fmt.Errorf("replicas of %s: %v, %v", master, replicas, err)
				}
				replica = strings.Fields(replicas[0])[1]
				replica = replica[:strings.Index(replica, "@")]
				rc := redis.NewClient(&redis.Options{Addr: replica})
				defer rc.Close()
				info, err := rc.Info(ctx, "replication").Result()
				if err != nil || !strings.Contains(info, "master_link_status:up") {
					return fmt.Errorf("replica %s not in sync: %v", replica, err)
				}
				return nil
			})
			keys := keysOf(t, cc, master, 8)

			addr, _ := startProxy(t, proxy.Config{Upstreams: []string{nodes[0].addr()}, Cluster: true, NoEventLoop: m.noLoop})
			pl := startKeyLoad(addr, false, keys)
			dl := startKeyLoad(nodes[0].addr(), true, keys)
			eventually.True(t, 10*time.Second, "load served", func() bool { return pl.acked.Load() > 100 && dl.acked.Load() > 100 })
			rc := redis.NewClient(&redis.Options{Addr: replica})
			defer rc.Close()
			if err := rc.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
				t.Fatal(err)
			}
			eventually.Succeeds(t, 30*time.Second, func() error {
				role, err := rc.Do(ctx, "ROLE").Slice()
				if err != nil {
					return err
				}
				if role[0] != "master" {
					return fmt.Errorf("%s is %v", replica, role[0])
				}
				return nil
			})
			acked := pl.acked.Load()
			eventually.True(t, 10*time.Second, "served after the failover", func() bool { return pl.acked.Load() > acked+200 })
			pl.end()
			dl.end()
			t.Logf("through the proxy: %d acknowledged, %d failed %v; go-redis cluster client: %d acknowledged, %d failed %v",
				pl.acked.Load(), pl.failed.Load(), pl.errors(), dl.acked.Load(), dl.failed.Load(), dl.errors())
			if pl.hangs.Load() > 0 {
				t.Errorf("%d commands hung through the proxy", pl.hangs.Load())
			}
			if pl.failed.Load() > dl.failed.Load() {
				t.Errorf("the proxy's clients saw %d errors (%v), a cluster client %d", pl.failed.Load(), pl.errors(), dl.failed.Load())
			}
		})
	}
}

// startKeyLoad INCRs keys in a loop, one client per key, through addr
// (a cluster client when cluster).
func startKeyLoad(addr string, cluster bool, keys []string) *load {
	l := &load{stop: make(chan struct{})}
	for _, key := range keys {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			var c redis.UniversalClient
			if cluster {
				c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, PoolSize: 1, ReadTimeout: -1})
			} else {
				c = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, ReadTimeout: -1})
			}
			defer c.Close()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := c.Incr(ctx, key).Err()
				cancel()
				switch {
				case err == nil:
					l.acked.Add(1)
				case ctx.Err() != nil:
					l.hangs.Add(1)
				default:
					l.failed.Add(1)
					l.errs.Store(err.Error(), true)
				}
			}
		}()
	}
	return l
}

// TestSlotMigrationUnderLoad moves a slot from one master to another, key
// by key, while clients INCR keys of that slot through the proxy: the
// MOVED and ASK replies of the migration are followed, no client sees an
// error, and no increment is lost or counted twice.
func TestSlotMigrationUnderLoad(t *testing.T) {
	skipShort(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cl := redistest.Cluster(t)
			addr, reg := startProxy(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true, NoEventLoop: m.noLoop})
			var keys []string
			for i := range 16 {
				keys = append(keys, "{mig}:"+strconv.Itoa(i))
			}
			l := startKeyLoad(addr, false, keys)
			eventually.True(t, 10*time.Second, "load served", func() bool { return l.acked.Load() > 200 })
			redistest.MigrateSlot(t, cl.Addrs(), int(routing.Slot("{mig}")))
			acked := l.acked.Load()
			eventually.True(t, 10*time.Second, "served after the migration", func() bool { return l.acked.Load() > acked+200 })
			l.end()
			redirects := counter(t, reg, "heatsink_proxy_redirects_total", nil)
			t.Logf("%d INCRs acknowledged, %d failed, %v redirects followed", l.acked.Load(), l.failed.Load(), redirects)
			if l.failed.Load() > 0 || l.hangs.Load() > 0 {
				t.Fatalf("%d errors (%v), %d hangs during the migration", l.failed.Load(), l.errors(), l.hangs.Load())
			}
			if redirects == 0 {
				t.Fatal("no redirect followed: the migration did not happen under load")
			}
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
			defer cc.Close()
			var sum int64
			for _, k := range keys {
				n, _ := cc.Get(context.Background(), k).Int64()
				sum += n
			}
			if sum != l.acked.Load() {
				t.Fatalf("Redis counted %d INCRs, clients got %d replies", sum, l.acked.Load())
			}
		})
	}
}
