package redishook_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

type target struct {
	name string
	// app is the application's client, with the hook; direct has none.
	app, direct redis.UniversalClient
	nodes       []*redis.Client
}

// hook puts an engine with a table of entries (validated) on tg's
// application client, as an application would; closed with the test.
func (tg target) hook(t *testing.T, entries ...routing.Entry) *engine.Engine {
	t.Helper()
	e := engine.New(tg.app, engine.Options{})
	t.Cleanup(func() { e.Close() })
	tg.app.AddHook(redishook.New(e))
	tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000, Entries: entries}
	if err := tbl.Validate(); err != nil {
		t.Fatal(err)
	}
	e.SetTable(tbl)
	return e
}

func targets(t *testing.T) []target {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	s := redistest.Standalone(t)
	c := redistest.Cluster(t)
	var out []target
	mk := func(name string, newClient func() redis.UniversalClient, addrs []string) {
		tg := target{name: name, app: newClient(), direct: newClient()}
		for _, a := range addrs {
			tg.nodes = append(tg.nodes, redis.NewClient(&redis.Options{Addr: a}))
		}
		t.Cleanup(func() {
			_ = tg.app.Close()
			_ = tg.direct.Close()
			for _, n := range tg.nodes {
				_ = n.Close()
			}
		})
		out = append(out, tg)
	}
	mk("standalone", func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64}) }, []string{s.Addr})
	mk("cluster", func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 64})
	}, c.Addrs())
	return out
}

func (tg target) getCalls(t *testing.T) int64 {
	var total int64
	for _, n := range tg.nodes {
		info := n.Info(context.Background(), "commandstats").Val()
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_get:calls="); ok {
				v, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
				total += v
			}
		}
	}
	return total
}

