package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// The routing table governs one database; a connection's SELECT decides
// whether the engine may answer it. Each test runs with the event loop and
// with a session per client (NoEventLoop).

var loopModes = []struct {
	name   string
	noLoop bool
}{{"event loop", false}, {"NoEventLoop", true}}

// dbTable caches key k (a minute) in db and splits counter likes in 4.
func dbTable(db int32) *routing.Table {
	return &routing.Table{SchemaVersion: routing.SchemaVersionFor(db), Version: 1, Database: db, EpochMillis: 60000, Entries: []routing.Entry{
		{Key: "k", Source: routing.SourceDetected, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60000}},
		{Key: "likes", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}},
	}}
}

// dbClients returns a direct client of srv for each of databases 0 to 3.
func dbClients(t *testing.T, addr string) []*redis.Client {
	out := make([]*redis.Client, 4)
	for i := range out {
		out[i] = redis.NewClient(&redis.Options{Addr: addr, DB: i})
		t.Cleanup(func() { out[i].Close() })
	}
	return out
}

// doStr runs one command on conn and renders its reply.
func doStr(ctx context.Context, conn *redis.Conn, args ...any) string {
	v, err := conn.Do(ctx, args...).Result()
	if err != nil {
		return "err=" + err.Error()
	}
	return fmt.Sprint(v)
}

// TestDatabasesCachedKey: with a table caching k in database 0, a client
// that selected database 1 reads and writes database 1's k, never the
// cached value of database 0, and is not counted for the policy; back in
// database 0 (SELECT 0, RESET) it gets the cached value again.
func TestDatabasesCachedKey(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := dbClients(t, srv.Addr)
	ctx := context.Background()
	for _, mode := range loopModes {
		t.Run(mode.name, func(t *testing.T) {
			must(t, direct[0].FlushAll(ctx).Err())
			eng := engine.New(direct[0], engine.Options{})
			defer eng.Close()
			eng.SetTable(dbTable(0))
			rec := &recorder{m: map[string][3]uint32{}}
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Engine: eng, NoEventLoop: mode.noLoop, Observer: rec, Policy: "ns/p"})
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()

			must(t, c.Set(ctx, "k", "v0", 0).Err())
			if v := c.Get(ctx, "k").Val(); v != "v0" {
				t.Fatalf("GET k in db 0 = %q, want v0", v)
			}
			// Changed behind the cache: database 0's k is now served from
			// the cache (v0), which tells an engine-served read apart.
			must(t, direct[0].Set(ctx, "k", "behind", 0).Err())
			if v := c.Get(ctx, "k").Val(); v != "v0" {
				t.Fatalf("GET k in db 0 = %q, want the cached v0", v)
			}

			conn := c.Conn()
			defer conn.Close()
			steps := []struct {
				cmd  []any
				want string
			}{
				{[]any{"SELECT", 1}, "OK"},
				{[]any{"SET", "k", "v1"}, "OK"},
				{[]any{"GET", "k"}, "v1"},
				{[]any{"INCR", "likes"}, "1"},
				{[]any{"SELECT", 0}, "OK"},
				{[]any{"GET", "k"}, "v0"},
				// A refused SELECT leaves the connection where it was.
				{[]any{"SELECT", 99}, "err=ERR DB index is out of range"},
				{[]any{"GET", "k"}, "v0"},
				{[]any{"SELECT", 1}, "OK"},
				{[]any{"SELECT", 99}, "err=ERR DB index is out of range"},
				{[]any{"GET", "k"}, "v1"},
				// RESET goes back to database 0.
				{[]any{"RESET"}, "RESET"},
				{[]any{"GET", "k"}, "v0"},
				// SELECT inside MULTI applies at EXEC; DISCARD drops it.
				{[]any{"MULTI"}, "OK"},
				{[]any{"SELECT", 1}, "QUEUED"},
				{[]any{"DISCARD"}, "OK"},
				{[]any{"GET", "k"}, "v0"},
				{[]any{"MULTI"}, "OK"},
				{[]any{"SELECT", 1}, "QUEUED"},
				{[]any{"EXEC"}, "[OK]"},
				{[]any{"GET", "k"}, "v1"},
				{[]any{"SELECT", 0}, "OK"},
				{[]any{"GET", "k"}, "v0"},
			}
			for i, s := range steps {
				if got := doStr(ctx, conn, s.cmd...); got != s.want {
					t.Fatalf("step %d %v = %q, want %q", i, s.cmd, got, s.want)
				}
			}
			// Database 1's k was written in database 1 only, raw.
			if v := direct[1].Get(ctx, "k").Val(); v != "v1" {
				t.Fatalf("db 1 k = %q, want v1", v)
			}
			if v := direct[0].Get(ctx, "k").Val(); v != "behind" {
				t.Fatalf("db 0 k = %q, want behind (untouched by database 1's SET)", v)
			}
			// The split counter of database 0 is not database 1's likes:
			// its INCR went raw to database 1's base key.
			if v := direct[1].Get(ctx, "likes").Val(); v != "1" {
				t.Fatalf("db 1 likes = %q, want 1 (a raw INCR)", v)
			}
			if n := direct[0].Exists(ctx, "likes").Val(); n != 0 {
				t.Fatal("db 0 likes exists after an INCR in db 1")
			}

			// Pipelined: SELECT and the GET after it in one write.
			pipe := conn.Pipeline()
			pipe.Select(ctx, 1)
			g1 := pipe.Get(ctx, "k")
			pipe.Select(ctx, 0)
			g0 := pipe.Get(ctx, "k")
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if g1.Val() != "v1" || g0.Val() != "v0" {
				t.Fatalf("pipelined GETs = %q, %q; want v1, v0", g1.Val(), g0.Val())
			}

			// A client configured for database 1 (go-redis SELECTs on connect).
			c1 := redis.NewClient(&redis.Options{Addr: addr, DB: 1})
			defer c1.Close()
			must(t, direct[1].Set(ctx, "k", "v1b", 0).Err())
			if v := c1.Get(ctx, "k").Val(); v != "v1b" {
				t.Fatalf("GET k with DB 1 = %q, want v1b (database 1 is never cached)", v)
			}

			// Only database 0's accesses count for the policy: c's SET and
			// 2 GETs, conn's 5 GETs in database 0 among the steps and 1 in
			// the pipeline; none of database 1's (nor c1's).
			rec.mu.Lock()
			got := rec.m["ns/p|k"]
			likes := rec.m["ns/p|likes"]
			rec.mu.Unlock()
			if got[0] != 2+5+1 || got[1] != 1 {
				t.Fatalf("policy counts of k: %d reads, %d writes; want 8 reads (database 0 only), 1 write", got[0], got[1])
			}
			if likes != ([3]uint32{}) {
				t.Fatalf("policy counts of likes = %v, want none (its only INCR was in database 1)", likes)
			}
		})
	}
}

