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
// refresh, for a key not measured yet: percent of its lifetime before
// expiry (the window's ceiling).
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
			exp := t0.Add(tc.life)
			got := refreshAt(exp, refreshCeiling(t0, exp, tc.percent), refreshTiming{})
			switch {
			case tc.want < 0 && !got.IsZero():
				t.Fatalf("refreshAt = %v after fill; want never", got.Sub(t0))
			case tc.want >= 0 && (got.IsZero() || got.Sub(t0) != tc.want):
				t.Fatalf("refreshAt = %v (zero %v); want %v after fill", got.Sub(t0), got.IsZero(), tc.want)
			}
		})
	}
}

// TestRefreshWindow is the measured window: twice the first need, then
// 30 % wider after a refresh that needed more and 3 % narrower after one
// that needed less, within [1 ms, ceiling]; the ceiling until measured.
func TestRefreshWindow(t *testing.T) {
	const ceiling = 200 * time.Millisecond
	ms := time.Millisecond
	after := func(needs ...time.Duration) refreshTiming {
		var tm refreshTiming
		for _, d := range needs {
			tm = tm.observe(d, ceiling)
		}
		return tm
	}
	tests := map[string]struct {
		timing refreshTiming
		want   time.Duration
	}{
		"nothing measured: the ceiling":     {refreshTiming{}, ceiling},
		"one need of 3ms: twice it":         {after(3 * ms), 6 * ms},
		"a need under the window: 3% less":  {after(10*ms, 5*ms), 20 * ms * 97 / 100},
		"a need over the window: 30% more":  {after(10*ms, 25*ms), 26 * ms},
		"a stall moves it by 30% only":      {after(10*ms, 10*time.Second), 26 * ms},
		"a fast key: the 1ms floor":         {after(100 * time.Microsecond), ms},
		"a slow key: the ceiling":           {after(150*ms, 250*ms), ceiling},
		"a need of 0 (an injected clock)":   {after(0), ms},
		"a negative need counts as nothing": {after(-time.Second), ms},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := refreshWindow(tc.timing, ceiling); got != tc.want {
				t.Fatalf("refreshWindow = %v; want %v", got, tc.want)
			}
		})
	}
	if got := refreshWindow(after(ms), 500*time.Microsecond); got != 500*time.Microsecond {
		t.Fatalf("a ceiling under the floor: window %v; want the ceiling", got)
	}
	// Needs drawn so that one in five exceeds a 4 ms window and the rest
	// are 1 ms: it settles where about one in ten exceeds it, so not at
	// 4 ms (too many late) nor at the 1 ms floor.
	var tm refreshTiming
	for i := range 2000 {
		need := ms
		if i%5 == 0 {
			need = 4*ms + time.Duration(i%7)*ms
		}
		tm = tm.observe(need, ceiling)
	}
	if w := refreshWindow(tm, ceiling); w <= 4*ms {
		t.Fatalf("with 20 %% of the needs over 4 ms the window settled at %v; want over 4 ms", w)
	}
	// One in twenty of 10 ms: under one in ten, so the floor.
	tm = refreshTiming{}
	for i := range 2000 {
		need := 900 * time.Microsecond
		if i%20 == 0 {
			need = 10 * ms
		}
		tm = tm.observe(need, ceiling)
	}
	if w := refreshWindow(tm, ceiling); w >= 2*ms {
		t.Fatalf("with 5 %% of the needs at 10 ms the window settled at %v; want under 2 ms", w)
	}
}

