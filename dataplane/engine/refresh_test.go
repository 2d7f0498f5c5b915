package engine_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestRefreshAheadKeepsAHotKeyCached: with refreshAheadPercent 20 and a
// 1 s TTL, reads in the last 200 ms of a new key's entry get the cached
// value and start one background refresh (one upstream GET however many
// read); the refreshed value replaces the entry before it expires, so no
// reader misses at the old expiry; the refreshed entry's window is the
// measured one (the injected clock makes every fill take no time and the
// refresh was claimed at once: the 100 µs floor), and an entry nobody reads
// in its window is not refreshed and expires. With the knob at 0 nothing is read early. Real
// redis-server (standalone and 3-master cluster), injected clock, upstream
// GETs counted by INFO commandstats.
func TestRefreshAheadKeepsAHotKeyCached(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			for _, percent := range []int32{20, 0} {
				ctx := context.Background()
				k := key(t, "hot")
				if percent == 0 {
					k = key(t, "off")
				}
				clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
				e := newEngine(t, tg.client, engine.Options{Clock: clk})
				e.SetTable(table(routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 1000, RefreshAheadPercent: percent}}))
				if err := tg.client.Set(ctx, k, "v1", 0).Err(); err != nil {
					t.Fatal(err)
				}
				tg.resetStats(t)
				// reads reads k 50 times at once; each must return one of
				// want.
				reads := func(want ...string) {
					t.Helper()
					var wg sync.WaitGroup
					for range 50 {
						wg.Go(func() {
							if v, _, err := e.Get(ctx, k); err != nil || !slices.Contains(want, string(v)) {
								t.Errorf("GET = %q, %v; want one of %q", v, err, want)
							}
						})
					}
					wg.Wait()
				}
				upstream := func(want int64) {
					t.Helper()
					if n := tg.calls(t, "get"); n != want {
						t.Fatalf("refreshAheadPercent %d: %d upstream GETs; want %d", percent, n, want)
					}
				}
				reads("v1")
				upstream(1)
				// Written elsewhere: only a read upstream can see it.
				if err := tg.client.Set(ctx, k, "v2", 0).Err(); err != nil {
					t.Fatal(err)
				}
				clk.Step(799 * time.Millisecond)
				reads("v1")
				upstream(1)
				clk.Step(time.Millisecond) // 800 ms: the refresh window opens
				if percent == 0 {
					reads("v1")
					upstream(1)
					clk.Step(200 * time.Millisecond)
					reads("v2") // expired: read again
					upstream(2)
					continue
				}
				// Cached reads; the refresh they start may already have
				// replaced the entry for the later ones.
				reads("v1", "v2")
				eventually.True(t, 10*time.Second, "the refreshed value replaces the entry before it expires", func() bool {
					v, _, err := e.Get(ctx, k)
					return err == nil && string(v) == "v2"
				})
				upstream(2)
				reads("v2")
				clk.Step(200 * time.Millisecond) // the old entry's expiry: no miss
				reads("v2")
				upstream(2)
				// The refreshed entry (filled at 800 ms) opens its window at
				// 1799.9 ms: a read at 1700 ms does not refresh it, and nobody
				// reads it again until it expired at 1800 ms.
				clk.Step(700 * time.Millisecond)
				reads("v2")
				upstream(2)
				clk.Step(100 * time.Millisecond)
				reads("v2")
				upstream(3) // a miss, as without refresh
			}
		})
	}
}

// TestRefreshedEntryLivesTheWholeTTL: with jitterPercent 10 a key's first
// fill lives 90 to 100 % of the TTL (here, with the random draw injected at
// its largest, 900 ms of 1 s), but a fill timed by the expiry of the key's
// previous entry gets the whole TTL: a refresh ahead of it, or a miss
// within the jitter span (100 ms) after it; it keeps that entry's phase,
// which already carries the jitter. A miss after a longer gap is jittered
// again. Real redis-server, injected clock, upstream GETs counted by INFO
// commandstats.
func TestRefreshedEntryLivesTheWholeTTL(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	k := key(t, "jittered")
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	e := newEngine(t, tg.client, engine.Options{Clock: clk, IntN: func(n int) int { return n - 1 }})
	e.SetTable(table(routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 1000, JitterPercent: 10, RefreshAheadPercent: 20}}))
	if err := tg.client.Set(ctx, k, "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	tg.resetStats(t)
	read := func(want string, upstream int64) {
		t.Helper()
		if v, _, err := e.Get(ctx, k); err != nil || string(v) != want {
			t.Fatalf("GET = %q, %v; want %q", v, err, want)
		}
		if n := tg.calls(t, "get"); n != upstream {
			t.Fatalf("%d upstream GETs; want %d", n, upstream)
		}
	}
	read("v1", 1) // the first fill: lives 900 ms, its window is 20 % of that
	if err := tg.client.Set(ctx, k, "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	clk.Step(720 * time.Millisecond)
	if v, _, err := e.Get(ctx, k); err != nil || string(v) != "v1" {
		t.Fatalf("GET in the window = %q, %v; want the cached v1 (and its refresh claimed)", v, err)
	}
	eventually.True(t, 10*time.Second, "the refreshed value replaces the entry", func() bool {
		v, _, err := e.Get(ctx, k)
		return err == nil && string(v) == "v2"
	})
	// Reads stay out of the measured window (the 1 ms floor: the refresh
	// needed no time on the injected clock), so none claims a refresh.
	clk.Step(998 * time.Millisecond) // 1718 ms: the refresh (at 720 ms) lives to 1720 ms
	read("v2", 2)
	clk.Step(2 * time.Millisecond)
	read("v2", 3) // expired unrefreshed, a miss at once: lives to 2720 ms
	clk.Step(998 * time.Millisecond)
	read("v2", 3)
	clk.Step(103 * time.Millisecond) // 2821 ms: 101 ms after the expiry
	read("v2", 4)                    // a miss after a gap: lives 900 ms, to 3721 ms
	clk.Step(898 * time.Millisecond)
	read("v2", 4)
	clk.Step(2 * time.Millisecond)
	read("v2", 5)
}
