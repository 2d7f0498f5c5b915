package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Writes: SET, DEL and INCRBY on a mitigated key, reaching its replicas or
// shards as its mitigation needs.

// Set writes a key. args are SET's options after the value (EX, PX, EXAT,
// PXAT, KEEPTTL, NX, XX; the GET option is refused) as strings, []byte or
// integers, passed to Redis unchanged for the base key. ok is false when NX
// or XX prevented the write.
func (e *Engine) Set(ctx context.Context, key string, val []byte, args ...any) (ok bool, err error) {
	p := e.plan(key)
	if p == nil {
		return e.setRaw(ctx, key, val, args)
	}
	sa, err := parseSetArgs(args)
	if err != nil {
		return false, err
	}
	e.invalidate(key)
	defer e.invalidate(key)
	now := e.clock.Now()
	active := p.entry.Active(now)
	switch {
	case p.entry.Split != nil && p.hasShards:
		if len(args) > 0 {
			return false, errors.New("ERR heatsink: SET options are not supported on a split counter")
		}
		n, perr := strconv.ParseInt(string(val), 10, 64)
		if perr != nil {
			return false, errors.New("ERR heatsink: SET on a split counter needs an integer value")
		}
		return true, e.setCounter(ctx, p, n)
	case active && len(p.replicas) > 0:
		return e.setReplicated(ctx, p, val, args, sa, now)
	}
	return e.setRaw(ctx, key, val, args)
}

func (e *Engine) setRaw(ctx context.Context, key string, val []byte, args []any) (bool, error) {
	err := e.rc().Do(ctx, setCmd(key, val, args)...).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		e.m.upstreamErrors.Inc()
		return false, err
	}
	return true, nil
}

func setCmd(key string, val []byte, args []any) []any {
	cmd := make([]any, 0, 3+len(args))
	cmd = append(cmd, "set", key, val)
	return append(cmd, args...)
}

// setReplicated writes the base key and every replica. Without NX/XX it is
// one pipeline; with them the replicas are written only once the base write
// succeeded. Replicas expire after the replica TTL, or the base key's TTL if
// that is shorter.
func (e *Engine) setReplicated(ctx context.Context, p *plan, val []byte, args []any, sa setArgs, now time.Time) (bool, error) {
	ttl := time.Duration(p.entry.Replicate.TTLMillis) * time.Millisecond
	if d, ok := sa.ttl(now); ok && d < ttl {
		ttl = d
	}
	if ttl <= 0 {
		ttl = time.Millisecond
	}
	writeReplicas := func(pipe redis.Pipeliner) {
		for _, r := range p.replicas {
			pipe.Set(ctx, r, val, ttl)
		}
	}
	e.m.fanout.Add(float64(len(p.replicas)))
	if sa.keepTTL {
		return e.setReplicatedKeepTTL(ctx, p, val, args, ttl)
	}
	if sa.conditional {
		ok, err := e.setRaw(ctx, p.key, val, args)
		if !ok || err != nil {
			return ok, err
		}
		if _, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error { writeReplicas(pipe); return nil }); err != nil {
			e.m.upstreamErrors.Inc()
			return true, err
		}
		return true, nil
	}
	cmds, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Do(ctx, setCmd(p.key, val, args)...)
		writeReplicas(pipe)
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
		return cmds[0].Err() == nil, err
	}
	return true, nil
}

// setReplicatedKeepTTL is SET ... KEEPTTL on a replicated key: the base
// key keeps whatever TTL it has, and the replicas must not outlive it (a
// replica answering after the base key expired would resurrect the
// value), so they get min(the base key's expiry, the replica TTL). The
// base key's expiry is read right after the write, on its own connection,
// as an absolute time (PEXPIRETIME, Redis 7) that the replicas are given
// with PXAT, so the time between the two round trips cannot stretch them;
// nodes of a cluster must then have synchronised clocks, as Redis expiry
// already assumes. Before Redis 7 the remaining PTTL is used, which can
// let a replica outlive the base key by about one round trip. If the base
// key is gone by then (it expired in between), the replicas are deleted.
func (e *Engine) setReplicatedKeepTTL(ctx context.Context, p *plan, val []byte, args []any, ttl time.Duration) (bool, error) {
	var set *redis.Cmd
	var pttl *redis.DurationCmd
	var at *redis.Cmd
	_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		set = pipe.Do(ctx, setCmd(p.key, val, args)...)
		pttl = pipe.PTTL(ctx, p.key)
		at = pipe.Do(ctx, "pexpiretime", p.key)
		return nil
	})
	switch {
	case errors.Is(set.Err(), redis.Nil):
		return false, nil // NX/XX: not written
	case set.Err() != nil || pttl.Err() != nil:
		e.m.upstreamErrors.Inc()
		if set.Err() != nil {
			return false, set.Err()
		}
		return true, pttl.Err()
	}
	_ = err // PEXPIRETIME may be unknown (Redis < 7): PTTL is used then
	left := pttl.Val()
	pxat, _ := at.Int64()
	_, err = e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, r := range p.replicas {
			switch {
			case left == -2 || left == 0:
				pipe.Del(ctx, r)
			case left > 0 && left < ttl && pxat > 0:
				pipe.Do(ctx, "set", r, val, "pxat", pxat)
			case left > 0 && left < ttl:
				pipe.Set(ctx, r, val, left)
			default: // -1 (the base key has no TTL), or longer than the replica TTL
				pipe.Set(ctx, r, val, ttl)
			}
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
		return true, err
	}
	return true, nil
}

