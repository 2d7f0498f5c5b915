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
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/clock"

	"github.com/heatsink-dev/heatsink/dataplane/upstream"
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
	// Replicas, if set, lists the shards' replicas for replica reads
	// (replicas.go), for a client whose replicas the engine cannot find
	// itself: a Sentinel set, whose replicas only the Sentinels know.
	// Without it a cluster client's come from CLUSTER SLOTS and a
	// standalone client's from the table.
	Replicas ReplicaSource
	// Dialer, if set, is how the engine reaches replicas (TLS and
	// credentials included) rather than with its client's own options: the
	// sidecar's one upstream.Dialer, whose handshakes see the current CA
	// bundle, while in Sentinel mode its client's own dialer reaches the
	// master alone.
	Dialer *upstream.Dialer
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
	// clientDB is client's database; dbClients are the engine's own
	// clients of the other databases a table named (database.go).
	clientDB  int32
	dbMu      sync.Mutex
	dbClients map[int32]*redis.Client
	opts      Options
	clock     clock.WithTicker
	table     atomic.Pointer[index]
	cache     *cache
	reps      replicaSet
	flight    singleflight.Group
	// rflight coalesces the requests of readreq.go, by flightID; rflights
	// lists those in flight per key; raw holds their connections.
	rflight  singleflight.Group
	rflights reqFlights
	raw      rawPool
	m        *metrics

	// track holds the tracking connections while tracking is on (the
	// table's localCache.tracking, or Options.Tracking for a table that
	// does not say); nil while it is off.
	track   atomic.Pointer[trackers]
	closed  atomic.Bool
	trackMu sync.Mutex // serialises turning tracking on and off

	// bg counts early refreshes in flight (refresh.go); bgClosed, under
	// bgMu, stops new ones once Close waits for them.
	bgMu     sync.Mutex
	bgClosed bool
	bg       sync.WaitGroup

	countersMu sync.Mutex
	counters   map[string]*counter

	// limiters are the shed keys' token buckets (shed.go), by key.
	shedMu   sync.Mutex
	limiters map[string]*limiter

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
		clientDB:     clientDB(client),
		opts:         opts,
		clock:        opts.Clock,
		cache:        newCache(opts.MaxCacheEntries, opts.MaxCacheBytes),
		m:            newMetrics(opts.Registerer),
		counters:     make(map[string]*counter),
		tableChanged: make(chan struct{}, 1),
		stop:         make(chan struct{}),
		done:         make(chan struct{}),
	}
	e.reps.e = e
	e.setTracking(opts.Tracking)
	e.table.Store(e.newIndex(emptyTable))
	go e.flushLoop()
	return e
}

// index is an immutable, pre-computed view of one table.
type index struct {
	table *routing.Table
	plans map[string]*plan
	// client sends to the table's database; nil when the engine cannot
	// reach it (plans is then empty: see database.go).
	client redis.UniversalClient
	// flushEvery is the shortest pre-aggregation interval (0: none).
	flushEvery time.Duration
	// shedding: some entry has a shed budget.
	shedding bool
}

var emptyTable = &routing.Table{SchemaVersion: routing.SchemaVersion, EpochMillis: 1}

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
	// wrote is when this process last wrote the key (the engine clock's
	// Unix nanoseconds, 0: never), carried from table to table: replica
	// reads skip a replica not known to hold that write.
	wrote atomic.Int64
	// lim is the key's shed limiter, nil when it is not shed.
	lim *limiter
	// others caches a member split's sums of the places HINCRBY does not
	// write (members.go).
	others others[int64]
	// zothers is the same for a sorted set's ZINCRBY (zset.go).
	zothers others[float64]
	// zbase is a sorted set's base key in a settled layout (zset.go).
	zbase baseCopy
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
	if t == nil {
		t = &routing.Table{SchemaVersion: routing.SchemaVersion, EpochMillis: 1, Database: e.Database()}
	}
	ix := e.newIndex(t)
	old := e.table.Load()
	if ix.client != nil {
		for _, en := range t.Entries {
			p := newPlan(en)
			if op := old.plans[en.Key]; op != nil && old.table.Database == t.Database {
				p.wrote.Store(op.wrote.Load())
			}
			if en.Shed != nil {
				p.lim = e.limiterFor(en.Key)
				ix.shedding = true
			}
			ix.plans[en.Key] = p
			if pa := en.PreAggregate; pa != nil {
				d := time.Duration(pa.FlushMillis) * time.Millisecond
				if ix.flushEvery == 0 || d < ix.flushEvery {
					ix.flushEvery = d
				}
			}
		}
	}
	if old.table.Database != t.Database {
		e.switchDatabase(old)
	}
	e.table.Store(ix)
	e.retainLimiters(ix)
	e.applyCacheSettings(ix.table)
	e.reps.configure(ix.table)
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

// invalidate drops key from the local cache and detaches later reads from a
// read in flight, which may have started before the write.
func (e *Engine) invalidate(key string) {
	e.cache.invalidate(key)
	e.forgetFlights(key)
	if p := e.plan(key); p != nil && p.entry.ReplicaReads != nil {
		p.wrote.Store(e.clock.Now().UnixNano())
	}
}

// Invalidate drops key from the local cache. The proxy calls it after
// forwarding a raw write command (APPEND, EXPIRE, ...) on a mitigated key.
func (e *Engine) Invalidate(key string) { e.invalidate(key) }

// Close flushes pre-aggregated increments and stops background work. It does
// not close the client.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		close(e.stop)
		<-e.done
		e.waitRefreshes()
		e.trackMu.Lock()
		e.closed.Store(true)
		if tr := e.track.Swap(nil); tr != nil {
			tr.closeAll()
		}
		e.trackMu.Unlock()
		e.reps.close()
		e.raw.closeAll()
		ctx, cancel := context.WithTimeout(context.Background(), e.opts.UpstreamTimeout)
		defer cancel()
		err = e.Flush(ctx)
		e.closeDBClients()
	})
	return err
}

// CacheStats returns how many entries and bytes the local cache holds.
func (e *Engine) CacheStats() (entries int, bytes int64) { return e.cache.stats() }
