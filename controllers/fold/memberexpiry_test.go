package fold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/memberkinds"
	"github.com/heatsink-dev/heatsink/routing"
)

// replyOf is a write's reply, whatever its type.
func replyOf(c redis.Cmder) string {
	switch c := c.(type) {
	case *redis.IntCmd:
		return fmt.Sprint(c.Val(), c.Err())
	case *redis.FloatCmd:
		return fmt.Sprint(c.Val(), c.Err())
	}
	return fmt.Sprintf("%T", c)
}

// TestMemberFoldNeverRecreatesAnExpiredKey is
// TestFoldNeverRecreatesAnExpiredKey for a hash split by field, a sorted
// set and a set split by member: the base key and 3 shards hold members
// and one expiry, which passes while the fold runs (between reading a
// shard and crediting the base key, and between the credit and the
// debit). No key is left without an expiry (the fold neither re-creates
// the expired base key without one nor a shard's member at −v), and
// nothing of the key is left after its expiry. Standalone and cluster.
func TestMemberFoldNeverRecreatesAnExpiredKey(t *testing.T) {
	for _, tg := range targets(t) {
		c := tg.admin
		for _, mk := range memberkinds.All {
			for _, step := range []Step{StepCredit, StepDebit} {
				t.Run(fmt.Sprintf("%s/%s/expires before step %d", tg.name, mk.Type, step), func(t *testing.T) {
					ctx := context.Background()
					key := fmt.Sprintf("mexp:%s:%s:%d", tg.name, mk.Type, step)
					split := &routing.Split{Members: true, Kind: mk.Kind}
					gen := routing.Generation{FromEpoch: 3, Shards: 3}
					at := time.Now().Add(2 * time.Second)
					keys := append([]string{key}, routing.ShardKeys(key, gen)...)
					for j, k := range keys {
						for i := range 4 {
							if err := mk.Write(ctx, c, k, 10*j+i).Err(); err != nil {
								t.Fatal(err)
							}
						}
						if err := c.PExpireAt(ctx, k, at).Err(); err != nil {
							t.Fatal(err)
						}
					}
					waited := false
					f := New(c, Options{Fault: func(s Step) error {
						if s == step && !waited {
							waited = true
							gone(t, c, key)
						}
						return nil
					}})
					res, err := f.Split(ctx, key, split, gen)
					if err != nil || !res.Done {
						t.Fatalf("fold: %+v, %v", res, err)
					}
					if !waited {
						t.Fatal("the fold never reached the step")
					}
					for _, k := range keys {
						if n := c.Exists(ctx, k).Val(); n != 0 {
							t.Errorf("%s exists after the key's expiry (TTL %v)", k, c.PTTL(ctx, k).Val())
						}
					}
					if err := f.Retire(ctx, key, gen, RetiredTTL); err != nil {
						t.Fatal(err)
					}
					if left := persistent(t, c); len(left) > 0 {
						t.Fatalf("keys without an expiry after the fold: %q", left)
					}
				})
			}
		}
	}
}

