package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The sums of a member's other places that HINCRBY's and ZINCRBY's
// replies add (docs/engine.md, "What HINCRBY returns").

// others caches, per field, the sum of the places HINCRBY does not write,
// so that its reply (the field's whole value) costs no read of them on
// every write: every process sends a field's increments to the same
// place, whose reply counts them all. The other places change only
// through a fold (which moves value between them and the base key,
// conserving the sum, except between its credit and its debit) and
// through late writers still on an older table. So while an older
// generation is listed, a sum is used for Options.TotalRefresh; once the
// write generation is the only one with shards (the layout is settled:
// the other place is the base key, which nothing served writes), for
// settledRefresh, which bounds only writes made around heatsink. Both are
// the reply's error bound (docs/engine.md). It lives on the plan, so a
// new table (new generations) starts afresh.
// A sorted set's scores use the same cache with float64 sums (zset.go).
type others[T int64 | float64] struct {
	mu sync.Mutex
	m  map[string]otherSum[T]
}

type otherSum[T int64 | float64] struct {
	write string // the write place the sum excludes
	sum   T
	at    time.Time
	// until is the base key's expiry when the sum was read (zero: none):
	// every place goes at that time, so the sum is not used past it.
	until time.Time
	// mark is the write place's removal mark read with the sum
	// (routing.RemovalMarkKey): a write that reads another drops it.
	mark string
}

// expiryTime is a PEXPIRETIME reply as a time (zero: no expiry, or no
// key).
func expiryTime(c *redis.Cmd) time.Time {
	if ms, _ := c.Int64(); ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// alive reports whether a copy read when the key expired at until (zero:
// never) may still be used: against Redis' wall clock, not the engine's
// injected one, which tests may move.
func alive(until time.Time) bool { return until.IsZero() || time.Now().Before(until) }

// maxOthers bounds a key's cached sums; past it the cache starts over.
const maxOthers = 4096

// settledRefresh is how long a field's other places are trusted once the
// layout is settled (see others): then only a write made around heatsink
// (straight to Redis) changes them, and reading them costs the base key's
// master one HMGET per field written per process per settledRefresh (at
// 1 s, 200 fields written cost that master 200 reads/s, which left it
// 1.21 × the mean in make bench's run).
const settledRefresh = 10 * time.Second

// othersMaxAge is how long p's sum of a field's other places is used
// when write is the write place (see others).
func (e *Engine) othersMaxAge(p *plan, write string) time.Duration {
	if write == p.key {
		return e.opts.TotalRefresh
	}
	withShards := 0
	for _, g := range p.entry.Split.Generations {
		if g.Shards > 0 {
			withShards++
		}
	}
	if withShards == 1 {
		return settledRefresh
	}
	return e.opts.TotalRefresh
}

// sum is the sum of field's places but write: the one cached, unless it
// is older than maxAge or its key's expiry has passed, else read (and
// cached, stamped now).
func (o *others[T]) sum(field, write string, now time.Time, maxAge time.Duration, read func() (otherSum[T], error)) (otherSum[T], error) {
	o.mu.Lock()
	s, ok := o.m[field]
	o.mu.Unlock()
	if ok && s.write == write && now.Sub(s.at) < maxAge && alive(s.until) {
		return s, nil
	}
	s, err := read()
	if err != nil {
		return s, err
	}
	s.at = now
	o.put(field, s)
	return s, nil
}

// since is s's sum when the write place's removal mark, read with the
// write, is still the one read with s; else a removal happened in between
// (another process's HDEL, SREM or DEL), and the sum is read again.
func (o *others[T]) since(field string, s otherSum[T], mark string, read func() (otherSum[T], error)) (T, error) {
	if mark == s.mark {
		return s.sum, nil
	}
	fresh, err := read()
	if err != nil {
		return 0, err
	}
	fresh.at = s.at
	o.put(field, fresh)
	return fresh.sum, nil
}

func (o *others[T]) put(field string, s otherSum[T]) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m) >= maxOthers {
		o.m = make(map[string]otherSum[T])
	}
	o.m[field] = s
}

