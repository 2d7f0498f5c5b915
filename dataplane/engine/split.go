package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// counter is this process's view of one split counter's total, so that INCR
// can return a value without reading every shard on every write.
type counter struct {
	mu sync.Mutex
	// total is the sum read at `at`; known is false until the first read.
	total int64
	at    time.Time
	known bool
	// local is what this process added since the read that set total
	// began (acknowledged increments, plus pending ones in pre-aggregation).
	local int64
	// pending are pre-aggregated increments not yet written upstream.
	pending int64
	// preAggregated is set once the counter held pending increments: it is
	// then never pruned, since a writer may still hold it.
	preAggregated bool
	// refreshing is closed when the running refresh ends; nil if none.
	refreshing chan struct{}
	// failedAt is when the last refresh began, if it failed (zero if it
	// did not): none is tried again before failedTotalRetry (or
	// TotalRefresh, if longer) has passed.
	failedAt time.Time

	// flushMu serialises a pre-aggregated counter's flushes with its
	// refreshes, so a refresh sees every pending increment either in Redis
	// or in pending, never in both or neither.
	flushMu sync.Mutex
}

// failedTotalRetry is how long after a failed read of a split counter's
// shards the next is tried. The caller whose INCR starts a read waits for
// it, and a read that fails (a shard's node down) takes go-redis' cluster
// pipeline retries, about 100 ms: tried every TotalRefresh, it made one
// client's every INCR that slow (a round of 40 commands took 1.1 s instead
// of 0.1 s in test/clients TestFailingSplitPathRolledBack, while the
// split's other shards and then the counter's own key served them).
const failedTotalRetry = time.Second

func (e *Engine) counter(key string) *counter {
	e.countersMu.Lock()
	defer e.countersMu.Unlock()
	c := e.counters[key]
	if c == nil {
		c = &counter{}
		e.counters[key] = c
	}
	return c
}

// forgetCounter drops the known total after SET/DEL moved it.
func (e *Engine) forgetCounter(key string) {
	c := e.counter(key)
	c.mu.Lock()
	c.known = false
	c.mu.Unlock()
}

// estimate returns the counter's estimated total after this process's
// acknowledged increment n: the last known total plus what this process
// added since, refreshing the total with one read of every shard when it is
// older than TotalRefresh. Only one caller refreshes at a time; the others
// return the current estimate unless no total is known yet.
func (e *Engine) estimate(ctx context.Context, p *plan, n, shardVal int64) int64 {
	c := e.counter(p.key)
	now := e.clock.Now()
	c.mu.Lock()
	c.local += n
	for {
		fresh := c.known && now.Sub(c.at) < e.opts.TotalRefresh
		// A refresh that failed (a shard's node down) is not tried again
		// at once (failedTotalRetry): every INCR would otherwise wait for
		// a read of every shard that fails again.
		failedLately := !c.failedAt.IsZero() && now.Sub(c.failedAt) < max(e.opts.TotalRefresh, failedTotalRetry)
		if c.refreshing == nil && !fresh && !failedLately {
			break // this caller refreshes
		}
		if c.known {
			v := c.total + c.local
			c.mu.Unlock()
			return v
		}
		if c.refreshing == nil { // no total yet, and the last read failed
			c.mu.Unlock()
			return shardVal
		}
		// The first total is being read: wait for it.
		ch := c.refreshing
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return shardVal
		}
		c.mu.Lock()
	}
	ch := make(chan struct{})
	c.refreshing = ch
	startLocal := c.local
	c.mu.Unlock()

	total, _, err := e.sum(ctx, p)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = nil
	close(ch)
	if err != nil {
		c.failedAt = now
		if c.known {
			return c.total + c.local
		}
		// The increment is applied; returning an error would invite a
		// retry that counts it twice. The shard's value is a lower bound
		// of a non-negative counter.
		return shardVal
	}
	// Increments acknowledged after the read began may already be in
	// total too: they are counted twice until the next refresh (the
	// over-count bound in docs/engine.md).
	c.total, c.at, c.known = total, now, true
	c.failedAt = time.Time{}
	c.local -= startLocal
	return c.total + c.local
}

