package engine

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// A set split by member (Split.Kind KindSet; docs/engine.md, Member
// split): a member m has the places of a hash field (the base key and m's
// shard in every listed generation with shards) and is in the set when
// some place holds it. SADD adds m to its place in the write generation;
// the fold adds a retired place's members to the base key before it
// removes them from the place, so membership holds at every step and the
// fold needs no ledger (adding twice is adding once). SREM removes m from
// every place (removal.go). SPOP and SMOVE are refused: their reply and removal would have to
// be one step over the places.

// setOps are the commands a set split by member serves.
var setOps = map[string]hashOp{
	"SADD":       {minArgs: 3},
	"SREM":       {minArgs: 3},
	"SISMEMBER":  {minArgs: 3, maxArgs: 3},
	"SMISMEMBER": {minArgs: 3},
	"SMEMBERS":   {minArgs: 2, maxArgs: 2},
	"SCARD":      {minArgs: 2, maxArgs: 2},
}

// SAdd adds members to a set split by member and returns how many were
// not in the set: each goes to its write place, and counts when that
// place added it and no other place held it (one pipeline for both).
func (e *Engine) SAdd(ctx context.Context, key string, members []string) (int64, error) {
	p := e.memberPlan(key, routing.KindSet)
	if p == nil {
		return e.rc().SAdd(ctx, key, anys(members)...).Result()
	}
	e.invalidate(key)
	defer e.invalidate(key)
	now := e.clock.Now()
	added := make([]*redis.IntCmd, len(members))
	held := make([][]*redis.BoolCmd, len(members))
	// A shard this SADD creates must carry the key's expiry: an EXISTS
	// before the first write to each shard tells (writeMember).
	existed := map[string]*redis.IntCmd{}
	_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, m := range members {
			write := e.memberWritePlace(p, m, now)
			for _, k := range without(memberPlaces(p, m), write) {
				held[i] = append(held[i], pipe.SIsMember(ctx, k, m))
			}
			if _, seen := existed[write]; !seen && write != p.key {
				existed[write] = pipe.Exists(ctx, write)
			}
			added[i] = pipe.SAdd(ctx, write, m)
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, err
	}
	for write, ex := range existed {
		if ex.Val() == 0 {
			e.inheritExpiry(ctx, p, write)
		}
	}
	var n int64
	for i := range members {
		if added[i].Val() == 1 && !anyTrue(held[i]) {
			n++
		}
	}
	return n, nil
}

// restoreBase makes a base key that a removal emptied (Redis deleted it
// with its expiry at) exist again with that expiry when shards still hold
// the key. The removal is already applied, so a failure is counted, not
// returned.
func (e *Engine) restoreBase(ctx context.Context, p *plan, at int64) {
	create, err := e.createBase(ctx, p)
	if err != nil || create == nil {
		return
	}
	_, err = e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		create(pipe)
		pipe.Do(ctx, "pexpireat", p.key, at, "nx")
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
	}
}

func anyTrue(cmds []*redis.BoolCmd) bool {
	for _, c := range cmds {
		if c.Val() {
			return true
		}
	}
	return false
}

// SIsMembers reports, per member, whether some place holds it.
func (e *Engine) SIsMembers(ctx context.Context, key string, members []string) ([]bool, error) {
	p := e.memberPlan(key, routing.KindSet)
	if e.folding(p) {
		if out, err := e.sismembersFolding(ctx, p, members); !errors.Is(err, errFoldRights) {
			return out, err
		}
	}
	held := make([][]*redis.BoolCmd, len(members))
	_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, m := range members {
			for _, k := range placesOf(p, key, m) {
				held[i] = append(held[i], pipe.SIsMember(ctx, k, m))
			}
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
		return nil, err
	}
	out := make([]bool, len(members))
	for i := range members {
		out[i] = anyTrue(held[i])
	}
	return out, nil
}

// SMembers is the union of every place's members, in byte order.
func (e *Engine) SMembers(ctx context.Context, key string) ([]string, error) {
	p := e.memberPlan(key, routing.KindSet)
	if e.folding(p) {
		if out, err := e.smembersFolding(ctx, p); !errors.Is(err, errFoldRights) {
			return out, err
		}
	}
	keys := allPlaces(p, key)
	cmds, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, k := range keys {
			pipe.SMembers(ctx, k)
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range cmds {
		for _, m := range c.(*redis.StringSliceCmd).Val() {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// ServeSet serves an OpMembers command of a set.
func (e *Engine) ServeSet(ctx context.Context, args [][]byte, obs Observe) Reply {
	name := strings.ToUpper(string(args[0]))
	k := string(args[1])
	members := make([]string, 0, len(args))
	for _, a := range args[2:] {
		members = append(members, string(a))
	}
	switch name {
	case "SADD":
		n, err := e.SAdd(ctx, k, members)
		obs(k, 0, 1, 8*len(members))
		if err != nil {
			return errReply(err)
		}
		return Reply{Kind: ReplyInt, Int: n}
	case "SREM":
		n, err := e.SRem(ctx, k, members)
		obs(k, 0, 1, 8*len(members))
		if err != nil {
			return errReply(err)
		}
		return Reply{Kind: ReplyInt, Int: n}
	case "SISMEMBER", "SMISMEMBER":
		in, err := e.SIsMembers(ctx, k, members)
		obs(k, 1, 0, len(members))
		if err != nil {
			return errReply(err)
		}
		if name == "SISMEMBER" {
			return Reply{Kind: ReplyInt, Int: boolInt(in[0])}
		}
		out := Reply{Kind: ReplyArray, Elems: make([]Reply, len(in))}
		for i, b := range in {
			out.Elems[i] = Reply{Kind: ReplyInt, Int: boolInt(b)}
		}
		return out
	}
	all, err := e.SMembers(ctx, k)
	obs(k, 1, 0, 8*len(all))
	if err != nil {
		return errReply(err)
	}
	if name == "SCARD" {
		return Reply{Kind: ReplyInt, Int: int64(len(all))}
	}
	out := bulks(all)
	out.Kind = ReplySet
	return out
}
