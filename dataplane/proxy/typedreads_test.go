package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// typedTable coalesces and caches (for a minute) a hash, a set and a
// sorted set.
func typedTable() *routing.Table {
	lc := func() *routing.LocalCache { return &routing.LocalCache{TTLMillis: 60000} }
	return &routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
		{Key: "th", Source: routing.SourceDetected, Coalesce: true, LocalCache: lc()},
		{Key: "ts", Source: routing.SourceDetected, Coalesce: true, LocalCache: lc()},
		{Key: "tz", Source: routing.SourceDetected, Coalesce: true, LocalCache: lc()},
	}}
}

// typedReads are the read-hot requests of the target (docs/benchmarks.md):
// each must cost Redis at most 0.002 of its client calls.
var typedReads = [][]any{
	{"HGETALL", "th"}, {"HGET", "th", "a"},
	{"SISMEMBER", "ts", "m1"}, {"SMEMBERS", "ts"},
	{"ZREVRANGE", "tz", "0", "9", "WITHSCORES"}, {"ZSCORE", "tz", "p3"},
}

func fillTyped(t *testing.T, ctx context.Context, direct redis.UniversalClient) {
	t.Helper()
	for _, k := range []string{"th", "ts", "tz"} {
		must(t, direct.Del(ctx, k).Err())
	}
	must(t, direct.HSet(ctx, "th", "a", "1", "b", "2", "c", "3").Err())
	must(t, direct.SAdd(ctx, "ts", "m1", "m2", "m3").Err())
	for i := range 20 {
		must(t, direct.ZAdd(ctx, "tz", redis.Z{Score: float64(i) + 0.5, Member: fmt.Sprintf("p%d", i)}).Err())
	}
}

// totalCalls sums INFO commandstats calls of cmd over nodes.
func totalCalls(t *testing.T, nodes []*redis.Client, cmd string) int {
	n := 0
	for _, c := range nodes {
		n += commandCalls(t, c, strings.ToLower(cmd))
	}
	return n
}

