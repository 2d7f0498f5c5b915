// Package engine applies a routing table's mitigations to the commands on
// mitigated keys: coalesced reads, a bounded local cache, replicated values,
// split counters and opt-in pre-aggregation. The proxy and the go-redis hook
// both use it; neither calls it for keys the table does not list, so ordinary
// keys never pay for it beyond one map lookup (Lookup).
//
// The engine only ever INCRBYs shard keys (never SET/DEL), so the manager's
// fold protocol, which moves shard values into the base key with DECRBY, never
// loses an increment. See docs/engine.md for the semantics and error bounds.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/clock"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing"
)

// Options tunes an Engine. The zero value is usable.
type Options struct {
	// Clock is the time source for TTLs, epochs and flushes; the real clock
	// if nil.
	Clock clock.WithTicker
	// IntN returns a random int in [0, n); math/rand/v2.IntN if nil. Must be
	// safe for concurrent use.
	IntN func(n int) int
	// MaxCacheEntries bounds the local cache's entries (default 10000).
	MaxCacheEntries int
	// MaxCacheBytes bounds the local cache's key+value bytes, counting 64
	// bytes of overhead per entry (default 64 MiB).
	MaxCacheBytes int64
	// TotalRefresh is how old the last known total of a split counter may be
	// before an INCR refreshes it with a read of every shard (default 50ms).
	// It bounds the error of what INCR returns on a split key.
	TotalRefresh time.Duration
	// UpstreamTimeout bounds one coalesced upstream read, which runs on behalf
	// of every waiter and so cannot use any single caller's context
	// (default 5s). Each waiter still returns when its own context ends.
	UpstreamTimeout time.Duration
	// Registerer, if set, receives the engine's metrics.
	Registerer prometheus.Registerer
	// Tracking fills the local cache through RESP3 connections with CLIENT
	// TRACKING on, so writes made by any client invalidate cached values
	// within a network delay rather than at the end of their TTL. Needs a
	// *redis.Client or *redis.ClusterClient and Redis 6 or later. It applies
	// to keys that are not split (a split counter's cached sum still lives
	// for its TTL).
	Tracking bool
}

func (o *Options) defaults() {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.IntN == nil {
		o.IntN = rand.IntN
	}
	if o.MaxCacheEntries <= 0 {
		o.MaxCacheEntries = 10000
	}
	if o.MaxCacheBytes <= 0 {
		o.MaxCacheBytes = 64 << 20
	}
	if o.TotalRefresh <= 0 {
		o.TotalRefresh = 50 * time.Millisecond
	}
	if o.UpstreamTimeout <= 0 {
		o.UpstreamTimeout = 5 * time.Second
	}
}

// Engine applies one routing table to commands on its keys. It is safe for
// concurrent use.
type Engine struct {
	client redis.UniversalClient
	opts   Options
	clock  clock.WithTicker
	table  atomic.Pointer[index]
	cache  *cache
	flight singleflight.Group
	m      *metrics

	// track holds the tracking connections while tracking is on (the
	// table's localCache.tracking, or Options.Tracking for a table that
	// does not say); nil while it is off.
	track   atomic.Pointer[trackers]
	closed  atomic.Bool
	trackMu sync.Mutex // serialises turning tracking on and off

	countersMu sync.Mutex
	counters   map[string]*counter

	tableChanged chan struct{}
	stop         chan struct{}
	done         chan struct{}
	closeOnce    sync.Once
}

// New returns an engine that sends its commands through client (a standalone
// or cluster client). It starts with an empty table and one background
// goroutine that flushes pre-aggregated increments; Close stops it.
func New(client redis.UniversalClient, opts Options) *Engine {
	opts.defaults()
	e := &Engine{
		client:       client,
		opts:         opts,
		clock:        opts.Clock,
		cache:        newCache(opts.MaxCacheEntries, opts.MaxCacheBytes),
		m:            newMetrics(opts.Registerer),
		counters:     make(map[string]*counter),
		tableChanged: make(chan struct{}, 1),
		stop:         make(chan struct{}),
		done:         make(chan struct{}),
	}
	e.setTracking(opts.Tracking)
	e.table.Store(emptyIndex)
	go e.flushLoop()
	return e
}

