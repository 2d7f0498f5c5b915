package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

func req(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

func read(t *testing.T, e *engine.Engine, proto int, want string, args ...string) {
	t.Helper()
	b, err := e.Read(context.Background(), req(args...), proto)
	if err != nil || string(b) != want {
		t.Fatalf("%v in RESP%d = %q, %v; want %q", args, proto, b, err, want)
	}
}

// TestTypedReadsCacheBound: a reply larger than the local cache's byte
// bound is never cached (every read of it goes upstream) and the cache
// stays within the bound, while small replies of the same key are cached
// per request. Real redis-server, standalone and 3-master cluster.
func TestTypedReadsCacheBound(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "big")
			e := newEngine(t, tg.client, engine.Options{MaxCacheBytes: 4096})
			e.SetTable(table(routing.Entry{Key: k, LocalCache: &routing.LocalCache{TTLMillis: 60_000}}))
			big := strings.Repeat("x", 200)
			for i := range 50 {
				if err := tg.client.HSet(ctx, k, "f"+strings.Repeat("0", i), big).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := tg.client.HSet(ctx, k, "small", "s").Err(); err != nil {
				t.Fatal(err)
			}
			tg.resetStats(t)
			for range 20 {
				b, err := e.Read(ctx, req("HGETALL", k), 2)
				if err != nil || len(b) < 10_000 {
					t.Fatalf("HGETALL: %d bytes, %v", len(b), err)
				}
			}
			if n := tg.calls(t, "hgetall"); n != 20 {
				t.Fatalf("20 reads of a reply over the byte bound: %d upstream, want 20 (never cached)", n)
			}
			for range 20 {
				read(t, e, 2, "$1\r\ns\r\n", "HGET", k, "small")
			}
			if n := tg.calls(t, "hget"); n != 1 {
				t.Fatalf("20 reads of a small reply: %d upstream, want 1", n)
			}
			if _, bytes := e.CacheStats(); bytes > 4096 {
				t.Fatalf("cache holds %d bytes, bound 4096", bytes)
			}
		})
	}
}

// TestTypedReadsRefreshAhead: a cached request read in its refresh window
// is re-sent upstream as it was (the exact request, HGET with its field),
// once, in the background, and the refreshed reply replaces the entry
// before it expires: no read misses at the old expiry. Injected clock.
func TestTypedReadsRefreshAhead(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "h")
			clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
			e := newEngine(t, tg.client, engine.Options{Clock: clk})
			e.SetTable(table(routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 1000, RefreshAheadPercent: 20}}))
			if err := tg.client.HSet(ctx, k, "a", "1", "b", "2").Err(); err != nil {
				t.Fatal(err)
			}
			tg.resetStats(t)
			read(t, e, 3, "$1\r\n1\r\n", "HGET", k, "a")
			read(t, e, 3, "$1\r\n2\r\n", "HGET", k, "b")
			if n := tg.calls(t, "hget"); n != 2 {
				t.Fatalf("%d upstream HGET after two distinct requests, want 2", n)
			}
			// A direct write the engine does not see (no tracking): the
			// refresh brings it.
			if err := tg.client.HSet(ctx, k, "a", "new").Err(); err != nil {
				t.Fatal(err)
			}
			clk.Step(850 * time.Millisecond) // in the last 20 %
			read(t, e, 3, "$1\r\n1\r\n", "HGET", k, "a")
			eventually.True(t, 10*time.Second, "the refresh of HGET a", func() bool { return tg.calls(t, "hget") == 3 })
			eventually.Succeeds(t, 10*time.Second, func() error {
				b, err := e.Read(ctx, req("HGET", k, "a"), 3)
				if err != nil || string(b) != "$3\r\nnew\r\n" {
					return fmt.Errorf("HGET a = %q, %v; want the refreshed reply", b, err)
				}
				return nil
			})
			clk.Step(200 * time.Millisecond) // past the first fill's expiry
			read(t, e, 3, "$3\r\nnew\r\n", "HGET", k, "a")
			if n := tg.calls(t, "hget"); n != 3 {
				t.Fatalf("%d upstream HGET; want 3: the refreshed entry outlives the first", n)
			}
		})
	}
}

// TestTypedReadsFromReplicas: a replica-read key's hash, set and sorted
// set reads go to the replicas within the lag bound, none to the master,
// with Redis' reply in each protocol.
func TestTypedReadsFromReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	r := redistest.Replicated(t, 2)
	ctx := context.Background()
	mc := redis.NewClient(&redis.Options{Addr: r.Master.Addr})
	defer mc.Close()
	e := engine.New(mc, engine.Options{})
	defer e.Close()
	if err := mc.HSet(ctx, "rh", "a", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := mc.ZAdd(ctx, "rz", redis.Z{Score: 1.5, Member: "m"}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := mc.Do(ctx, "WAIT", 2, 5000).Int(); err != nil || n != 2 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	e.SetTable(replicaTable(0, r.ReplicaAddrs(), "rh", "rz"))
	usable(t, e, 2)
	all := append([]string{r.Master.Addr}, r.ReplicaAddrs()...)
	resetStats(t, all...)
	for range 50 {
		read(t, e, 2, "*2\r\n$1\r\na\r\n$1\r\n1\r\n", "HGETALL", "rh")
		read(t, e, 3, "%1\r\n$1\r\na\r\n$1\r\n1\r\n", "HGETALL", "rh")
		read(t, e, 2, "$3\r\n1.5\r\n", "ZSCORE", "rz", "m")
		read(t, e, 3, ",1.5\r\n", "ZSCORE", "rz", "m")
	}
	count := func(addr, cmd string) int64 {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		return parseCalls(c.Info(ctx, "commandstats").Val(), cmd)
	}
	if m := count(r.Master.Addr, "hgetall") + count(r.Master.Addr, "zscore"); m != 0 {
		t.Fatalf("%d typed reads on the master, want 0", m)
	}
	var reps int64
	for _, a := range r.ReplicaAddrs() {
		reps += count(a, "hgetall") + count(a, "zscore")
	}
	if reps != 200 {
		t.Fatalf("%d typed reads on the replicas, want 200", reps)
	}
}
