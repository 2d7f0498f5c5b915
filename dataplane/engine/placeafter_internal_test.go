package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/routing"
)

// TestPlaceAfterFailure is the order in which a split counter's increment
// tries its places when each one failed without running it: the other
// shards of the current write generation, then the base key, at most
// maxWritePlaces in all; never a retired generation's shard, and nothing
// when the counter is written to its base key anyway.
func TestPlaceAfterFailure(t *testing.T) {
	now := time.UnixMilli(10 * 60_000) // epoch 10 of 60-s epochs
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rc.Close()
	e := New(rc, Options{Clock: clocktesting.NewFakeClock(now), IntN: func(n int) int { return n - 1 }})
	defer e.Close()
	const k = "likes"
	gens := []routing.Generation{{FromEpoch: 0, Shards: 5}, {FromEpoch: 10, Shards: 3}, {FromEpoch: 11, Shards: 2}}
	e.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000, Entries: []routing.Entry{
		{Key: k, Split: &routing.Split{Generations: gens}},
		{Key: "folding", Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}, {FromEpoch: 5, Shards: 0}}}},
	}})
	cur := routing.ShardKeys(k, gens[1])
	p := e.plan(k)
	var failed []string
	for _, want := range []string{cur[2], cur[1], k, ""} {
		got := e.placeAfterFailure(p, now, append(failed, cur[0]))
		if got != want {
			t.Fatalf("after %v failed: %q, want %q", append(failed, cur[0]), got, want)
		}
		if got == "" {
			break
		}
		failed = append(failed, got)
	}
	// Every place a write may take is tried once, and the bound holds
	// with more shards than places allowed.
	for n := range maxWritePlaces + 2 {
		tried := routing.ShardKeys(k, gens[0])[:min(n, 5)]
		if got := e.placeAfterFailure(p, now, tried); len(tried) >= maxWritePlaces && got != "" {
			t.Fatalf("after %d places failed: %q, want none (at most %d)", len(tried), got, maxWritePlaces)
		} else if got != "" && slices.Contains(routing.ShardKeys(k, gens[0]), got) {
			t.Fatalf("a retired generation's shard %q takes a write", got)
		}
	}
	if got := e.placeAfterFailure(e.plan("folding"), now, []string{"folding"}); got != "" {
		t.Fatalf("a counter written to its base key moved its write to %q", got)
	}
}
