package engine

import (
	"bytes"
	"container/list"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
)

// cache is the local cache of mitigated keys' values (GET) and of the
// replies to their other cacheable reads (HGETALL, SISMEMBER, ZRANGE...,
// by the whole request and the client's protocol: entryID). It is bounded
// by entries and by bytes (key + request + value), evicting the oldest fill first: the
// keys it holds are the few hot keys of the routing table, each refilled once
// per TTL, so insertion order is as good as recency and costs no write on a
// hit. A hit takes a read lock only.
//
// Every invalidation is numbered (gen); a fill carries the number current
// before its upstream read (seq) and is dropped if its key was invalidated
// since, so a read that raced a write never caches the old value. An early
// refresh (refresh.go) is such a fill, so it cannot bring back a value
// invalidated while it was in flight. What that takes per key is bounded:
// a key's last invalidation number is kept only until maxInvalidations
// keys have one, then every record is dropped at once and the floor rises
// to the current number, which fails every fill older than it (the ones
// whose records went with the drop, and a few innocent ones, which are
// then just not cached). Invalidations are by Redis key: every entry of
// the key, whatever its request, goes, and every fill of it in flight
// fails.
type cache struct {
	maxEntries int
	maxBytes   int64

	mu sync.RWMutex
	// m holds the entries by Redis key, then by request ("" for the
	// key's value, read by GET).
	m     map[string]map[string]*centry
	n     int        // entries in m
	order *list.List // of *centry, oldest fill first
	bytes int64
	// gen counts invalidations; inval is each recently invalidated key's
	// last number; a fill that started before floor is dropped (its key's
	// record may be gone).
	gen, floor uint64
	inval      map[string]uint64
	// timing is what each key's fills measured, for its refresh window
	// (refresh.go); kept across entries and invalidations, dropped with
	// the key in retain.
	timing map[entryID]refreshTiming
}

// entryID names one cache entry: a Redis key and a request on it. req is
// "" for the key's value (GET, MGET), else the client's protocol and the
// whole request (reqID): two requests differing in any argument, or in
// the protocol their reply is written in, are two entries.
type entryID struct {
	key, req string
}

// keyID is the entry of key's value.
func keyID(key string) entryID { return entryID{key: key} }

// reqID is the request part of the entry of a cacheable read (args[0] is
// its name, in any case) answered in RESP proto: the reply bytes differ
// by protocol (a map or an array of pairs, a double or a bulk string).
func reqID(proto int, args [][]byte) string {
	n := 2
	for _, a := range args {
		n += 4 + len(a)
	}
	b := make([]byte, 0, n)
	b = append(b, byte(proto), byte(len(args)))
	for i, a := range args {
		if i == 0 {
			a = bytes.ToUpper(a)
		}
		b = binary.AppendUvarint(b, uint64(len(a)))
		b = append(b, a...)
	}
	return string(b)
}

type centry struct {
	id      entryID
	val     []byte
	found   bool
	expires time.Time
	// refreshAt is when a read starts an early refresh (zero: never).
	refreshAt time.Time
	// refreshing is set by the one read that claimed the refresh: at most
	// one early refetch per entry, so per key per TTL.
	refreshing atomic.Bool
	size       int64
	elem       *list.Element
}

// fillTimes is when a fill ran and what its entry's refresh ceiling is.
type fillTimes struct {
	// started is when the fill began (a miss) or its refresh was claimed;
	// done when its reply came back (the entry's lifetime starts there).
	started, done time.Time
	expires       time.Time
	// aheadPercent is the ceiling of the refresh window, in percent of the
	// entry's lifetime (0: no refresh).
	aheadPercent int32
}

func newCache(maxEntries int, maxBytes int64) *cache {
	return &cache{
		maxEntries: maxEntries,
		maxBytes:   maxBytes,
		m:          make(map[string]map[string]*centry),
		order:      list.New(),
		inval:      make(map[string]uint64),
		timing:     make(map[entryID]refreshTiming),
	}
}

// get returns the cached value of key if it has not expired at now. refresh
// is true for the one caller, per entry, that reads it at or after its
// refreshAt: that caller starts the early refresh.
func (c *cache) get(id entryID, now time.Time) (val []byte, found, ok, refresh bool) {
	c.mu.RLock()
	ce := c.m[id.key][id.req]
	c.mu.RUnlock()
	if ce == nil || !now.Before(ce.expires) {
		return nil, false, false, false
	}
	// Load before the compare-and-swap: every hit in the window after the
	// first is then a plain read, not a contended write.
	refresh = !ce.refreshAt.IsZero() && !now.Before(ce.refreshAt) && !ce.refreshing.Load() && ce.refreshing.CompareAndSwap(false, true)
	return ce.val, ce.found, true, refresh
}

// fresh is get without claiming the refresh.
func (c *cache) fresh(id entryID, now time.Time) (val []byte, found, ok bool) {
	c.mu.RLock()
	ce := c.m[id.key][id.req]
	c.mu.RUnlock()
	if ce == nil || !now.Before(ce.expires) {
		return nil, false, false
	}
	return ce.val, ce.found, true
}

