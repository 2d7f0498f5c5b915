package fold

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

var memberSplit = &routing.Split{Members: true}

// TestMemberFoldKilledAtEachStep leaves the fold of a member split's
// shards (hashes of increments) dead before each step, then lets a fresh
// folder finish: every field's sum is conserved, a field that held 0 in a
// shard still exists, and the shards end empty.
func TestMemberFoldKilledAtEachStep(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := redistest.Standalone(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	gen := routing.Generation{FromEpoch: 7, Shards: 4}
	for _, step := range []Step{StepRead, StepCredit, StepDebit, StepClear} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			key := fmt.Sprintf("stats:%d", step)
			c.HSet(ctx, key, "views", 10, "name", "x")
			want := map[string]int64{"views": 10}
			for i := range 40 {
				f := fmt.Sprintf("f%d", i)
				s := routing.ShardKeys(key, gen)[routing.MemberShard(f, 4)]
				c.HIncrBy(ctx, s, f, int64(i))
				want[f] += int64(i)
				c.HIncrBy(ctx, routing.ShardKeys(key, gen)[i%4], "views", 1)
				want["views"]++
			}
			dying := New(c, Options{Fault: func(s Step) error {
				if s == step {
					return errKilled
				}
				return nil
			}})
			if _, err := dying.Split(ctx, key, memberSplit, gen); !errors.Is(err, errKilled) {
				t.Fatalf("dying fold: err = %v, want killed", err)
			}
			res, err := New(c, Options{Rounds: 5}).Split(ctx, key, memberSplit, gen)
			if err != nil || !res.Done {
				t.Fatalf("fresh fold: %+v, %v", res, err)
			}
			got := map[string]string{}
			for f, v := range c.HGetAll(ctx, key).Val() {
				got[f] = v
			}
			for f, v := range want {
				if got[f] != fmt.Sprint(v) {
					t.Errorf("base %s = %q, want %d", f, got[f], v)
				}
			}
			if got["name"] != "x" {
				t.Errorf("base name = %q, want the value set before the split", got["name"])
			}
			for _, s := range routing.ShardKeys(key, gen) {
				if n := c.HLen(ctx, s).Val(); n != 0 {
					t.Errorf("shard %s holds %d fields after the fold", s, n)
				}
			}
		})
	}
}

