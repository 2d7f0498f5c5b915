package proxy_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestHashSplitByFieldThroughProxy: a hash of counters split by field in
// 4 shards, used through the sidecar by go-redis clients in their default
// configuration (RESP3, so HGETALL is a map) and with Protocol 2 (an
// array), standalone and cluster: HINCRBY replies, HGET, HMGET, HEXISTS,
// HSTRLEN, HGETALL, HKEYS, HVALS and HLEN equal an unsplit reference
// hash's; the increments land on the shards, not the base key; HDEL
// replies as on the reference and the field is gone from every place;
// HSET is refused with nothing written; EXPIRE, TTL, TYPE, EXISTS,
// PERSIST and DEL answer as on the reference, and DEL leaves no place.
func TestHashSplitByFieldThroughProxy(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	cl := redistest.Cluster(t)
	for _, up := range []struct {
		name    string
		cluster bool
		addrs   []string
	}{{"standalone", false, []string{srv.Addr}}, {"cluster", true, cl.Addrs()}} {
		t.Run(up.name, func(t *testing.T) {
			ctx := context.Background()
			var direct redis.UniversalClient
			if up.cluster {
				direct = redis.NewClusterClient(&redis.ClusterOptions{Addrs: up.addrs})
			} else {
				direct = redis.NewClient(&redis.Options{Addr: up.addrs[0]})
			}
			defer direct.Close()
			const k, ref = "stats:split", "stats:ref"
			split := &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}, Members: true}
			for _, x := range append([]string{k, ref}, routing.ShardKeys(k, split.Generations[0])...) {
				must(t, direct.Del(ctx, x).Err())
			}
			must(t, direct.HSet(ctx, k, "name", "x").Err())
			must(t, direct.HSet(ctx, ref, "name", "x").Err())
			eng := engine.New(direct, engine.Options{})
			defer eng.Close()
			eng.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
				{Key: k, Source: routing.SourceDetected, Split: split}}})
			addr, _ := start(t, proxy.Config{Upstreams: up.addrs[:1], Cluster: up.cluster, Engine: eng})
			for _, protocol := range []int{0, 2} { // 0: go-redis' default, RESP3
				c := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol})
				defer c.Close()
				for i := range 120 {
					f := fmt.Sprintf("f%d", i%30)
					got, err := c.HIncrBy(ctx, k, f, int64(i)).Result()
					want := direct.HIncrBy(ctx, ref, f, int64(i)).Val()
					if err != nil || got != want {
						t.Fatalf("protocol %d: HINCRBY %s = %d, %v; want %d", protocol, f, got, err, want)
					}
				}
				want := direct.HGetAll(ctx, ref).Val()
				got, err := c.HGetAll(ctx, k).Result()
				if err != nil || !maps.Equal(got, want) {
					t.Fatalf("protocol %d: HGETALL = %v, %v; want %v", protocol, got, err, want)
				}
				keys, _ := c.HKeys(ctx, k).Result()
				vals, _ := c.HVals(ctx, k).Result()
				if n, _ := c.HLen(ctx, k).Result(); n != int64(len(want)) || len(keys) != len(want) || len(vals) != len(want) {
					t.Errorf("protocol %d: HLEN %d, HKEYS %d, HVALS %d; want %d", protocol, n, len(keys), len(vals), len(want))
				}
				for i, f := range keys {
					if want[f] != vals[i] {
						t.Errorf("protocol %d: HKEYS/HVALS pair %s=%s, want %s", protocol, f, vals[i], want[f])
					}
				}
				if v, err := c.HGet(ctx, k, "f7").Result(); err != nil || v != want["f7"] {
					t.Errorf("protocol %d: HGET = %q, %v; want %q", protocol, v, err, want["f7"])
				}
				if v, err := c.HMGet(ctx, k, "f1", "nope", "name").Result(); err != nil || !slices.Equal(v, []any{want["f1"], nil, "x"}) {
					t.Errorf("protocol %d: HMGET = %v, %v", protocol, v, err)
				}
				if ok, err := c.HExists(ctx, k, "f2").Result(); err != nil || !ok {
					t.Errorf("protocol %d: HEXISTS = %v, %v", protocol, ok, err)
				}
				if n, err := c.HStrLen(ctx, k, "f3").Result(); err != nil || n != int64(len(want["f3"])) {
					t.Errorf("protocol %d: HSTRLEN = %d, %v", protocol, n, err)
				}
				if err := c.HSet(ctx, k, "f1", 0).Err(); err == nil {
					t.Errorf("protocol %d: HSET on a hash split by field was not refused", protocol)
				}
				n, err := c.HDel(ctx, k, "f1", "nope", "f2").Result()
				if want := direct.HDel(ctx, ref, "f1", "nope", "f2").Val(); err != nil || n != want {
					t.Errorf("protocol %d: HDEL = %d, %v; want %d", protocol, n, err, want)
				}
				want = direct.HGetAll(ctx, ref).Val()
				if got, err := c.HGetAll(ctx, k).Result(); err != nil || !maps.Equal(got, want) {
					t.Errorf("protocol %d: HGETALL after HDEL = %v, %v; want %v", protocol, got, err, want)
				}
			}
			if base := direct.HGetAll(ctx, k).Val(); !maps.Equal(base, map[string]string{"name": "x"}) {
				t.Errorf("base key = %v: the increments reached it, or HSET did", base)
			}
			// The whole-key commands are Redis' (docs/engine.md, Expiry and
			// deletion of a member split), and DEL leaves no place.
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			for _, step := range []struct {
				name string
				run  func(c redis.UniversalClient, key string) redis.Cmder
			}{
				{"EXPIRE NX", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireNX(ctx, key, time.Hour) }},
				{"EXPIRE XX GT", func(c redis.UniversalClient, key string) redis.Cmder { return c.Do(ctx, "expire", key, 1800, "gt") }},
				{"TYPE", func(c redis.UniversalClient, key string) redis.Cmder { return c.Type(ctx, key) }},
				{"EXISTS", func(c redis.UniversalClient, key string) redis.Cmder { return c.Exists(ctx, key) }},
				{"PERSIST", func(c redis.UniversalClient, key string) redis.Cmder { return c.Persist(ctx, key) }},
				{"DEL", func(c redis.UniversalClient, key string) redis.Cmder { return c.Del(ctx, key) }},
				{"EXISTS after DEL", func(c redis.UniversalClient, key string) redis.Cmder { return c.Exists(ctx, key) }},
				{"DEL again", func(c redis.UniversalClient, key string) redis.Cmder { return c.Del(ctx, key) }},
			} {
				if step.name == "PERSIST" {
					got, want := c.TTL(ctx, k).Val(), direct.TTL(ctx, ref).Val()
					if want <= 0 || (got-want).Abs() > time.Second {
						t.Errorf("TTL through the sidecar: %v, Redis says %v", got, want)
					}
				}
				if got, want := fmt.Sprint(step.run(c, k)), fmt.Sprint(step.run(direct, ref)); strings.ReplaceAll(got, k, ref) != want {
					t.Errorf("%s through the sidecar: %s, Redis says %s", step.name, got, want)
				}
			}
			for _, x := range append([]string{k}, routing.ShardKeys(k, split.Generations[0])...) {
				if direct.Exists(ctx, x).Val() != 0 {
					t.Errorf("%s exists after DEL", x)
				}
			}
		})
	}
}
