package proxy_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestZSetAndSetSplitByMemberThroughProxy: a leaderboard and a flag set
// split by member in 4 shards, used through the sidecar by go-redis
// clients in their default configuration (RESP3: scores are doubles,
// WITHSCORES replies [member, score] pairs, SMEMBERS a set) and with
// Protocol 2, standalone and cluster: every served command's reply, read
// by Do as the client decodes it, equals Redis' own reply for an unsplit
// reference key sent the same commands; the typed go-redis calls of a
// leaderboard decode; SREM and ZREM remove as Redis does; ZADD without
// INCR and SPOP are refused.
func TestZSetAndSetSplitByMemberThroughProxy(t *testing.T) {
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
			const lb, lbRef, fl, flRef = "board:split", "board:ref", "flags:split", "flags:ref"
			gens := []routing.Generation{{FromEpoch: 0, Shards: 4}}
			for _, k := range []string{lb, lbRef, fl, flRef} {
				for _, x := range append([]string{k}, routing.ShardKeys(k, gens[0])...) {
					must(t, direct.Del(ctx, x).Err())
				}
			}
			for _, k := range []string{lb, lbRef} {
				must(t, direct.ZAdd(ctx, k, redis.Z{Score: 50, Member: "old"}).Err())
			}
			eng := engine.New(direct, engine.Options{})
			defer eng.Close()
			eng.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
				{Key: lb, Source: routing.SourceDetected, Split: &routing.Split{Generations: gens, Members: true, Kind: routing.KindZSet}},
				{Key: fl, Source: routing.SourceDetected, Split: &routing.Split{Generations: gens, Members: true, Kind: routing.KindSet}}}})
			addr, _ := start(t, proxy.Config{Upstreams: up.addrs[:1], Cluster: up.cluster, Engine: eng})
			for _, protocol := range []int{0, 2} { // 0: go-redis' default, RESP3
				c := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol})
				defer c.Close()
				same := func(args ...any) {
					t.Helper()
					got, gerr := c.Do(ctx, args...).Result()
					ref := append([]any{args[0]}, args[1:]...)
					switch ref[1] {
					case lb:
						ref[1] = lbRef
					case fl:
						ref[1] = flRef
					}
					want, werr := c.Do(ctx, ref...).Result()
					if !reflect.DeepEqual(got, want) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
						t.Errorf("protocol %d: %v = %#v, %v; want %#v, %v", protocol, args, got, gerr, want, werr)
					}
				}
				for i := range 60 {
					p := fmt.Sprintf("p%d", i%12)
					same("ZINCRBY", lb, i%5, p)
					same("SADD", fl, fmt.Sprintf("f%d", i%17), fmt.Sprintf("f%d", i%5))
				}
				same("ZADD", lb, "INCR", "2", "p1")
				for _, q := range [][]any{{"ZREVRANGE", lb, 0, 4, "WITHSCORES"}, {"ZRANGE", lb, 0, 4, "WITHSCORES"}, {"ZRANGE", lb, 0, -1, "REV"},
					{"ZREVRANGE", lb, 2, 6}, {"ZRANGE", lb, -3, -1, "WITHSCORES"}, {"ZSCORE", lb, "p3"}, {"ZSCORE", lb, "nobody"},
					{"ZMSCORE", lb, "p1", "nobody", "old"}, {"ZCARD", lb}, {"ZRANK", lb, "p4"}, {"ZREVRANK", lb, "old"},
					{"SISMEMBER", fl, "f3"}, {"SISMEMBER", fl, "nope"}, {"SMISMEMBER", fl, "f1", "nope"}, {"SCARD", fl}} {
					same(q...)
				}
				members, err := c.SMembers(ctx, fl).Result()
				if want := direct.SMembers(ctx, flRef).Val(); err != nil || len(members) != len(want) {
					t.Errorf("protocol %d: SMEMBERS = %v, %v; want %v", protocol, members, err, want)
				}
				top, err := c.ZRevRangeWithScores(ctx, lb, 0, 2).Result()
				if want := direct.ZRevRangeWithScores(ctx, lbRef, 0, 2).Val(); err != nil || !reflect.DeepEqual(top, want) {
					t.Errorf("protocol %d: ZRevRangeWithScores = %v, %v; want %v", protocol, top, err, want)
				}
				if s, err := c.ZIncrBy(ctx, lb, 1, "p2").Result(); err != nil || s != direct.ZIncrBy(ctx, lbRef, 1, "p2").Val() {
					t.Errorf("protocol %d: ZIncrBy = %v, %v", protocol, s, err)
				}
				same("SREM", fl, fmt.Sprintf("f%d", protocol+1), "nope", fmt.Sprintf("f%d", protocol+1))
				same("SISMEMBER", fl, fmt.Sprintf("f%d", protocol+1))
				same("SCARD", fl)
				same("ZREM", lb, fmt.Sprintf("p%d", protocol+1), "nobody", fmt.Sprintf("p%d", protocol+1))
				same("ZSCORE", lb, fmt.Sprintf("p%d", protocol+1))
				same("ZREVRANGE", lb, 0, 4, "WITHSCORES")
				same("ZCARD", lb)
				for _, refused := range [][]any{{"ZADD", lb, "1", "p1"}, {"SPOP", fl}} {
					if err := c.Do(ctx, refused...).Err(); err == nil {
						t.Errorf("protocol %d: %v on a key split by member was not refused", protocol, refused)
					}
				}
			}
			if n := direct.ZCard(ctx, lb).Val(); n != 1 {
				t.Errorf("base key holds %d members: the increments reached it", n)
			}
		})
	}
}
