package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestRefreshAt is the decision of when reads start an entry's early
// refresh.
func TestRefreshAt(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	tests := map[string]struct {
		life    time.Duration
		percent int32
		want    time.Duration // after t0; -1: never
	}{
		"off":                         {life: 2 * time.Second, percent: 0, want: -1},
		"negative is off":             {life: 2 * time.Second, percent: -5, want: -1},
		"10% of 2s: 200ms before":     {life: 2 * time.Second, percent: 10, want: 1800 * time.Millisecond},
		"50% of 100ms":                {life: 100 * time.Millisecond, percent: 50, want: 50 * time.Millisecond},
		"of a jittered lifetime":      {life: 1800 * time.Millisecond, percent: 10, want: 1620 * time.Millisecond},
		"100% would refresh at fill":  {life: time.Second, percent: 100, want: -1},
		"an entry already expired":    {life: 0, percent: 10, want: -1},
		"1% of 1ms rounds to the end": {life: time.Millisecond, percent: 1, want: 990 * time.Microsecond},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := refreshAt(t0, t0.Add(tc.life), tc.percent)
			switch {
			case tc.want < 0 && !got.IsZero():
				t.Fatalf("refreshAt = %v after fill; want never", got.Sub(t0))
			case tc.want >= 0 && (got.IsZero() || got.Sub(t0) != tc.want):
				t.Fatalf("refreshAt = %v (zero %v); want %v after fill", got.Sub(t0), got.IsZero(), tc.want)
			}
		})
	}
}

// TestCacheClaimsOneRefreshPerEntry: before its refresh point no read
// claims the refresh; from it exactly one read does, however many read;
// a new fill can be claimed again; an invalidation made while a refresh is
// in flight makes its fill fail.
func TestCacheClaimsOneRefreshPerEntry(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	c := newCache(10, 1<<20)
	fill := func(val string) bool {
		now := clk.Now()
		exp := now.Add(time.Second)
		return c.put("k", c.seq("k"), []byte(val), true, exp, refreshAt(now, exp, 20))
	}
	if !fill("v1") {
		t.Fatal("fill refused")
	}
	claims := func() int {
		var wg sync.WaitGroup
		var mu sync.Mutex
		n := 0
		for range 100 {
			wg.Go(func() {
				v, _, ok, refresh := c.get("k", clk.Now())
				if !ok || string(v) != "v1" && string(v) != "v2" {
					t.Errorf("get = %q, %v", v, ok)
				}
				if refresh {
					mu.Lock()
					n++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return n
	}
	clk.Step(799 * time.Millisecond)
	if n := claims(); n != 0 {
		t.Fatalf("%d refreshes claimed before the refresh point", n)
	}
	clk.Step(time.Millisecond)
	if n := claims(); n != 1 {
		t.Fatalf("%d refreshes claimed at the refresh point; want 1", n)
	}
	if n := claims(); n != 0 {
		t.Fatalf("%d more refreshes claimed for the same entry", n)
	}
	if !fill("v2") {
		t.Fatal("refresh fill refused")
	}
	clk.Step(800 * time.Millisecond)
	if n := claims(); n != 1 {
		t.Fatalf("%d refreshes claimed of the refreshed entry; want 1", n)
	}
	// A refresh read its sequence number, then a write invalidated.
	seq := c.seq("k")
	c.invalidate("k")
	now := clk.Now()
	if c.put("k", seq, []byte("stale"), true, now.Add(time.Second), time.Time{}) {
		t.Fatal("a refresh that raced an invalidation was stored")
	}
	if _, _, ok, _ := c.get("k", now); ok {
		t.Fatal("the invalidated entry came back")
	}
	// An expired entry is neither served nor refreshed.
	fill("v3")
	clk.Step(time.Second)
	if _, _, ok, refresh := c.get("k", clk.Now()); ok || refresh {
		t.Fatalf("expired entry: ok=%v refresh=%v", ok, refresh)
	}
}

// gate holds the reply of every GET of one key once armed: the command has
// been read by the real server and answered, and the engine does not see
// the answer until release.
type gate struct {
	key      string
	mu       sync.Mutex
	armed    bool
	answered chan struct{}
	release  chan struct{}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		g.mu.Lock()
		hold := g.armed && strings.EqualFold(cmd.Name(), "get") && len(cmd.Args()) == 2 && cmd.Args()[1] == g.key
		if hold {
			g.armed = false
		}
		g.mu.Unlock()
		if hold {
			close(g.answered)
			<-g.release
		}
		return err
	}
}

// TestRefreshDoesNotResurrectAnInvalidatedValue: an early refresh whose
// reply was read from Redis before a write invalidated the key must not be
// stored; the next read sees the write. Real redis-server; the refresh's
// reply is held in a go-redis hook until the write is done.
func TestRefreshDoesNotResurrectAnInvalidatedValue(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	ctx := context.Background()
	const k = "hot"
	g := &gate{key: k, answered: make(chan struct{}), release: make(chan struct{})}
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	rc.AddHook(g)
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	e := New(rc, Options{Clock: clk})
	defer e.Close()
	e.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000,
		Entries: []routing.Entry{{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 1000, RefreshAheadPercent: 20}}}})
	if err := rc.Set(ctx, k, "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	mustGet := func(want string) {
		t.Helper()
		if v, _, err := e.Get(ctx, k); err != nil || string(v) != want {
			t.Fatalf("GET = %q, %v; want %q", v, err, want)
		}
	}
	mustGet("v1")
	clk.Step(800 * time.Millisecond)
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
	mustGet("v1") // claims the refresh, which reads "v1" upstream ...
	<-g.answered
	// ... and, before the engine sees that reply, a write through the
	// engine invalidates the key.
	if _, err := e.Set(ctx, k, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	e.waitRefreshes() // the refresh has tried to store its reply
	if v, _, ok := e.cache.fresh(k, clk.Now()); ok {
		t.Fatalf("the cache holds %q after the write: the refresh resurrected it", v)
	}
	mustGet("v2")
}