// incrMember adds to member's write place of p (the command queued by
// incr, whose reply it returns) and returns, beside that reply, the sum of
// the member's other places: o's, read by read when o has none for this
// write place, or one too old, or one read before a removal the write saw
// (its place's removal mark changed: removal.go). HIncrBy's and ZIncrBy's
// one implementation.
func incrMember[T int64 | float64](ctx context.Context, e *Engine, p *plan, o *others[T], member string,
	read func(write string) (otherSum[T], error), incr func(pipe redis.Pipeliner, write string) func() T) (reply, others T, err error) {
	e.invalidate(p.key)
	defer e.invalidate(p.key)
	now := e.clock.Now()
	write := e.memberWritePlace(p, member, now)
	readWrite := func() (otherSum[T], error) { return read(write) }
	s, err := o.sum(member, write, now, e.othersMaxAge(p, write), readWrite)
	if err != nil {
		return 0, 0, err
	}
	var val func() T
	mark, err := e.writeMember(ctx, p, write, func(pipe redis.Pipeliner) { val = incr(pipe, write) })
	if err != nil {
		return 0, 0, err
	}
	sum, err := o.since(member, s, mark, readWrite)
	if err != nil {
		// The increment is applied: an error now would have the client
		// count it as not applied, or send it again (go-redis retries
		// some), and a field would read one increment off for good. The
		// reply adds the sum read before the write instead, a removal
		// elsewhere since then not taken off (as a counter's INCR falls
		// back to its last total: split.go estimate).
		e.m.upstreamErrors.Inc()
		return val(), s.sum, nil
	}
	return val(), sum, nil
}

// readOthers reads member's value in each of its places but write (one
// pipeline; read queues one place's read and says how to take its value,
// absent or not) with the base key's expiry and the write place's removal
// mark, and adds the values up with add: the sum is not used past the
// expiry, nor after the mark changed. The reads' own errors decide;
// PEXPIRETIME's is ignored (Redis before 7 lacks it: what is read then
// lives its age alone), and so is the mark's (the sum then lives its
// age). otherPlaces' and zscorePlaces' one implementation.
func readOthers[T int64 | float64](ctx context.Context, e *Engine, p *plan, member, write string,
	read func(pipe redis.Pipeliner, key string) (redis.Cmder, func() (T, bool, error)), add func(sum, v T) (T, error),
	folded foldedOthers[T]) (otherSum[T], error) {
	if e.folding(p) && write != p.key {
		if s, err := readOthersFolding(ctx, e, p, member, write, add, folded); !errors.Is(err, errFoldRights) {
			return s, err
		}
	}
	s := otherSum[T]{write: write}
	keys := without(memberPlaces(p, member), write)
	cmds := make([]redis.Cmder, len(keys))
	vals := make([]func() (T, bool, error), len(keys))
	var at *redis.Cmd
	var mark *redis.SliceCmd
	_, _ = e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i], vals[i] = read(pipe, k)
		}
		at = pipe.Do(ctx, "pexpiretime", p.key)
		mark = readMark(ctx, pipe, write)
		return nil
	})
	for i, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			if !isRedisError(err) {
				e.m.upstreamErrors.Inc()
			}
			return s, err
		}
		v, ok, err := vals[i]()
		if err != nil {
			return s, err
		}
		if !ok {
			continue
		}
		if s.sum, err = add(s.sum, v); err != nil {
			return s, err
		}
	}
	s.until, s.mark = expiryTime(at), markOf(mark)
	return s, nil
}

// foldedOthers says how readOthersFolding reads a member's value in a
// place: the command that reads members (HMGET, ZMSCORE) and how to parse
// the value Redis printed.
type foldedOthers[T int64 | float64] struct {
	cmd   string
	parse func(string) (T, error)
}

// readOthersFolding is readOthers while a fold may be in flight: the
// other places read with their fold records and reconciled (foldRead), so
// that a value moving between a retired shard and the base key is counted
// once; the write place, a shard of the write generation, is never folded.
// The base key's expiry and the write place's removal mark are read in
// the same pipeline, their errors ignored as readOthers ignores them.
func readOthersFolding[T int64 | float64](ctx context.Context, e *Engine, p *plan, member, write string,
	add func(sum, v T) (T, error), folded foldedOthers[T]) (otherSum[T], error) {
	s := otherSum[T]{write: write}
	var reads []placeRead
	for _, r := range byPlace(p, folded.cmd, []string{member}) {
		if r.place != write {
			reads = append(reads, r)
		}
	}
	var at *redis.Cmd
	var mark *redis.SliceCmd
	places, err := e.foldRead(ctx, p, reads, func(i int, r any) (map[string]string, error) {
		return pickFields(r, reads[i].fields), nil
	}, func(pipe redis.Pipeliner) {
		at = pipe.Do(ctx, "pexpiretime", p.key)
		mark = readMark(ctx, pipe, write)
	})
	if err != nil {
		return s, err
	}
	for _, pl := range places {
		v, ok := pl[member]
		if !ok {
			continue
		}
		n, err := folded.parse(v)
		if err != nil {
			return s, err
		}
		if s.sum, err = add(s.sum, n); err != nil {
			return s, err
		}
	}
	s.until, s.mark = expiryTime(at), markOf(mark)
	return s, nil
}