// index is an immutable, pre-computed view of one table.
type index struct {
	table *routing.Table
	plans map[string]*plan
	// flushEvery is the shortest pre-aggregation interval (0: none).
	flushEvery time.Duration
}

var emptyIndex = &index{table: &routing.Table{SchemaVersion: routing.SchemaVersion, EpochMillis: 1}, plans: map[string]*plan{}}

// plan is one entry with its physical keys computed once per table.
type plan struct {
	key      string
	entry    routing.Entry
	replicas []string
	// gens holds the shard keys of each split generation, in table order.
	gens [][]string
	// readKeys are the base key and every shard of every generation: what a
	// read of a split counter sums.
	readKeys []string
	// hasShards is false when no generation has shards: the base key then
	// holds the whole counter.
	hasShards bool
}

func newPlan(en routing.Entry) *plan {
	p := &plan{key: en.Key, entry: en}
	if r := en.Replicate; r != nil {
		p.replicas = routing.ReplicaKeys(en.Key, int(r.Replicas))
	}
	if s := en.Split; s != nil {
		p.readKeys = append(p.readKeys, en.Key)
		for _, g := range s.Generations {
			keys := routing.ShardKeys(en.Key, g)
			p.gens = append(p.gens, keys)
			p.readKeys = append(p.readKeys, keys...)
			if g.Shards > 0 {
				p.hasShards = true
			}
		}
	}
	return p
}

// SetTable atomically replaces the routing table; nil empties it. The table
// must be valid (routing.Parse validates) and must not be modified after.
func (e *Engine) SetTable(t *routing.Table) {
	ix := emptyIndex
	if t != nil && len(t.Entries) > 0 {
		ix = &index{table: t, plans: make(map[string]*plan, len(t.Entries))}
		for _, en := range t.Entries {
			ix.plans[en.Key] = newPlan(en)
			if pa := en.PreAggregate; pa != nil {
				d := time.Duration(pa.FlushMillis) * time.Millisecond
				if ix.flushEvery == 0 || d < ix.flushEvery {
					ix.flushEvery = d
				}
			}
		}
	} else if t != nil {
		ix = &index{table: t, plans: map[string]*plan{}}
	}
	e.table.Store(ix)
	e.applyCacheSettings(ix.table)
	// Keys that lost their local cache are written raw from now on, and raw
	// writes do not invalidate: drop what is cached for them.
	e.cache.retain(func(key string) bool {
		p := ix.plans[key]
		return p != nil && p.entry.LocalCache != nil
	})
	select {
	case e.tableChanged <- struct{}{}:
	default:
	}
}

// applyCacheSettings applies a table's localCache settings: tracking on or
// off, and the cache's bounds. A table without them leaves the Options'.
func (e *Engine) applyCacheSettings(t *routing.Table) {
	tracking, entries, bytes := e.opts.Tracking, e.opts.MaxCacheEntries, e.opts.MaxCacheBytes
	if c := t.LocalCache; c != nil {
		tracking = c.Tracking
		if c.MaxEntries > 0 {
			entries = int(c.MaxEntries)
		}
		if c.MaxBytes > 0 {
			bytes = c.MaxBytes
		}
	}
	e.cache.setLimits(entries, bytes)
	e.setTracking(tracking)
}

// setTracking turns server-assisted invalidation on or off. Turning it off
// closes the tracking connections, which drops every cached value (from
// then on the TTL alone bounds staleness, as documented).
func (e *Engine) setTracking(on bool) {
	e.trackMu.Lock()
	defer e.trackMu.Unlock()
	cur := e.track.Load()
	switch {
	case e.closed.Load() || on == (cur != nil):
	case on:
		e.track.Store(&trackers{e: e, m: map[string]*tracker{}})
	default:
		e.track.Store(nil)
		cur.closeAll()
	}
}

