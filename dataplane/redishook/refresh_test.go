package redishook_test

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestHookRefreshesAhead: an application's GETs of a cached key in its
// refresh window are answered from the cache while one early refresh reads
// the key upstream on the application's own client; the refresh passes
// the hook (were it intercepted, it would be answered from the cache and
// store the old value again) and the outside write shows before the entry
// would have expired. Real redis-server (standalone and cluster), injected
// clock, upstream GETs counted by INFO commandstats.
func TestHookRefreshesAhead(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			const k = "hook:refresh"
			clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
			e := engine.New(tg.app, engine.Options{Clock: clk})
			t.Cleanup(func() { e.Close() })
			tg.app.AddHook(redishook.New(e))
			tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000, Entries: []routing.Entry{
				{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 1000, RefreshAheadPercent: 10}}}}
			if err := tbl.Validate(); err != nil {
				t.Fatal(err)
			}
			e.SetTable(tbl)
			if err := tg.direct.Set(ctx, k, "v1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			tg.resetStats(t)
			get := func() string {
				t.Helper()
				v, err := tg.app.Get(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			if v := get(); v != "v1" {
				t.Fatalf("GET = %q", v)
			}
			if err := tg.direct.Set(ctx, k, "v2", 0).Err(); err != nil {
				t.Fatal(err)
			}
			clk.Step(900 * time.Millisecond)
			for range 20 {
				if v := get(); v != "v1" && v != "v2" {
					t.Fatalf("GET = %q", v)
				}
			}
			eventually.True(t, 10*time.Second, "the refresh brings the outside write before expiry", func() bool { return get() == "v2" })
			if n := tg.getCalls(t); n != 2 {
				t.Fatalf("%d upstream GETs; want 2 (the fill and one refresh)", n)
			}
			clk.Step(100 * time.Millisecond) // the first entry's expiry
			if v := get(); v != "v2" {
				t.Fatalf("GET = %q", v)
			}
			if n := tg.getCalls(t); n != 2 {
				t.Fatalf("%d upstream GETs after the old expiry; want 2", n)
			}
		})
	}
}