// checkTypedReads drives the typed reads through the proxy at addr in
// both protocols and checks, against direct (Redis alone) and the nodes'
// INFO commandstats: identical replies, the upstream ratio, per-protocol
// reply shapes, distinct requests, invalidation by a write through the
// proxy, and SRANDMEMBER never cached.
func checkTypedReads(t *testing.T, addr string, direct redis.UniversalClient, nodes []*redis.Client, directIn func(protocol int) redis.UniversalClient) {
	ctx := context.Background()
	fillTyped(t, ctx, direct)
	const calls = 1000
	for _, protocol := range []int{2, 3} {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol})
		defer c.Close()
		d := directIn(protocol)
		defer d.Close()
		t.Run(fmt.Sprintf("RESP%d upstream ÷ client calls ≤ 0.002", protocol), func(t *testing.T) {
			for _, req := range typedReads {
				before := totalCalls(t, nodes, req[0].(string))
				want, _ := d.Do(ctx, req...).Result()
				for i := range calls {
					got, err := c.Do(ctx, req...).Result()
					if err != nil {
						t.Fatalf("%v: %v", req, err)
					}
					if (i == 0 || i == calls-1) && !cmp.Equal(got, want) {
						t.Fatalf("%v through the proxy = %#v, Redis alone %#v", req, got, want)
					}
				}
				up := totalCalls(t, nodes, req[0].(string)) - before - 1 // the direct read
				if ratio := float64(up) / calls; ratio > 0.002 {
					t.Errorf("%v: %d upstream calls for %d client calls = %.4f, want ≤ 0.002", req, up, calls, ratio)
				}
			}
		})
		t.Run(fmt.Sprintf("RESP%d reply shape", protocol), func(t *testing.T) {
			for range 2 { // a miss, then a hit
				v, err := c.Do(ctx, "HGETALL", "th").Result()
				if err != nil {
					t.Fatal(err)
				}
				switch v.(type) {
				case map[any]any:
					if protocol != 3 {
						t.Fatalf("RESP%d client got a RESP3 map for HGETALL", protocol)
					}
				case []any:
					if protocol != 2 {
						t.Fatalf("RESP%d client got a flat array for HGETALL", protocol)
					}
				default:
					t.Fatalf("HGETALL = %T", v)
				}
				// A double in RESP3, a bulk string in RESP2, as Redis
				// answers the same client.
				got, err := c.Do(ctx, "ZSCORE", "tz", "p3").Result()
				want, _ := d.Do(ctx, "ZSCORE", "tz", "p3").Result()
				if err != nil || !cmp.Equal(got, want) {
					t.Fatalf("ZSCORE = %#v (%v), Redis alone %#v", got, err, want)
				}
				got, err = c.Do(ctx, "ZREVRANGE", "tz", "0", "2", "WITHSCORES").Result()
				want, _ = d.Do(ctx, "ZREVRANGE", "tz", "0", "2", "WITHSCORES").Result()
				if err != nil || !cmp.Equal(got, want) {
					t.Fatalf("ZREVRANGE WITHSCORES = %#v (%v), Redis alone %#v", got, err, want)
				}
			}
		})
		t.Run(fmt.Sprintf("RESP%d distinct arguments are distinct entries", protocol), func(t *testing.T) {
			for _, f := range []string{"a", "b", "c", "a", "b", "c"} {
				got, err := c.HGet(ctx, "th", f).Result()
				want := direct.HGet(ctx, "th", f).Val()
				if err != nil || got != want {
					t.Fatalf("HGET th %s = %q (%v), want %q", f, got, err, want)
				}
			}
			if got := c.SIsMember(ctx, "ts", "nope").Val(); got {
				t.Fatal("SISMEMBER ts nope = true after SISMEMBER ts m1 was cached")
			}
		})
		t.Run(fmt.Sprintf("RESP%d a write through the proxy drops every entry of the key", protocol), func(t *testing.T) {
			for _, req := range [][]any{{"HGETALL", "th"}, {"HGET", "th", "a"}} {
				must(t, c.Do(ctx, req...).Err()) // cached
			}
			// Another client of the same sidecar writes.
			w := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol})
			defer w.Close()
			must(t, w.HSet(ctx, "th", "a", "new").Err())
			if v := c.HGet(ctx, "th", "a").Val(); v != "new" {
				t.Fatalf("HGET th a after HSET = %q, want new", v)
			}
			if m := c.HGetAll(ctx, "th").Val(); m["a"] != "new" {
				t.Fatalf("HGETALL th after HSET = %v, want a=new", m)
			}
			must(t, c.HSet(ctx, "th", "a", "1").Err())
		})
		t.Run(fmt.Sprintf("RESP%d SRANDMEMBER is never cached", protocol), func(t *testing.T) {
			before := totalCalls(t, nodes, "srandmember")
			for range 50 {
				must(t, c.SRandMember(ctx, "ts").Err())
			}
			if n := totalCalls(t, nodes, "srandmember") - before; n != 50 {
				t.Fatalf("50 SRANDMEMBER through the proxy → %d upstream, want 50", n)
			}
		})
	}
}

// TestTypedReadsRelievedStandalone: the read-only commands of hashes, sets
// and sorted sets on a coalesced, cached key are served by the engine
// (docs/engine.md, reads of every type).
func TestTypedReadsRelievedStandalone(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	// The event loop (shared connections) and sessions (dedicated).
	for _, shared := range []int{0, -1} {
		t.Run(fmt.Sprintf("sharedConns %d", shared), func(t *testing.T) {
			eng := engine.New(direct, engine.Options{})
			defer eng.Close()
			eng.SetTable(typedTable())
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Engine: eng, SharedConns: shared})
			checkTypedReads(t, addr, direct, []*redis.Client{direct}, func(protocol int) redis.UniversalClient {
				return redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: protocol})
			})
		})
	}
}