// TestDatabasesTableForDatabase2: a table for database 2 mitigates in
// database 2 only; the engine's own commands (here SET through it, and
// cache fills) reach database 2 although its client is database 0's, as
// the sidecar's is.
func TestDatabasesTableForDatabase2(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := dbClients(t, srv.Addr)
	ctx := context.Background()
	for _, mode := range loopModes {
		t.Run(mode.name, func(t *testing.T) {
			must(t, direct[0].FlushAll(ctx).Err())
			eng := engine.New(direct[0], engine.Options{})
			defer eng.Close()
			eng.SetTable(dbTable(2))
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Engine: eng, NoEventLoop: mode.noLoop})
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()

			// Database 0: plain. A write behind the proxy is seen at once.
			must(t, c.Set(ctx, "k", "a", 0).Err())
			if v := c.Get(ctx, "k").Val(); v != "a" {
				t.Fatalf("GET k in db 0 = %q, want a", v)
			}
			must(t, direct[0].Set(ctx, "k", "b", 0).Err())
			if v := c.Get(ctx, "k").Val(); v != "b" {
				t.Fatalf("GET k in db 0 = %q, want b: database 0 is not mitigated", v)
			}
			for range 3 {
				must(t, c.Incr(ctx, "likes").Err())
			}
			if v := direct[0].Get(ctx, "likes").Val(); v != "3" {
				t.Fatalf("db 0 likes = %q, want 3 in the base key", v)
			}

			// Database 2: cached and split.
			c2 := redis.NewClient(&redis.Options{Addr: addr, DB: 2})
			defer c2.Close()
			must(t, c2.Set(ctx, "k", "x", 0).Err())
			if v := direct[2].Get(ctx, "k").Val(); v != "x" {
				t.Fatalf("db 2 k = %q, want x", v)
			}
			if v := c2.Get(ctx, "k").Val(); v != "x" {
				t.Fatalf("GET k in db 2 = %q, want x", v)
			}
			must(t, direct[2].Set(ctx, "k", "y", 0).Err())
			if v := c2.Get(ctx, "k").Val(); v != "x" {
				t.Fatalf("GET k in db 2 = %q, want the cached x", v)
			}
			for range 10 {
				must(t, c2.Incr(ctx, "likes").Err())
			}
			if v, err := c2.Get(ctx, "likes").Result(); v != "10" {
				t.Fatalf("GET likes in db 2 = %q, %v; want 10 (the sum of the shards)", v, err)
			}
			if n := direct[2].Exists(ctx, "likes").Val(); n != 0 {
				t.Fatal("db 2 base key likes exists: the increments did not go to the shards")
			}
			if v := direct[0].Get(ctx, "likes").Val(); v != "3" {
				t.Fatalf("db 0 likes = %q, want 3 still", v)
			}
			if v := direct[0].Get(ctx, "k").Val(); v != "b" {
				t.Fatalf("db 0 k = %q, want b still", v)
			}
		})
	}
}

