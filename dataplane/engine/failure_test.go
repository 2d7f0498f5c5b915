package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestFailureTellsPathFromAnswer: what the engine's path fails with (a
// timeout, a refused or lost connection, a pool exhausted, a node loading
// or without its master) is a failure; Redis' answers to the command
// itself (WRONGTYPE, not an integer, a syntax error, the engine's own
// stand-ins and refusals) are not. The Redis errors are real ones, from a
// real redis-server through go-redis.
func TestFailureTellsPathFromAnswer(t *testing.T) {
	srv := redistest.Standalone(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.LPush(ctx, "list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	wrongType := c.Incr(ctx, "list").Err()
	if err := c.Set(ctx, "text", "abc", 0).Err(); err != nil {
		t.Fatal(err)
	}
	notInt := c.Incr(ctx, "text").Err()
	syntax := c.Do(ctx, "SET", "k", "v", "BOGUS").Err()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // go-redis defaults: retried, still refused
	defer dead.Close()
	refused := dead.Get(ctx, "k").Err()
	tctx, cancel := context.WithTimeout(ctx, 0)
	defer cancel()
	timeout := c.Get(tctx, "k").Err()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"WRONGTYPE", wrongType, false},
		{"not an integer", notInt, false},
		{"syntax", syntax, false},
		{"engine stand-in", errNotAnInteger, false},
		{"engine refusal", errors.New("ERR heatsink: LPUSH on a key mitigated by split is not supported"), false},
		{"connection refused", refused, true},
		{"timeout", timeout, true},
		{"pool timeout", redis.ErrPoolTimeout, true},
		{"closed", redis.ErrClosed, true},
		{"EOF", io.EOF, true},
		{"wrapped i/o", fmt.Errorf("split shard: %w", io.ErrUnexpectedEOF), true},
		{"no replica", errNoReplica, true},
		{"LOADING", errors.New("LOADING Redis is loading the dataset in memory"), true},
		{"MASTERDOWN", errors.New("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{"READONLY", errors.New("READONLY You can't write against a read only replica."), true},
		{"engine lost", errors.New("heatsink: tracking connection lost"), true},
	} {
		if tc.name != "nil" && tc.err == nil {
			t.Fatalf("%s: no error produced", tc.name)
		}
		if got := Failure(tc.err); got != tc.want {
			t.Errorf("%s (%v): Failure = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
