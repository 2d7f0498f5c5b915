package fold

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// target is a real Redis deployment started for the test: admin is a
// client of it, newClient makes another (an application process's).
type target struct {
	name      string
	admin     redis.UniversalClient
	newClient func() redis.UniversalClient
}

// targets starts a standalone server and a 3-master cluster for the test.
func targets(t *testing.T) []target {
	t.Helper()
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	s := redistest.Standalone(t)
	c := redistest.Cluster(t)
	out := []target{
		{name: "standalone", newClient: func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: s.Addr}) }},
		{name: "cluster", newClient: func() redis.UniversalClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()}) }},
	}
	for i := range out {
		out[i].admin = out[i].newClient()
		t.Cleanup(func() { _ = out[i].admin.Close() })
	}
	return out
}

// persistent lists every key of c (on every master) that has no expiry.
func persistent(t *testing.T, c redis.UniversalClient) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	scan := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			if n.TTL(ctx, iter.Val()).Val() == -1 {
				out = append(out, iter.Val())
			}
		}
		return iter.Err()
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// gone waits until key has expired.
func gone(t *testing.T, c redis.UniversalClient, key string) {
	t.Helper()
	eventually.Succeeds(t, 10*time.Second, func() error {
		if c.Exists(context.Background(), key).Val() != 0 {
			return errors.New(key + " has not expired yet")
		}
		return nil
	})
}

// TestFoldNeverRecreatesAnExpiredKey folds a split counter whose base key
// and shards carry one expiry, with the expiry passing while the fold runs:
// between reading a shard and crediting the base key, and between the
// credit and the debit of the shard. No key is left without an expiry (the
// fold does not re-create the expired base key, nor the expired shard at
// −v), and nothing of the counter is left after its expiry. Standalone and
// cluster.
func TestFoldNeverRecreatesAnExpiredKey(t *testing.T) {
	for _, tg := range targets(t) {
		name, c := tg.name, tg.admin
		for _, step := range []Step{StepCredit, StepDebit} {
			t.Run(fmt.Sprintf("%s/expires before step %d", name, step), func(t *testing.T) {
				ctx := context.Background()
				key := fmt.Sprintf("rl:%s:%d", name, step)
				gen := routing.Generation{FromEpoch: 3, Shards: 3}
				at := time.Now().Add(2 * time.Second)
				keys := append([]string{key}, routing.ShardKeys(key, gen)...)
				for i, k := range keys {
					if err := c.Set(ctx, k, 10+i, 0).Err(); err != nil {
						t.Fatal(err)
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
				res, err := f.Generation(ctx, key, gen)
				if err != nil || !res.Done {
					t.Fatalf("fold: %+v, %v", res, err)
				}
				if !waited {
					t.Fatal("the fold never reached the step")
				}
				for _, k := range keys {
					if n := c.Exists(ctx, k).Val(); n != 0 {
						t.Errorf("%s exists after the counter's expiry (TTL %v)", k, c.PTTL(ctx, k).Val())
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

// TestFoldKeepsTheExpiryOfALiveCounter folds a generation of a counter that
// expires later: the base key keeps its expiry and the value is exact; a
// shard with an expiry whose base key is gone gives its expiry to the
// re-created base key.
func TestFoldKeepsTheExpiryOfALiveCounter(t *testing.T) {
	for _, tg := range targets(t) {
		name, c := tg.name, tg.admin
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			gen := routing.Generation{FromEpoch: 5, Shards: 2}
			live := "live:" + name
			at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			c.Set(ctx, live, 100, 0)
			for i, s := range routing.ShardKeys(live, gen) {
				c.Set(ctx, s, 1+i, 0)
			}
			for _, k := range append([]string{live}, routing.ShardKeys(live, gen)...) {
				c.PExpireAt(ctx, k, at)
			}
			// Only the shards hold this one; its base key is gone.
			shardsOnly := "shards:" + name
			for i, s := range routing.ShardKeys(shardsOnly, gen) {
				c.Set(ctx, s, 5+i, 0)
				c.PExpireAt(ctx, s, at)
			}
			f := New(c, Options{})
			for _, k := range []string{live, shardsOnly} {
				if res, err := f.Generation(ctx, k, gen); err != nil || !res.Done {
					t.Fatalf("fold %s: %+v, %v", k, res, err)
				}
				if got := c.Do(ctx, "pexpiretime", k).Val(); got != at.UnixMilli() {
					t.Errorf("%s: PEXPIRETIME %v after the fold, want %d", k, got, at.UnixMilli())
				}
			}
			if v, _ := c.Get(ctx, live).Int64(); v != 103 {
				t.Errorf("%s = %d, want 103", live, v)
			}
			if v, _ := c.Get(ctx, shardsOnly).Int64(); v != 11 {
				t.Errorf("%s = %d, want 11", shardsOnly, v)
			}
		})
	}
}
