package sidecar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestSidecarRefreshesAhead: through the sidecar (its event loop answers
// cache hits inline), a hot key read continuously is refreshed in its
// refresh window, so a write made directly to Redis shows before the cached
// entry could have expired, after exactly one more upstream GET; with
// refreshAheadPercent 0 it shows only at expiry. Real redis-server; the
// sidecar's wall clock, with a refresh window (1 s) far longer than a
// round trip.
func TestSidecarRefreshesAhead(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	const ttl = 2 * time.Second
	for _, percent := range []int{50, 0} {
		t.Run(fmt.Sprintf("refreshAheadPercent=%d", percent), func(t *testing.T) {
			srv := redistest.Standalone(t)
			direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer direct.Close()
			ctx := context.Background()
			const key = "hot"
			addr := runSidecar(t, srv.Addr, fmt.Sprintf(`{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[`+
				`{"key":%q,"source":"detected","coalesce":true,"localCache":{"ttlMillis":%d,"refreshAheadPercent":%d}}]}`, key, ttl.Milliseconds(), percent))
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			eventually.True(t, 10*time.Second, "the routing table applies", func() bool {
				direct.Set(ctx, key, "v0", 0)
				c.Get(ctx, key)
				direct.Set(ctx, key, "behind", 0)
				return c.Get(ctx, key).Val() != "behind"
			})
			// A write through the sidecar drops the entry: the next read
			// fills it, no earlier than start.
			if err := c.Set(ctx, key, "v1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := direct.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if v := c.Get(ctx, key).Val(); v != "v1" {
				t.Fatalf("GET = %q", v)
			}
			if err := direct.Set(ctx, key, "v2", 0).Err(); err != nil {
				t.Fatal(err)
			}
			deadline := start.Add(ttl + 5*time.Second)
			for c.Get(ctx, key).Val() != "v2" {
				if time.Now().After(deadline) {
					t.Fatalf("the outside write not seen %v after the fill (TTL %v)", time.Since(start), ttl)
				}
				time.Sleep(time.Millisecond) // a measurement: the read rate, not a wait for a condition
			}
			seen := time.Since(start)
			gets := infoCalls(t, direct, "get")
			t.Logf("outside write seen %v after the fill, %d upstream GETs", seen, gets)
			if gets != 2 {
				t.Errorf("%d upstream GETs; want 2 (the fill, then one refresh or one refill)", gets)
			}
			switch {
			case percent > 0 && seen >= ttl:
				t.Errorf("seen after %v: not refreshed before the entry expired (TTL %v)", seen, ttl)
			case seen < ttl*time.Duration(100-percent)/100:
				t.Errorf("seen after %v: read upstream before the refresh window opened", seen)
			}
		})
	}
}
