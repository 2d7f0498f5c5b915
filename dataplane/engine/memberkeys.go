package engine

import (
	"context"
	"errors"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// Whole-key commands of a member split (a hash by field, a sorted set or
// set by member): the logical key exists when any of its places (the base
// key K and every shard of every listed generation) holds a member, DEL
// removes every place, and its expiry is K's, carried by every place as a
// split counter's is (expire.go: Expire, TTL, inheritExpiry and
// spreadExpiry serve both; this file gives them what differs).

// isMemberSplit reports whether p is a member split (with shards or not:
// without, K is its only place and the functions below read K alone).
func isMemberSplit(p *plan) bool {
	return p != nil && p.entry.Split != nil && p.entry.Split.Members
}

// exists reports whether a split key (counter or member split) exists:
// some place holds it. A counter's places hold integers (sum reads them);
// a member split's any collection, so one EXISTS per place, in one
// pipeline.
func (e *Engine) exists(ctx context.Context, p *plan) (bool, error) {
	if !p.entry.Split.Members {
		_, ok, err := e.sum(ctx, p)
		return ok, err
	}
	n, err := e.countPlaces(ctx, p, "exists")
	if err == nil && n == 0 && e.folding(p) {
		// A fold's move may have run between the pipeline's reads: K
		// read before the credit that created it, the shard after the
		// debit that emptied it. K exists from that credit on (credits
		// never delete it), so a second read, after the first, finds the
		// key unless it was deleted or expired since.
		e.m.foldReadRetries.Inc()
		n, err = e.countPlaces(ctx, p, "exists")
	}
	return n > 0, err
}

// countPlaces sends cmd (EXISTS, DEL or UNLINK) for each of keys, in one
// pipeline (one batch per node of a cluster), and adds up the replies.
func (e *Engine) countPlaces(ctx context.Context, p *plan, cmd string, keys ...string) (int64, error) {
	if keys == nil {
		keys = p.readKeys
	}
	if len(keys) == 0 {
		return 0, nil
	}
	e.m.fanout.Add(float64(len(keys) - 1))
	cmds, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, k := range keys {
			pipe.Do(ctx, cmd, k)
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		v, _ := c.(*redis.Cmd).Int64()
		n += v
	}
	return n, nil
}

// createBase returns what makes a missing base key exist without changing
// the logical value, queued before an expiry command on it (expireBase):
// for a counter INCRBY K 0; for a member split a member some shard holds,
// added to K with nothing (HINCRBY K f 0, ZINCRBY K 0 m: the sum over its
// places is unchanged; SADD K m: it is already in the set). nil when no
// place holds anything: the key does not exist.
func (e *Engine) createBase(ctx context.Context, p *plan) (func(redis.Pipeliner), error) {
	if !p.entry.Split.Members {
		if ok, err := e.exists(ctx, p); err != nil || !ok {
			return nil, err
		}
		return func(pipe redis.Pipeliner) { pipe.IncrBy(ctx, p.key, 0) }, nil
	}
	kind := p.entry.Split.Kind
	shards := p.readKeys[1:]
	cmds, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, s := range shards {
			switch kind {
			case routing.KindZSet:
				pipe.ZRange(ctx, s, 0, 0)
			case routing.KindSet:
				pipe.SRandMember(ctx, s)
			default:
				pipe.HRandField(ctx, s, 1)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		e.m.upstreamErrors.Inc()
		return nil, err
	}
	for _, c := range cmds {
		var m []string
		switch c := c.(type) {
		case *redis.StringSliceCmd:
			m = c.Val()
		case *redis.StringCmd:
			if c.Err() == nil {
				m = []string{c.Val()}
			}
		}
		if len(m) == 0 {
			continue
		}
		member := m[0]
		return func(pipe redis.Pipeliner) {
			switch kind {
			case routing.KindZSet:
				pipe.ZIncrBy(ctx, p.key, 0, member)
			case routing.KindSet:
				pipe.SAdd(ctx, p.key, member)
			default:
				pipe.HIncrBy(ctx, p.key, member, 0)
			}
		}, nil
	}
	return nil, nil
}

// forgetMembers drops this process's cached sums of a member split's other
// places and its copy of the base key, after a command that removed
// members (DEL, an expiry in the past).
func (p *plan) forgetMembers() {
	p.others.mu.Lock()
	p.others.m = nil
	p.others.mu.Unlock()
	p.zothers.mu.Lock()
	p.zothers.m = nil
	p.zothers.mu.Unlock()
	p.zbase.mu.Lock()
	p.zbase.zs = nil
	p.zbase.mu.Unlock()
}

// delMembers deletes a member split: every shard of every generation
// first, then, in one transaction on K's node, K and a bump of the
// deletion count in K's fold ledger (routing.LedgerDeleted). A fold reads
// that count before it reads a shard and credits K only if it has not
// moved (controllers/fold), so a member it read before the deletion is
// not put back into K after it; a move credited before the deletion is
// removed with K, and its debit finds the member gone and is skipped. The
// reply is Redis': 1 when some place existed.
func (e *Engine) delMembers(ctx context.Context, p *plan, cmd string) (int64, error) {
	n, err := e.countPlaces(ctx, p, cmd, p.readKeys[1:]...)
	if err != nil {
		return 0, err
	}
	var del *redis.Cmd
	_, err = e.rc().TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HIncrBy(ctx, routing.FoldLedgerKey(p.key), routing.LedgerDeleted, 1)
		del = pipe.Do(ctx, cmd, p.key)
		return nil
	})
	p.forgetMembers()
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, err
	}
	// Other processes' cached sums of the places go with them
	// (removal.go).
	e.markRemoved(ctx, slices.Clone(p.readKeys))
	if v, _ := del.Int64(); v > 0 {
		n += v
	}
	if n > 0 {
		return 1, nil
	}
	return 0, nil
}

