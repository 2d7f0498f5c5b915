package redishook_test

import (
	"context"
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
// shed key over the client's share fail with TRYAGAIN without reaching a
// real redis-server, alone and in a pipeline, while the other commands of
// the pipeline are answered.
func TestHookSheds(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	app := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
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
	if !redis.IsTryAgainError(err) || err.Error() != routing.ShedError {
		t.Fatalf("second INCR with the clock still: %v, want %q", err, routing.ShedError)
	}
	cmds, _ := app.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "other")
		p.Incr(ctx, "counter")
		p.Incr(ctx, "other")
		return nil
	})
	if cmds[0].Err() != nil || cmds[2].Err() != nil || !redis.IsTryAgainError(cmds[1].Err()) {
		t.Fatalf("pipeline: %v, %v, %v; want the shed key's INCR alone refused", cmds[0].Err(), cmds[1].Err(), cmds[2].Err())
	}
	if v, _ := direct.Get(ctx, "counter").Int(); v != 1 {
		t.Fatalf("counter = %d, want only the admitted increment", v)
	}
	if v, _ := direct.Get(ctx, "other").Int(); v != 2 {
		t.Fatalf("other = %d, want 2", v)
	}
}