// preAggregate adds n to the counter's pending increments and returns the
// estimated total including them.
func (e *Engine) preAggregate(ctx context.Context, p *plan, n int64) (int64, error) {
	c := e.counter(p.key)
	now := e.clock.Now()
	c.mu.Lock()
	c.preAggregated = true
	c.pending += n
	c.local += n
	if c.known && now.Sub(c.at) < e.opts.TotalRefresh {
		v := c.total + c.local
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	// Refresh under flushMu: no flush runs meanwhile, so Redis holds
	// exactly what was flushed and pending the rest.
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	if c.known && now.Sub(c.at) < e.opts.TotalRefresh {
		v := c.total + c.local
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	total, _, err := e.sum(ctx, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		return c.total + c.local, nil
	}
	c.total, c.at, c.known = total, now, true
	c.local = c.pending
	return c.total + c.local, nil
}

// flushLoop flushes pre-aggregated increments at the shortest flush
// interval of the table until Close.
func (e *Engine) flushLoop() {
	defer close(e.done)
	for {
		every := e.table.Load().flushEvery
		var tick <-chan time.Time
		var t clockTimer
		if every > 0 {
			t = e.clock.NewTimer(every)
			tick = t.C()
		}
		select {
		case <-e.stop:
			if t != nil {
				t.Stop()
			}
			return
		case <-e.tableChanged:
			if t != nil {
				t.Stop()
			}
			// A key may have left pre-aggregation (or the table): write
			// what it has pending now rather than at Close.
			ctx, cancel := context.WithTimeout(context.Background(), e.opts.UpstreamTimeout)
			_ = e.flushWhere(ctx, func(key string) bool {
				p := e.plan(key)
				return p == nil || p.entry.PreAggregate == nil
			})
			cancel()
			e.pruneCounters()
		case <-tick:
			ctx, cancel := context.WithTimeout(context.Background(), e.opts.UpstreamTimeout)
			_ = e.Flush(ctx)
			cancel()
		}
	}
}

type clockTimer interface {
	C() <-chan time.Time
	Stop() bool
}

// Flush writes every pending pre-aggregated increment upstream now. An
// increment that fails to write stays pending for the next flush.
func (e *Engine) Flush(ctx context.Context) error {
	return e.flushWhere(ctx, func(string) bool { return true })
}

// flushWhere flushes the keys that match.
func (e *Engine) flushWhere(ctx context.Context, match func(key string) bool) error {
	e.countersMu.Lock()
	keys := make([]string, 0, len(e.counters))
	for k := range e.counters {
		if match(k) {
			keys = append(keys, k)
		}
	}
	e.countersMu.Unlock()
	var first error
	for _, k := range keys {
		if err := e.flushKey(ctx, k); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// flushKey writes key's pending increments to a random shard of the current
// write generation, or to the base key if the key left the table or its
// mitigation is not active.
func (e *Engine) flushKey(ctx context.Context, key string) error {
	e.countersMu.Lock()
	c := e.counters[key]
	e.countersMu.Unlock()
	if c == nil {
		return nil
	}
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	d := c.pending
	c.pending = 0
	c.mu.Unlock()
	if d == 0 {
		return nil
	}
	target := key
	now := e.clock.Now()
	if p := e.plan(key); p != nil && p.entry.Split != nil && p.hasShards && p.entry.Active(now) {
		target = e.writeKey(p, now)
	}
	v, err := e.rc().IncrBy(ctx, target, d).Result()
	if err != nil {
		e.m.upstreamErrors.Inc()
		c.mu.Lock()
		c.pending += d
		c.mu.Unlock()
		return err
	}
	e.m.flushes.Inc()
	if p := e.plan(key); target != key && v == d && p != nil {
		e.inheritExpiry(ctx, p, target)
	}
	return nil
}

// pruneCounters forgets the counters of keys that left the table and have
// nothing pending, so the map stays as small as the table.
func (e *Engine) pruneCounters() {
	e.countersMu.Lock()
	defer e.countersMu.Unlock()
	for k, c := range e.counters {
		if e.plan(k) != nil {
			continue
		}
		c.mu.Lock()
		// An estimate-only counter that a writer still holds is harmless
		// to drop: the writer's next call makes a new one.
		idle := !c.preAggregated && c.refreshing == nil
		c.mu.Unlock()
		if idle {
			delete(e.counters, k)
		}
	}
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
	if err := e.rc().IncrBy(ctx, p.key, n-total).Err(); err != nil {
		e.m.upstreamErrors.Inc()
		return err
	}
	e.forgetCounter(p.key)
	// SET drops the key's expiry (no options are accepted here).
	e.persistCounter(ctx, p)
	return nil
}

// persistCounter removes a split counter's expiry from its base key and
// every shard, as SET and DEL do to a plain key. The value is already
// written, so a failure is counted, not returned.
func (e *Engine) persistCounter(ctx context.Context, p *plan) {
	if err := e.rc().Persist(ctx, p.key).Err(); err != nil {
		e.m.upstreamErrors.Inc()
		return
	}
	e.spreadExpiry(ctx, p, p.readKeys[1:], -1, false)
}

// writeKey is the physical key that takes a write of a split counter now: a
// random shard of the current write generation, or the base key when that
// generation has no shards or none has started.
func (e *Engine) writeKey(p *plan, now time.Time) string {
	return e.writePlace(p, now, e.opts.IntN)
}

// placeAfterFailure is where a split counter's increment goes after the
// places in failed provably did not take it (notApplied): another shard of
// the current write generation, chosen at random, then the base key; ""
// once every one failed, or when the counter is not being written to its
// shards. Any place is exact: every read of the counter sums the base key
// and every shard of every generation listed, and the fold moves whatever a
// shard holds. At most maxWritePlaces are tried, so that a write fails in
// bounded time when the whole upstream is down.
func (e *Engine) placeAfterFailure(p *plan, now time.Time, failed []string) string {
	if len(failed) >= maxWritePlaces {
		return ""
	}
	shards := e.writeShards(p, now)
	var left []string
	for _, k := range shards {
		if !slices.Contains(failed, k) {
			left = append(left, k)
		}
	}
	switch {
	case len(left) > 0:
		return left[e.opts.IntN(len(left))]
	case len(shards) > 0 && !slices.Contains(failed, p.key):
		return p.key
	}
	return ""
}

// maxWritePlaces bounds the places a split counter's increment tries
// (placeAfterFailure): the shards of a cluster's three masters and the
// base key, beyond which a failure is the upstream's, not one node's.
const maxWritePlaces = 4

// writePlace is the physical key of the current write generation that
// pick chooses among its shards, or the base key when that generation has
// no shards or none has started.
func (e *Engine) writePlace(p *plan, now time.Time, pick func(shards int) int) string {
	shards := e.writeShards(p, now)
	if len(shards) == 0 {
		return p.key
	}
	e.m.fanout.Inc()
	return shards[pick(len(shards))]
}

// writeShards are the shard keys of p's current write generation: none
// when it has none or no generation has started (the base key takes the
// writes).
func (e *Engine) writeShards(p *plan, now time.Time) []string {
	epoch := routing.EpochAt(now, e.table.Load().table.EpochMillis)
	gens := p.entry.Split.Generations
	for i := len(gens) - 1; i >= 0; i-- {
		if gens[i].FromEpoch <= epoch {
			return p.gens[i]
		}
	}
	return nil
}