// TestTypedReadsRelievedCluster: the same on the 3-master cluster.
func TestTypedReadsRelievedCluster(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer direct.Close()
	var nodes []*redis.Client
	for _, a := range cl.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: a})
		defer n.Close()
		nodes = append(nodes, n)
	}
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	eng.SetTable(typedTable())
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true, Engine: eng})
	checkTypedReads(t, addr, direct, nodes, func(protocol int) redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: protocol})
	})
}

// TestTypedReadsTrackingInvalidation: with server-assisted tracking, a
// write by a client that does not go through heatsink drops the cached
// replies of the key, in both protocols, long before their TTL; standalone
// and 3-master cluster.
func TestTypedReadsTrackingInvalidation(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	cl := redistest.Cluster(t)
	single := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer single.Close()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer cc.Close()
	var cnodes []*redis.Client
	for _, a := range cl.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: a})
		defer n.Close()
		cnodes = append(cnodes, n)
	}
	for _, tc := range []struct {
		name    string
		direct  redis.UniversalClient
		nodes   []*redis.Client
		cluster bool
		up      []string
	}{
		{"standalone", single, []*redis.Client{single}, false, []string{srv.Addr}},
		{"cluster", cc, cnodes, true, cl.Addrs()[:1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := engine.New(tc.direct, engine.Options{Tracking: true})
			defer eng.Close()
			eng.SetTable(typedTable())
			addr, _ := start(t, proxy.Config{Upstreams: tc.up, Cluster: tc.cluster, Engine: eng})
			ctx := context.Background()
			fillTyped(t, ctx, tc.direct)
			for _, protocol := range []int{2, 3} {
				c := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol})
				defer c.Close()
				must(t, c.HSet(ctx, "th", "a", "1").Err())
				for range 2 {
					if v := c.HGetAll(ctx, "th").Val(); v["a"] != "1" {
						t.Fatalf("RESP%d: HGETALL = %v", protocol, v)
					}
				}
				before := totalCalls(t, tc.nodes, "hgetall")
				for range 100 {
					must(t, c.HGetAll(ctx, "th").Err())
				}
				if n := totalCalls(t, tc.nodes, "hgetall") - before; n != 0 {
					t.Fatalf("RESP%d: 100 cached HGETALL cost %d upstream calls, want 0", protocol, n)
				}
				must(t, tc.direct.HSet(ctx, "th", "a", fmt.Sprint("direct", protocol)).Err())
				eventually.Succeeds(t, 10*time.Second, func() error {
					if v := c.HGetAll(ctx, "th").Val(); v["a"] != fmt.Sprint("direct", protocol) {
						return fmt.Errorf("RESP%d: HGETALL after a write not through heatsink = %v", protocol, v)
					}
					return nil
				})
			}
		})
	}
}

// TestTypedReadsFollowAMovedSlot: the engine reads a cacheable request on
// connections of its own; when the key's slot moves to another master
// (the engine's slot map is then stale: Redis answers MOVED), the read
// follows the redirection and the client gets the reply, never MOVED.
func TestTypedReadsFollowAMovedSlot(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer direct.Close()
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	const k = "moving-hash"
	eng.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
		{Key: k, Source: routing.SourceDetected, Coalesce: true},
	}})
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true, Engine: eng})
	ctx := context.Background()
	must(t, direct.HSet(ctx, k, "a", "1").Err())
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer c.Close()
	if v, err := c.HGetAll(ctx, k).Result(); err != nil || v["a"] != "1" {
		t.Fatalf("HGETALL before the move = %v, %v", v, err)
	}
	redistest.MigrateSlot(t, cl.Addrs(), int(routing.Slot(k)))
	for range 5 {
		if v, err := c.HGetAll(ctx, k).Result(); err != nil || v["a"] != "1" {
			t.Fatalf("HGETALL after the slot moved = %v, %v", v, err)
		}
	}
}