// Tracking reports whether server-assisted invalidation is on.
func (e *Engine) Tracking() bool { return e.track.Load() != nil }

// Table returns the current table (never nil).
func (e *Engine) Table() *routing.Table { return e.table.Load().table }

// Lookup reports whether key is in the routing table, i.e. whether commands
// on it that Handles accepts must go through the engine. It is one lock-free
// map lookup.
func (e *Engine) Lookup(key string) bool {
	ix := e.table.Load()
	if len(ix.plans) == 0 {
		return false
	}
	_, ok := ix.plans[key]
	return ok
}

func (e *Engine) plan(key string) *plan {
	return e.table.Load().plans[key]
}

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
		if v, f, ok := e.cache.get(key, now); ok {
			e.m.cacheHits.Inc()
			return v, f, nil
		}
		e.m.cacheMisses.Inc()
	}
	if !active || (!p.entry.Coalesce && lc == nil) {
		r, err := e.fetch(ctx, p, active)
		return r.val, r.found, err
	}
	ch := e.flight.DoChan(key, func() (any, error) {
		// A caller that missed the cache just before the previous flight
		// filled it must not read upstream again.
		if lc != nil {
			if v, f, ok := e.cache.get(key, e.clock.Now()); ok {
				return readResult{v, f}, nil
			}
		}
		seq := e.cache.seq(key)
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
				// No tracking connection (an old server, a failover
				// in progress): read as without tracking, so the TTL
				// alone bounds staleness, rather than fail the read.
				e.m.upstreamErrors.Inc()
				r, err = e.fetch(fctx, p, true)
			}
		} else {
			r, err = e.fetch(fctx, p, true)
		}
		if err == nil && lc != nil {
			e.cache.put(key, seq, r.val, r.found, e.clock.Now().Add(e.ttl(lc)))
		}
		return r, err
	})
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

// Cached returns key's value from the local cache without any I/O. ok is
// false when the key has no fresh cached value (or no local cache in
// force); the caller then uses Get. It lets an event loop, which must never
// block, answer cache hits inline.
func (e *Engine) Cached(key string) (val []byte, found, ok bool) {
	p := e.plan(key)
	if p == nil || p.entry.LocalCache == nil {
		return nil, false, false
	}
	now := e.clock.Now()
	if !p.entry.Active(now) {
		return nil, false, false
	}
	if val, found, ok = e.cache.get(key, now); ok {
		e.m.cacheHits.Inc()
	}
	return val, found, ok
}

// ttl is a local-cache TTL shortened by a random jitter of up to
// JitterPercent, so entries filled together do not expire together and no
// entry outlives TTLMillis.
func (e *Engine) ttl(lc *routing.LocalCache) time.Duration {
	d := time.Duration(lc.TTLMillis) * time.Millisecond
	if j := int64(lc.JitterPercent); j > 0 && j <= 100 {
		span := int64(d) * j / 100
		if span > 0 {
			d -= time.Duration(e.opts.IntN(int(span) + 1))
		}
	}
	return d
}

func (e *Engine) getRaw(ctx context.Context, key string) ([]byte, bool, error) {
	e.m.upstreamReads.Inc()
	b, err := e.client.Get(ctx, key).Bytes()
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
		total, exists, err := e.sum(ctx, p)
		if err != nil || !exists {
			return readResult{}, err
		}
		return readResult{val: strconv.AppendInt(nil, total, 10), found: true}, nil
	case active && len(p.replicas) > 0:
		i := e.opts.IntN(len(p.replicas) + 1)
		if i > 0 {
			e.m.fanout.Inc()
			v, found, err := e.getRaw(ctx, p.replicas[i-1])
			if err != nil || found {
				return readResult{v, found}, err
			}
			// The replica expired or was never filled: the base key is
			// the truth.
		}
	}
	v, found, err := e.getRaw(ctx, p.key)
	return readResult{v, found}, err
}

// errNotInteger is returned when a split counter's key holds something else.
var errNotInteger = errors.New("ERR heatsink: a physical key of a split counter does not hold an integer")

