package fold

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/memberkinds"
	"github.com/heatsink-dev/heatsink/routing"
)

// memberApps makes application processes of a target: go-redis clients in
// their default configuration with the engine and the hook, under one
// member split's tables.
type memberApps struct {
	t    *testing.T
	tg   target
	kind routing.MemberKind
}

func (a memberApps) newApp(tbl *routing.Table) (redis.UniversalClient, *engine.Engine) {
	c := a.tg.newClient()
	e := engine.New(c, engine.Options{})
	c.AddHook(redishook.New(e))
	a.t.Cleanup(func() { _ = e.Close(); _ = c.Close() })
	if tbl != nil {
		e.SetTable(tbl)
	}
	return c, e
}

// table is version's table with key split by member over gens (none: the
// key unsplit).
func (a memberApps) table(version int64, key string, gens ...routing.Generation) *routing.Table {
	tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, Policy: "t/p", Version: version, EpochMillis: 60_000}
	if len(gens) > 0 {
		tbl.Entries = []routing.Entry{{Key: key, Source: routing.SourceDetected,
			Split: &routing.Split{Members: true, Kind: a.kind, Generations: gens}}}
	}
	return tbl
}

// TestMemberSplitRemoval: HDEL on a hash split by field and SREM on a set
// split by member, against real Redis (standalone and a 3-master cluster),
// go-redis clients in their default configuration with the engine and the
// hook.
//   - Removal racing a fold: every member is removed between the fold's
//     read of a shard and its credit, or between credit and debit; after
//     the fold the key is empty (a fold that read a member before its
//     removal does not add it back).
//   - Expiry: a base key whose only member is removed (Redis deletes it,
//     and its expiry with it) while shards hold members keeps the key's
//     expiry: TTL equals an unsplit reference's and every place carries it.
//   - Across epochs (4 shards, resized to 6, 4 folded, unsplit, 6
//     folded), two processes writing and removing their own members: after
//     each phase a fresh process's whole read and removal replies equal an
//     unsplit reference's.
func TestMemberSplitRemoval(t *testing.T) {
	for _, tg := range targets(t) {
		ctx := context.Background()
		admin := tg.admin
		for _, mk := range memberkinds.All {
			apps := memberApps{t: t, tg: tg, kind: mk.Kind}
			empty := mk.Whole(ctx, admin, "rm:none")
			for _, step := range []Step{StepCredit, StepDebit} {
				t.Run(fmt.Sprintf("%s/%s/removal before step %d", tg.name, mk.Type, step), func(t *testing.T) {
					apps.t = t
					key := fmt.Sprintf("rm:%s:%s:%d", tg.name, mk.Type, step)
					gen := routing.Generation{FromEpoch: 3, Shards: 3}
					split := routing.Split{Members: true, Kind: mk.Kind, Generations: []routing.Generation{gen}}
					app, _ := apps.newApp(apps.table(1, key, gen))
					for i := range 24 {
						if err := mk.Write(ctx, app, key, i).Err(); err != nil {
							t.Fatal(err)
						}
					}
					removed := false
					f := New(admin, Options{Fault: func(s Step) error {
						if s == step && !removed {
							removed = true
							for i := range 24 {
								if n, err := mk.Remove(ctx, app, key, i).Result(); n != 1 || err != nil {
									t.Errorf("removal of %d = %d, %v; want 1", i, n, err)
								}
							}
						}
						return nil
					}})
					res, err := f.Split(ctx, key, &split, gen)
					if err == nil {
						res, err = f.Split(ctx, key, &split, gen)
					}
					if err != nil || !res.Done || !removed {
						t.Fatalf("fold: %+v, %v (removed %v)", res, err, removed)
					}
					if got := mk.Whole(ctx, admin, key); got != empty {
						t.Errorf("after the removal and the fold the base key holds %s", got)
					}
				})
			}
			t.Run(tg.name+"/"+mk.Type+"/expiry kept when a removal empties the base key", func(t *testing.T) {
				apps.t = t
				key, ref := "rmttl:{"+tg.name+mk.Type+"}", "rmttl:{"+tg.name+mk.Type+"}:ref"
				gen := routing.Generation{FromEpoch: 0, Shards: 4}
				for _, x := range append([]string{key, ref}, routing.ShardKeys(key, gen)...) {
					admin.Del(ctx, x)
				}
				mk.Write(ctx, admin, key, 1000)
				mk.Write(ctx, admin, ref, 1000)
				app, _ := apps.newApp(apps.table(1, key, gen))
				if got, want := app.Expire(ctx, key, time.Hour).Val(), admin.Expire(ctx, ref, time.Hour).Val(); got != want || !got {
					t.Fatalf("EXPIRE = %v, want %v", got, want)
				}
				for i := range 20 {
					mk.Write(ctx, app, key, i)
					mk.Write(ctx, admin, ref, i)
				}
				if got, want := mk.Remove(ctx, app, key, 1000).Val(), mk.Remove(ctx, admin, ref, 1000).Val(); got != want {
					t.Fatalf("removal = %d, want %d", got, want)
				}
				got, want := app.TTL(ctx, key).Val(), admin.TTL(ctx, ref).Val()
				if got <= 0 || (got-want).Abs() > time.Second {
					t.Errorf("TTL after the removal emptied the base key = %v, want %v", got, want)
				}
				at := admin.Do(ctx, "pexpiretime", key).Val().(int64)
				for _, s := range append([]string{key}, routing.ShardKeys(key, gen)...) {
					if got := admin.Do(ctx, "pexpiretime", s).Val().(int64); got != at || at <= 0 {
						t.Errorf("%s expires at %d, the base key at %d", s, got, at)
					}
				}
				if got, want := mk.Whole(ctx, app, key), mk.Whole(ctx, admin, ref); got != want {
					t.Errorf("whole read = %s, want %s", got, want)
				}
			})
			t.Run(tg.name+"/"+mk.Type+"/across epochs", func(t *testing.T) {
				apps.t = t
				removalAcrossEpochs(t, ctx, apps, mk)
			})
		}
	}
}

