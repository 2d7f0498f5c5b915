package engine

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Expiry of a split key (a counter, or a hash, sorted set or set split by
// member): EXPIRE and its family, PERSIST, TTL and its family.
//
// The rule: the base key's expiry is the key's, and every physical key
// (the base key and each shard of each generation) carries it as the same
// absolute time, so that when the base key expires the whole logical
// key is gone at once, as a plain key would be.
//
//   - A command that sets or removes the expiry runs on the base key, made
//     to exist first when only shards hold the key (createBase: INCRBY 0
//     for a counter, a shard's member added to it with nothing for a
//     member split; the value is unchanged), so Redis itself applies NX,
//     XX, GT and LT against the key's expiry and gives the exact reply.
//     Its result (PEXPIRETIME of the base key) is then given to every
//     shard.
//   - A shard the engine creates (INCRBY answered with the increment
//     itself; a member write whose EXISTS before it found no shard,
//     writeMember) is given the base key's expiry right after.
//   - Both end by reading the base key's expiry again and repeating while
//     it moved: for each shard, the last write of its expiry is followed by
//     a read of the base key that found the value written, so once the
//     writers stop every shard carries the base key's last expiry (a write
//     reading an old value is followed by the newer writer's own, or by its
//     own repair).
//
// Redis 7 (PEXPIRETIME) is needed; on an older server the shards keep no
// expiry and docs/engine.md says so.

// expiryRounds bounds the repairs of a shard's expiry when the base key's
// moves under it (another process setting it at the same time). The rule
// above holds only for a writer whose repairs end by finding the value it
// wrote: at 3, three processes sending EXPIRE, PEXPIRE GT and PERSIST to
// one key as fast as they could once left every shard 197 s short of the
// base key (TestSplitExpiryUnderConcurrentWriters, a fresh-clone run). A
// round is one pipeline and one read; 16 bounds a command's cost while
// the key's expiry is fought over, not its outcome once that stops.
const expiryRounds = 16

// Expire serves EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX, XX, GT, LT)
// and PERSIST; args is the command as sent (args[1] is the key). The reply
// is Redis' integer reply, or its error.
func (e *Engine) Expire(ctx context.Context, args [][]byte) (int64, error) {
	key := string(args[1])
	cmd := anyArgs(args)
	p := e.plan(key)
	if p == nil || p.entry.Split == nil || !p.hasShards {
		// The base key is the whole value.
		return e.rc().Do(ctx, cmd...).Int64()
	}
	e.invalidate(key)
	defer e.invalidate(key)
	// Increments this process acknowledged make the key exist.
	if err := e.flushKey(ctx, key); err != nil {
		return 0, err
	}
	r, at, err := e.expireBase(ctx, key, cmd, nil)
	if err != nil {
		return 0, err
	}
	if r == 0 && at == -2 {
		// The base key is missing: the key exists if a shard holds it,
		// and is then made to exist in the base key too (createBase).
		create, err := e.createBase(ctx, p)
		if err != nil {
			return 0, err
		}
		if create == nil && !e.folding(p) {
			return 0, nil
		}
		// No shard held it: while a fold may be in flight, a move's credit
		// can have created K since expireBase found it missing and its
		// debit emptied the shard before createBase read it (the key
		// exists all along: see exists); the command runs on K again,
		// with nothing to create.
		if r, at, err = e.expireBase(ctx, key, cmd, create); err != nil {
			return 0, err
		}
	}
	if r == 1 {
		e.spreadExpiry(ctx, p, p.readKeys[1:], at, true)
	}
	switch {
	case r == 1 && p.entry.Split.Members:
		// The copies this process keeps of the base key die with it
		// (zset.go's baseCopy keeps its expiry): the expiry moved.
		p.forgetMembers()
	case r == 1 && at == -2:
		// A time in the past deleted the counter: its known total is gone.
		e.forgetCounter(key)
	}
	return r, nil
}

// expireBase runs an expiry command on the base key (made to exist first
// by create, when set: createBase) and returns its reply and the base
// key's resulting PEXPIRETIME (-1: none, -2: no key).
func (e *Engine) expireBase(ctx context.Context, key string, cmd []any, create func(redis.Pipeliner)) (int64, int64, error) {
	var r *redis.Cmd
	var at *redis.Cmd
	_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if create != nil {
			create(pipe)
		}
		r = pipe.Do(ctx, cmd...)
		at = pipe.Do(ctx, "pexpiretime", key)
		return nil
	})
	if r.Err() != nil {
		if !isRedisError(r.Err()) {
			e.m.upstreamErrors.Inc()
		}
		return 0, 0, r.Err()
	}
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, 0, err
	}
	n, err := r.Int64()
	if err != nil {
		return 0, 0, err
	}
	t, err := at.Int64()
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, 0, err
	}
	return n, t, nil
}

