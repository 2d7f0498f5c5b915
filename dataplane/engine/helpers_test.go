package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/routing"
)

// target is one real Redis deployment a test runs against.
type target struct {
	name   string
	client redis.UniversalClient
	// nodes are direct clients of every master, to read INFO.
	nodes []*redis.Client
}

// shared holds one standalone server and one 3-master cluster for the whole
// package: starting a cluster takes seconds, and each test uses its own keys.
var shared struct {
	once    sync.Once
	err     error
	server  *redisproc.Server
	cluster *redisproc.Cluster
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.server != nil {
		shared.server.Stop()
	}
	if shared.cluster != nil {
		shared.cluster.Stop()
	}
	os.Exit(code)
}

// targets returns a client for the shared standalone server and one for the
// shared cluster. Tests run their body once per target.
func targets(t testing.TB) []target {
	t.Helper()
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	shared.once.Do(func() {
		var wg sync.WaitGroup
		var serr, cerr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			shared.server, serr = redisproc.Start(context.Background(), redisproc.Options{})
		}()
		go func() {
			defer wg.Done()
			shared.cluster, cerr = redisproc.StartCluster(context.Background(), 3)
		}()
		wg.Wait()
		shared.err = errors.Join(serr, cerr)
	})
	if shared.err != nil {
		t.Fatalf("start redis: %v", shared.err)
	}
	s, c := shared.server, shared.cluster
	sc := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 64})
	t.Cleanup(func() { _ = sc.Close(); _ = cc.Close() })
	var nodes []*redis.Client
	for _, a := range c.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
	}
	single := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = single.Close() })
	return []target{
		{name: "standalone", client: sc, nodes: []*redis.Client{single}},
		{name: "cluster", client: cc, nodes: nodes},
	}
}

// resetStats zeroes INFO commandstats on every node.
func (tg target) resetStats(t testing.TB) {
	t.Helper()
	for _, n := range tg.nodes {
		if err := n.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// calls sums the calls of command cmd (lower case) over every node.
func (tg target) calls(t testing.TB, cmd string) int64 {
	t.Helper()
	var total int64
	for _, n := range tg.nodes {
		info, err := n.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		total += parseCalls(info, cmd)
	}
	return total
}

// perNode returns the calls of cmd on each node.
func (tg target) perNode(t *testing.T, cmd string) []int64 {
	t.Helper()
	var out []int64
	for _, n := range tg.nodes {
		info, err := n.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parseCalls(info, cmd))
	}
	return out
}

func parseCalls(info, cmd string) int64 {
	prefix := "cmdstat_" + cmd + ":calls="
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}

func table(entries ...routing.Entry) *routing.Table {
	t := &routing.Table{SchemaVersion: routing.SchemaVersion, Policy: "ns/p", Version: 1, EpochMillis: 60_000, Entries: entries}
	if err := t.Validate(); err != nil {
		panic(err)
	}
	return t
}

func key(t *testing.T, suffix string) string {
	return fmt.Sprintf("%s:%s", strings.ReplaceAll(t.Name(), "/", ":"), suffix)
}
