package engine

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing/command"
)

// Reads of every type: a cacheable read (command.Info.Cacheable: HGETALL,
// SISMEMBER, ZRANGE, LRANGE, XRANGE, TYPE, GETRANGE...) of a coalesced,
// cached or replica-read key is served as GET is (read.go), by the whole
// request: the local cache holds Redis' reply bytes per key, request and
// client protocol (entryID), a miss is one coalesced upstream read of that
// request, refresh ahead re-sends it, and every write of the key seen by
// the engine, every tracking invalidation of the key, drops all of the
// key's entries. The reply is Redis' own, in the client's protocol: the
// engine reads it on connections of its own (rawconn.go), not through
// go-redis, whose parsed replies cannot give the bytes back.

// reqFlights names the single flights of requests in flight per key, so
// that an invalidation of the key detaches later readers from all of them
// (as from the key's GET flight).
type reqFlights struct {
	mu sync.Mutex
	m  map[string]map[string]struct{}
}

func (rf *reqFlights) add(key, id string) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if rf.m == nil {
		rf.m = map[string]map[string]struct{}{}
	}
	ids := rf.m[key]
	if ids == nil {
		ids = map[string]struct{}{}
		rf.m[key] = ids
	}
	ids[id] = struct{}{}
}

func (rf *reqFlights) done(key, id string) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	delete(rf.m[key], id)
	if len(rf.m[key]) == 0 {
		delete(rf.m, key)
	}
}

// take returns and forgets key's flights.
func (rf *reqFlights) take(key string) []string {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	ids := rf.m[key]
	if len(ids) == 0 {
		return nil
	}
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	delete(rf.m, key)
	return out
}

// forgetFlights detaches later reads of key from every read of it in
// flight (its GET and its requests), which may have started before a
// write.
func (e *Engine) forgetFlights(key string) {
	e.flight.Forget(key)
	for _, id := range e.rflights.take(key) {
		e.rflight.Forget(id)
	}
}

// flightID is the single-flight name of a request: its key's length
// first, so that no two (key, request) pairs share one.
func flightID(id entryID) string {
	return strconv.Itoa(len(id.key)) + ":" + id.key + id.req
}

