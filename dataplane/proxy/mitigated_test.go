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
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// mitigatedTable mitigates a split counter, a cached key and two
// replicated keys; everything else is plain.
func mitigatedTable() *routing.Table {
	return &routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
		{Key: "hot", Source: routing.SourceDetected, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60000}},
		{Key: "likes", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}},
		{Key: "page", Source: routing.SourceDetected, Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 60000}},
		{Key: "page2", Source: routing.SourceDetected, Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 60000}},
	}}
}

// checkMitigatedCommands drives every multi-key and SET-family path on
// mitigated keys through the proxy at addr and checks the outcome with
// direct, a client of the same Redis.
func checkMitigatedCommands(t *testing.T, addr string, direct redis.UniversalClient, protocol int) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol})
	defer c.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	replicasOf := func(key, want string) {
		t.Helper()
		for _, r := range routing.ReplicaKeys(key, 2) {
			if v, err := direct.Get(ctx, r).Result(); v != want {
				t.Fatalf("replica of %s = %q (%v), want %q", key, v, err, want)
			}
		}
	}
	for range 10 {
		must(c.Incr(ctx, "likes").Err())
	}
	if v, _ := direct.Get(ctx, "likes").Result(); v != "" {
		t.Fatalf("base key of the split counter = %q: the increments did not go to the shards", v)
	}
	must(c.Set(ctx, "hot", "cached", 0).Err())
	must(c.Set(ctx, "page", "html", 0).Err())
	must(c.Set(ctx, "plain", "p", 0).Err())
	must(c.HSet(ctx, "hash", "f", "v").Err())

	t.Run("MGET assembles engine and raw keys in order", func(t *testing.T) {
		got, err := c.MGet(ctx, "likes", "hot", "plain", "missing", "page", "hash").Result()
		want := []any{"10", "cached", "p", nil, "html", nil}
		if err != nil || !cmp.Equal(got, want) {
			t.Fatalf("MGET = %#v, %v; want %#v", got, err, want)
		}
		// Without a mitigated key it is forwarded as is.
		if got, err := c.MGet(ctx, "plain").Result(); err != nil || !cmp.Equal(got, []any{"p"}) {
			t.Fatalf("plain MGET = %#v, %v", got, err)
		}
	})

	t.Run("EXISTS and STRLEN of a split counter", func(t *testing.T) {
		if n, err := c.Exists(ctx, "likes", "plain", "missing", "likes").Result(); err != nil || n != 3 {
			t.Fatalf("EXISTS = %d, %v; want 3", n, err)
		}
		if n, err := c.StrLen(ctx, "likes").Result(); err != nil || n != 2 {
			t.Fatalf("STRLEN likes = %d, %v; want 2", n, err)
		}
		if v, err := c.Type(ctx, "likes").Result(); err != nil || v != "string" {
			t.Fatalf("TYPE likes = %q, %v", v, err)
		}
		if v, err := c.Do(ctx, "GETEX", "likes").Text(); err != nil || v != "10" {
			t.Fatalf("GETEX likes = %q, %v", v, err)
		}
	})

	t.Run("SETEX, PSETEX and SETNX write the replicas", func(t *testing.T) {
		must(c.Do(ctx, "SETEX", "page", 100, "v1").Err())
		replicasOf("page", "v1")
		if ttl := direct.TTL(ctx, "page").Val(); ttl <= 0 || ttl > 100*time.Second {
			t.Fatalf("TTL page after SETEX 100 = %v", ttl)
		}
		must(c.Do(ctx, "PSETEX", "page", 100000, "v2").Err())
		replicasOf("page", "v2")
		if n, err := c.Do(ctx, "SETNX", "page", "no").Int(); err != nil || n != 0 {
			t.Fatalf("SETNX on an existing key = %d, %v", n, err)
		}
		replicasOf("page", "v2")
		if n, err := c.Do(ctx, "SETNX", "page2", "yes").Int(); err != nil || n != 1 {
			t.Fatalf("SETNX on a new key = %d, %v", n, err)
		}
		replicasOf("page2", "yes")
	})

	t.Run("writes that cannot be exact are refused and the connection stays usable", func(t *testing.T) {
		conn := c.Conn()
		defer conn.Close()
		for _, tc := range []struct {
			cmd  []any
			want string
		}{
			{[]any{"APPEND", "likes", "x"}, "ERR heatsink: APPEND on a key mitigated by split is not supported"},
			{[]any{"INCRBYFLOAT", "likes", "1.5"}, "ERR heatsink: INCRBYFLOAT on a key mitigated by split is not supported"},
			{[]any{"GETRANGE", "likes", 0, 1}, "ERR heatsink: GETRANGE on a key mitigated by split is not supported"},
			{[]any{"EXPIRE", "page", 10}, "ERR heatsink: EXPIRE on a key mitigated by replicate is not supported"},
			{[]any{"APPEND", "page", "x"}, "ERR heatsink: APPEND on a key mitigated by replicate is not supported"},
			{[]any{"GETSET", "page", "x"}, "ERR heatsink: GETSET on a key mitigated by replicate is not supported"},
			{[]any{"GETDEL", "page"}, "ERR heatsink: GETDEL on a key mitigated by replicate is not supported"},
			{[]any{"SETRANGE", "page", 0, "x"}, "ERR heatsink: SETRANGE on a key mitigated by replicate is not supported"},
			{[]any{"GETEX", "page", "EX", 5}, "ERR heatsink: GETEX on a key mitigated by replicate is not supported"},
			{[]any{"RENAME", "plain", "page"}, "ERR heatsink: RENAME on a key mitigated by replicate is not supported"},
			{[]any{"SET", "page", "x", "GET"}, "ERR heatsink: SET with GET on a key mitigated by replicate is not supported"},
			{[]any{"MSETNX", "fresh", "1", "page", "x"}, "ERR heatsink: MSETNX cannot be atomic across a key mitigated by replicate; set the keys one by one"},
		} {
			err := conn.Do(ctx, tc.cmd...).Err()
			if err == nil || err.Error() != tc.want {
				t.Errorf("%v: %v, want %q", tc.cmd, err, tc.want)
			}
			if v, err := conn.Get(ctx, "plain").Result(); err != nil || v != "p" {
				t.Fatalf("after %v the connection answers GET plain = %q, %v", tc.cmd, v, err)
			}
		}
		replicasOf("page", "v2")
		if n := direct.Exists(ctx, "fresh").Val(); n != 0 {
			t.Fatal("a refused MSETNX wrote a key")
		}
		if v := direct.Get(ctx, "plain").Val(); v != "p" {
			t.Fatalf("a refused RENAME moved the source: plain = %q", v)
		}
		// Raw is exact where the base key is the truth: reads of a
		// replicated key, typed commands, any command on a cached key.
		if v, err := conn.StrLen(ctx, "page").Result(); err != nil || v != 2 {
			t.Fatalf("STRLEN page = %d, %v", v, err)
		}
		if err := conn.HSet(ctx, "page", "f", "v").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Fatalf("HSET on a replicated string: %v, want Redis' WRONGTYPE", err)
		}
		must(conn.Append(ctx, "hot", "!").Err())
		if v := conn.Get(ctx, "hot").Val(); v != "cached!" {
			t.Fatalf("GET hot after APPEND = %q", v)
		}
	})

	t.Run("MSET through the engine per key", func(t *testing.T) {
		must(c.MSet(ctx, "plain2", "a", "likes", "100", "page", "m", "hot", "h").Err())
		got, err := c.MGet(ctx, "plain2", "likes", "page", "hot").Result()
		if want := []any{"a", "100", "m", "h"}; err != nil || !cmp.Equal(got, want) {
			t.Fatalf("MGET after MSET = %#v, %v; want %#v", got, err, want)
		}
		replicasOf("page", "m")
		err = c.MSet(ctx, "plain3", "x", "likes", "not-a-number").Err()
		if err == nil || !strings.Contains(err.Error(), "needs an integer value") {
			t.Fatalf("MSET of a split counter to a string: %v", err)
		}
		if direct.Exists(ctx, "plain3").Val() != 0 {
			t.Fatal("a refused MSET wrote its other keys")
		}
	})

	t.Run("DEL and UNLINK over mitigated and plain keys", func(t *testing.T) {
		if n, err := c.Del(ctx, "likes", "plain2", "page", "missing").Result(); err != nil || n != 3 {
			t.Fatalf("DEL = %d, %v; want 3", n, err)
		}
		for _, r := range routing.ReplicaKeys("page", 2) {
			if direct.Exists(ctx, r).Val() != 0 {
				t.Fatalf("replica %s survived DEL", r)
			}
		}
		if v := c.Get(ctx, "likes").Val(); v != "0" {
			t.Fatalf("split counter after DEL = %q, want 0", v)
		}
		if n, err := c.Unlink(ctx, "page2", "plain").Result(); err != nil || n != 2 {
			t.Fatalf("UNLINK = %d, %v; want 2", n, err)
		}
		if n := direct.Exists(ctx, "page2", "plain").Val(); n != 0 {
			t.Fatalf("%d keys left after UNLINK", n)
		}
	})

	t.Run("pipeline order holds across engine, refused and raw replies", func(t *testing.T) {
		pipe := c.Pipeline()
		set := pipe.Set(ctx, "pa", "1", 0)
		mget := pipe.MGet(ctx, "likes", "pa")
		refused := pipe.Append(ctx, "likes", "x")
		incr := pipe.Incr(ctx, "likes")
		get := pipe.Get(ctx, "pa")
		pipe.Exec(ctx)
		if set.Err() != nil || !cmp.Equal(mget.Val(), []any{"0", "1"}) || refused.Err() == nil || incr.Val() != 1 || get.Val() != "1" {
			t.Fatalf("pipeline: %v %v %v %v %v", set, mget, refused, incr, get)
		}
	})
}

