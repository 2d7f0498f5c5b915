package redishook_test

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestHookDatabase: the hook applies the table only to a client of the
// table's database (redis.Options.DB); a client of another database goes
// through untouched and is not reported for the policy.
func TestHookDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	s := redistest.Standalone(t)
	ctx := context.Background()
	split := &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}
	for _, tc := range []struct {
		name          string
		clientDB      int
		tableDB       int32
		wantMitigated bool
	}{
		{"client db 1, table db 0", 1, 0, false},
		{"client db 1, table db 1", 1, 1, true},
		{"client db 0, table db 2", 0, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct := redis.NewClient(&redis.Options{Addr: s.Addr, DB: tc.clientDB})
			defer direct.Close()
			if err := direct.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			app := redis.NewClient(&redis.Options{Addr: s.Addr, DB: tc.clientDB})
			defer app.Close()
			e := engine.New(app, engine.Options{})
			defer e.Close()
			rec := &obsRecorder{}
			app.AddHook(redishook.New(e, redishook.WithObserver(rec, "ns/p")))
			e.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersionFor(tc.tableDB), Version: 1, Database: tc.tableDB, EpochMillis: 60_000,
				Entries: []routing.Entry{{Key: "likes", Split: split}}})
			for range 5 {
				if err := app.Incr(ctx, "likes").Err(); err != nil {
					t.Fatal(err)
				}
			}
			base, _ := direct.Get(ctx, "likes").Int64()
			if got := base != 5; got != tc.wantMitigated {
				t.Fatalf("base key of the client's database = %d after 5 INCRs: mitigated %v, want %v", base, got, tc.wantMitigated)
			}
			if v := app.Get(ctx, "likes").Val(); v != "5" {
				t.Fatalf("GET likes = %q, want 5", v)
			}
			if n := rec.count(); (n > 0) != tc.wantMitigated {
				t.Fatalf("%d accesses reported for the policy; want some only when the client is in the table's database", n)
			}
		})
	}
}

// obsRecorder counts the accesses reported to it.
type obsRecorder struct {
	mu sync.Mutex
	n  int
}

func (r *obsRecorder) Observe(policy, key string, reads, writes, bytes uint32) {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
}

func (r *obsRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}