// sum reads the base key and every shard of every generation in one
// pipeline (a cluster client sends one batch per node) and adds them up.
func (e *Engine) sum(ctx context.Context, p *plan) (total int64, exists bool, err error) {
	e.m.upstreamReads.Inc()
	e.m.fanout.Add(float64(len(p.readKeys) - 1))
	cmds, err := e.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, k := range p.readKeys {
			pipe.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		e.m.upstreamErrors.Inc()
		return 0, false, err
	}
	for _, c := range cmds {
		s, err := c.(*redis.StringCmd).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			e.m.upstreamErrors.Inc()
			return 0, false, err
		}
		n, perr := strconv.ParseInt(s, 10, 64)
		if perr != nil {
			return 0, false, errNotInteger
		}
		total += n
		exists = true
	}
	return total, exists, nil
}

// invalidate drops key from the local cache and detaches later reads from a
// read in flight, which may have started before the write.
func (e *Engine) invalidate(key string) {
	e.cache.invalidate(key)
	e.flight.Forget(key)
}

// Invalidate drops key from the local cache. The proxy calls it after
// forwarding a raw write command (APPEND, EXPIRE, ...) on a mitigated key.
func (e *Engine) Invalidate(key string) { e.invalidate(key) }

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
	err := e.client.Do(ctx, setCmd(key, val, args)...).Err()
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
		if _, err := e.client.Pipelined(ctx, func(pipe redis.Pipeliner) error { writeReplicas(pipe); return nil }); err != nil {
			e.m.upstreamErrors.Inc()
			return true, err
		}
		return true, nil
	}
	cmds, err := e.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
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
	_, err := e.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
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
	_, err = e.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
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

// setCounter sets a split counter's logical value to n without touching its
// shards: it reads the total T and adds n-T to the base key. Increments that
// land between the read and the write are kept, as if SET happened at the
// read.
func (e *Engine) setCounter(ctx context.Context, p *plan, n int64) error {
	if err := e.flushKey(ctx, p.key); err != nil {
		return err
	}
	total, _, err := e.sum(ctx, p)
	if err != nil {
		return err
	}
	if err := e.client.IncrBy(ctx, p.key, n-total).Err(); err != nil {
		e.m.upstreamErrors.Inc()
		return err
	}
	e.forgetCounter(p.key)
	return nil
}

// Del deletes a key and returns how many logical keys were removed (0 or
// 1). On a split counter it sets the logical value to 0 (a later GET
// returns "0", not nil), since shards may only ever be incremented, and
// returns 1 when the total was not already 0.
func (e *Engine) Del(ctx context.Context, key string) (int64, error) {
	p := e.plan(key)
	if p == nil {
		return e.client.Del(ctx, key).Result()
	}
	e.invalidate(key)
	defer e.invalidate(key)
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
		if err := e.client.DecrBy(ctx, p.key, total).Err(); err != nil {
			e.m.upstreamErrors.Inc()
			return 0, err
		}
		e.forgetCounter(p.key)
		return 1, nil
	}
	if len(p.replicas) == 0 {
		return e.client.Del(ctx, key).Result()
	}
	e.m.fanout.Add(float64(len(p.replicas)))
	var del *redis.IntCmd
	_, err := e.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
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
		return e.client.IncrBy(ctx, key, n).Result()
	}
	e.invalidate(key)
	defer e.invalidate(key)
	now := e.clock.Now()
	active := p.entry.Active(now)
	if p.entry.Split == nil {
		v, err := e.client.IncrBy(ctx, key, n).Result()
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
		return e.client.IncrBy(ctx, key, n).Result()
	}
	if active && p.entry.PreAggregate != nil {
		return e.preAggregate(ctx, p, n)
	}
	target := key
	if active {
		target = e.writeKey(p, now)
	}
	shardVal, err := e.client.IncrBy(ctx, target, n).Result()
	if err != nil {
		e.m.upstreamErrors.Inc()
		return 0, err
	}
	return e.estimate(ctx, p, n, shardVal), nil
}

