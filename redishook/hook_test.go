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

	"github.com/heatsink-dev/heatsink/engine"
	"github.com/heatsink-dev/heatsink/internal/redistest"
	"github.com/heatsink-dev/heatsink/redishook"
	"github.com/heatsink-dev/heatsink/routing"
)

type target struct {
	name string
	// app is the application's client, with the hook; direct has none.
	app, direct redis.UniversalClient
	nodes       []*redis.Client
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
			e := engine.New(tg.app, engine.Options{})
			defer e.Close()
			tg.app.AddHook(redishook.New(e))
			const counter, page, profile, plain = "{user:1}:likes", "product:1", "profile:1", "plain:1"
			split := &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}
			tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000, Entries: []routing.Entry{
				{Key: page, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60_000}},
				{Key: profile, Replicate: &routing.Replicate{Replicas: 3, TTLMillis: 30_000}},
				{Key: counter, Split: split},
			}}
			if err := tbl.Validate(); err != nil {
				t.Fatal(err)
			}
			e.SetTable(tbl)

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