// memberType is TYPE of a member split: its kind's type name when some
// place holds the key, else "none".
func (e *Engine) memberType(ctx context.Context, p *plan) (string, error) {
	ok, err := e.exists(ctx, p)
	if err != nil || !ok {
		return "none", err
	}
	switch p.entry.Split.Kind {
	case routing.KindZSet:
		return "zset", nil
	case routing.KindSet:
		return "set", nil
	}
	return "hash", nil
}

// writeMember runs a member write on its place (queued by do) and, when
// the place is a shard that did not exist before it (an EXISTS queued just
// before the write, in the same pipeline), gives it the key's expiry, as
// a split counter's new shards get it (inheritExpiry). The EXISTS and the
// write are not atomic: a writer that finds the shard made by another
// between them leaves the expiry to that one, which saw it missing; only
// a shard deleted (by DEL or expiry) between them is missed, and then K
// was deleted too and has no expiry to give. It returns the write place's
// removal mark, read after the write in the same pipeline (removal.go); a
// mark it could not read (a user without the right to read heatsink's
// keys: docs/proxy.md, ACL rules) fails no write: it is counted, and reads
// as "", which keeps a cached sum to its age bound.
func (e *Engine) writeMember(ctx context.Context, p *plan, write string, do func(pipe redis.Pipeliner)) (string, error) {
	var ex *redis.IntCmd
	var mark *redis.SliceCmd
	cmds, _ := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if write != p.key {
			ex = pipe.Exists(ctx, write)
		}
		do(pipe)
		mark = readMark(ctx, pipe, write)
		return nil
	})
	for _, c := range cmds {
		if err := c.Err(); err != nil && c != redis.Cmder(mark) {
			if !isRedisError(err) {
				e.m.upstreamErrors.Inc()
			}
			return "", err
		}
	}
	if mark.Err() != nil {
		e.m.upstreamErrors.Inc()
	}
	if ex != nil && ex.Val() == 0 {
		e.inheritExpiry(ctx, p, write)
	}
	return markOf(mark), nil
}