// expiredAt is when key's entry expired, if the cache still holds one that
// has expired at now (it is replaced at the next fill).
func (c *cache) expiredAt(id entryID, now time.Time) (time.Time, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ce := c.m[id.key][id.req]
	if ce == nil || now.Before(ce.expires) {
		return time.Time{}, false
	}
	return ce.expires, true
}

// maxInvalidations bounds the keys whose last invalidation is recorded:
// past it the records are dropped and the floor raised (see cache).
const maxInvalidations = 4096

// seq is the invalidation number a fill that starts now carries.
func (c *cache) seq() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// put stores a fill read after seq() returned seq, unless its key was
// invalidated since. It reports whether the value was stored: a value
// larger than the byte bound is not. The fill's times and the entry it
// replaces are what the entry's refresh window is measured from
// (refresh.go).
func (c *cache) put(id entryID, seq uint64, val []byte, found bool, f fillTimes) bool {
	size := int64(len(id.key) + len(id.req) + len(val) + 64)
	c.mu.Lock()
	defer c.mu.Unlock()
	if size > c.maxBytes {
		return false
	}
	if seq < c.floor || c.inval[id.key] > seq {
		return false
	}
	ceiling := refreshCeiling(f.done, f.expires, f.aheadPercent)
	t := c.timing[id]
	if old := c.m[id.key][id.req]; old != nil {
		// What the refresh of the entry replaced needed: from its window's
		// opening to now, whether this is that refresh or, when it was not
		// refreshed in time (no read in its window, a refresh that failed
		// or came late), the fill after its expiry. The latter only once a
		// refresh of the key has been measured: a key not yet read steadily
		// (filled, then idle) would otherwise start at the ceiling's
		// window from its idle gap.
		if !old.refreshAt.IsZero() && ceiling > 0 && (old.refreshing.Load() || t.known && !f.started.Before(old.expires)) {
			t = t.observe(f.done.Sub(old.refreshAt), ceiling)
			c.timing[id] = t
		}
		c.removeLocked(old)
	}
	for c.n >= c.maxEntries || c.bytes+size > c.maxBytes {
		front := c.order.Front()
		if front == nil {
			break
		}
		c.removeLocked(front.Value.(*centry))
	}
	if len(c.timing) > 2*c.maxEntries {
		// Requests come and go (HGET of many fields): keep the timing of
		// the entries held only.
		for tid := range c.timing {
			if c.m[tid.key][tid.req] == nil {
				delete(c.timing, tid)
			}
		}
	}
	ce := &centry{id: id, val: val, found: found, expires: f.expires, refreshAt: refreshAt(f.expires, ceiling, t), size: size}
	ce.elem = c.order.PushBack(ce)
	reqs := c.m[id.key]
	if reqs == nil {
		reqs = make(map[string]*centry, 1)
		c.m[id.key] = reqs
	}
	reqs[id.req] = ce
	c.n++
	c.bytes += size
	return true
}

func (c *cache) removeLocked(ce *centry) {
	c.order.Remove(ce.elem)
	reqs := c.m[ce.id.key]
	delete(reqs, ce.id.req)
	if len(reqs) == 0 {
		delete(c.m, ce.id.key)
	}
	c.n--
	c.bytes -= ce.size
}

// invalidate drops every entry of key (its value and the replies to
// every request on it) and makes the fills of key that started before
// fail.
func (c *cache) invalidate(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.inval) >= maxInvalidations {
		c.dropRecordsLocked()
	}
	c.gen++
	c.inval[key] = c.gen
	for _, ce := range c.m[key] {
		c.removeLocked(ce)
	}
}

// dropRecordsLocked forgets every key's last invalidation and fails every
// fill in flight instead: one that started before now may have had its
// key invalidated.
func (c *cache) dropRecordsLocked() {
	c.gen++
	c.floor = c.gen
	clear(c.inval)
}

// invalidateAll drops every entry (lost server-assisted invalidations).
func (c *cache) invalidateAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, reqs := range c.m {
		for _, ce := range reqs {
			c.removeLocked(ce)
		}
	}
	c.dropRecordsLocked()
}

// retain drops the entries of keys keep rejects, when they leave the
// routing table: their writes stop invalidating the cache. A fill in
// flight for such a key must fail too, and which keys have one is not
// known: every fill in flight fails (a table change costs them their
// store, not their read).
func (c *cache) retain(keep func(key string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, reqs := range c.m {
		if !keep(k) {
			for _, ce := range reqs {
				c.removeLocked(ce)
			}
		}
	}
	c.dropRecordsLocked()
	for id := range c.timing {
		if !keep(id.key) {
			delete(c.timing, id)
		}
	}
}

// setLimits changes the bounds, evicting the oldest fills that no longer
// fit.
func (c *cache) setLimits(maxEntries int, maxBytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maxEntries, c.maxBytes = maxEntries, maxBytes
	for c.n > c.maxEntries || c.bytes > c.maxBytes {
		front := c.order.Front()
		if front == nil {
			break
		}
		c.removeLocked(front.Value.(*centry))
	}
}

// stats returns the number of entries and bytes held.
func (c *cache) stats() (entries int, bytes int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.n, c.bytes
}
