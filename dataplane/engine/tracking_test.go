package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

func TestTrackingInvalidatesOnWritesFromElsewhere(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "page")
			e := newEngine(t, tg.client, engine.Options{Tracking: true})
			// A TTL far beyond the test: only an invalidation can refresh.
			e.SetTable(table(routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 3_600_000}}))
			if err := tg.client.Set(ctx, k, "v1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			get := func() string {
				v, _, err := e.Get(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				return string(v)
			}
			if v := get(); v != "v1" {
				t.Fatalf("GET = %q", v)
			}
			tg.resetStats(t)
			for i := 0; i < 100; i++ {
				get()
			}
			if n := tg.calls(t, "get"); n != 0 {
				t.Fatalf("cached reads went upstream %d times", n)
			}
			// Another client writes; the server tells the engine.
			if err := tg.client.Set(ctx, k, "v2", 0).Err(); err != nil {
				t.Fatal(err)
			}
			eventually.Succeeds(t, 5*time.Second, func() error {
				if v := get(); v != "v2" {
					return errors.New("still " + v)
				}
				return nil
			})
			// Deleted elsewhere: the engine sees the key gone.
			if err := tg.client.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
			eventually.Succeeds(t, 5*time.Second, func() error {
				if _, found, _ := e.Get(ctx, k); found {
					return errors.New("still cached")
				}
				return nil
			})
			// The tracking connection dies: nothing cached survives it.
			if err := tg.client.Set(ctx, k, "v3", 0).Err(); err != nil {
				t.Fatal(err)
			}
			eventually.Succeeds(t, 5*time.Second, func() error {
				if v := get(); v != "v3" {
					return errors.New("still " + v)
				}
				return nil
			})
			if killed := killTracking(t, tg); killed == 0 {
				t.Fatal("no tracking connection to kill")
			}
			if err := tg.client.Set(ctx, k, "v4", 0).Err(); err != nil {
				t.Fatal(err)
			}
			eventually.Succeeds(t, 5*time.Second, func() error {
				if v := get(); v != "v4" {
					return errors.New("still " + v)
				}
				return nil
			})
		})
	}
}

// killTracking kills every connection with tracking on (flag t) and returns
// how many it killed.
func killTracking(t *testing.T, tg target) int {
	t.Helper()
	ctx := context.Background()
	killed := 0
	for _, n := range tg.nodes {
		list, err := n.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			var id, flags string
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "id="); ok {
					id = v
				}
				if v, ok := strings.CutPrefix(f, "flags="); ok {
					flags = v
				}
			}
			if id != "" && strings.Contains(flags, "t") {
				if err := n.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
					t.Fatal(err)
				}
				killed++
			}
		}
	}
	return killed
}

func TestTrackingUnavailableFallsBackToTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	// A server without the CLIENT command cannot track.
	s := redistest.Standalone(t, "--rename-command", "CLIENT", "")
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	ctx := context.Background()
	k := key(t, "k")
	if err := c.Set(ctx, k, "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	e := newEngine(t, c, engine.Options{Tracking: true, Clock: clk})
	e.SetTable(table(routing.Entry{Key: k, LocalCache: &routing.LocalCache{TTLMillis: 1000}}))
	for _, want := range []string{"v1", "v1"} {
		if v, _, err := e.Get(ctx, k); err != nil || string(v) != want {
			t.Fatalf("GET = %q, %v; want %q", v, err, want)
		}
		if err := c.Set(ctx, k, "v2", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	clk.Step(time.Second)
	if v, _, err := e.Get(ctx, k); err != nil || string(v) != "v2" {
		t.Fatalf("after the TTL GET = %q, %v", v, err)
	}
}

func TestTrackingDoesNotDialAfterClose(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "closed")
			if err := tg.client.Set(ctx, k, "v1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			e := engine.New(tg.client, engine.Options{Tracking: true})
			e.SetTable(table(routing.Entry{Key: k, LocalCache: &routing.LocalCache{TTLMillis: 3_600_000}}))
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			// A read after Close still answers (without tracking) and
			// leaves no tracking connection behind.
			if v, _, err := e.Get(ctx, k); err != nil || string(v) != "v1" {
				t.Fatalf("GET after Close = %q, %v", v, err)
			}
			if n := killTracking(t, tg); n != 0 {
				t.Fatalf("%d tracking connections opened after Close", n)
			}
		})
	}
}