func (tg target) resetStats(t *testing.T) {
	for _, n := range tg.nodes {
		if err := n.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHookAppliesRouting(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			const counter, page, profile, plain = "{user:1}:likes", "product:1", "profile:1", "plain:1"
			split := &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}
			tg.hook(t,
				routing.Entry{Key: page, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60_000}},
				routing.Entry{Key: profile, Replicate: &routing.Replicate{Replicas: 3, TTLMillis: 30_000}},
				routing.Entry{Key: counter, Split: split})

			// Split: 50 writers through the application's client.
			var acked atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < 50; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < 40; i++ {
						var err error
						switch i % 4 {
						case 0:
							err = tg.app.Incr(ctx, counter).Err()
							acked.Add(1)
						case 1:
							err = tg.app.IncrBy(ctx, counter, 3).Err()
							acked.Add(3)
						case 2:
							err = tg.app.Decr(ctx, counter).Err()
							acked.Add(-1)
						case 3:
							err = tg.app.DecrBy(ctx, counter, 2).Err()
							acked.Add(-2)
						}
						if err != nil {
							t.Errorf("write: %v", err)
							return
						}
					}
				}(w)
			}
			wg.Wait()
			got, err := tg.app.Get(ctx, counter).Int64()
			if err != nil || got != acked.Load() {
				t.Fatalf("GET through the hook = %d, %v; want %d", got, err, acked.Load())
			}
			// The increments are in the shards, not in the base key.
			if v, err := tg.direct.Get(ctx, counter).Result(); !errors.Is(err, redis.Nil) {
				t.Fatalf("base key holds %q, %v; want nothing", v, err)
			}
			var inShards int64
			for _, k := range routing.ShardKeys(counter, split.Generations[0]) {
				n, _ := tg.direct.Get(ctx, k).Int64()
				inShards += n
			}
			if inShards != acked.Load() {
				t.Fatalf("shards hold %d, want %d", inShards, acked.Load())
			}

			// Replicate: SET writes the replicas with their TTL.
			if err := tg.app.Set(ctx, profile, "alice", 0).Err(); err != nil {
				t.Fatal(err)
			}
			for _, r := range routing.ReplicaKeys(profile, 3) {
				if v := tg.direct.Get(ctx, r).Val(); v != "alice" {
					t.Fatalf("replica %s = %q", r, v)
				}
				if ttl := tg.direct.PTTL(ctx, r).Val(); ttl <= 0 || ttl > 30*time.Second {
					t.Fatalf("replica TTL %v", ttl)
				}
			}
			if ok, err := tg.app.SetNX(ctx, profile, "bob", 0).Result(); err != nil || ok {
				t.Fatalf("SETNX on an existing key = %v, %v", ok, err)
			}
			// SETEX is rewritten to SET ... EX: replicas follow the shorter TTL.
			if err := tg.app.SetEx(ctx, profile, "alice", 20*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			for _, r := range routing.ReplicaKeys(profile, 3) {
				if ttl := tg.direct.PTTL(ctx, r).Val(); ttl <= 0 || ttl > 20*time.Second {
					t.Fatalf("replica TTL after SETEX %v", ttl)
				}
			}
			for i := 0; i < 8; i++ {
				if v, err := tg.app.Get(ctx, profile).Result(); err != nil || v != "alice" {
					t.Fatalf("GET replicated = %q, %v", v, err)
				}
			}

			// Coalesce + local cache: a stampede costs one upstream GET.
			if err := tg.direct.Set(ctx, page, "html", 0).Err(); err != nil {
				t.Fatal(err)
			}
			tg.resetStats(t)
			var bad atomic.Int64
			start := make(chan struct{})
			for i := 0; i < 2000; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if v, err := tg.app.Get(ctx, page).Result(); err != nil || v != "html" {
						bad.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if bad.Load() != 0 {
				t.Fatalf("%d GETs failed", bad.Load())
			}
			if n := tg.getCalls(t); n != 1 {
				t.Fatalf("upstream GETs = %d, want 1", n)
			}
			// A raw write command on the cached key invalidates it.
			if err := tg.app.Append(ctx, page, "!").Err(); err != nil {
				t.Fatal(err)
			}
			if v := tg.app.Get(ctx, page).Val(); v != "html!" {
				t.Fatalf("after APPEND GET = %q", v)
			}

			// Pipelines mix mitigated and plain keys; replies land in place.
			cmds, err := tg.app.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, plain, "p", 0)
				p.Incr(ctx, counter)
				p.Get(ctx, plain)
				p.Get(ctx, profile)
				p.Get(ctx, "missing:key")
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			if v := cmds[2].(*redis.StringCmd).Val(); v != "p" {
				t.Fatalf("pipelined GET plain = %q", v)
			}
			if v := cmds[3].(*redis.StringCmd).Val(); v != "alice" {
				t.Fatalf("pipelined GET replicated = %q", v)
			}
			if err := cmds[4].Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("pipelined GET missing: %v", err)
			}
			if got := tg.app.Get(ctx, counter).Val(); got != strconv.FormatInt(acked.Load()+1, 10) {
				t.Fatalf("counter after pipelined INCR = %s", got)
			}

			// DEL of a split counter resets it without deleting shards.
			if n, err := tg.app.Del(ctx, counter).Result(); err != nil || n != 1 {
				t.Fatalf("DEL = %d, %v", n, err)
			}
			if v := tg.app.Get(ctx, counter).Val(); v != "0" {
				t.Fatalf("GET after DEL = %q", v)
			}
			if tg.name == "standalone" {
				// Multi-key DEL mixes engine and raw deletes.
				if n, err := tg.app.Del(ctx, profile, plain, "missing:key").Result(); err != nil || n != 2 {
					t.Fatalf("multi-key DEL = %d, %v", n, err)
				}
				if n := tg.direct.Exists(ctx, routing.ReplicaKeys(profile, 3)...).Val(); n != 0 {
					t.Fatalf("%d replicas survived DEL", n)
				}
			}
		})
	}
}

