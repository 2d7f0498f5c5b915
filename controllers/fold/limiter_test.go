package fold

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestFixedWindowLimiterOnASplitCounter runs a fixed-window rate limiter as
// applications write it (INCR key:window; EXPIRE key:window N when the reply
// is 1; admit when the reply is within the limit) in 3 application
// processes, each a go-redis client in its default configuration with an
// engine and the hook, against real Redis (standalone and a 3-master
// cluster), at 1,200 calls/s in all. Each window's key is split in 4 shards once it exists (as a
// detected hot key is), and after the window expired its generation is
// folded and retired as the manager does. Checked: within a live window the
// counter is exact; the limiter admits at most its limit plus the bound of
// docs/engine.md (the other processes' increments acknowledged in any
// interval of TotalRefresh plus three of the slowest INCR's round trips); and once the windows
// expired and were folded, no key is left without an expiry.
func TestFixedWindowLimiterOnASplitCounter(t *testing.T) {
	const (
		processes = 3
		workers   = 4                     // goroutines per process
		each      = 40                    // limiter calls per goroutine per window
		pace      = 10 * time.Millisecond // between a goroutine's calls: 1,200/s in all
		limit     = 200
		windows   = 2
		// A window outlives its load (0.4 s at the pace) by ten times: on
		// a 2-core machine at load 35 one window's load took 2.4 s.
		window  = 4 * time.Second
		refresh = 50 * time.Millisecond // engine.Options' default TotalRefresh
	)
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			var apps []redis.UniversalClient
			var engines []*engine.Engine
			for range processes {
				c := tg.newClient()
				e := engine.New(c, engine.Options{TotalRefresh: refresh})
				c.AddHook(redishook.New(e))
				t.Cleanup(func() { _ = e.Close(); _ = c.Close() })
				apps = append(apps, c)
				engines = append(engines, e)
			}
			version := int64(0)
			publish := func(entries ...routing.Entry) {
				version++
				tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, Policy: "t/p", Version: version, EpochMillis: 60_000, Entries: entries}
				if err := tbl.Validate(); err != nil {
					t.Fatal(err)
				}
				for _, e := range engines {
					e.SetTable(tbl)
				}
			}
			limiter := func(c redis.UniversalClient, key string) (bool, error) {
				n, err := c.Incr(ctx, key).Result()
				if err != nil {
					return false, err
				}
				if n == 1 {
					if err := c.Expire(ctx, key, window).Err(); err != nil {
						return false, err
					}
				}
				return n <= limit, nil
			}
			gen := routing.Generation{FromEpoch: 0, Shards: 4}
			folder := New(tg.admin, Options{})
			for w := range windows {
				key := fmt.Sprintf("rl:%s:%d", tg.name, w)
				// The window's first call, before the key is split.
				if ok, err := limiter(apps[0], key); err != nil || !ok {
					t.Fatalf("first call: %v, %v", ok, err)
				}
				publish(routing.Entry{Key: key, Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{gen}}})
				type call struct {
					process  int
					acked    time.Time
					took     time.Duration
					admitted bool
				}
				calls := make([][]call, processes*workers)
				var wg sync.WaitGroup
				start := time.Now()
				for i := range calls {
					wg.Add(1)
					go func() {
						defer wg.Done()
						tick := time.NewTicker(pace)
						defer tick.Stop()
						for range each {
							<-tick.C
							t0 := time.Now()
							ok, err := limiter(apps[i%processes], key)
							if err != nil {
								t.Errorf("limiter: %v", err)
								return
							}
							now := time.Now()
							calls[i] = append(calls[i], call{process: i % processes, acked: now, took: now.Sub(t0), admitted: ok})
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				if t.Failed() {
					t.FailNow()
				}
				// Within the window the counter is exact.
				pttl := tg.admin.PTTL(ctx, key).Val()
				got, err := apps[0].Get(ctx, key).Int64()
				if err != nil {
					t.Fatal(err)
				}
				if left := tg.admin.PTTL(ctx, key).Val(); pttl <= 0 || left <= 0 {
					t.Fatalf("the window expired during the load (%v): make it shorter", elapsed)
				}
				if want := int64(1 + len(calls)*each); got != want {
					t.Fatalf("window %d: GET = %d, want the %d calls made", w, got, want)
				}
				// Over-admission against the bound.
				admitted, n := 1, 0
				acks := make([][]time.Time, processes)
				var slowest time.Duration
				for _, cs := range calls {
					for _, c := range cs {
						if c.admitted {
							admitted++
						}
						n++
						acks[c.process] = append(acks[c.process], c.acked)
						slowest = max(slowest, c.took)
					}
				}
				// An INCR misses what others added since its total was read: a read
				// begun at most TotalRefresh before the call (plus a refresh in
				// flight), up to its reply; their acknowledgements come up to one
				// round trip later.
				span := refresh + 3*slowest
				bound := 0
				for p := range processes {
					var others []time.Time
					for q, a := range acks {
						if q != p {
							others = append(others, a...)
						}
					}
					bound = max(bound, mostIn(others, span))
				}
				t.Logf("window %d: %d calls in %v (%.0f/s), %d admitted for a limit of %d (over by %d, %.1f %%); bound %d (calls of the other processes acknowledged in any %v)",
					w, n+1, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), admitted, limit,
					admitted-limit, 100*float64(admitted-limit)/limit, bound, span.Round(time.Millisecond))
				if admitted-limit > bound {
					t.Errorf("window %d: admitted %d, over the limit %d by more than the bound %d", w, admitted, limit, bound)
				}
				// The window ends; the manager folds the retired generation
				// and drops the key from the table.
				gone(t, tg.admin, key)
				res, err := folder.Generation(ctx, key, gen)
				if err != nil || !res.Done {
					t.Fatalf("fold: %+v, %v", res, err)
				}
				publish()
				if err := folder.Retire(ctx, key, gen, RetiredTTL); err != nil {
					t.Fatal(err)
				}
				if n := tg.admin.Exists(ctx, key).Val(); n != 0 {
					t.Fatalf("window %d: the fold brought the expired key back", w)
				}
			}
			if left := persistent(t, tg.admin); len(left) > 0 {
				t.Fatalf("keys without an expiry after the windows: %q", left)
			}
		})
	}
}

// mostIn is the largest number of times of ts within any interval of
// length d.
func mostIn(ts []time.Time, d time.Duration) int {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) > d {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}
