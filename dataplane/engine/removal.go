package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// Removing members from a member split (docs/engine.md, Member split):
// SREM of a set, HDEL of a hash and ZREM of a sorted set remove each member from every place it
// has, shards first, then from the base key K in one transaction with a
// bump of the fold ledger's deletion count, as DEL does (memberkeys.go).
// A fold that read the member before the removal finds the count moved
// and credits nothing to K (controllers/fold creditMember), and its debit
// finds the member gone from the shard and is skipped, so the removal is
// never undone. A removal is not atomic over the places: a write
// concurrent with it may survive in a place already done, as if ordered
// after it.
//
// Then every place a member was removed from gets a new removal mark
// (routing.RemovalMarkKey): the sums of a member's other places that
// other processes cache for HINCRBY's and ZINCRBY's replies were read
// with their write place's mark and are dropped when it changed, so a
// reply never adds back a removed value. A sorted set's copy of the base
// key (zset.go) is checked against every shard's mark in its reader's own
// pipeline (copyCheck).

// removalMarkTTL is how long a removal mark lives: longer than any cached
// sum is kept (settledRefresh), so a mark a sum was read with cannot
// expire and come back unchanged. A mark that expired reads "", which
// differs from every mark set, so at worst a sum is read again.
const removalMarkTTL = 60 * time.Second

// removeMembers removes members from every place of the member split p
// with cmd (its kind's removal: SREM, HDEL, ZREM) and returns how many of them
// some place held, as Redis' reply counts them. A K the removal empties is
// deleted by Redis with its expiry while shards may still hold members:
// it is made to exist again with that expiry (restoreBase).
func (e *Engine) removeMembers(ctx context.Context, p *plan, cmd string, members []string) (int64, error) {
	e.invalidate(p.key)
	defer e.invalidate(p.key)
	members = slices.Compact(slices.Sorted(slices.Values(members)))
	removed := make([][]*redis.Cmd, len(members))
	var marks []string
	_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, m := range members {
			for _, s := range memberPlaces(p, m)[1:] {
				removed[i] = append(removed[i], pipe.Do(ctx, cmd, s, m))
				marks = append(marks, s)
			}
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, err
	}
	var before, after *redis.Cmd
	_, err = e.rc().TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HIncrBy(ctx, routing.FoldLedgerKey(p.key), routing.LedgerDeleted, 1)
		before = pipe.Do(ctx, "pexpiretime", p.key)
		for i, m := range members {
			removed[i] = append(removed[i], pipe.Do(ctx, cmd, p.key, m))
		}
		after = pipe.Do(ctx, "exists", p.key)
		return nil
	})
	p.forgetMembers()
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, err
	}
	e.markRemoved(ctx, append(marks, p.key))
	var n int64
	for _, cmds := range removed {
		for _, c := range cmds {
			if v, _ := c.Int64(); v > 0 {
				n++
				break
			}
		}
	}
	left, _ := after.Int64()
	if at, _ := before.Int64(); at > 0 && left == 0 {
		e.restoreBase(ctx, p, at)
	}
	return n, nil
}

// markRemoved gives each of places a new removal mark (one pipeline). The
// removal is already applied, so a failure is counted, not returned; the
// sums other processes cached then live their bound (docs/engine.md).
func (e *Engine) markRemoved(ctx context.Context, places []string) {
	slices.Sort(places)
	places = slices.Compact(places)
	mark := fmt.Sprintf("%x-%x", time.Now().UnixNano(), rand.Uint64())
	_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, pl := range places {
			pipe.Set(ctx, routing.RemovalMarkKey(pl), mark, removalMarkTTL)
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
	}
}

// readMark queues the read of place's removal mark; its value is
// markOf's. MGET, not GET: a missing mark is no error, which would fail
// the pipeline it rides in.
func readMark(ctx context.Context, pipe redis.Pipeliner, place string) *redis.SliceCmd {
	return pipe.MGet(ctx, routing.RemovalMarkKey(place))
}

// markOf is a removal mark read by readMark ("" when there is none).
func markOf(c *redis.SliceCmd) string {
	if c == nil {
		return ""
	}
	if v := c.Val(); len(v) == 1 {
		s, _ := v[0].(string)
		return s
	}
	return ""
}

// SRem removes members from a set split by member (or from a plain set
// when key is not one) and returns how many it held.
func (e *Engine) SRem(ctx context.Context, key string, members []string) (int64, error) {
	p := e.memberPlan(key, routing.KindSet)
	if p == nil {
		return e.rc().SRem(ctx, key, anys(members)...).Result()
	}
	return e.removeMembers(ctx, p, "srem", members)
}

// HDel removes fields from a hash split by field (or from a plain hash
// when key is not one) and returns how many it held.
func (e *Engine) HDel(ctx context.Context, key string, fields []string) (int64, error) {
	p := e.memberPlan(key, routing.KindHash)
	if p == nil {
		return e.rc().HDel(ctx, key, fields...).Result()
	}
	return e.removeMembers(ctx, p, "hdel", fields)
}

// ZRem removes members from a sorted set split by member (or from a
// plain sorted set when key is not one) and returns how many it held.
func (e *Engine) ZRem(ctx context.Context, key string, members []string) (int64, error) {
	p := e.memberPlan(key, routing.KindZSet)
	if p == nil {
		return e.rc().ZRem(ctx, key, anys(members)...).Result()
	}
	return e.removeMembers(ctx, p, "zrem", members)
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
