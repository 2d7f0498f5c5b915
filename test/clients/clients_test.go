package clients

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestGoRedisClusterClient: go-redis' ClusterClient (RESP3, its default),
// pointed at the sidecar.
func TestGoRedisClusterClient(t *testing.T) {
	play(t, "go", func() client { return &goRedis{} })
}

type goRedis struct {
	c      *redis.ClusterClient
	prefix string
}

func (g *goRedis) start(t *testing.T, addr, prefix string) {
	t.Helper()
	g.prefix = prefix
	g.c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	t.Cleanup(func() { g.c.Close() })
	// The first command loads the slot map.
	if err := g.c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

func (g *goRedis) work(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	for i := range nSet {
		if err := g.c.Set(ctx, g.prefix+"k:"+strconv.Itoa(i), "v", 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
	}
	for range nHot {
		if err := g.c.Get(ctx, g.prefix+"hot").Err(); err != nil && err != redis.Nil {
			t.Fatalf("GET: %v", err)
		}
	}
	return g.incrOnly(t)
}

func (g *goRedis) incr(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	for range nHot {
		if err := g.c.Get(ctx, g.prefix+"hot").Err(); err != nil && err != redis.Nil {
			t.Fatalf("GET: %v", err)
		}
	}
	return g.incrOnly(t)
}

// incrOnly increments the counter nIncr times and reads it.
func (g *goRedis) incrOnly(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	for range nIncr {
		if err := g.c.Incr(ctx, g.prefix+"ctr").Err(); err != nil {
			t.Fatalf("INCR: %v", err)
		}
	}
	v, err := g.c.Get(ctx, g.prefix+"ctr").Result()
	if err != nil {
		t.Fatalf("GET ctr: %v", err)
	}
	return v
}

// TestRedisPyRedisCluster: redis-py's RedisCluster, Debian's python3-redis
// (4.3.4) run by the system python3.
func TestRedisPyRedisCluster(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import redis.cluster").Run(); err != nil {
		t.Skipf("redis-py is not installed for %s (hack/setup-clients.sh installs python3-redis): %v", py, err)
	}
	play(t, "py", func() client { return &script{argv: []string{py, "testdata/workload.py"}} })
}

// TestIoredisCluster: ioredis' Cluster, from bin/node_modules
// (hack/setup-clients.sh).
func TestIoredisCluster(t *testing.T) {
	modules, err := filepath.Abs("../../bin/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "ioredis", "package.json")); err != nil {
		t.Skipf("ioredis is not installed in %s (hack/setup-clients.sh installs it): %v", modules, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("node is not installed (hack/setup-clients.sh installs it): %v", err)
	}
	play(t, "js", func() client {
		return &script{argv: []string{node, "testdata/workload.js"}, env: []string{"NODE_PATH=" + modules}}
	})
}