// TestMemberFoldAfterDel deletes a key split by member (DEL through a
// go-redis client with the engine and the hook) while the fold of one of
// its generations runs: between reading a shard and crediting the base
// key, and between the credit and the debit. The key stays deleted: no
// place holds anything after the fold, as no key holds anything after a
// DEL; a member written after the DEL stays. Standalone and cluster.
func TestMemberFoldAfterDel(t *testing.T) {
	for _, tg := range targets(t) {
		c := tg.admin
		for _, mk := range memberkinds.All {
			for _, step := range []Step{StepCredit, StepDebit} {
				t.Run(fmt.Sprintf("%s/%s/DEL before step %d", tg.name, mk.Type, step), func(t *testing.T) {
					ctx := context.Background()
					key := fmt.Sprintf("mdel:%s:%s:%d", tg.name, mk.Type, step)
					ref := key + ":ref"
					gen := routing.Generation{FromEpoch: 3, Shards: 3}
					split := routing.Split{Members: true, Kind: mk.Kind, Generations: []routing.Generation{gen}}
					app := tg.newClient()
					e := engine.New(app, engine.Options{})
					app.AddHook(redishook.New(e))
					t.Cleanup(func() { _ = e.Close(); _ = app.Close() })
					e.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersion, Policy: "t/p", Version: 1, EpochMillis: 60_000,
						Entries: []routing.Entry{{Key: key, Source: routing.SourceDetected, Split: &split}}})
					for i := range 24 {
						if err := mk.Write(ctx, app, key, i).Err(); err != nil {
							t.Fatal(err)
						}
					}
					deleted := false
					f := New(c, Options{Fault: func(s Step) error {
						if s == step && !deleted {
							deleted = true
							if n, err := app.Del(ctx, key).Result(); n != 1 || err != nil {
								t.Errorf("DEL = %d, %v; want 1", n, err)
							}
							// A write after the DEL, the same to a plain
							// key: the one thing left afterwards.
							mk.Write(ctx, app, key, 1000)
							mk.Write(ctx, c, ref, 1000)
						}
						return nil
					}})
					res, err := f.Split(ctx, key, &split, gen)
					if err != nil {
						t.Fatalf("fold: %+v, %v", res, err)
					}
					if !deleted {
						t.Fatal("the fold never reached the step")
					}
					if res, err = f.Split(ctx, key, &split, gen); err != nil || !res.Done {
						t.Fatalf("fold again: %+v, %v", res, err)
					}
					if got, want := mk.Whole(ctx, app, key), mk.Whole(ctx, c, ref); got != want {
						t.Errorf("after DEL and fold: %s, want %s", got, want)
					}
					if got, want := mk.Whole(ctx, c, key), mk.Whole(ctx, c, ref); got != want {
						t.Errorf("base key alone after the fold: %s, want %s", got, want)
					}
				})
			}
		}
	}
}