func TestMitigatedCommandsStandalone(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	for _, tc := range []struct {
		name     string
		shared   int
		protocol int
	}{{"shared RESP2", 0, 2}, {"shared RESP3", 0, 3}, {"dedicated RESP3", -1, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			must(t, direct.FlushAll(context.Background()).Err())
			eng := engine.New(direct, engine.Options{})
			defer eng.Close()
			eng.SetTable(mitigatedTable())
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Engine: eng, SharedConns: tc.shared})
			checkMitigatedCommands(t, addr, direct, tc.protocol)
		})
	}
}

func TestMitigatedCommandsInsideMulti(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	eng.SetTable(mitigatedTable())
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Engine: eng})
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	must(t, c.Set(ctx, "hot", "h", 0).Err())
	conn := c.Conn()
	defer conn.Close()
	got := run(t, conn, []step{{"MULTI"}, {"INCR", "likes"}, {"SET", "page", "x"}, {"GET", "hot"}, {"GET", "page"}, {"EXEC"}})
	want := []string{
		`[MULTI] -> "OK" err=<nil>`,
		`[INCR likes] -> <nil> err=ERR heatsink: INCR on a key mitigated by split is not supported inside MULTI`,
		`[SET page x] -> <nil> err=ERR heatsink: SET on a key mitigated by replicate is not supported inside MULTI`,
		`[GET hot] -> "QUEUED" err=<nil>`,
		`[GET page] -> "QUEUED" err=<nil>`,
		// Refused at queue time, as Redis refuses a command: the
		// transaction is aborted, nothing of it runs.
		`[EXEC] -> <nil> err=EXECABORT Transaction discarded because of previous errors.`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestMitigatedCommandsCluster(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer direct.Close()
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	eng.SetTable(mitigatedTable())
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true, Engine: eng})
	// The keys of the checks live on different masters: MGET, EXISTS, DEL
	// and MSET are split per key only because a mitigated key is named.
	nodes := map[string]bool{}
	for _, k := range []string{"likes", "hot", "plain", "page", "hash", "plain2"} {
		nodes[fmt.Sprint(routing.Slot(k)*3/16384)] = true
	}
	if len(nodes) < 2 {
		t.Fatal("the test keys share a master; pick others")
	}
	checkMitigatedCommands(t, addr, direct, 2)
	// Without a mitigated key, a cross-slot MGET gets Redis' own error.
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.MGet(context.Background(), "plain", "hash").Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
		t.Fatalf("cross-slot MGET of plain keys: %v, want CROSSSLOT", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