// TestCacheClaimsOneRefreshPerEntry: before its refresh point no read
// claims the refresh; from it exactly one read does, however many read;
// a new fill can be claimed again, at the window measured from the fills
// before it; an invalidation made while a refresh is in flight makes its
// fill fail.
func TestCacheClaimsOneRefreshPerEntry(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	c := newCache(10, 1<<20)
	fill := func(val string) bool {
		now := clk.Now()
		return c.put(keyID("k"), c.seq(), []byte(val), true, fillTimes{started: now, done: now, expires: now.Add(time.Second), aheadPercent: 20})
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
				v, _, ok, refresh := c.get(keyID("k"), clk.Now())
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
	// The refresh needed no time (claimed at its point, filled at once on
	// a fake clock): the measured window is the 1 ms floor, not the 200 ms
	// ceiling.
	clk.Step(998 * time.Millisecond)
	if n := claims(); n != 0 {
		t.Fatalf("%d refreshes claimed of the refreshed entry before its measured window", n)
	}
	clk.Step(time.Millisecond)
	if n := claims(); n != 1 {
		t.Fatalf("%d refreshes claimed of the refreshed entry; want 1", n)
	}
	// A refresh read its sequence number, then a write invalidated.
	seq := c.seq()
	c.invalidate("k")
	now := clk.Now()
	if c.put(keyID("k"), seq, []byte("stale"), true, fillTimes{started: now, done: now, expires: now.Add(time.Second)}) {
		t.Fatal("a refresh that raced an invalidation was stored")
	}
	if _, _, ok, _ := c.get(keyID("k"), now); ok {
		t.Fatal("the invalidated entry came back")
	}
	// An expired entry is neither served nor refreshed.
	fill("v3")
	clk.Step(time.Second)
	if _, _, ok, refresh := c.get(keyID("k"), clk.Now()); ok || refresh {
		t.Fatalf("expired entry: ok=%v refresh=%v", ok, refresh)
	}
	// A key that leaves the table takes its measured window with it (the
	// map stays bounded by the table), whether or not it was ever
	// invalidated; the next fill of it starts at the ceiling again.
	fillN := func() {
		now := clk.Now()
		c.put(keyID("n"), 0, []byte("x"), true, fillTimes{started: now, done: now, expires: now.Add(time.Second), aheadPercent: 20})
	}
	fillN()
	clk.Step(800 * time.Millisecond)
	if _, _, ok, refresh := c.get(keyID("n"), clk.Now()); !ok || !refresh {
		t.Fatalf("n at its refresh point: ok=%v refresh=%v", ok, refresh)
	}
	fillN() // its refresh: now measured
	if len(c.timing) != 2 {
		t.Fatalf("%d keys' refresh timings; want k's and n's", len(c.timing))
	}
	now = clk.Now()
	c.retain(func(string) bool { return false })
	if len(c.timing) != 0 {
		t.Fatalf("after retain of no key: %d keys' refresh timings kept", len(c.timing))
	}
	fill("v4")
	if got := c.m["k"][""].refreshAt.Sub(now); got != 800*time.Millisecond {
		t.Fatalf("a key back in the table refreshes %v after its fill; want the ceiling's 800ms", got)
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
	if v, _, ok := e.cache.fresh(keyID(k), clk.Now()); ok {
		t.Fatalf("the cache holds %q after the write: the refresh resurrected it", v)
	}
	mustGet("v2")
}

// TestIdleExpiryBeforeAnyRefreshIsNotANeed: an entry that expired unread
// before any refresh of its key was measured (a key filled, then idle)
// leaves the window at the ceiling, rather than setting it from the idle
// gap; once a refresh is measured, an unrefreshed expiry counts.
func TestIdleExpiryBeforeAnyRefreshIsNotANeed(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	c := newCache(10, 1<<20)
	fill := func() {
		now := clk.Now()
		c.put(keyID("k"), c.seq(), []byte("v"), true, fillTimes{started: now, done: now, expires: now.Add(time.Second), aheadPercent: 20})
	}
	fill()
	clk.Step(5 * time.Second) // expired unread
	fill()
	if tm := c.timing[keyID("k")]; tm.known {
		t.Fatalf("an idle expiry before any refresh was measured: timing %+v; want none", tm)
	}
	clk.Step(800 * time.Millisecond)
	if _, _, ok, refresh := c.get(keyID("k"), clk.Now()); !ok || !refresh {
		t.Fatalf("at the ceiling's window: ok=%v refresh=%v", ok, refresh)
	}
	clk.Step(time.Millisecond)
	fill() // the refresh, 1 ms after the window opened
	if w := refreshWindow(c.timing[keyID("k")], 200*time.Millisecond); w != 2*time.Millisecond {
		t.Fatalf("after one refresh that needed 1ms: window %v; want twice the need", w)
	}
	clk.Step(5 * time.Second) // expired unread again: now a need, over the window
	fill()
	if w := refreshWindow(c.timing[keyID("k")], 200*time.Millisecond); w != 2*time.Millisecond*130/100 {
		t.Fatalf("an unrefreshed expiry after a measured refresh: window %v; want it counted (30 %% wider)", w)
	}
}