// TestMemberSplitExpiryAcrossEpochs checks the whole-key commands of a
// hash split by field, a sorted set and a set split by member across
// epochs: 2 application processes (go-redis clients in their default
// configuration, each with an engine and the hook) write members while
// the keys go unsplit → split in 4 → resized to 6 → 4 folded → unsplit →
// 6 folded, each retired generation folded and retired as the manager
// does; every write is also applied to an unsplit reference key. One key
// ("short") is given a 1.5-s TTL before the split, which passes while it
// is split; the other ("live") is deleted (DEL) and given an hour's TTL
// (EXPIRE) while split. After each phase a fresh process's EXISTS, TYPE,
// TTL (to the second), whole read and one write's reply equal the
// reference's; at the end no physical key of "short" is left (the folds
// did not re-create it) and every physical key of "live" that exists
// carries the reference's expiry.
func TestMemberSplitExpiryAcrossEpochs(t *testing.T) {
	const each = 60
	for _, tg := range targets(t) {
		for _, mk := range memberkinds.All {
			t.Run(tg.name+"/"+mk.Type, func(t *testing.T) {
				ctx := context.Background()
				admin := tg.admin
				live, liveRef := "mlive:{"+tg.name+"}:"+mk.Type, "mlive:{"+tg.name+"}:"+mk.Type+":ref"
				short, shortRef := "mshort:{"+tg.name+"}:"+mk.Type, "mshort:{"+tg.name+"}:"+mk.Type+":ref"
				g4 := routing.Generation{FromEpoch: 0, Shards: 4}
				g6 := routing.Generation{FromEpoch: 1, Shards: 6}
				g0 := routing.Generation{FromEpoch: 2, Shards: 0}
				physical := func(k string) []string {
					return append(append([]string{k}, routing.ShardKeys(k, g4)...), routing.ShardKeys(k, g6)...)
				}
				for _, k := range []string{live, liveRef, short, shortRef} {
					for _, x := range physical(k) {
						admin.Del(ctx, x)
					}
				}
				split := routing.Split{Members: true, Kind: mk.Kind}
				newApp := func() (redis.UniversalClient, *engine.Engine) {
					return memberApps{t: t, tg: tg, kind: mk.Kind}.newApp(nil)
				}
				var apps []redis.UniversalClient
				var engines []*engine.Engine
				for range 2 {
					c, e := newApp()
					apps, engines = append(apps, c), append(engines, e)
				}
				version := int64(0)
				var current *routing.Table
				publish := func(gens ...routing.Generation) {
					version++
					tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, Policy: "t/p", Version: version, EpochMillis: 60_000}
					if len(gens) > 0 {
						for _, k := range []string{live, short} { // sorted by key
							s := split
							s.Generations = gens
							tbl.Entries = append(tbl.Entries, routing.Entry{Key: k, Source: routing.SourceDetected, Split: &s})
						}
					}
					if err := tbl.Validate(); err != nil {
						t.Fatal(err)
					}
					for _, e := range engines {
						e.SetTable(tbl)
					}
					current = tbl
				}
				folder := New(admin, Options{})
				fold := func(g routing.Generation) {
					for _, k := range []string{live, short} {
						s := split
						res, err := folder.Split(ctx, k, &s, g)
						if err == nil && !res.Done {
							res, err = folder.Split(ctx, k, &s, g)
						}
						if err != nil || !res.Done {
							t.Fatalf("fold %s %+v: %+v, %v", k, g, res, err)
						}
						if err := folder.Retire(ctx, k, g, RetiredTTL); err != nil {
							t.Fatal(err)
						}
					}
				}
				// writes sends each members through the applications
				// (two at once) and to the references.
				writes := func(keys map[string]string, from int) {
					var wg sync.WaitGroup
					errs := make(chan error, len(apps))
					for w, app := range apps {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := from + w; i < from+each; i += len(apps) {
								for k, ref := range keys {
									if err := mk.Write(ctx, app, k, i).Err(); err != nil {
										errs <- err
										return
									}
									mk.Write(ctx, admin, ref, i)
								}
							}
						}()
					}
					wg.Wait()
					close(errs)
					for err := range errs {
						t.Fatal(err)
					}
				}
				check := func(phase string) {
					t.Helper()
					c, e := newApp()
					if current != nil {
						e.SetTable(current)
					}
					for k, ref := range map[string]string{live: liveRef, short: shortRef} {
						same := func(what string, got, want any) {
							t.Helper()
							if fmt.Sprint(got) != fmt.Sprint(want) {
								t.Errorf("%s: %s %s = %v, want %v", phase, what, k, got, want)
							}
						}
						same("EXISTS", c.Exists(ctx, k).Val(), admin.Exists(ctx, ref).Val())
						same("TYPE", c.Type(ctx, k).Val(), admin.Type(ctx, ref).Val())
						got, err := c.TTL(ctx, k).Result()
						want := admin.TTL(ctx, ref).Val()
						if err != nil || (got < 0 || want < 0) && got != want || (got-want).Abs() > time.Second {
							t.Errorf("%s: TTL %s = %v, %v; want %v", phase, k, got, err, want)
						}
						same("whole read", mk.Whole(ctx, c, k), mk.Whole(ctx, admin, ref))
					}
					w := 7 + int(version)
					same := replyOf(mk.Write(ctx, c, live, w)) == replyOf(mk.Write(ctx, admin, liveRef, w))
					if !same {
						t.Errorf("%s: a write's reply differs from the reference's", phase)
					}
				}
				both := map[string]string{live: liveRef, short: shortRef}
				writes(both, 0)
				for _, k := range []string{short, shortRef} {
					if err := admin.PExpire(ctx, k, 1500*time.Millisecond).Err(); err != nil {
						t.Fatal(err)
					}
				}
				check("unsplit")
				publish(g4)
				writes(both, 100)
				check("split in 4")
				// The short key expires while split: every place at once.
				eventually.Succeeds(t, 10*time.Second, func() error {
					for _, k := range []string{short, shortRef} {
						if n := apps[0].Exists(ctx, k).Val(); n != 0 {
							return errors.New(k + " has not expired yet")
						}
					}
					return nil
				})
				check("short expired")
				for _, k := range physical(short) {
					if admin.Exists(ctx, k).Val() != 0 {
						t.Fatalf("%s outlived its key's expiry", k)
					}
				}
				// DEL and EXPIRE while split.
				if got, want := apps[1].Del(ctx, live).Val(), admin.Del(ctx, liveRef).Val(); got != want {
					t.Fatalf("DEL = %d, want %d", got, want)
				}
				check("deleted")
				live1 := map[string]string{live: liveRef}
				writes(live1, 200)
				for _, exp := range []func(c redis.UniversalClient, k string) *redis.BoolCmd{
					func(c redis.UniversalClient, k string) *redis.BoolCmd { return c.Expire(ctx, k, time.Hour) },
					func(c redis.UniversalClient, k string) *redis.BoolCmd { return c.ExpireNX(ctx, k, 2*time.Hour) },
				} {
					if got, want := exp(apps[0], live).Val(), exp(admin, liveRef).Val(); got != want {
						t.Fatalf("EXPIRE = %v, want %v", got, want)
					}
				}
				publish(g4, g6)
				writes(live1, 300)
				check("resized to 6")
				fold(g4)
				publish(g6)
				writes(live1, 400)
				check("4 folded")
				publish(g6, g0)
				writes(live1, 500)
				check("unsplit again")
				fold(g6)
				publish()
				check("6 folded")
				for _, k := range physical(short) {
					if n := admin.Exists(ctx, k).Val(); n != 0 {
						t.Errorf("%s exists after the folds (TTL %v)", k, admin.PTTL(ctx, k).Val())
					}
				}
				want := admin.Do(ctx, "pexpiretime", liveRef).Val().(int64)
				for _, k := range physical(live) {
					at := admin.Do(ctx, "pexpiretime", k).Val().(int64)
					if at != -2 && (at < 0 || time.Duration(at-want).Abs() > time.Second) {
						t.Errorf("%s expires at %d, the reference at %d", k, at, want)
					}
				}
			})
		}
	}
}