// removalAcrossEpochs is TestMemberSplitRemoval's epochs: two processes
// write and remove their own members while the key is split in 4, resized
// to 6, the 4 folded, unsplit and the 6 folded.
func removalAcrossEpochs(t *testing.T, ctx context.Context, apps memberApps, mk memberkinds.Kind) {
	admin := apps.tg.admin
	key, ref := "rmep:{"+apps.tg.name+mk.Type+"}", "rmep:{"+apps.tg.name+mk.Type+"}:ref"
	g4 := routing.Generation{FromEpoch: 0, Shards: 4}
	g6 := routing.Generation{FromEpoch: 1, Shards: 6}
	g0 := routing.Generation{FromEpoch: 2, Shards: 0}
	for _, x := range append(append([]string{key, ref}, routing.ShardKeys(key, g4)...), routing.ShardKeys(key, g6)...) {
		admin.Del(ctx, x)
	}
	var clients []redis.UniversalClient
	var engines []*engine.Engine
	for range 2 {
		c, e := apps.newApp(nil)
		clients, engines = append(clients, c), append(engines, e)
	}
	version := int64(0)
	var current *routing.Table
	publish := func(gens ...routing.Generation) {
		version++
		current = apps.table(version, key, gens...)
		for _, e := range engines {
			e.SetTable(current)
		}
	}
	split := routing.Split{Members: true, Kind: mk.Kind}
	folder := New(admin, Options{})
	fold := func(g routing.Generation) {
		res, err := folder.Split(ctx, key, &split, g)
		if err == nil && !res.Done {
			res, err = folder.Split(ctx, key, &split, g)
		}
		if err != nil || !res.Done {
			t.Fatalf("fold %+v: %+v, %v", g, res, err)
		}
		if err := folder.Retire(ctx, key, g, RetiredTTL); err != nil {
			t.Fatal(err)
		}
	}
	phase := func(name string) {
		var wg sync.WaitGroup
		errs := make(chan error, len(clients))
		for w, app := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 80 {
					// Each process its own members, so that both keys
					// see one order per member.
					m := 2*((i*7+int(version))%30) + w
					var err error
					if i%3 == 2 {
						err = mk.Remove(ctx, app, key, m).Err()
						mk.Remove(ctx, admin, ref, m)
					} else {
						err = mk.Write(ctx, app, key, m).Err()
						mk.Write(ctx, admin, ref, m)
					}
					if err != nil {
						errs <- fmt.Errorf("%s: %w", name, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		c, _ := apps.newApp(current)
		if got, want := mk.Whole(ctx, c, key), mk.Whole(ctx, admin, ref); got != want {
			t.Errorf("%s: whole read = %s, want %s", name, got, want)
		}
		for _, m := range []int{2, 3, 59, 1000, int(version)} {
			if got, want := mk.Remove(ctx, c, key, m).Val(), mk.Remove(ctx, admin, ref, m).Val(); got != want {
				t.Errorf("%s: removal of %d = %d, want %d", name, m, got, want)
			}
		}
		// The processes' own replies after the fresh one's removals: a
		// sum of other places cached before them is not added back.
		for _, app := range clients {
			for _, m := range []int{2, 3} {
				if got, want := replyOf(mk.Write(ctx, app, key, m)), replyOf(mk.Write(ctx, admin, ref, m)); got != want {
					t.Errorf("%s: write of %d after its removal replied %s, want %s", name, m, got, want)
				}
			}
		}
	}
	phase("unsplit")
	publish(g4)
	phase("split in 4")
	publish(g4, g6)
	phase("resized to 6")
	fold(g4)
	publish(g6)
	phase("4 folded")
	publish(g6, g0)
	phase("unsplit again")
	fold(g6)
	publish()
	phase("6 folded")
}

// TestMemberSplitRepliesAfterARemovalElsewhere: the reply of a write
// (HINCRBY, ZINCRBY) adds the sum of the member's other places, which a
// process caches (10 s once the layout is settled), and a sorted set's
// whole and top-N reads use a copy of the base key (as long); another
// process's removal (HDEL, ZREM, SREM) or DEL removes the member from
// those places. The first process's next whole read, top-N read and write
// reply as Redis would (the member gone, then counted from 0), not with
// the removed value added back: every place it was removed from got a new
// removal mark, which the write reads with it and the reads read with the
// shards. Real Redis, standalone and cluster, go-redis defaults with the
// engine and the hook.
func TestMemberSplitRepliesAfterARemovalElsewhere(t *testing.T) {
	for _, tg := range targets(t) {
		ctx := context.Background()
		admin := tg.admin
		for _, mk := range memberkinds.All {
			removals := map[string]func(c redis.UniversalClient, key string) redis.Cmder{
				"DEL":     func(c redis.UniversalClient, key string) redis.Cmder { return c.Del(ctx, key) },
				"removal": func(c redis.UniversalClient, key string) redis.Cmder { return mk.Remove(ctx, c, key, 0) },
			}
			for name, remove := range removals {
				t.Run(tg.name+"/"+mk.Type+"/"+name, func(t *testing.T) {
					apps := memberApps{t: t, tg: tg, kind: mk.Kind}
					key, ref := "rmreply:{"+tg.name+mk.Type+name+"}", "rmreply:{"+tg.name+mk.Type+name+"}:ref"
					gen := routing.Generation{FromEpoch: 0, Shards: 4}
					for _, x := range append([]string{key, ref}, routing.ShardKeys(key, gen)...) {
						admin.Del(ctx, x)
					}
					// Member 0 held by the base key from before the split:
					// the other place of its write place in this settled
					// layout.
					for range 5 {
						mk.Write(ctx, admin, key, 0)
						mk.Write(ctx, admin, ref, 0)
					}
					a, _ := apps.newApp(apps.table(1, key, gen))
					b, _ := apps.newApp(apps.table(1, key, gen))
					for i := 1; i < 4; i++ {
						mk.Write(ctx, a, key, i)
						mk.Write(ctx, admin, ref, i)
					}
					if got, want := replyOf(mk.Write(ctx, a, key, 0)), replyOf(mk.Write(ctx, admin, ref, 0)); got != want {
						t.Fatalf("first write replied %s, want %s", got, want)
					}
					reads := func(when string) {
						if got, want := mk.Whole(ctx, a, key), mk.Whole(ctx, admin, ref); got != want {
							t.Errorf("%s: whole read = %s, want %s", when, got, want)
						}
						if mk.Kind == routing.KindZSet {
							got, err := a.ZRevRangeWithScores(ctx, key, 0, 1).Result()
							want := admin.ZRevRangeWithScores(ctx, ref, 0, 1).Val()
							if fmt.Sprint(got, err) != fmt.Sprint(want, nil) {
								t.Errorf("%s: top 2 = %v, %v; want %v", when, got, err, want)
							}
						}
					}
					reads("before") // a sorted set's base key copied
					if got, want := replyOf(remove(b, key)), replyOf(remove(admin, ref)); got != want {
						t.Fatalf("%s by the other process replied %s, want %s", name, got, want)
					}
					reads("after the other process's " + name)
					for i := range 3 {
						if got, want := replyOf(mk.Write(ctx, a, key, 0)), replyOf(mk.Write(ctx, admin, ref, 0)); got != want {
							t.Errorf("write %d after the other process's %s replied %s, want %s", i, name, got, want)
						}
					}
				})
			}
		}
	}
}
