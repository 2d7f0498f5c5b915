package proxy_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestShedRefusesTheExcessAtOnce: through the sidecar against a real
// redis-server, the writes of a shed key over the sidecar's share are
// answered routing.ShedError without reaching Redis, the admitted ones are
// applied once each (go-redis' default retries), a plain key on the same
// server is untouched, the reads of a cached shed key are never shed, and a
// transaction with a command over the share is aborted whole (EXECABORT). The clock is a fake
// one: the share is whatever tokens its steps add, exactly.
func TestShedRefusesTheExcessAtOnce(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	for _, noLoop := range []bool{false, true} {
		name := "event loop"
		if noLoop {
			name = "sessions"
		}
		t.Run(name, func(t *testing.T) { checkShed(t, srv.Addr, noLoop) })
	}
}

func checkShed(t *testing.T, srvAddr string, noLoop bool) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	ec := redis.NewClient(&redis.Options{Addr: srvAddr})
	ec.FlushDB(context.Background())
	eng := engine.New(ec, engine.Options{Clock: clk})
	t.Cleanup(func() { eng.Close(); ec.Close() })
	shed := &routing.Shed{WritesPerSecond: 100, ReadsPerSecond: 100, DemandWrites: 500, DemandReads: 1, MinPerSecond: 10}
	eng.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
		{Key: "cached", Source: routing.SourceDetected, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60000}, Shed: shed},
		{Key: "counter", Source: routing.SourceDetected, Shed: shed},
	}})
	rec := &recorder{m: map[string][3]uint32{}}
	addr, _ := start(t, proxy.Config{Upstreams: []string{srvAddr}, Engine: eng, Observer: rec, Policy: "ns/p", NoEventLoop: noLoop})
	// go-redis' defaults: the refusal is not one it retries.
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	ec.ConfigResetStat(ctx)

	incr := func(n int) (ok, shedN int) {
		t.Helper()
		for range n {
			err := c.Incr(ctx, "counter").Err()
			switch {
			case err == nil:
				ok++
			case err.Error() == routing.ShedError:
				shedN++
			default:
				t.Fatalf("INCR counter: %v", err)
			}
			if err := c.Incr(ctx, "other").Err(); err != nil {
				t.Fatalf("INCR of a plain key on the same server: %v", err)
			}
		}
		return ok, shedN
	}
	// A new sidecar starts from the minimum: with the clock still, the
	// first write is admitted and every other is refused.
	if ok, n := incr(50); ok != 1 || n != 49 {
		t.Fatalf("first window: %d admitted, %d shed; want 1 and 49", ok, n)
	}
	// One window later its demand (50/s) is measured: its share is
	// 100 × 50 ÷ 500 = 10/s, a burst of one. Ten steps of 100ms admit ten.
	clk.Step(time.Second)
	admitted := 0
	for range 10 {
		ok, n := incr(5)
		if ok != 1 || n != 4 {
			t.Fatalf("at its share: %d admitted, %d shed of 5; want 1 and 4", ok, n)
		}
		admitted += ok
		clk.Step(100 * time.Millisecond)
	}
	if v, err := ec.Get(ctx, "counter").Int(); err != nil || v != 1+admitted {
		t.Fatalf("counter = %d (%v), want the %d admitted increments", v, err, 1+admitted)
	}
	if v, _ := ec.Get(ctx, "other").Int(); v != 100 {
		t.Fatalf("plain key = %d, want every one of 100 increments", v)
	}
	if got := commandCalls(t, ec, "incr"); got != 1+admitted+100 {
		t.Fatalf("Redis saw %d INCRs, want %d: a shed command must not reach it", got, 1+admitted+100)
	}
	// Refused writes are demand too: the node agent sees every attempt.
	rec.mu.Lock()
	writes := rec.m["ns/p|counter"][1]
	rec.mu.Unlock()
	if writes != 100 {
		t.Fatalf("observer saw %d writes of the shed key, want all 100 attempts", writes)
	}

	t.Run("reads of a cached key are never shed", func(t *testing.T) {
		for i := range 200 {
			if err := c.Get(ctx, "cached").Err(); err != nil && err != redis.Nil {
				t.Fatalf("GET cached #%d: %v", i, err)
			}
		}
	})
	t.Run("a transaction over the share is aborted whole", func(t *testing.T) {
		before, _ := ec.Get(ctx, "counter").Int()
		cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for range 20 {
				p.Incr(ctx, "counter")
			}
			return nil
		})
		if err == nil || !strings.HasPrefix(err.Error(), "EXECABORT ") {
			t.Fatalf("MULTI of 20 INCRs over the share: %v, want EXECABORT", err)
		}
		refused := 0
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil && e.Error() == routing.ShedError {
				refused++
			}
		}
		if refused == 0 {
			t.Fatalf("no INCR in MULTI got %q", routing.ShedError)
		}
		if v, _ := ec.Get(ctx, "counter").Int(); v != before {
			t.Fatalf("counter = %d after an aborted transaction, want %d: some of it ran", v, before)
		}
	})
}

// TestShedFollowsASlowShard: through the sidecar against a real
// redis-server, a shed key's writers take its whole share while the shard
// answers at once; while the shard queues (another client's scripts keep it
// busy 20 ms at a time, so every command waits), the sidecar admits a
// small part of the share, steadily, although the writers (20 at one
// command per script) could get far more than the share through; once the
// shard is fast again the share comes back (redistest.ShedFollowsBusy).
func TestShedFollowsASlowShard(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	for _, noLoop := range []bool{false, true} {
		name := "event loop"
		if noLoop {
			name = "sessions"
		}
		t.Run(name, func(t *testing.T) { checkShedSlowShard(t, srv.Addr, noLoop) })
	}
}

func checkShedSlowShard(t *testing.T, srvAddr string, noLoop bool) {
	const (
		budget  = 400
		writers = 20
	)
	ctx := context.Background()
	direct := redis.NewClient(&redis.Options{Addr: srvAddr})
	defer direct.Close()
	direct.FlushDB(ctx)
	ec := redis.NewClient(&redis.Options{Addr: srvAddr})
	eng := engine.New(ec, engine.Options{})
	t.Cleanup(func() { eng.Close(); ec.Close() })
	// The published demand is the budget: the share of this sidecar (the
	// whole demand) is the budget.
	eng.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
		{Key: "counter", Source: routing.SourceDetected, Shed: &routing.Shed{WritesPerSecond: budget, DemandWrites: budget, MinPerSecond: 10}},
	}})
	addr, _ := start(t, proxy.Config{Upstreams: []string{srvAddr}, Engine: eng, NoEventLoop: noLoop})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range writers {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		defer c.Close()
		wg.Go(func() {
			for range 1_000_000 {
				select {
				case <-stop:
					return
				default:
				}
				if err := c.Incr(ctx, "counter").Err(); err != nil && err.Error() != routing.ShedError {
					t.Errorf("INCR: %v", err)
					return
				}
				time.Sleep(time.Millisecond) // about 1,000/s each at most: far over the share
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	// rate is the counter's increase per second over d.
	rate := func(d time.Duration) float64 {
		v0, err := direct.Get(ctx, "counter").Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		time.Sleep(d)
		v1, err := direct.Get(ctx, "counter").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return float64(v1-v0) / time.Since(t0).Seconds()
	}
	time.Sleep(1500 * time.Millisecond) // the sidecar measures its own demand
	redistest.ShedFollowsBusy(t, srvAddr, 20*time.Millisecond, budget, rate)
}
