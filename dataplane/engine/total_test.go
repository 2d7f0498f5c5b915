package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestFailedTotalReadNotRetriedAtEveryIncr: when the read of a split
// counter's shards fails (a shard's node down; here, on the shared real
// servers that cannot be stopped, a retired shard holding a non-integer),
// the INCRs that follow still succeed on their shards, and do not each
// read every shard again: one read per TotalRefresh, failed or not. Each
// INCR used to start a read of its own and wait for it, and a counter
// with one shard's node down answered every INCR a failed read later
// (1.1 s for 40 commands in test/clients TestFailingSplitPathRolledBack,
// against 0.1 s before the stop).
func TestFailedTotalReadNotRetriedAtEveryIncr(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "unreadable")
			en := routing.Entry{Key: k, Source: routing.SourceDetected, Split: &routing.Split{
				Generations: []routing.Generation{{FromEpoch: 0, Shards: 2}, {FromEpoch: 1, Shards: 3}},
			}}
			clean(t, tg.client, en)
			if err := tg.client.Set(ctx, routing.ShardKey(k, 0, 1, 2), "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, tg.client, engine.Options{TotalRefresh: time.Hour})
			e.SetTable(table(en))
			tg.resetStats(t)
			for range 50 {
				if _, err := e.IncrBy(ctx, k, 1); err != nil {
					t.Fatalf("INCRBY with the total unreadable: %v", err)
				}
			}
			// Generation 0 retires: each read of the total reads every
			// place with its fold records, one EVAL per place (foldread.go).
			const readKeys = 1 + 2 + 3 // the base key and every generation's shards
			if evals := tg.calls(t, "eval"); evals > readKeys {
				t.Fatalf("%d EVAL for 50 INCRBY with the total unreadable, want one read of the %d keys", evals, readKeys)
			}
		})
	}
}