// TestMemberSplitRepliesAfterAnExpiryElsewhere: in a settled layout (one
// generation of 4 shards) a process's HINCRBY and ZINCRBY replies add a
// cached sum of the member's other places (the base key, for 10 s), and
// its whole reads of a sorted set a cached copy of the base key. Another
// process gives the key a 1-s expiry; once it has passed, the first
// process's replies and reads count nothing of the expired members: they
// equal an unsplit reference's that expired too. go-redis clients in their
// default configuration with the engine and the hook; standalone and
// cluster.
func TestMemberSplitRepliesAfterAnExpiryElsewhere(t *testing.T) {
	for _, tg := range targets(t) {
		for _, mk := range memberkinds.All {
			t.Run(tg.name+"/"+mk.Type, func(t *testing.T) {
				ctx := context.Background()
				admin := tg.admin
				key, ref := "mrep:{"+tg.name+"}:"+mk.Type, "mrep:{"+tg.name+"}:"+mk.Type+":ref"
				gen := routing.Generation{FromEpoch: 0, Shards: 4}
				for _, x := range append([]string{key, ref}, routing.ShardKeys(key, gen)...) {
					admin.Del(ctx, x)
				}
				ma := memberApps{t: t, tg: tg, kind: mk.Kind}
				var apps []redis.UniversalClient
				for range 2 {
					c, _ := ma.newApp(ma.table(1, key, gen))
					apps = append(apps, c)
				}
				// Members written before the split are in the base key.
				for i := range 8 {
					mk.Write(ctx, admin, key, i)
					mk.Write(ctx, admin, ref, i)
				}
				same := func(step string, got, want redis.Cmder) {
					t.Helper()
					if replyOf(got) != replyOf(want) {
						t.Fatalf("%s: %s, the reference says %s", step, replyOf(got), replyOf(want))
					}
				}
				if got, want := apps[1].PExpire(ctx, key, time.Second).Val(), admin.PExpire(ctx, ref, time.Second).Val(); got != want || !got {
					t.Fatalf("PEXPIRE = %v, want %v", got, want)
				}
				for i := range 8 {
					same(fmt.Sprintf("write %d", i), mk.Write(ctx, apps[0], key, i), mk.Write(ctx, admin, ref, i))
				}
				if got, want := mk.Whole(ctx, apps[0], key), mk.Whole(ctx, admin, ref); got != want {
					t.Fatalf("whole read: %s, want %s", got, want)
				}
				gone(t, admin, key)
				gone(t, admin, ref)
				for i := range 8 {
					same(fmt.Sprintf("write %d after the expiry", i), mk.Write(ctx, apps[0], key, i), mk.Write(ctx, admin, ref, i))
				}
				if got, want := mk.Whole(ctx, apps[0], key), mk.Whole(ctx, admin, ref); got != want {
					t.Fatalf("whole read after the expiry: %s, want %s", got, want)
				}
			})
		}
	}
}
