package engine_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// BenchmarkLookup measures the per-command cost the proxy pays for every
// key: the no-mitigation path. The peer is a plain Go map lookup.
func BenchmarkLookup(b *testing.B) {
	big := make([]routing.Entry, 1000)
	for i := range big {
		big[i] = routing.Entry{Key: "hot:" + strconv.Itoa(100000+i), Coalesce: true}
	}
	m := map[string]bool{}
	for _, en := range big {
		m[en.Key] = true
	}
	e := engine.New(nil, engine.Options{})
	defer e.Close()
	b.Run("empty-table", func(b *testing.B) {
		e.SetTable(nil)
		for b.Loop() {
			if e.Lookup("user:12345:session") {
				b.Fatal("hit")
			}
		}
	})
	b.Run("1000-entries-miss", func(b *testing.B) {
		e.SetTable(table(big...))
		for b.Loop() {
			if e.Lookup("user:12345:session") {
				b.Fatal("hit")
			}
		}
	})
	b.Run("peer-go-map-miss", func(b *testing.B) {
		for b.Loop() {
			if m["user:12345:session"] {
				b.Fatal("hit")
			}
		}
	})
}

// BenchmarkGet compares a read of a hot key straight from Redis (go-redis,
// one round trip) with the engine's local-cache hit and coalesced read.
func BenchmarkGet(b *testing.B) {
	tg := targets(b)[0]
	ctx := context.Background()
	const k = "bench:get:hot"
	if err := tg.client.Set(ctx, k, "0123456789abcdef0123456789abcdef", 0).Err(); err != nil {
		b.Fatal(err)
	}
	e := engine.New(tg.client, engine.Options{})
	defer e.Close()
	b.Run("direct-redis", func(b *testing.B) {
		b.SetParallelism(25) // 50 concurrent callers on 2 cores, as in the proxy benchmarks
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := tg.client.Get(ctx, k).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("engine-cache-hit", func(b *testing.B) {
		e.SetTable(table(routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 600_000}}))
		b.SetParallelism(25) // 50 concurrent callers on 2 cores, as in the proxy benchmarks
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := e.Get(ctx, k); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("engine-coalesce-only", func(b *testing.B) {
		e.SetTable(table(routing.Entry{Key: k, Coalesce: true}))
		b.SetParallelism(25) // 50 concurrent callers on 2 cores, as in the proxy benchmarks
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := e.Get(ctx, k); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkIncr compares INCR straight to Redis with INCR on a split
// counter (one shard write plus the bounded-staleness estimate) and with
// pre-aggregation (no round trip).
func BenchmarkIncr(b *testing.B) {
	tg := targets(b)[0]
	ctx := context.Background()
	const k = "bench:incr:hot"
	e := engine.New(tg.client, engine.Options{})
	defer e.Close()
	split := &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 8}}}
	b.Run("direct-redis", func(b *testing.B) {
		b.SetParallelism(25) // 50 concurrent callers on 2 cores, as in the proxy benchmarks
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := tg.client.Incr(ctx, k).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("engine-split-8", func(b *testing.B) {
		e.SetTable(table(routing.Entry{Key: k, Split: split}))
		b.SetParallelism(25) // 50 concurrent callers on 2 cores, as in the proxy benchmarks
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := e.IncrBy(ctx, k, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("engine-preaggregate", func(b *testing.B) {
		e.SetTable(table(routing.Entry{Key: k, Split: split, PreAggregate: &routing.PreAggregate{FlushMillis: 100}}))
		b.SetParallelism(25) // 50 concurrent callers on 2 cores, as in the proxy benchmarks
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := e.IncrBy(ctx, k, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
