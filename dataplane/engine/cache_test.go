package engine_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

func TestLocalCacheTTLJitterAndWriteThrough(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	k := key(t, "page")
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	// IntN returns its maximum: the jitter takes the whole 10%.
	e := newEngine(t, tg.client, engine.Options{Clock: clk, IntN: func(n int) int { return n - 1 }})
	e.SetTable(table(routing.Entry{Key: k, LocalCache: &routing.LocalCache{TTLMillis: 2000, JitterPercent: 10}}))
	mustGet := func(want string) {
		t.Helper()
		v, _, err := e.Get(ctx, k)
		if err != nil || string(v) != want {
			t.Fatalf("GET = %q, %v; want %q", v, err, want)
		}
	}
	if err := tg.client.Set(ctx, k, "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	mustGet("v1")
	// A write from elsewhere is not seen until the TTL (minus jitter) ends.
	if err := tg.client.Set(ctx, k, "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	clk.Step(1799 * time.Millisecond)
	mustGet("v1")
	clk.Step(time.Millisecond) // 1800ms = 2000ms - 10%
	mustGet("v2")
	// A write through the engine is seen at once.
	if _, err := e.Set(ctx, k, []byte("v3")); err != nil {
		t.Fatal(err)
	}
	mustGet("v3")
	if _, err := e.IncrBy(ctx, k, 1); err == nil {
		t.Fatal("INCR of a non-integer: want the upstream error")
	}
	if _, err := e.Del(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, found, err := e.Get(ctx, k); err != nil || found {
		t.Fatalf("GET after DEL: found=%v err=%v", found, err)
	}
	// Raw writes forwarded by the proxy invalidate through Invalidate.
	if err := tg.client.Set(ctx, k, "v4", 0).Err(); err != nil {
		t.Fatal(err)
	}
	e.Invalidate(k)
	mustGet("v4")
	// Leaving the table drops the cached value.
	e.SetTable(table())
	if err := tg.client.Set(ctx, k, "v5", 0).Err(); err != nil {
		t.Fatal(err)
	}
	e.SetTable(table(routing.Entry{Key: k, LocalCache: &routing.LocalCache{TTLMillis: 2000}}))
	mustGet("v5")
}

func TestLocalCacheBounded(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	big := strings.Repeat("x", 1000)
	var entries []routing.Entry
	var keys []string
	for i := 0; i < 20; i++ {
		keys = append(keys, key(t, "k"+strconv.Itoa(100+i)))
	}
	for _, k := range keys {
		entries = append(entries, routing.Entry{Key: k, LocalCache: &routing.LocalCache{TTLMillis: 60_000}})
		if err := tg.client.Set(ctx, k, big, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for name, opts := range map[string]engine.Options{
		"entries": {MaxCacheEntries: 5},
		"bytes":   {MaxCacheBytes: 5 * (1000 + 64 + int64(len(keys[0])))},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, tg.client, opts)
			e.SetTable(table(entries...))
			for _, k := range keys {
				if _, _, err := e.Get(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			n, b := e.CacheStats()
			if n != 5 {
				t.Fatalf("cache holds %d entries (%d bytes), want 5", n, b)
			}
			// The 5 newest are cached: reading them costs no upstream GET.
			tg.resetStats(t)
			for _, k := range keys[15:] {
				if _, _, err := e.Get(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			if got := tg.calls(t, "get"); got != 0 {
				t.Fatalf("upstream GETs for cached keys = %d", got)
			}
		})
	}
}

// TestTableCacheSettings: the table's localCache settings (the policy's)
// bound the cache and turn tracking on and off; a table without them
// leaves the Options'.
func TestTableCacheSettings(t *testing.T) {
	e := engine.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), engine.Options{MaxCacheEntries: 100})
	defer e.Close()
	tbl := func(c *routing.CacheSettings) *routing.Table {
		return &routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, LocalCache: c}
	}
	e.SetTable(tbl(&routing.CacheSettings{Tracking: true, MaxEntries: 2}))
	if !e.Tracking() {
		t.Fatal("tracking not turned on by the table")
	}
	e.SetTable(tbl(nil))
	if e.Tracking() {
		t.Fatal("tracking still on after a table that leaves it to Options (off)")
	}
	e.SetTable(tbl(&routing.CacheSettings{Tracking: true}))
	e.Close()
	e.SetTable(tbl(&routing.CacheSettings{Tracking: true}))
	if e.Tracking() {
		t.Fatal("tracking turned on after Close")
	}
}

// TestTableCacheBounds: the policy's localCache.maxEntries and maxBytes,
// carried by the table, bound the cache (before, only Options did, and the
// sidecar never set them).
func TestTableCacheBounds(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	e := newEngine(t, tg.client, engine.Options{})
	var entries []routing.Entry
	for i := range 5 {
		entries = append(entries, routing.Entry{Key: key(t, strconv.Itoa(i)), Source: routing.SourceDetected, LocalCache: &routing.LocalCache{TTLMillis: 60_000}})
	}
	tb := table(entries...)
	tb.LocalCache = &routing.CacheSettings{MaxEntries: 2}
	e.SetTable(tb)
	for _, en := range entries {
		if _, _, err := e.Get(ctx, en.Key); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := e.CacheStats(); n != 2 {
		t.Fatalf("%d cache entries with maxEntries 2", n)
	}
	tb2 := table(entries...)
	tb2.Version = 2
	tb2.LocalCache = &routing.CacheSettings{MaxBytes: 1}
	e.SetTable(tb2)
	if n, b := e.CacheStats(); n != 0 || b != 0 {
		t.Fatalf("%d entries, %d bytes held with maxBytes 1", n, b)
	}
}
