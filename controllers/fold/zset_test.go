package fold

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestLeaderboardAndSetSplitExactAcrossEpochs is
// TestHashCounterSplitExactAcrossEpochs for a leaderboard (ZINCRBY of 64
// players by -1..3, ZREVRANGE 0 4 WITHSCORES reads) and a set (SADD of 200
// names, SISMEMBER reads) split by member: 3 application processes, each a
// go-redis client in its default configuration with an engine and the
// hook, against real Redis (standalone and a 3-master cluster), while
// both keys are split in 4 shards, resized to 6, unsplit, each table
// reaching the processes one after the other, and each retired generation
// folded and retired as the manager does. Every command is also applied
// to unsplit references. After each phase a fresh process's ZRANGE 0 -1
// WITHSCORES, top 10, ZSCORE, ZCARD, ZINCRBY replies, SMEMBERS, SCARD and
// SADD replies equal the references'; no command is refused; at the end
// the base keys alone hold the references' contents and every shard is
// empty.
func TestLeaderboardAndSetSplitExactAcrossEpochs(t *testing.T) {
	const (
		processes = 3
		workers   = 4
		each      = 150
		players   = 64
		names     = 200
	)
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			lb, lbRef := "lb:{"+tg.name+"}:split", "lb:{"+tg.name+"}:ref"
			set, setRef := "flags:{"+tg.name+"}:split", "flags:{"+tg.name+"}:ref"
			g4 := routing.Generation{FromEpoch: 0, Shards: 4}
			g6 := routing.Generation{FromEpoch: 1, Shards: 6}
			g0 := routing.Generation{FromEpoch: 2, Shards: 0}
			for _, k := range []string{lb, lbRef, set, setRef} {
				for _, x := range append(append([]string{k}, routing.ShardKeys(k, g4)...), routing.ShardKeys(k, g6)...) {
					tg.admin.Del(ctx, x)
				}
			}
			// Scores and names set before the split.
			for _, k := range []string{lb, lbRef} {
				tg.admin.ZAdd(ctx, k, redis.Z{Score: 100, Member: "champion"}, redis.Z{Score: 5, Member: "p:1"})
			}
			for _, k := range []string{set, setRef} {
				tg.admin.SAdd(ctx, k, "n:0", "old")
			}
			splits := map[string]*routing.Split{lb: {Members: true, Kind: routing.KindZSet}, set: {Members: true, Kind: routing.KindSet}}
			var apps []redis.UniversalClient
			var engines []*engine.Engine
			newApp := func() (redis.UniversalClient, *engine.Engine) {
				c := tg.newClient()
				e := engine.New(c, engine.Options{})
				c.AddHook(redishook.New(e))
				t.Cleanup(func() { _ = e.Close(); _ = c.Close() })
				return c, e
			}
			for range processes {
				c, e := newApp()
				apps = append(apps, c)
				engines = append(engines, e)
			}
			version := int64(0)
			var current *routing.Table
			tableOf := func(gens ...routing.Generation) *routing.Table {
				version++
				tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, Policy: "t/p", Version: version, EpochMillis: 60_000}
				if len(gens) > 0 {
					for _, k := range []string{set, lb} { // sorted by key
						s := *splits[k]
						s.Generations = gens
						tbl.Entries = append(tbl.Entries, routing.Entry{Key: k, Source: routing.SourceDetected, Split: &s})
					}
				}
				if err := tbl.Validate(); err != nil {
					t.Fatal(err)
				}
				return tbl
			}
			publish := func(tbl *routing.Table) {
				for _, e := range engines {
					e.SetTable(tbl)
				}
				current = tbl
			}
			folder := New(tg.admin, Options{})
			fold := func(g routing.Generation) {
				for _, k := range []string{lb, set} {
					res, err := folder.Split(ctx, k, splits[k], g)
					if err != nil {
						t.Fatalf("fold %s %+v: %v", k, g, err)
					}
					if !res.Done {
						if res, err = folder.Split(ctx, k, splits[k], g); err != nil || !res.Done {
							t.Fatalf("fold %s %+v again: %+v, %v", k, g, res, err)
						}
					}
				}
			}
			retire := func(g routing.Generation) {
				for _, k := range []string{lb, set} {
					if err := folder.Retire(ctx, k, g, RetiredTTL); err != nil {
						t.Fatal(err)
					}
				}
			}
			phase := func(name string, tbl *routing.Table, after func()) {
				var wg sync.WaitGroup
				errs := make(chan error, processes*workers)
				started := make(chan struct{}, processes*workers)
				for w := range processes * workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						app := apps[w%processes]
						rng := rand.New(rand.NewPCG(uint64(w), uint64(version)))
						fail := func(what string, err error) { errs <- fmt.Errorf("%s: %s: %w", name, what, err) }
						for i := range each {
							if i == each/4 {
								started <- struct{}{}
							}
							p := fmt.Sprintf("p:%d", rng.IntN(players))
							n := float64(rng.IntN(5) - 1)
							if err := app.ZIncrBy(ctx, lb, n, p).Err(); err != nil {
								fail("ZINCRBY", err)
								return
							}
							tg.admin.ZIncrBy(ctx, lbRef, n, p)
							m := fmt.Sprintf("n:%d", rng.IntN(names))
							if err := app.SAdd(ctx, set, m).Err(); err != nil {
								fail("SADD", err)
								return
							}
							tg.admin.SAdd(ctx, setRef, m)
							if i%10 == 0 {
								if err := app.ZRevRangeWithScores(ctx, lb, 0, 4).Err(); err != nil {
									fail("ZREVRANGE", err)
									return
								}
								if err := app.SIsMember(ctx, set, m).Err(); err != nil {
									fail("SISMEMBER", err)
									return
								}
							}
						}
					}()
				}
				for range processes * workers {
					<-started
				}
				if tbl != nil {
					publish(tbl)
				}
				if after != nil {
					after()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				c, e := newApp()
				if current != nil {
					e.SetTable(current)
				}
				check := func(what string, got, want any, err error) {
					t.Helper()
					if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s: %s = %v, %v; want %v", name, what, got, err, want)
					}
				}
				want := tg.admin.ZRangeWithScores(ctx, lbRef, 0, -1).Val()
				got, err := c.ZRangeWithScores(ctx, lb, 0, -1).Result()
				check("ZRANGE 0 -1 WITHSCORES", got, want, err)
				top, err := c.ZRevRangeWithScores(ctx, lb, 0, 9).Result()
				check("ZREVRANGE 0 9 WITHSCORES", top, tg.admin.ZRevRangeWithScores(ctx, lbRef, 0, 9).Val(), err)
				n, err := c.ZCard(ctx, lb).Result()
				check("ZCARD", n, len(want), err)
				for _, z := range want {
					s, err := c.ZScore(ctx, lb, z.Member.(string)).Result()
					check("ZSCORE "+z.Member.(string), s, z.Score, err)
				}
				for i := range 8 {
					p := fmt.Sprintf("p:%d", i)
					g, err := c.ZIncrBy(ctx, lb, 3, p).Result()
					check("ZINCRBY "+p, g, tg.admin.ZIncrBy(ctx, lbRef, 3, p).Val(), err)
				}
				members, err := c.SMembers(ctx, set).Result()
				wantM := tg.admin.SMembers(ctx, setRef).Val()
				slices.Sort(members)
				slices.Sort(wantM)
				check("SMEMBERS", members, wantM, err)
				sc, err := c.SCard(ctx, set).Result()
				check("SCARD", sc, len(wantM), err)
				for _, m := range []string{"n:1", "new:" + name, "old"} {
					g, err := c.SAdd(ctx, set, m).Result()
					check("SADD "+m, g, tg.admin.SAdd(ctx, setRef, m).Val(), err)
				}
			}
			phase("unsplit", nil, nil)
			phase("split in 4", tableOf(g4), nil)
			phase("resized to 6", tableOf(g4, g6), nil)
			phase("4 folded", nil, func() {
				fold(g4)
				publish(tableOf(g6))
				retire(g4)
			})
			phase("unsplit again", tableOf(g6, g0), nil)
			phase("6 folded", nil, func() {
				fold(g6)
				publish(tableOf())
			})
			zw := tg.admin.ZRangeWithScores(ctx, lbRef, 0, -1).Val()
			if zg := tg.admin.ZRangeWithScores(ctx, lb, 0, -1).Val(); !slices.Equal(zg, zw) {
				t.Errorf("leaderboard's base key alone = %v, want %v", zg, zw)
			}
			sw, sg := tg.admin.SMembers(ctx, setRef).Val(), tg.admin.SMembers(ctx, set).Val()
			if !maps.Equal(setOf(sg), setOf(sw)) {
				t.Errorf("set's base key alone = %v, want %v", sg, sw)
			}
			for _, g := range []routing.Generation{g4, g6} {
				for _, k := range []string{lb, set} {
					for _, s := range routing.ShardKeys(k, g) {
						if n := tg.admin.Exists(ctx, s).Val(); n != 0 {
							t.Errorf("shard %s still exists", s)
						}
					}
				}
			}
		})
	}
}

func setOf(ss []string) map[string]bool {
	out := make(map[string]bool, len(ss))
	for _, s := range ss {
		out[s] = true
	}
	return out
}
