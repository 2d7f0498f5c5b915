package controllers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/controllers/fold"
	"github.com/heatsink-dev/heatsink/controllers/sizes"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// managerACL is the ACL rule list docs/proxy.md (Hardened Redis) gives the
// manager's Redis user, the key patterns first (app:* stands for the
// policy's keys.include patterns).
var managerACL = []string{"~app:*", "~{*}hs:*", "+get", "+set", "+expire", "+hget", "+eval", "+evalsha",
	"+incrby", "+decrby", "+hset", "+hincrby", "+hexists", "+hdel", "+memory|usage", "+cluster|slots"}

// TestManagerACL: a Redis user with exactly managerACL folds a split
// generation, retires it, fills replicas and measures a big key (MEMORY
// USAGE), as a manager pass does; with
// any one rule fewer the pass fails with an error (the policy's condition
// message) that names what is missing: the command, or the keys.
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
	srv := redistest.Standalone(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	n := 0
	// exercise folds a generation of two shards into its base key, retires
	// it and fills replicas, as a manager pass does, as user.
	exercise := func(rules []string) error {
		n++
		user := fmt.Sprintf("mgr%d", n)
		args := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw"}, toAny(rules)...)
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
		// As on a fresh (or restarted, or failed over) Redis: the scripts
		// are not loaded, so EVAL runs first.
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("app:counter:%d", n)
		gen := routing.Generation{FromEpoch: 7, Shards: 2}
		admin.Set(ctx, key, 100, 0)
		for i, s := range routing.ShardKeys(key, gen) {
			admin.Set(ctx, s, 5+2*i, 0)
		}
		admin.Set(ctx, fmt.Sprintf("app:page:%d", n), "html", 0)
		cl := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: "pw", MaxRetries: -1})
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
		if err := fillReplicas(ctx, cl, decide.Fill{Key: fmt.Sprintf("app:page:%d", n), Replicas: 3, TTL: time.Minute}); err != nil {
			return err
		}
		got, err := sizes.Measure(ctx, cl, []string{fmt.Sprintf("app:page:%d", n)}, sizes.DefaultSamples, time.Now())
		if err == nil && got[fmt.Sprintf("app:page:%d", n)].Bytes == 0 {
			t.Fatalf("MEMORY USAGE as %s: %+v", user, got)
		}
		return err
	}
	if err := exercise(managerACL); err != nil {
		t.Fatalf("with the documented rules: %v", err)
	}
	for i, r := range managerACL {
		if r == "+cluster|slots" {
			continue // cluster mode only: go-redis's cluster client reads the slot map with it
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
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