// TestHookDecidesLikeTheProxy covers the commands the hook used to send raw
// on split or replicated keys: it must serve them through the engine, as
// the proxy does, or refuse them, and never lose a counter's value.
func TestHookDecidesLikeTheProxy(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			const counter, profile, plain = "{cls:1}:likes", "cls:profile", "cls:plain"
			split := &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}
			tg.hook(t,
				routing.Entry{Key: profile, Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 30_000}},
				routing.Entry{Key: counter, Split: split})
			shardsHold := func() int64 {
				var sum int64
				for _, k := range append(routing.ShardKeys(counter, split.Generations[0]), counter) {
					n, _ := tg.direct.Get(ctx, k).Int64()
					sum += n
				}
				return sum
			}
			for i := 0; i < 20; i++ {
				if err := tg.app.IncrBy(ctx, counter, 2).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := tg.direct.Set(ctx, plain, "p", 0).Err(); err != nil {
				t.Fatal(err)
			}

			// MGET sums the split counter, in place among plain keys.
			got, err := tg.app.MGet(ctx, plain, counter, "cls:missing").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 3 || got[0] != "p" || got[1] != "40" || got[2] != nil {
				t.Fatalf("MGET = %#v, want [p 40 nil]", got)
			}
			if n, err := tg.app.Exists(ctx, counter, plain, "cls:missing").Result(); err != nil || n != 2 {
				t.Fatalf("EXISTS = %d, %v; want 2", n, err)
			}

			// APPEND, GETSET and EXPIRE of a replicated key are refused:
			// nothing is written.
			for _, c := range []redis.Cmder{
				tg.app.Append(ctx, counter, "x"),
				tg.app.GetSet(ctx, counter, "1"),
				tg.app.Expire(ctx, profile, time.Second),
				tg.app.Append(ctx, profile, "x"),
				tg.app.MSetNX(ctx, plain, "q", profile, "v"),
			} {
				if err := c.Err(); err == nil || !strings.Contains(err.Error(), "heatsink") {
					t.Errorf("%v: err = %v, want a heatsink refusal", c.Args(), err)
				}
			}
			if v := tg.app.Get(ctx, counter).Val(); v != "40" {
				t.Fatalf("counter after refusals = %q, want 40", v)
			}
			if ttl := tg.direct.TTL(ctx, profile).Val(); ttl > 0 {
				t.Fatalf("a refused EXPIRE set a TTL: %v", ttl)
			}

			// UNLINK deletes the whole counter: no shard brings it back.
			if n, err := tg.app.Unlink(ctx, counter, plain).Result(); err != nil || n != 2 {
				t.Fatalf("UNLINK = %d, %v; want 2", n, err)
			}
			if s := shardsHold(); s != 0 {
				t.Fatalf("after UNLINK the base key and shards still hold %d", s)
			}
			if v := tg.app.Get(ctx, counter).Val(); v == "40" {
				t.Fatal("the counter came back after UNLINK")
			}

			// MSET goes through the engine for mitigated keys.
			if err := tg.app.MSet(ctx, counter, "10", profile, "alice", plain, "q").Err(); err != nil {
				t.Fatal(err)
			}
			if v := tg.app.Get(ctx, counter).Val(); v != "10" {
				t.Fatalf("counter after MSET = %q", v)
			}
			for _, r := range routing.ReplicaKeys(profile, 2) {
				if v := tg.direct.Get(ctx, r).Val(); v != "alice" {
					t.Fatalf("replica %s after MSET = %q", r, v)
				}
			}
			if err := tg.app.MSet(ctx, counter, "ten").Err(); err == nil || !strings.Contains(err.Error(), "integer") {
				t.Fatalf("MSET of a non-integer counter: %v", err)
			}

			// A transaction with an engine-only command is refused whole.
			_, err = tg.app.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, counter, "99", 0) // same slot as the counter
				p.Incr(ctx, counter)
				return nil
			})
			if err == nil || !strings.Contains(err.Error(), "inside MULTI") {
				t.Fatalf("MULTI with INCR on a split counter: %v", err)
			}
			if v := tg.app.Get(ctx, counter).Val(); v != "10" {
				t.Fatalf("counter after the refused transaction = %q", v)
			}
		})
	}
}

// TestHookPipelineKeepsOrder: every command of a pipeline sees the effects
// of the ones queued before it, whether Redis or the engine serves it.
func TestHookPipelineKeepsOrder(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			const counter, profile, plain = "{ord:1}:n", "ord:profile", "ord:plain"
			tg.hook(t,
				routing.Entry{Key: profile, Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 30_000}},
				routing.Entry{Key: counter, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}})
			cmds, err := tg.app.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, plain, "1", 0)                 // raw
				p.MGet(ctx, plain, counter)               // engine: sees plain=1
				p.Set(ctx, profile, "a", 100*time.Second) // engine
				p.PTTL(ctx, profile)                      // raw: sees the SET's TTL
				p.Set(ctx, plain, "2", 0)                 // raw
				p.IncrBy(ctx, counter, 5)                 // engine
				p.Get(ctx, plain)                         // raw: 2
				p.Get(ctx, counter)                       // engine: 5
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if v := cmds[1].(*redis.SliceCmd).Val(); len(v) != 2 || v[0] != "1" || v[1] != nil {
				t.Errorf("MGET = %#v, want [1 nil]", v)
			}
			if v := cmds[3].(*redis.DurationCmd).Val(); v <= 0 {
				t.Errorf("PTTL after the pipelined SET = %v, want > 0", v)
			}
			if v := cmds[5].(*redis.IntCmd).Val(); v != 5 {
				t.Errorf("INCRBY = %d", v)
			}
			if v := cmds[6].(*redis.StringCmd).Val(); v != "2" {
				t.Errorf("GET plain = %q", v)
			}
			if v := cmds[7].(*redis.StringCmd).Val(); v != "5" {
				t.Errorf("GET counter = %q", v)
			}
		})
	}
}
