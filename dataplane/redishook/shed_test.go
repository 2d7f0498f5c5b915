package redishook_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestHookSheds: in process, as through the sidecar, the commands of a
// shed key over the client's share fail with routing.ShedError without
// reaching a real redis-server, alone and in a pipeline, while the other
// commands of the pipeline are answered once each (go-redis' default
// retries: the refusal is not one it retries); a transaction naming it is
// refused whole.
func TestHookSheds(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	app := redis.NewClient(&redis.Options{Addr: srv.Addr})
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { app.Close(); direct.Close() })
	e := engine.New(app, engine.Options{Clock: clk})
	t.Cleanup(func() { e.Close() })
	app.AddHook(redishook.New(e))
	e.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000, Entries: []routing.Entry{
		{Key: "counter", Shed: &routing.Shed{WritesPerSecond: 100, DemandWrites: 1000, MinPerSecond: 10}},
	}})
	if err := app.Incr(ctx, "counter").Err(); err != nil {
		t.Fatalf("first INCR (the first attempt is admitted): %v", err)
	}
	err := app.Incr(ctx, "counter").Err()
	if err == nil || err.Error() != routing.ShedError {
		t.Fatalf("second INCR with the clock still: %v, want %q", err, routing.ShedError)
	}
	cmds, _ := app.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "other")
		p.Incr(ctx, "counter")
		p.Incr(ctx, "other")
		return nil
	})
	if cmds[0].Err() != nil || cmds[2].Err() != nil || cmds[1].Err() == nil || cmds[1].Err().Error() != routing.ShedError {
		t.Fatalf("pipeline: %v, %v, %v; want the shed key's INCR alone refused", cmds[0].Err(), cmds[1].Err(), cmds[2].Err())
	}
	if v, _ := direct.Get(ctx, "counter").Int(); v != 1 {
		t.Fatalf("counter = %d, want only the admitted increment", v)
	}
	if v, _ := direct.Get(ctx, "other").Int(); v != 2 {
		t.Fatalf("other = %d, want 2", v)
	}
	// A transaction with the shed key over its share is refused whole,
	// nothing sent, as the sidecar aborts it (EXECABORT).
	cmds, err = app.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "other")
		p.Incr(ctx, "counter")
		return nil
	})
	if err == nil || err.Error() != routing.ShedError {
		t.Fatalf("MULTI with the shed key over its share: %v, want %q", err, routing.ShedError)
	}
	for i, c := range cmds {
		if c.Err() == nil {
			t.Fatalf("command %d of the refused transaction succeeded", i)
		}
	}
	if v, _ := direct.Get(ctx, "other").Int(); v != 2 {
		t.Fatalf("other = %d after a refused transaction, want 2: part of it ran", v)
	}
}

// TestHookShedFollowsASlowShard: as the sidecar does (proxy's
// TestShedFollowsASlowShard), a client with the hook admits its share of a
// shed key while a real redis-server answers at once, a small part of it,
// steadily, while the server queues behind another client's 20 ms scripts,
// and its share again once the server is fast (redistest.ShedFollowsBusy).
func TestHookShedFollowsASlowShard(t *testing.T) {
	const budget, writers = 400, 20
	srv := redistest.Standalone(t)
	ctx := context.Background()
	app := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: writers})
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { app.Close(); direct.Close() })
	e := engine.New(app, engine.Options{})
	t.Cleanup(func() { e.Close() })
	app.AddHook(redishook.New(e))
	e.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000, Entries: []routing.Entry{
		{Key: "counter", Shed: &routing.Shed{WritesPerSecond: budget, DemandWrites: budget, MinPerSecond: 10}},
	}})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range 1_000_000 {
				select {
				case <-stop:
					return
				default:
				}
				if err := app.Incr(ctx, "counter").Err(); err != nil && err.Error() != routing.ShedError {
					t.Errorf("INCR: %v", err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	rate := func(d time.Duration) float64 {
		v0, _ := direct.Get(ctx, "counter").Int64()
		t0 := time.Now()
		time.Sleep(d)
		v1, _ := direct.Get(ctx, "counter").Int64()
		return float64(v1-v0) / time.Since(t0).Seconds()
	}
	time.Sleep(1500 * time.Millisecond) // the client measures its own demand
	redistest.ShedFollowsBusy(t, srv.Addr, 20*time.Millisecond, budget, rate)
}
