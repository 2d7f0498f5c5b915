package redishook_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestHookSplitCounterExpiry plays the expiry commands (EXPIRE, PEXPIRE,
// EXPIREAT, PEXPIREAT with NX, XX, GT, LT; PERSIST; TTL, PTTL, EXPIRETIME,
// PEXPIRETIME) on a split counter through a go-redis client with the hook,
// and the same commands on a plain key through a client without it, against
// real Redis (standalone and a 3-master cluster): every reply is Redis'
// (times to within the second the two sequences are apart), every physical
// key of the counter carries the base key's expiry, shards created after
// the EXPIRE inherit it, and when it passes the whole counter is gone.
func TestHookSplitCounterExpiry(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := "expiry:" + tg.name + ":likes"
			plain := "expiry:" + tg.name + ":plain"
			gen := routing.Generation{FromEpoch: 0, Shards: 4}
			tg.hook(t, routing.Entry{Key: k, Split: &routing.Split{Generations: []routing.Generation{gen}}})
			physical := append([]string{k}, routing.ShardKeys(k, gen)...)
			app, direct := tg.app, tg.direct

			// Both sides run one step, and their replies must agree.
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
			// The counter is held by its shards alone (no base key).
			same("INCRBY", app.IncrBy(ctx, k, 5), direct.IncrBy(ctx, plain, 5))
			if n := direct.Exists(ctx, k).Val(); n != 0 {
				t.Fatalf("the base key exists before any EXPIRE")
			}
			steps := []struct {
				name string
				run  func(c redis.UniversalClient, key string) redis.Cmder
			}{
				{"TTL without expiry", func(c redis.UniversalClient, key string) redis.Cmder { return c.TTL(ctx, key) }},
				{"PEXPIRETIME without expiry", func(c redis.UniversalClient, key string) redis.Cmder { return c.PExpireTime(ctx, key) }},
				{"EXPIRE XX", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireXX(ctx, key, 100*time.Second) }},
				{"EXPIRE GT", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireGT(ctx, key, 100*time.Second) }},
				{"EXPIRE LT", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireLT(ctx, key, 100*time.Second) }},
				{"EXPIRE NX", func(c redis.UniversalClient, key string) redis.Cmder { return c.ExpireNX(ctx, key, 50*time.Second) }},
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
			}
			for _, s := range steps {
				same(s.name, s.run(app, k), s.run(direct, plain))
			}
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
			sameExpiry("after the EXPIREs")
			// New shards inherit the expiry.
			for range 200 {
				if err := app.Incr(ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range physical {
				if direct.Exists(ctx, p).Val() != 1 {
					t.Fatalf("after 200 INCRs %s does not exist", p)
				}
			}
			if at := sameExpiry("after INCRs created every shard"); at <= 0 {
				t.Fatalf("the base key's PEXPIRETIME is %d", at)
			}
			same("PERSIST", app.Persist(ctx, k), direct.Persist(ctx, plain))
			same("PERSIST again", app.Persist(ctx, k), direct.Persist(ctx, plain))
			same("TTL after PERSIST", app.TTL(ctx, k), direct.TTL(ctx, plain))
			if at := sameExpiry("after PERSIST"); at != -1 {
				t.Fatalf("after PERSIST the base key's PEXPIRETIME is %d", at)
			}
			// Expiry removes the whole counter at once.
			same("PEXPIRE", app.PExpire(ctx, k, 300*time.Millisecond), direct.PExpire(ctx, plain, 300*time.Millisecond))
			eventually.Succeeds(t, 5*time.Second, func() error {
				if err := app.Get(ctx, k).Err(); !errors.Is(err, redis.Nil) {
					return fmt.Errorf("GET after the expiry: %v", err)
				}
				return nil
			})
			for _, p := range physical {
				if direct.Exists(ctx, p).Val() != 0 {
					t.Fatalf("%s outlived the counter's expiry", p)
				}
			}
			eventually.Succeeds(t, 5*time.Second, func() error {
				if direct.Exists(ctx, plain).Val() != 0 {
					return errors.New("the plain key has not expired yet")
				}
				return nil
			})
			same("TTL of a missing key", app.TTL(ctx, k), direct.TTL(ctx, plain))
			same("EXPIRE of a missing key", app.Expire(ctx, k, time.Minute), direct.Expire(ctx, plain, time.Minute))
			same("PERSIST of a missing key", app.Persist(ctx, k), direct.Persist(ctx, plain))
			// A new counter, then EXPIREAT in the past deletes it all.
			same("INCR a new counter", app.Incr(ctx, k), direct.Incr(ctx, plain))
			same("EXPIREAT in the past", app.ExpireAt(ctx, k, time.Unix(1, 0)), direct.ExpireAt(ctx, plain, time.Unix(1, 0)))
			same("GET after EXPIREAT in the past", app.Get(ctx, k), direct.Get(ctx, plain))
			for _, p := range physical {
				if direct.Exists(ctx, p).Val() != 0 {
					t.Fatalf("%s outlived EXPIREAT in the past", p)
				}
			}
		})
	}
}

// value is a go-redis command's value, whatever its type.
func value(c redis.Cmder) any {
	switch c := c.(type) {
	case *redis.BoolCmd:
		return c.Val()
	case *redis.IntCmd:
		return c.Val()
	case *redis.DurationCmd:
		return c.Val()
	case *redis.StringCmd:
		return c.Val()
	case *redis.StatusCmd:
		return c.Val()
	case *redis.FloatCmd:
		return c.Val()
	case *redis.Cmd:
		return fmt.Sprint(c.Val())
	}
	return fmt.Sprintf("%T", c)
}