// Del deletes a key and returns how many logical keys were removed (0 or
// 1). On a split counter it sets the logical value to 0 (a later GET
// returns "0", not nil), since shards may only ever be incremented, and
// returns 1 when the total was not already 0. A member split's places are
// all deleted (delMembers).
func (e *Engine) Del(ctx context.Context, key string) (int64, error) {
	p := e.plan(key)
	if p == nil {
		return e.rc().Del(ctx, key).Result()
	}
	e.invalidate(key)
	defer e.invalidate(key)
	if isMemberSplit(p) {
		return e.delMembers(ctx, p, "del")
	}
	if p.entry.Split != nil && p.hasShards {
		if err := e.flushKey(ctx, p.key); err != nil {
			return 0, err
		}
		total, _, err := e.sum(ctx, p)
		if err != nil {
			return 0, err
		}
		if total == 0 {
			return 0, nil
		}
		if err := e.rc().DecrBy(ctx, p.key, total).Err(); err != nil {
			e.m.upstreamErrors.Inc()
			return 0, err
		}
		e.forgetCounter(p.key)
		// A deleted key has no expiry left: a later INCR starts one
		// without.
		e.persistCounter(ctx, p)
		return 1, nil
	}
	if len(p.replicas) == 0 {
		return e.rc().Del(ctx, key).Result()
	}
	e.m.fanout.Add(float64(len(p.replicas)))
	var del *redis.IntCmd
	_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		del = pipe.Del(ctx, key)
		for _, r := range p.replicas {
			pipe.Del(ctx, r)
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, err
	}
	return del.Val(), nil
}

// IncrBy adds n to a counter (INCR, DECR, INCRBY and DECRBY map to it) and
// returns its value. On a split counter the write goes to one random shard
// and the value returned is an estimate: the last known total plus this
// process's increments since (see docs/engine.md for the bound).
func (e *Engine) IncrBy(ctx context.Context, key string, n int64) (int64, error) {
	p := e.plan(key)
	if p == nil {
		return e.rc().IncrBy(ctx, key, n).Result()
	}
	e.invalidate(key)
	defer e.invalidate(key)
	now := e.clock.Now()
	active := p.entry.Active(now)
	if p.entry.Split == nil {
		v, err := e.rc().IncrBy(ctx, key, n).Result()
		if err != nil {
			e.m.upstreamErrors.Inc()
			return 0, err
		}
		if active && len(p.replicas) > 0 {
			e.copyToReplicas(ctx, p, v)
		}
		return v, nil
	}
	if !p.hasShards {
		// Every generation writes to the base key: it is the whole counter.
		return e.rc().IncrBy(ctx, key, n).Result()
	}
	if active && p.entry.PreAggregate != nil {
		return e.preAggregate(ctx, p, n)
	}
	target := key
	if active {
		target = e.writeKey(p, now)
	}
	shardVal, err := e.rc().IncrBy(ctx, target, n).Result()
	// A place that provably did not take the increment (its node down or
	// refusing) is not the counter's only one while it is split: the
	// increment goes to another, which every read sums too, so a shard's
	// outage costs the clients nothing (placeAfterFailure).
	for failed := []string{target}; active && err != nil && notApplied(err); failed = append(failed, target) {
		if target = e.placeAfterFailure(p, now, failed); target == "" {
			break
		}
		e.m.writeRedirects.Inc()
		shardVal, err = e.rc().IncrBy(ctx, target, n).Result()
	}
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, err
	}
	if target != key && shardVal == n {
		// This INCRBY created the shard (or found it at 0): it must carry
		// the counter's expiry, which Redis does not give a new key.
		e.inheritExpiry(ctx, p, target)
	}
	return e.estimate(ctx, p, n, shardVal), nil
}

// copyToReplicas writes an incremented value to the replicas. The increment
// is already acknowledged, so a failure here is counted, not returned (a
// retry would count it twice); the replicas then serve the older value
// until they expire or the next write.
func (e *Engine) copyToReplicas(ctx context.Context, p *plan, v int64) {
	ttl := time.Duration(p.entry.Replicate.TTLMillis) * time.Millisecond
	e.m.fanout.Add(float64(len(p.replicas)))
	_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, r := range p.replicas {
			pipe.Set(ctx, r, v, ttl)
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
	}
}