// TTL serves TTL, PTTL, EXPIRETIME and PEXPIRETIME: the base key's reply,
// except that a split key (a counter, or a member split) held by its
// shards alone (no base key) exists without an expiry (-1).
func (e *Engine) TTL(ctx context.Context, args [][]byte) (int64, error) {
	key := string(args[1])
	r, err := e.rc().Do(ctx, anyArgs(args)...).Int64()
	if err != nil || r != -2 {
		if err != nil && !isRedisError(err) {
			e.m.upstreamErrors.Inc()
		}
		return r, err
	}
	p := e.plan(key)
	if p == nil || p.entry.Split == nil || !p.hasShards {
		return r, nil
	}
	if e.hasPending(key) {
		return -1, nil
	}
	exists, err := e.exists(ctx, p)
	switch {
	case err != nil:
		return 0, err
	case exists:
		return -1, nil
	}
	return -2, nil
}

// inheritExpiry gives shard, which this process's INCRBY just created, the
// counter's expiry (the base key's). The increment is already
// acknowledged, so a failure is counted, not returned: the shard then
// lives without an expiry, which docs/engine.md bounds.
func (e *Engine) inheritExpiry(ctx context.Context, p *plan, shard string) {
	at, err := e.rc().Do(ctx, "pexpiretime", p.key).Int64()
	if err != nil {
		e.m.upstreamErrors.Inc()
		return
	}
	if at < 0 {
		// No expiry (or no base key, which then carries none): a new key
		// has none either, and a concurrent EXPIRE writes the shards after
		// the base key, so after this read: it reaches this shard.
		return
	}
	e.spreadExpiry(ctx, p, []string{shard}, at, false)
}

// spreadExpiry gives shards the expiry at (PEXPIRETIME: an absolute time in
// ms, -1 for none, -2 for a base key the command deleted), then reads the
// base key's again and repeats while it moved (see the rule above). deleting
// tells a base key the command deleted (its shards go too) from one that
// is missing when a shard is created (the new shard has no expiry).
func (e *Engine) spreadExpiry(ctx context.Context, p *plan, shards []string, at int64, deleting bool) {
	for range expiryRounds {
		e.m.fanout.Add(float64(len(shards)))
		_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, s := range shards {
				switch {
				case at > 0:
					pipe.Do(ctx, "pexpireat", s, at)
				case at == -2 && deleting:
					// A time in the past: Redis deletes the key, as
					// the command did the base key.
					pipe.Do(ctx, "pexpireat", s, 1)
				default:
					pipe.Persist(ctx, s)
				}
			}
			return nil
		})
		if err != nil {
			e.m.upstreamErrors.Inc()
			return
		}
		now, err := e.rc().Do(ctx, "pexpiretime", p.key).Int64()
		if err != nil {
			e.m.upstreamErrors.Inc()
			return
		}
		if now == at {
			return
		}
		at = now
	}
}

// hasPending reports whether this process holds pre-aggregated increments
// of key not yet written.
func (e *Engine) hasPending(key string) bool {
	e.countersMu.Lock()
	c := e.counters[key]
	e.countersMu.Unlock()
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending != 0
}

func anyArgs(args [][]byte) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = string(a)
	}
	return out
}

// isRedisError reports an error reply of Redis (its own answer to the
// command), as opposed to a failure to get one.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
