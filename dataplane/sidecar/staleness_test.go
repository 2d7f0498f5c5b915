package sidecar_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// runSidecar serves a sidecar in front of addr following the routing table
// in table (JSON) until the test ends, and returns its listen address. opts
// adjust its configuration.
func runSidecar(t testing.TB, addr, table string, opts ...func(*sidecar.Config)) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "routing.json")
	if err := os.WriteFile(file, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := sidecar.Config{Listener: ln, Upstreams: []string{addr}, Policy: "p", Namespace: "ns", RoutingFile: file}
	for _, o := range opts {
		o(&cfg)
	}
	go func() { done <- sidecar.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ln.Addr().String()
}

func infoField(t *testing.T, c *redis.Client, section, field string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// TestStalenessAfterAnOutsideWrite measures, through the sidecar, how long
// a cached hot key keeps answering its old value after a write made
// directly to Redis (another service, a script, an operator), with the
// policy's localCache.tracking on and off; it also measures what tracking
// costs Redis (connections, tracked keys, memory). Before, the sidecar
// never applied tracking: the value stayed stale for its whole TTL either
// way. The figures are in docs/engine.md.
func TestStalenessAfterAnOutsideWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	const rounds = 8
	for _, tc := range []struct {
		tracking bool
		ttl      time.Duration
	}{{true, 2 * time.Second}, {false, time.Second}} {
		t.Run(fmt.Sprintf("tracking=%v", tc.tracking), func(t *testing.T) {
			srv := redistest.Standalone(t)
			direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer direct.Close()
			ctx := context.Background()
			const keys = 1000
			var entries []string
			for i := range keys {
				entries = append(entries, fmt.Sprintf(`{"key":"hot:%04d","source":"detected","coalesce":true,"localCache":{"ttlMillis":%d}}`, i, tc.ttl.Milliseconds()))
			}
			clientsBefore := infoField(t, direct, "clients", "connected_clients")
			memBefore := infoField(t, direct, "memory", "used_memory")
			addr := runSidecar(t, srv.Addr, fmt.Sprintf(`{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"localCache":{"tracking":%v},"entries":[%s]}`,
				tc.tracking, strings.Join(entries, ",")))
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			const key = "hot:0000"
			if err := direct.Set(ctx, key, "v0", 0).Err(); err != nil {
				t.Fatal(err)
			}
			// The table is in force once the cache answers a value Redis
			// no longer has.
			eventually.True(t, 10*time.Second, "the routing table applies", func() bool {
				c.Get(ctx, key)
				direct.Set(ctx, key, "behind", 0)
				defer direct.Set(ctx, key, "v0", 0)
				return c.Get(ctx, key).Val() != "behind"
			})
			var stale []time.Duration
			for r := 1; r <= rounds; r++ {
				want := "v" + strconv.Itoa(r)
				c.Get(ctx, key) // cached
				start := time.Now()
				if err := direct.Set(ctx, key, want, 0).Err(); err != nil {
					t.Fatal(err)
				}
				deadline := start.Add(tc.ttl + 2*time.Second)
				for c.Get(ctx, key).Val() != want {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: %q still stale after %v (TTL %v)", r, key, time.Since(start), tc.ttl)
					}
					time.Sleep(time.Millisecond) // a measurement: the read rate, not a wait for a condition
				}
				stale = append(stale, time.Since(start))
			}
			slices.Sort(stale)
			// Cost: fill every key's cache, then read what Redis holds for it.
			for i := range keys {
				c.Get(ctx, fmt.Sprintf("hot:%04d", i))
			}
			t.Logf("staleness after an outside write, %d rounds: p50 %v, max %v (TTL %v)", rounds, stale[len(stale)/2], stale[len(stale)-1], tc.ttl)
			t.Logf("Redis: +%d connections, tracking_total_keys %d, tracking_total_items %d, used_memory %+d bytes for %d cached keys",
				infoField(t, direct, "clients", "connected_clients")-clientsBefore, infoField(t, direct, "stats", "tracking_total_keys"),
				infoField(t, direct, "stats", "tracking_total_items"), infoField(t, direct, "memory", "used_memory")-memBefore, keys)
			if tc.tracking {
				if max := stale[len(stale)-1]; max > 500*time.Millisecond {
					t.Errorf("with tracking a value stayed stale %v after an outside write", max)
				}
				if n := infoField(t, direct, "stats", "tracking_total_keys"); n < keys/2 {
					t.Errorf("tracking_total_keys = %d: the sidecar's cache fills are not tracked", n)
				}
			} else if stale[len(stale)/2] < tc.ttl/10 {
				t.Errorf("without tracking the median staleness is %v: the cache is not in force", stale[len(stale)/2])
			}
		})
	}
}