// TestHashCounterSplitExactAcrossEpochs runs a hash of counters (HINCRBY
// of 64 fields, HGETALL, HGET, HLEN) in 3 application processes, each a
// go-redis client in its default configuration with an engine and the
// hook, against real Redis (standalone and a 3-master cluster), while the
// key is split by field in 4 shards, resized to 6, and unsplit, each
// table reaching the processes one after the other (so writers on the old
// and on the new layout overlap), and each retired generation is folded
// and retired as the manager does. Every increment is also applied to an
// unsplit reference hash. After each phase a fresh process's HINCRBY
// replies, HGET, HGETALL and HLEN equal the reference's; no command is
// refused; at the end the base key alone holds the reference's values and
// every shard is empty.
func TestHashCounterSplitExactAcrossEpochs(t *testing.T) {
	const (
		processes = 3
		workers   = 4
		each      = 150
		fields    = 64
	)
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := "stats:{" + tg.name + "}:split"
			ref := "stats:{" + tg.name + "}:ref"
			g4 := routing.Generation{FromEpoch: 0, Shards: 4}
			g6 := routing.Generation{FromEpoch: 1, Shards: 6}
			g0 := routing.Generation{FromEpoch: 2, Shards: 0}
			for _, x := range append(append([]string{k, ref}, routing.ShardKeys(k, g4)...), routing.ShardKeys(k, g6)...) {
				tg.admin.Del(ctx, x)
			}
			// A field set before the split, not a counter.
			tg.admin.HSet(ctx, k, "name", "top sellers")
			tg.admin.HSet(ctx, ref, "name", "top sellers")
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
					tbl.Entries = []routing.Entry{{Key: k, Source: routing.SourceDetected, Split: &routing.Split{Generations: gens, Members: true}}}
				}
				if err := tbl.Validate(); err != nil {
					t.Fatal(err)
				}
				return tbl
			}
			folder := New(tg.admin, Options{})
			fold := func(g routing.Generation) {
				res, err := folder.Split(ctx, k, memberSplit, g)
				if err != nil {
					t.Fatalf("fold %+v: %v", g, err)
				}
				if !res.Done {
					// Late increments: one more pass, as the manager's next one.
					if res, err = folder.Split(ctx, k, memberSplit, g); err != nil || !res.Done {
						t.Fatalf("fold %+v again: %+v, %v", g, res, err)
					}
				}
			}
			// phase runs the writers and, meanwhile, publishes tbl to the
			// processes one by one, then runs after (a fold) while the
			// writers go on.
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
						for i := range each {
							if i == each/4 {
								started <- struct{}{}
							}
							f := fmt.Sprintf("item:%d", rng.IntN(fields))
							n := int64(rng.IntN(5) - 1)
							if err := app.HIncrBy(ctx, k, f, n).Err(); err != nil {
								errs <- fmt.Errorf("%s: HINCRBY: %w", name, err)
								return
							}
							if err := tg.admin.HIncrBy(ctx, ref, f, n).Err(); err != nil {
								errs <- err
								return
							}
							if i%10 == 0 {
								if err := app.HGetAll(ctx, k).Err(); err != nil {
									errs <- fmt.Errorf("%s: HGETALL: %w", name, err)
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
					for _, e := range engines {
						e.SetTable(tbl)
					}
					current = tbl
				}
				if after != nil {
					after()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				// A fresh process reads and writes what the reference
				// holds.
				c, e := newApp()
				if current != nil {
					e.SetTable(current)
				}
				want := tg.admin.HGetAll(ctx, ref).Val()
				got, err := c.HGetAll(ctx, k).Result()
				if err != nil {
					t.Fatalf("%s: HGETALL: %v", name, err)
				}
				if !maps.Equal(got, want) {
					t.Fatalf("%s: HGETALL = %v, want %v", name, got, want)
				}
				if n, err := c.HLen(ctx, k).Result(); err != nil || n != int64(len(want)) {
					t.Errorf("%s: HLEN = %d, %v; want %d", name, n, err, len(want))
				}
				for f, v := range want {
					if g, err := c.HGet(ctx, k, f).Result(); err != nil || g != v {
						t.Errorf("%s: HGET %s = %q, %v; want %q", name, f, g, err, v)
					}
				}
				for i := range 8 {
					f := fmt.Sprintf("item:%d", i)
					g, err := c.HIncrBy(ctx, k, f, 3).Result()
					w := tg.admin.HIncrBy(ctx, ref, f, 3).Val()
					if err != nil || g != w {
						t.Errorf("%s: HINCRBY %s reply = %d, %v; want %d", name, f, g, err, w)
					}
				}
			}
			phase("unsplit", nil, nil)
			phase("split in 4", tableOf(g4), nil)
			phase("resized to 6", tableOf(g4, g6), nil)
			phase("4 folded", nil, func() {
				fold(g4)
				tbl := tableOf(g6)
				for _, e := range engines {
					e.SetTable(tbl)
				}
				current = tbl
				if err := folder.Retire(ctx, k, g4, RetiredTTL); err != nil {
					t.Fatal(err)
				}
			})
			phase("unsplit again", tableOf(g6, g0), nil)
			phase("6 folded", nil, func() {
				fold(g6)
				tbl := tableOf()
				for _, e := range engines {
					e.SetTable(tbl)
				}
				current = tbl
			})
			want := tg.admin.HGetAll(ctx, ref).Val()
			if got := tg.admin.HGetAll(ctx, k).Val(); !maps.Equal(got, want) {
				t.Errorf("base key alone = %v, want %v", got, want)
			}
			for _, g := range []routing.Generation{g4, g6} {
				for _, s := range routing.ShardKeys(k, g) {
					if n := tg.admin.HLen(ctx, s).Val(); n != 0 {
						t.Errorf("shard %s holds %d fields", s, n)
					}
				}
			}
		})
	}
}