// Read answers a cacheable read (Decision.Op OpRead; args[0] is its name,
// args' first key is mitigated) for a client speaking RESP proto (2 or
// 3): Redis' reply bytes, in that protocol, an error reply included. The
// returned slice may be shared with other callers and the cache: do not
// modify it.
func (e *Engine) Read(ctx context.Context, args [][]byte, proto int) ([]byte, error) {
	c, _ := command.Lookup(args[0])
	key := string(c.FirstKey(args))
	p := e.plan(key)
	if p == nil {
		// The key left the table: as Redis alone.
		return e.readReq(ctx, key, args, proto)
	}
	id := entryID{key: key, req: reqID(proto, args)}
	now := e.clock.Now()
	active := p.entry.Active(now)
	lc := p.entry.LocalCache
	if active && lc != nil {
		if v, _, ok, refresh := e.cache.get(id, now); ok {
			e.m.cacheHits.Inc()
			if refresh {
				e.refreshReq(ctx, p, id, ownArgs(args), proto, now)
			}
			return v, nil
		}
		e.m.cacheMisses.Inc()
	}
	if !active || (!p.entry.Coalesce && lc == nil) {
		return e.fetchReq(ctx, p, key, args, proto, active)
	}
	// The flight may outlive this caller (its context ends, and its
	// buffers are reused): it sends a copy.
	args = ownArgs(args)
	fid := flightID(id)
	e.rflights.add(key, fid)
	ch := e.rflight.DoChan(fid, func() (any, error) {
		defer e.rflights.done(key, fid)
		return e.fillReq(ctx, p, id, args, proto, time.Time{})
	})
	select {
	case res := <-ch:
		if res.Shared {
			e.m.coalesced.Inc()
		}
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.([]byte), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CachedRead is Cached for a cacheable read: the reply from the local
// cache, without waiting for any I/O, or ok false (the caller then uses
// Read).
func (e *Engine) CachedRead(args [][]byte, proto int) (reply []byte, ok bool) {
	c, _ := command.Lookup(args[0])
	key := c.FirstKey(args)
	p := e.plan(unsafeString(key))
	if p == nil || p.entry.LocalCache == nil {
		return nil, false
	}
	now := e.clock.Now()
	if !p.entry.Active(now) {
		return nil, false
	}
	id := entryID{key: p.key, req: reqID(proto, args)}
	v, _, ok, refresh := e.cache.get(id, now)
	if ok {
		e.m.cacheHits.Inc()
		if refresh {
			// args alias the caller's buffer: the refresh keeps a copy.
			e.refreshReq(context.Background(), p, id, ownArgs(args), proto, now)
		}
	}
	return v, ok
}

// fillReq is the one coalesced upstream read of a request (fill's
// counterpart): through the tracking connections when tracking is on, so
// that the server reports the key's next change, and into the local cache
// when the key has one. An error reply is returned, never cached: it may
// be transient (LOADING, BUSY, MOVED during a resharding).
func (e *Engine) fillReq(ctx context.Context, p *plan, id entryID, args [][]byte, proto int, claimed time.Time) (any, error) {
	lc := p.entry.LocalCache
	started := claimed
	if started.IsZero() {
		started = e.clock.Now()
		if lc != nil {
			if v, _, ok := e.cache.fresh(id, started); ok {
				return v, nil
			}
		}
	}
	seq := e.cache.seq()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.UpstreamTimeout)
	defer cancel()
	var b []byte
	var err error
	if tr := e.track.Load(); tr != nil && lc != nil {
		e.m.upstreamReads.Inc()
		b, err = tr.request(fctx, id.key, args, proto)
		if _, _, moved := redirection(b); err == nil && moved {
			// The slot moved: read where it is now (readReq follows),
			// untracked; the TTL bounds this fill's staleness.
			b, err = e.fetchReq(fctx, p, id.key, args, proto, true)
		} else if err != nil && fctx.Err() == nil {
			// No tracking connection: the TTL alone bounds staleness.
			e.m.upstreamErrors.Inc()
			b, err = e.fetchReq(fctx, p, id.key, args, proto, true)
		}
	} else {
		b, err = e.fetchReq(fctx, p, id.key, args, proto, true)
	}
	if err == nil && lc != nil && !isErrorReply(b) {
		now := e.clock.Now()
		e.cache.put(id, seq, b, true, fillTimes{started: started, done: now, expires: now.Add(e.ttl(lc, e.phased(id, lc, claimed, started))), aheadPercent: lc.RefreshAheadPercent})
	}
	return b, err
}

// refreshReq is refresh for a request: the same request, re-sent in the
// background as its single flight.
func (e *Engine) refreshReq(ctx context.Context, p *plan, id entryID, args [][]byte, proto int, claimed time.Time) {
	fid := flightID(id)
	e.background(ctx, func(ctx context.Context) {
		e.rflights.add(id.key, fid)
		_, _, _ = e.rflight.Do(fid, func() (any, error) {
			defer e.rflights.done(id.key, fid)
			return e.fillReq(ctx, p, id, args, proto, claimed)
		})
	})
}

// ownArgs copies args for work that may outlive the caller's buffers.
func ownArgs(args [][]byte) [][]byte {
	own := make([][]byte, len(args))
	for i, a := range args {
		own[i] = append([]byte(nil), a...)
	}
	return own
}

func isErrorReply(b []byte) bool { return len(b) > 0 && (b[0] == '-' || b[0] == '!') }

// fetchReq sends a request upstream: to a replica of the key's shard
// within the entry's lag bound when it asks for replica reads, else to the
// key's master.
func (e *Engine) fetchReq(ctx context.Context, p *plan, key string, args [][]byte, proto int, active bool) ([]byte, error) {
	if rr := p.entry.ReplicaReads; active && rr != nil {
		var wrote time.Time
		if ns := p.wrote.Load(); ns != 0 {
			wrote = time.Unix(0, ns)
		}
		if n, timeout := e.reps.pick(key, time.Duration(rr.MaxLagMillis)*time.Millisecond, wrote); n != nil {
			_, cluster := e.client.(*redis.ClusterClient)
			rctx, cancel := context.WithTimeout(ctx, timeout)
			rn, err := e.rawNode(n.c.Options(), proto, cluster)
			var b []byte
			if err == nil {
				b, err = e.raw.do(rctx, rn, args, false)
			}
			cancel()
			if err == nil && !isErrorReply(b) {
				e.m.replicaReads.Inc()
				return b, nil
			}
			// A replica that fails (or refuses: LOADING, MASTERDOWN) is
			// passed over until the next check measures it.
			n.lag.Store(lagUnknown)
			e.m.replicaFallbacks.Inc()
		}
	}
	return e.readReq(ctx, key, args, proto)
}

// readReq sends a request to the master of key. In a cluster whose slot
// moved (the client's slot map is stale, or the slot is being migrated),
// Redis answers MOVED or ASK: the request follows it once, as a cluster
// client would (ASKING first for ASK), and a MOVED makes the client reload
// its slot map; a client of the sidecar never sees either.
func (e *Engine) readReq(ctx context.Context, key string, args [][]byte, proto int) ([]byte, error) {
	e.m.upstreamReads.Inc()
	opts, err := e.nodeOptions(ctx, key)
	var b []byte
	if err == nil {
		b, err = e.rawDo(ctx, opts, proto, false, args)
	}
	for hop := 0; err == nil && hop < 2; hop++ {
		addr, ask, ok := redirection(b)
		if !ok {
			break
		}
		cc, _ := e.client.(*redis.ClusterClient)
		if cc == nil {
			break
		}
		if !ask {
			cc.ReloadState(ctx)
		}
		o := *opts
		o.Addr = addr
		b, err = e.rawDo(ctx, &o, proto, ask, args)
	}
	if err != nil {
		e.m.upstreamErrors.Inc()
	}
	return b, err
}

// rawDo sends one request on a raw connection of opts' node, after ASKING
// when asking.
func (e *Engine) rawDo(ctx context.Context, opts *redis.Options, proto int, asking bool, args [][]byte) ([]byte, error) {
	rn, err := e.rawNode(opts, proto, false)
	if err != nil {
		return nil, err
	}
	return e.raw.do(ctx, rn, args, asking)
}

// redirection reads a MOVED or ASK error reply: the address it names.
func redirection(b []byte) (addr string, ask, ok bool) {
	var rest []byte
	switch {
	case bytes.HasPrefix(b, []byte("-MOVED ")):
		rest = b[len("-MOVED "):]
	case bytes.HasPrefix(b, []byte("-ASK ")):
		rest, ask = b[len("-ASK "):], true
	default:
		return "", false, false
	}
	f := bytes.Fields(rest) // slot, address
	if len(f) != 2 {
		return "", false, false
	}
	return string(f[1]), ask, true
}

// rawNode is the raw pool's node for opts; errRawClosed after Close.
func (e *Engine) rawNode(opts *redis.Options, proto int, readOnly bool) (*rawNode, error) {
	if n := e.raw.node(opts, proto, readOnly); n != nil {
		return n, nil
	}
	return nil, errRawClosed
}
