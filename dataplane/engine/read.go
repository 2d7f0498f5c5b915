package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing"
)

// Reads: GET through the local cache, coalesced, or from a replica or the
// sum of a split counter's shards.

// readResult is what a (possibly shared) upstream read returns.
type readResult struct {
	val   []byte
	found bool
}

// Get reads a key. found is false when the key does not exist. The returned
// slice may be shared with other callers and the cache: do not modify it.
func (e *Engine) Get(ctx context.Context, key string) (val []byte, found bool, err error) {
	p := e.plan(key)
	if p == nil {
		return e.getRaw(ctx, key)
	}
	now := e.clock.Now()
	active := p.entry.Active(now)
	lc := p.entry.LocalCache
	if active && lc != nil {
		if v, f, ok, refresh := e.cache.get(keyID(key), now); ok {
			e.m.cacheHits.Inc()
			if refresh {
				e.refresh(ctx, p, now)
			}
			return v, f, nil
		}
		e.m.cacheMisses.Inc()
	}
	if !active || (!p.entry.Coalesce && lc == nil) {
		r, err := e.fetch(ctx, p, active)
		return r.val, r.found, err
	}
	ch := e.flight.DoChan(key, func() (any, error) { return e.fill(ctx, p, time.Time{}) })
	select {
	case res := <-ch:
		if res.Shared {
			e.m.coalesced.Inc()
		}
		if res.Err != nil {
			return nil, false, res.Err
		}
		r := res.Val.(readResult)
		return r.val, r.found, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// fill is the one coalesced upstream read of an active key (the body of
// its single flight), which fills the local cache when the key has one. It
// runs detached from ctx's cancellation (it serves every waiter) but keeps
// its values: the go-redis hook marks its own commands there. claimed is
// when a refresh ahead of expiry was claimed (zero for a miss's fill): that
// fill must read even though the cache still holds the key, and its
// duration, measured from the claim, sizes the key's next refresh window.
func (e *Engine) fill(ctx context.Context, p *plan, claimed time.Time) (any, error) {
	key, lc := p.key, p.entry.LocalCache
	started := claimed
	if started.IsZero() {
		started = e.clock.Now()
		// A caller that missed the cache just before the previous flight
		// filled it must not read upstream again.
		if lc != nil {
			if v, f, ok := e.cache.fresh(keyID(key), started); ok {
				return readResult{v, f}, nil
			}
		}
	}
	seq := e.cache.seq()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.UpstreamTimeout)
	defer cancel()
	var r readResult
	var err error
	if tr := e.track.Load(); tr != nil && lc != nil && p.entry.Split == nil {
		// The base key is the truth, and reading it on the tracking
		// connection makes the server report its next change.
		e.m.upstreamReads.Inc()
		r.val, r.found, err = tr.get(fctx, key)
		var re resp.Error
		if err != nil && !errors.As(err, &re) && fctx.Err() == nil {
			// No tracking connection (an old server, a failover in
			// progress): read as without tracking, so the TTL alone
			// bounds staleness, rather than fail the read.
			e.m.upstreamErrors.Inc()
			r, err = e.fetch(fctx, p, true)
		}
	} else {
		r, err = e.fetch(fctx, p, true)
	}
	if err == nil && lc != nil {
		// seq was read before the upstream read: an invalidation since
		// (a write, a tracking push) makes put drop this value, early
		// refresh or not.
		now := e.clock.Now()
		e.cache.put(keyID(key), seq, r.val, r.found, fillTimes{started: started, done: now, expires: now.Add(e.ttl(lc, e.phased(keyID(key), lc, claimed, started))), aheadPercent: lc.RefreshAheadPercent})
	}
	return r, err
}

// Cached returns key's value from the local cache without waiting for any
// I/O. ok is false when the key has no fresh cached value (or no local cache
// in force); the caller then uses Get. It lets an event loop, which must
// never block, answer cache hits inline. A hit that is due to refresh the
// key starts that refresh in the background, as Get does.
func (e *Engine) Cached(key string) (val []byte, found, ok bool) {
	p := e.plan(key)
	if p == nil || p.entry.LocalCache == nil {
		return nil, false, false
	}
	now := e.clock.Now()
	if !p.entry.Active(now) {
		return nil, false, false
	}
	val, found, ok, refresh := e.cache.get(keyID(key), now)
	if ok {
		e.m.cacheHits.Inc()
		if refresh {
			// The proxy's upstream client has no hook: a plain context.
			e.refresh(context.Background(), p, now)
		}
	}
	return val, found, ok
}

// ttl is the lifetime of a local-cache fill: TTLMillis, shortened by a
// random jitter of up to JitterPercent unless phased, so entries filled
// together do not expire together; no entry outlives TTLMillis.
func (e *Engine) ttl(lc *routing.LocalCache, phased bool) time.Duration {
	d := time.Duration(lc.TTLMillis) * time.Millisecond
	if span := jitterSpan(lc); !phased && span > 0 {
		d -= time.Duration(e.opts.IntN(int(span) + 1))
	}
	return d
}

// jitterSpan is the most the jitter shortens a fill's TTL.
func jitterSpan(lc *routing.LocalCache) time.Duration {
	if j := int64(lc.JitterPercent); j > 0 && j <= 100 {
		return time.Duration(lc.TTLMillis) * time.Millisecond * time.Duration(j) / 100
	}
	return 0
}

// phased is whether a fill of key that started at started (claimed: the
// refresh claimed then) is timed by the expiry of the key's previous entry,
// and so lives the whole TTL: a refresh ahead of that expiry, or a miss
// that started within the jitter span after it (the previous entry was not
// refreshed in time). Such a fill keeps the previous entry's phase, which
// carries the jitter of the key's first fill, so entries of processes and
// keys filled together stay as far apart as their first fills put them; a
// jitter on each of them would only refetch sooner (1.05 upstream reads per
// TTL at the default 10 %, docs/engine.md). Any other fill (the first, after
// an invalidation, an eviction or a longer gap, such as an outage that all
// processes see at once) is jittered.
func (e *Engine) phased(id entryID, lc *routing.LocalCache, claimed, started time.Time) bool {
	if !claimed.IsZero() {
		return true
	}
	expired, ok := e.cache.expiredAt(id, started)
	return ok && started.Sub(expired) <= jitterSpan(lc)
}

func (e *Engine) getRaw(ctx context.Context, key string) ([]byte, bool, error) {
	e.m.upstreamReads.Inc()
	b, err := e.rc().Get(ctx, key).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		e.m.upstreamErrors.Inc()
		return nil, false, err
	}
	return b, true, nil
}

