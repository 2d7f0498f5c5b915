package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/routing"
)

// dbTable is table() for database db.
func dbTable(db int32, entries ...routing.Entry) *routing.Table {
	t := table(entries...)
	t.Database, t.SchemaVersion = db, routing.SchemaVersionFor(db)
	return t
}

// TestTableDatabase: the engine's own commands reach the table's database
// although its client is database 0's (the sidecar's case): writes,
// replicas, shards, pre-aggregated flushes and the tracking connection's
// fills. A table for another database then drops what the engine holds.
func TestTableDatabase(t *testing.T) {
	tg := targets(t)[0] // standalone: a cluster has database 0 alone
	ctx := context.Background()
	db3 := redis.NewClient(&redis.Options{Addr: tg.nodes[0].Options().Addr, DB: 3})
	defer db3.Close()
	db0 := tg.client
	cached, page, likes, agg := key(t, "cached"), key(t, "page"), key(t, "likes"), key(t, "agg")
	split := &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}
	e := newEngine(t, db0, engine.Options{Tracking: true})
	e.SetTable(dbTable(3,
		routing.Entry{Key: agg, Split: split, PreAggregate: &routing.PreAggregate{FlushMillis: 3_600_000}},
		routing.Entry{Key: cached, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 3_600_000}},
		routing.Entry{Key: likes, Split: split},
		routing.Entry{Key: page, Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 60_000}},
	))
	if e.Database() != 3 || e.ClientDB() != 0 {
		t.Fatalf("Database() = %d, ClientDB() = %d; want 3, 0", e.Database(), e.ClientDB())
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(db0.Set(ctx, cached, "db0", 0).Err())
	must(db3.Set(ctx, cached, "db3", 0).Err())
	get := func(k string) string {
		t.Helper()
		v, _, err := e.Get(ctx, k)
		must(err)
		return string(v)
	}
	if v := get(cached); v != "db3" {
		t.Fatalf("Get = %q, want database 3's value", v)
	}
	// The tracking connection tracks database 3: a write there invalidates.
	must(db3.Set(ctx, cached, "db3b", 0).Err())
	eventually.Succeeds(t, 5*time.Second, func() error {
		if v := get(cached); v != "db3b" {
			return errors.New("still " + v)
		}
		return nil
	})

	if _, err := e.Set(ctx, page, []byte("html")); err != nil {
		t.Fatal(err)
	}
	for _, k := range append([]string{page}, routing.ReplicaKeys(page, 2)...) {
		if v := db3.Get(ctx, k).Val(); v != "html" {
			t.Fatalf("db 3 %s = %q, want html", k, v)
		}
		if db0.Exists(ctx, k).Val() != 0 {
			t.Fatalf("%s written in database 0", k)
		}
	}
	for range 8 {
		if _, err := e.IncrBy(ctx, likes, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := e.IncrBy(ctx, agg, 1); err != nil {
			t.Fatal(err)
		}
	}
	must(e.Flush(ctx))
	for _, k := range []string{likes, agg} {
		var sum int64
		for _, s := range append([]string{k}, routing.ShardKeys(k, split.Generations[0])...) {
			n, _ := db3.Get(ctx, s).Int64()
			sum += n
			if db0.Exists(ctx, s).Val() != 0 {
				t.Fatalf("%s written in database 0", s)
			}
		}
		if sum != 8 {
			t.Fatalf("database 3 holds %d of %s's 8 increments", sum, k)
		}
		if v := get(k); v != "8" {
			t.Fatalf("Get %s = %q, want 8", k, v)
		}
	}

	// The same keys in database 0: nothing cached from database 3 answers.
	e.SetTable(table(routing.Entry{Key: cached, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 3_600_000}}))
	if v := get(cached); v != "db0" {
		t.Fatalf("Get after the table moved to database 0 = %q, want db0", v)
	}
}

// TestTableDatabaseCluster: a cluster has database 0 alone; a table for
// another database is applied as empty.
func TestTableDatabaseCluster(t *testing.T) {
	tg := targets(t)[1]
	k := key(t, "k")
	e := newEngine(t, tg.client, engine.Options{})
	e.SetTable(dbTable(1, routing.Entry{Key: k, LocalCache: &routing.LocalCache{TTLMillis: 60_000}}))
	if e.Lookup(k) || e.Database() != 1 {
		t.Fatalf("Lookup = %v, Database = %d: a cluster engine applies a table for database 1", e.Lookup(k), e.Database())
	}
	e.SetTable(dbTable(0, routing.Entry{Key: k, LocalCache: &routing.LocalCache{TTLMillis: 60_000}}))
	if !e.Lookup(k) {
		t.Fatal("a table for database 0 is not applied")
	}
}
