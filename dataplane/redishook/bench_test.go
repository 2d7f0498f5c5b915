package redishook_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// BenchmarkHookUnmitigatedGet measures what the hook costs a go-redis
// client on keys the table does not list (peer: the same client without
// the hook), with 50 concurrent callers on a real redis-server.
func BenchmarkHookUnmitigatedGet(b *testing.B) {
	if testing.Short() {
		b.Skip("needs redis-server")
	}
	s := redistest.Standalone(b)
	ctx := context.Background()
	plain := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64})
	hooked := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64})
	defer plain.Close()
	defer hooked.Close()
	e := engine.New(hooked, engine.Options{})
	defer e.Close()
	hooked.AddHook(redishook.New(e))
	tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000,
		Entries: []routing.Entry{{Key: "hot", Coalesce: true}}}
	e.SetTable(tbl)
	if err := plain.Set(ctx, "cold", "v", 0).Err(); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *redis.Client
	}{{"peer-no-hook", plain}, {"with-hook", hooked}} {
		c := tc.c
		b.Run(tc.name, func(b *testing.B) {
			b.SetParallelism(25)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.Get(ctx, "cold").Err(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