// fetch reads key upstream: the sum of a split counter, one random copy of
// a replicated value, or the base key.
func (e *Engine) fetch(ctx context.Context, p *plan, active bool) (readResult, error) {
	switch {
	case p.entry.Split != nil && p.hasShards:
		total, exists, err := e.counterSum(ctx, p)
		if err != nil || !exists {
			return readResult{}, err
		}
		return readResult{val: strconv.AppendInt(nil, total, 10), found: true}, nil
	case active && len(p.replicas) > 0:
		i := e.opts.IntN(len(p.replicas) + 1)
		if i > 0 {
			e.m.fanout.Inc()
			v, found, err := e.readKey(ctx, p, p.replicas[i-1], active)
			if err != nil || found {
				return readResult{v, found}, err
			}
			// The replica expired or was never filled: the base key is
			// the truth.
		}
	}
	v, found, err := e.readKey(ctx, p, p.key, active)
	return readResult{v, found}, err
}

// readKey reads one physical key of p: from a replica of its shard while
// p's entry asks for replica reads and one is within its lag bound, from
// the master otherwise.
func (e *Engine) readKey(ctx context.Context, p *plan, key string, active bool) ([]byte, bool, error) {
	if rr := p.entry.ReplicaReads; active && rr != nil {
		v, found, err := e.replicaGet(ctx, p, rr, key)
		if err == nil {
			return v, found, nil
		}
	}
	return e.getRaw(ctx, key)
}

// counterSum is a split counter's value as this process knows it: the sum
// of its physical keys plus, when it is pre-aggregated, this process's
// increments not yet flushed, so that a read after an INCR sees it as the
// INCR's reply did. flushMu keeps a flush from moving increments out of
// pending into Redis while they are summed: each is counted once.
func (e *Engine) counterSum(ctx context.Context, p *plan) (int64, bool, error) {
	if p.entry.PreAggregate == nil {
		return e.sum(ctx, p)
	}
	c := e.counter(p.key)
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	total, exists, err := e.sum(ctx, p)
	if err != nil {
		return 0, false, err
	}
	c.mu.Lock()
	pending := c.pending
	c.mu.Unlock()
	return total + pending, exists || pending != 0, nil
}

// errNotInteger is returned when a split counter's key holds something else.
var errNotInteger = errors.New("ERR heatsink: a physical key of a split counter does not hold an integer")

// sum reads the base key and every shard of every generation in one
// pipeline (a cluster client sends one batch per node) and adds them up.
func (e *Engine) sum(ctx context.Context, p *plan) (total int64, exists bool, err error) {
	if e.folding(p) {
		if total, exists, err = e.sumFolding(ctx, p); !errors.Is(err, errFoldRights) {
			return total, exists, err
		}
	}
	e.m.upstreamReads.Inc()
	e.m.fanout.Add(float64(len(p.readKeys) - 1))
	cmds, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, k := range p.readKeys {
			pipe.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		e.m.upstreamErrors.Inc()
		return 0, false, err
	}
	vals := make([]string, 0, len(cmds))
	for _, c := range cmds {
		s, err := c.(*redis.StringCmd).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			e.m.upstreamErrors.Inc()
			return 0, false, err
		}
		vals = append(vals, s)
	}
	return addPlaces(vals)
}

// sumFolding is sum while a fold may be in flight: every place read with
// its fold records and reconciled (foldRead), so that a move is counted
// once.
func (e *Engine) sumFolding(ctx context.Context, p *plan) (total int64, exists bool, err error) {
	vals, err := e.foldRead(ctx, p, wholeReads(p, "GET"), func(_ int, r any) (map[string]string, error) {
		if s, ok := r.(string); ok {
			return map[string]string{"": s}, nil
		}
		return map[string]string{}, nil
	}, nil)
	if err != nil {
		return 0, false, err
	}
	present := make([]string, 0, len(vals))
	for _, m := range vals {
		if s, ok := m[""]; ok {
			present = append(present, s)
		}
	}
	return addPlaces(present)
}

// addPlaces adds up the values of a split counter's places that exist:
// sum's and sumFolding's one addition.
func addPlaces(vals []string) (total int64, exists bool, err error) {
	for _, s := range vals {
		n, perr := strconv.ParseInt(s, 10, 64)
		if perr != nil {
			return 0, false, errNotInteger
		}
		total += n
		exists = true
	}
	return total, exists, nil
}
