package redishook_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/memberkinds"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestHookMemberSplitKeyCommands plays the whole-key commands (EXISTS,
// TYPE, DEL, UNLINK, the expiry commands with NX, XX, GT, LT, PERSIST and
// the TTL family) on a hash split by field, a sorted set and a set split
// by member (4 shards) through a go-redis client with the hook, and the
// same commands with the same writes on a plain key of the same type
// through a client without it, against real Redis (standalone and a
// 3-master cluster): every reply is Redis' (times to within the second the
// two sequences are apart), every physical key carries the base key's
// expiry, shards created after the EXPIRE inherit it, and when it passes,
// or EXPIREAT names a past time, or DEL/UNLINK removes the key, no
// physical key is left.
func TestHookMemberSplitKeyCommands(t *testing.T) {
	gen := routing.Generation{FromEpoch: 0, Shards: 4}
	for _, tg := range targets(t) {
		// One engine (one hook on the application's client) for the three
		// keys, in key order.
		var entries []routing.Entry
		for _, mk := range memberkinds.All {
			entries = append(entries, routing.Entry{Key: "mexpiry:" + tg.name + ":" + mk.Type,
				Split: &routing.Split{Members: true, Kind: mk.Kind, Generations: []routing.Generation{gen}}})
		}
		slices.SortFunc(entries, func(a, b routing.Entry) int { return strings.Compare(a.Key, b.Key) })
		tg.hook(t, entries...)
		for _, mk := range memberkinds.All {
			t.Run(tg.name+"/"+mk.Type, func(t *testing.T) {
				ctx := context.Background()
				k := "mexpiry:" + tg.name + ":" + mk.Type
				plain := "mexpiry:" + tg.name + ":" + mk.Type + ":plain"
				physical := append([]string{k}, routing.ShardKeys(k, gen)...)
				app, direct := tg.app, tg.direct
				same := func(step string, split, ref redis.Cmder) {
					t.Helper()
					if fmt.Sprint(split.Err()) != fmt.Sprint(ref.Err()) {
						t.Fatalf("%s: error %v, Redis says %v", step, split.Err(), ref.Err())
					}
					a, b := value(split), value(ref)
					if da, ok := a.(time.Duration); ok {
						db := b.(time.Duration)
						if (da < 0 || db < 0) && da != db || (da-db).Abs() > time.Second {
							t.Fatalf("%s: %v, Redis says %v", step, da, db)
						}
						return
					}
					if a != b {
						t.Fatalf("%s: %v, Redis says %v", step, a, b)
					}
				}
				sameWhole := func(step string) {
					t.Helper()
					if a, b := mk.Whole(ctx, app, k), mk.Whole(ctx, direct, plain); a != b {
						t.Fatalf("%s: %s, Redis says %s", step, a, b)
					}
				}
				writes := func(step string, from, to int) {
					t.Helper()
					for i := from; i < to; i++ {
						same(fmt.Sprintf("%s: write %d", step, i), mk.Write(ctx, app, k, i), mk.Write(ctx, direct, plain, i))
					}
				}
				noneLeft := func(when string) {
					t.Helper()
					for _, p := range physical {
						if direct.Exists(ctx, p).Val() != 0 {
							t.Fatalf("%s: %s exists", when, p)
						}
					}
				}
				keyCmds := func(step string) {
					t.Helper()
					same(step+": EXISTS", app.Exists(ctx, k), direct.Exists(ctx, plain))
					same(step+": TYPE", app.Type(ctx, k), direct.Type(ctx, plain))
					same(step+": TTL", app.TTL(ctx, k), direct.TTL(ctx, plain))
					same(step+": PEXPIRETIME", app.PExpireTime(ctx, k), direct.PExpireTime(ctx, plain))
				}
				keyCmds("missing")
				// A member the shards alone hold (no base key).
				writes("first", 0, 1)
				if n := direct.Exists(ctx, k).Val(); n != 0 {
					t.Fatalf("the base key exists after one member write")
				}
				keyCmds("shards only")
				steps := []struct {
					name string
					run  func(c redis.UniversalClient, key string) redis.Cmder
				}{
					{"EXPIRE XX", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireXX(ctx, key, 100*time.Second) }},
					{"EXPIRE GT", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireGT(ctx, key, 100*time.Second) }},
					{"EXPIRE LT", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireLT(ctx, key, 100*time.Second) }},
					{"EXPIRE NX", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireNX(ctx, key, 50*time.Second) }},
					{"EXPIRE NX again", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireNX(ctx, key, 60*time.Second) }},
					{"EXPIRE GT shorter", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireGT(ctx, key, 50*time.Second) }},
					{"EXPIRE GT longer", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireGT(ctx, key, 200*time.Second) }},
					{"TTL", func(c redis.UniversalClient, key string) redis.Cmder { return c.TTL(ctx, key) }},
					{"PTTL", func(c redis.UniversalClient, key string) redis.Cmder { return c.PTTL(ctx, key) }},
					{"EXPIRETIME", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireTime(ctx, key) }},
					{"PEXPIRE XX", func(c redis.UniversalClient, key string) redis.Cmder {
						return c.Do(ctx, "pexpire", key, 300_000, "xx")
					}},
					{"EXPIREAT LT", func(c redis.UniversalClient, key string) redis.Cmder {
						return c.Do(ctx, "expireat", key, time.Now().Add(400*time.Second).Unix(), "lt")
					}},
					{"PEXPIREAT", func(c redis.UniversalClient, key string) redis.Cmder {
						return c.PExpireAt(ctx, key, time.Now().Add(250*time.Second))
					}},
					{"EXPIRE bad option", func(c redis.UniversalClient, key string) redis.Cmder { return c.Do(ctx, "expire", key, 10, "nx", "xx") }},
					{"EXPIRE no number", func(c redis.UniversalClient, key string) redis.Cmder { return c.Do(ctx, "expire", key, "soon") }},
					{"EXPIRE no time", func(c redis.UniversalClient, key string) redis.Cmder { return c.Do(ctx, "expire", key) }},
					{"TTL extra argument", func(c redis.UniversalClient, key string) redis.Cmder { return c.Do(ctx, "ttl", key, "x") }},
				}
				for _, s := range steps {
					same(s.name, s.run(app, k), s.run(direct, plain))
				}
				sameWhole("after the EXPIREs")
				sameExpiry := func(when string) int64 {
					t.Helper()
					at := direct.Do(ctx, "pexpiretime", k).Val().(int64)
					for _, p := range physical {
						got := direct.Do(ctx, "pexpiretime", p).Val().(int64)
						if got != at && got != -2 {
							t.Fatalf("%s: %s expires at %d, the base key at %d", when, p, got, at)
						}
					}
					return at
				}
				if at := sameExpiry("after the EXPIREs"); at <= 0 {
					t.Fatalf("after the EXPIREs the base key's PEXPIRETIME is %d", at)
				}
				// New shards inherit the expiry.
				writes("more members", 1, 120)
				for _, p := range physical {
					if direct.Exists(ctx, p).Val() != 1 {
						t.Fatalf("after 120 members %s does not exist", p)
					}
				}
				if at := sameExpiry("after writes created every shard"); at <= 0 {
					t.Fatalf("the base key's PEXPIRETIME is %d", at)
				}
				sameWhole("after the writes")
				keyCmds("with an expiry")
				same("PERSIST", app.Persist(ctx, k), direct.Persist(ctx, plain))
				same("PERSIST again", app.Persist(ctx, k), direct.Persist(ctx, plain))
				if at := sameExpiry("after PERSIST"); at != -1 {
					t.Fatalf("after PERSIST the base key's PEXPIRETIME is %d", at)
				}
				keyCmds("after PERSIST")
				// Expiry removes the whole key at once.
				same("PEXPIRE", app.PExpire(ctx, k, 300*time.Millisecond), direct.PExpire(ctx, plain, 300*time.Millisecond))
				eventually.Succeeds(t, 5*time.Second, func() error {
					if n := app.Exists(ctx, k).Val(); n != 0 {
						return fmt.Errorf("EXISTS after the expiry: %d", n)
					}
					return nil
				})
				noneLeft("after the expiry")
				eventually.Succeeds(t, 5*time.Second, func() error {
					if direct.Exists(ctx, plain).Val() != 0 {
						return errors.New("the plain key has not expired yet")
					}
					return nil
				})
				keyCmds("expired")
				sameWhole("expired")
				same("EXPIRE of a missing key", app.Expire(ctx, k, time.Minute), direct.Expire(ctx, plain, time.Minute))
				same("PERSIST of a missing key", app.Persist(ctx, k), direct.Persist(ctx, plain))
				// Writes after the expiry start a key without one; the
				// replies count nothing of the expired members.
				writes("after the expiry", 0, 40)
				keyCmds("written again")
				sameWhole("written again")
				same("EXPIREAT in the past", app.ExpireAt(ctx, k, time.Unix(1, 0)), direct.ExpireAt(ctx, plain, time.Unix(1, 0)))
				noneLeft("after EXPIREAT in the past")
				keyCmds("after EXPIREAT in the past")
				writes("after EXPIREAT", 0, 40)
				same("EXPIRE before DEL", app.Expire(ctx, k, time.Hour), direct.Expire(ctx, plain, time.Hour))
				same("DEL", app.Del(ctx, k), direct.Del(ctx, plain))
				noneLeft("after DEL")
				same("DEL again", app.Del(ctx, k), direct.Del(ctx, plain))
				keyCmds("after DEL")
				writes("after DEL", 0, 40)
				keyCmds("written after DEL")
				sameWhole("written after DEL")
				same("UNLINK", app.Unlink(ctx, k), direct.Unlink(ctx, plain))
				noneLeft("after UNLINK")
				same("UNLINK again", app.Unlink(ctx, k), direct.Unlink(ctx, plain))
				writes("after UNLINK", 0, 10)
				same("EXISTS twice", app.Exists(ctx, k, k), direct.Exists(ctx, plain, plain))
				sameWhole("written after UNLINK")
			})
		}
	}
}
