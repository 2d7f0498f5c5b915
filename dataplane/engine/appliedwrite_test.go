package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestAppliedIncrementNeverAnsweredWithAnError: an HINCRBY on a hash split
// by field is applied, then the engine must read the field's other places
// again (another process's HDEL changed its place's removal mark) and that
// read fails (here the user's right to HMGET is taken away in between, on a
// real standalone Redis). The reply must not be an error: the client would
// count the increment as not applied, or send it again, and the field
// would read one increment off for good (a fresh-clone run of test/apps
// found a field so). It answers with the sum read before the write, and
// Redis holds every increment once.
func TestAppliedIncrementNeverAnsweredWithAnError(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	admin := tg.client
	user := fmt.Sprintf("incr-%d", routing.MemberShard(t.Name(), 1<<20))
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	app := redis.NewClient(&redis.Options{Addr: tg.nodes[0].Options().Addr, Username: user, Password: "pw"})
	t.Cleanup(func() { _ = app.Close() })

	k := key(t, "stats")
	const shards = 4
	en := routing.Entry{Key: k, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: shards}}, Members: true}}
	clean(t, admin, en)
	f := "views"
	g := "" // another field on f's shard: its HDEL marks that place
	for i := 0; g == ""; i++ {
		if c := fmt.Sprint("session-", i); routing.MemberShard(c, shards) == routing.MemberShard(f, shards) {
			g = c
		}
	}
	e := newEngine(t, app, engine.Options{})
	e.SetTable(table(en))
	other := newEngine(t, admin, engine.Options{})
	other.SetTable(table(en))

	if v, err := e.HIncrBy(ctx, k, f, 1); err != nil || v != 1 {
		t.Fatalf("first HINCRBY: %d, %v", v, err)
	}
	if _, err := other.HIncrBy(ctx, k, g, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := other.HDel(ctx, k, []string{g}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "-hmget").Err(); err != nil {
		t.Fatal(err)
	}
	v, err := e.HIncrBy(ctx, k, f, 1)
	if err != nil {
		t.Fatalf("an applied HINCRBY answered with an error: %v", err)
	}
	if v != 2 {
		t.Errorf("HINCRBY replied %d, want 2", v)
	}
	var stored int64
	for _, place := range append([]string{k}, routing.ShardKeys(k, en.Split.Generations[0])...) {
		n, err := admin.HGet(ctx, place, f).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		stored += n
	}
	if stored != 2 {
		t.Fatalf("Redis holds %d increments of %s, want the 2 sent", stored, f)
	}
}