// writeKey is the physical key that takes a write of a split counter now: a
// random shard of the current write generation, or the base key when that
// generation has no shards or none has started.
func (e *Engine) writeKey(p *plan, now time.Time) string {
	epoch := routing.EpochAt(now, e.table.Load().table.EpochMillis)
	gens := p.entry.Split.Generations
	for i := len(gens) - 1; i >= 0; i-- {
		if gens[i].FromEpoch <= epoch {
			if gens[i].Shards == 0 {
				return p.key
			}
			e.m.fanout.Inc()
			return p.gens[i][e.opts.IntN(int(gens[i].Shards))]
		}
	}
	return p.key
}

// copyToReplicas writes an incremented value to the replicas. The increment
// is already acknowledged, so a failure here is counted, not returned (a
// retry would count it twice); the replicas then serve the older value
// until they expire or the next write.
func (e *Engine) copyToReplicas(ctx context.Context, p *plan, v int64) {
	ttl := time.Duration(p.entry.Replicate.TTLMillis) * time.Millisecond
	e.m.fanout.Add(float64(len(p.replicas)))
	_, err := e.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, r := range p.replicas {
			pipe.Set(ctx, r, v, ttl)
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
	}
}

// Close flushes pre-aggregated increments and stops background work. It does
// not close the client.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		close(e.stop)
		<-e.done
		e.trackMu.Lock()
		e.closed.Store(true)
		if tr := e.track.Swap(nil); tr != nil {
			tr.closeAll()
		}
		e.trackMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), e.opts.UpstreamTimeout)
		defer cancel()
		err = e.Flush(ctx)
	})
	return err
}

// setArgs is what the engine needs to know of SET's options.
type setArgs struct {
	conditional bool // NX or XX
	keepTTL     bool
	ex, px      int64
	exat, pxat  int64
}

// ttl is the expiry the options set, relative to now.
func (s setArgs) ttl(now time.Time) (time.Duration, bool) {
	switch {
	case s.ex > 0:
		return time.Duration(s.ex) * time.Second, true
	case s.px > 0:
		return time.Duration(s.px) * time.Millisecond, true
	case s.exat > 0:
		return time.Unix(s.exat, 0).Sub(now), true
	case s.pxat > 0:
		return time.UnixMilli(s.pxat).Sub(now), true
	}
	return 0, false
}

func parseSetArgs(args []any) (setArgs, error) {
	var s setArgs
	str := func(a any) (string, error) {
		switch v := a.(type) {
		case string:
			return v, nil
		case []byte:
			return string(v), nil
		case int:
			return strconv.Itoa(v), nil
		case int64:
			return strconv.FormatInt(v, 10), nil
		}
		return "", fmt.Errorf("ERR heatsink: SET option of type %T", a)
	}
	for i := 0; i < len(args); i++ {
		name, err := str(args[i])
		if err != nil {
			return s, err
		}
		switch strings.ToUpper(name) {
		case "NX", "XX":
			s.conditional = true
		case "KEEPTTL":
			s.keepTTL = true
		case "GET":
			return s, errors.New("ERR heatsink: SET ... GET is not supported on a mitigated key")
		case "EX", "PX", "EXAT", "PXAT":
			if i+1 >= len(args) {
				return s, errors.New("ERR syntax error")
			}
			i++
			v, err := str(args[i])
			if err != nil {
				return s, err
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return s, errors.New("ERR invalid expire time in 'set' command")
			}
			switch strings.ToUpper(name) {
			case "EX":
				s.ex = n
			case "PX":
				s.px = n
			case "EXAT":
				s.exat = n
			case "PXAT":
				s.pxat = n
			}
		default:
			return s, fmt.Errorf("ERR heatsink: SET option %q is not supported on a mitigated key", name)
		}
	}
	return s, nil
}

// CacheStats returns how many entries and bytes the local cache holds.
func (e *Engine) CacheStats() (entries int, bytes int64) { return e.cache.stats() }
