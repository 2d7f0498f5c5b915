package controllers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/controllers/fold"
	"github.com/heatsink-dev/heatsink/controllers/sizes"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// managerACL is the ACL rule list docs/proxy.md (Hardened Redis) gives the
// manager's Redis user, the key patterns first (app:* stands for the
// policy's keys.include patterns).
var managerACL = []string{"~app:*", "~{*}hs:*", "+get", "+set", "+expire", "+pexpiretime", "+pexpireat", "+hget", "+eval", "+evalsha",
	"+incrby", "+decrby", "+hset", "+hincrby", "+hexists", "+hdel", "+hgetall", "+zrange", "+zincrby", "+zrem", "+zscore", "+smembers", "+sadd", "+srem",
	"+memory|usage", "+cluster|slots"}

// TestManagerACL: a Redis user with exactly managerACL folds a split
// generation, retires it, fills replicas and measures a big key (MEMORY
// USAGE), as a manager pass does, through the client the manager makes
// (DialRedis), against a standalone Redis and a 3-master cluster (the user
// set on every master); with any one rule fewer the pass fails with an
// error (the policy's condition message) that names what is missing: the
// command, or the keys. +cluster|slots is needed in the cluster only.
func TestManagerACL(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	doc, err := os.ReadFile("../docs/proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	if line := "~{*}hs:* -@all " + strings.Join(managerACL[2:], " "); !strings.Contains(string(doc), line) {
		t.Fatalf("docs/proxy.md (Hardened Redis) does not give the rules tested here: %s", line)
	}
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			var addrs []string
			if cluster {
				addrs = redistest.Cluster(t).Addrs()
			} else {
				addrs = []string{redistest.Standalone(t).Addr}
			}
			exercise := managerPassAs(t, v1alpha1.RedisTarget{Addresses: addrs, Cluster: cluster})
			if err := exercise(managerACL); err != nil {
				t.Fatalf("with the documented rules: %v", err)
			}
			for i, r := range managerACL {
				if r == "+cluster|slots" && !cluster {
					continue // go-redis's cluster client reads the slot map with it
				}
				fewer := append(append([]string{}, managerACL[:i]...), managerACL[i+1:]...)
				err := exercise(fewer)
				want := "'" + strings.TrimPrefix(r, "+") + "'"
				if strings.HasPrefix(r, "~") {
					want = "access one of the keys"
				} else if err != nil && strings.Contains(err.Error(), "script") {
					want = "lacks " + r
				}
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("without %s: error %v, want one naming it (%q)", r, err, want)
				} else {
					t.Logf("without %s: %v", r, err)
				}
			}
		})
	}
}

// managerPassAs returns a function that, as a new user with the given
// rules on every node of target, folds a generation of two shards into its
// base key, retires it, fills replicas and measures a key, as a manager
// pass does, and returns the first error.
func managerPassAs(t *testing.T, target v1alpha1.RedisTarget) func(rules []string) error {
	ctx := context.Background()
	admin, err := DialRedis(target, Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	n := 0
	return func(rules []string) error {
		n++
		user := fmt.Sprintf("mgr%d", n)
		for _, a := range target.Addresses {
			node := redis.NewClient(&redis.Options{Addr: a})
			args := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw"}, toAny(rules)...)
			err := node.Do(ctx, args...).Err()
			if err == nil {
				// As on a fresh (or restarted, or failed over) Redis: the
				// scripts are not loaded, so EVAL runs first.
				err = node.ScriptFlush(ctx).Err()
			}
			node.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		key := fmt.Sprintf("app:counter:%d", n)
		gen := routing.Generation{FromEpoch: 7, Shards: 2}
		// No base key, and the first shard carries the counter's expiry:
		// the fold creates the base key with it (PEXPIREAT).
		for i, s := range routing.ShardKeys(key, gen) {
			admin.Set(ctx, s, 5+2*i, 0)
			if i == 0 {
				admin.Expire(ctx, s, time.Hour)
			}
		}
		page := fmt.Sprintf("app:page:%d", n)
		admin.Set(ctx, page, "html", 0)
		cl, err := DialRedis(target, Credentials{Username: user, Password: "pw"})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		f := fold.New(cl, fold.Options{})
		res, err := f.Generation(ctx, key, gen)
		if err != nil {
			return err
		}
		if !res.Done || res.Moved != 12 {
			t.Fatalf("fold as %s: %+v", user, res)
		}
		if err := f.Retire(ctx, key, gen, fold.RetiredTTL); err != nil {
			return err
		}
		// A hash of counters split by field: its shards are read whole
		// (HGETALL) and folded field by field.
		hkey := fmt.Sprintf("app:stats:%d", n)
		for i, s := range routing.ShardKeys(hkey, gen) {
			admin.HIncrBy(ctx, s, fmt.Sprintf("f%d", i), 3)
		}
		res, err = f.Split(ctx, hkey, &routing.Split{Members: true}, gen)
		if err != nil {
			return err
		}
		if !res.Done || res.Moved != 6 {
			t.Fatalf("member fold as %s: %+v", user, res)
		}
		// A leaderboard and a set split by member: ZRANGE WITHSCORES and
		// SMEMBERS read their shards; ZINCRBY/ZREM and SADD/SREM move.
		zkey, skey := fmt.Sprintf("app:board:%d", n), fmt.Sprintf("app:flags:%d", n)
		for i, s := range routing.ShardKeys(zkey, gen) {
			admin.ZIncrBy(ctx, s, 3, fmt.Sprintf("p%d", i))
		}
		for i, s := range routing.ShardKeys(skey, gen) {
			admin.SAdd(ctx, s, fmt.Sprintf("m%d", i))
		}
		for k, s := range map[string]*routing.Split{zkey: {Members: true, Kind: routing.KindZSet}, skey: {Members: true, Kind: routing.KindSet}} {
			res, err = f.Split(ctx, k, s, gen)
			if err != nil {
				return err
			}
			if !res.Done || res.Moves != 2 {
				t.Fatalf("%s member fold as %s: %+v", s.Kind, user, res)
			}
		}
		if err := fillReplicas(ctx, cl, decide.Fill{Key: page, Replicas: 3, TTL: time.Minute}); err != nil {
			return err
		}
		got, err := sizes.Measure(ctx, cl, []string{page}, sizes.DefaultSamples, time.Now())
		if err == nil && got[page].Bytes == 0 {
			t.Fatalf("MEMORY USAGE as %s: %+v", user, got)
		}
		return err
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