// TestDatabasesSplitCounterInDatabase1: a split counter of database 1 is
// read exactly in database 1, its shards live there, and database 0's key
// of the same name is another, plain, counter.
func TestDatabasesSplitCounterInDatabase1(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := dbClients(t, srv.Addr)
	ctx := context.Background()
	for _, mode := range loopModes {
		t.Run(mode.name, func(t *testing.T) {
			must(t, direct[0].FlushAll(ctx).Err())
			eng := engine.New(direct[0], engine.Options{})
			defer eng.Close()
			eng.SetTable(dbTable(1))
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Engine: eng, NoEventLoop: mode.noLoop})
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			conn := c.Conn()
			defer conn.Close()
			must(t, conn.Select(ctx, 1).Err())
			for range 20 {
				must(t, conn.IncrBy(ctx, "likes", 2).Err())
			}
			if v := doStr(ctx, conn, "GET", "likes"); v != "40" {
				t.Fatalf("GET likes in db 1 = %q, want 40", v)
			}
			var sum int64
			shards := 0
			for _, k := range routing.ShardKeys("likes", routing.Generation{FromEpoch: 0, Shards: 4}) {
				n, err := direct[1].Get(ctx, k).Int64()
				if err == nil {
					shards++
				}
				sum += n
				if direct[0].Exists(ctx, k).Val() != 0 {
					t.Fatalf("shard %s exists in db 0", k)
				}
			}
			if sum != 40 || shards == 0 {
				t.Fatalf("db 1 shards sum to %d over %d shards, want 40", sum, shards)
			}
			// Database 0, same connection: a plain counter.
			must(t, conn.Select(ctx, 0).Err())
			if n := conn.Incr(ctx, "likes").Val(); n != 1 {
				t.Fatalf("INCR likes in db 0 = %d, want 1", n)
			}
			if v := direct[0].Get(ctx, "likes").Val(); v != "1" {
				t.Fatalf("db 0 likes = %q, want 1", v)
			}
			must(t, conn.Select(ctx, 1).Err())
			if v := doStr(ctx, conn, "GET", "likes"); v != "40" {
				t.Fatalf("GET likes in db 1 again = %q, want 40", v)
			}
		})
	}
}

// TestDatabasesClusterEngineAppliesNothing: a cluster has database 0 alone; an engine
// on a cluster client given a table for another database applies nothing
// (every command raw) rather than database 0's keys.
func TestDatabasesClusterEngineAppliesNothing(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer direct.Close()
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	eng.SetTable(dbTable(1))
	if eng.Lookup("k") {
		t.Fatal("a cluster engine applies a table for database 1")
	}
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true, Engine: eng})
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	must(t, c.Set(ctx, "k", "a", 0).Err())
	must(t, c.Get(ctx, "k").Err())
	must(t, direct.Set(ctx, "k", "b", 0).Err())
	if v := c.Get(ctx, "k").Val(); v != "b" {
		t.Fatalf("GET k = %q, want b (not cached)", v)
	}
	if err := c.Do(ctx, "SELECT", 1).Err(); err == nil || !strings.Contains(err.Error(), "SELECT") {
		t.Fatalf("SELECT 1 on a cluster: %v, want Redis' refusal", err)
	}
}
