package engine

import (
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// Shedding (routing.Shed): each shed key has a limiter, kept across tables
// so that a republished demand does not reset what the engine measured.
// Admission is local: one mutex and a little arithmetic, no round trip.

// shedWindow is how long the engine measures its own demand of a key
// before its share follows it: the first window of a key admits
// MinPerSecond. It matches the default report interval, over which the
// manager's demand changes.
const shedWindow = time.Second

// shedBurst is how much of its share a limiter may admit at once: a share
// of r admits at most r × shedBurst ahead of its rate (and at least one
// command), so a pause cannot be spent in one burst on the shard.
const shedBurst = 100 * time.Millisecond

// limiter is one key's pair of token buckets (reads, writes).
type limiter struct {
	mu  sync.Mutex
	dir [2]bucket
}

// bucket is one direction's token bucket and demand measurement.
type bucket struct {
	tokens float64
	last   time.Time
	// start and count are the current measurement window and the
	// attempts in it; rate is the attempts per second of the last whole
	// window, valid once measured.
	start    time.Time
	count    int64
	rate     float64
	measured bool
	// cut is 1 − the fraction of the share admitted (0: all of it: the
	// zero bucket admits its whole share), lat the current window of its
	// replies' waits and quiet the quiet windows in a row before it
	// (shed_wait.go).
	cut   float64
	lat   waitWindow
	quiet int
}

// admit counts one attempt at now and reports whether it is admitted
// under s's share for direction dir.
func (l *limiter) admit(now time.Time, s *routing.Shed, dir int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dir[dir].admit(now, s, dir)
}

func (b *bucket) admit(now time.Time, s *routing.Shed, dir int) bool {
	if b.start.IsZero() {
		b.start, b.last = now, now
		b.tokens = 1 // the first attempt of a new key is admitted
	}
	if el := now.Sub(b.start); el >= shedWindow {
		b.rate = float64(b.count) / el.Seconds()
		b.measured = true
		b.start, b.count = now, 0
	}
	b.count++
	share := s.Share(dir, b.rate, b.measured) * (1 - b.cut)
	burst := max(share*shedBurst.Seconds(), 1)
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(b.tokens+share*el.Seconds(), burst)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// limiterFor is key's limiter, made on first use and kept while the key
// is shed (retainLimiters).
func (e *Engine) limiterFor(key string) *limiter {
	e.shedMu.Lock()
	defer e.shedMu.Unlock()
	if e.limiters == nil {
		e.limiters = make(map[string]*limiter)
	}
	l := e.limiters[key]
	if l == nil {
		l = &limiter{}
		e.limiters[key] = l
	}
	return l
}

// retainLimiters forgets the limiters of keys ix no longer sheds: a key
// shed again later starts over from MinPerSecond.
func (e *Engine) retainLimiters(ix *index) {
	e.shedMu.Lock()
	defer e.shedMu.Unlock()
	for k := range e.limiters {
		if p := ix.plans[k]; p == nil || p.lim == nil {
			delete(e.limiters, k)
		}
	}
}

// shed reports the first shed key of a command that its limiter refuses,
// "" when every one is admitted. A read of a key with a local cache is
// never shed. Each shed key the command names takes one token of its
// direction (a write command is a write of each of its keys).
func (e *Engine) shed(ix *index, args [][]byte, write bool) string {
	dir := routing.ShedReads
	if write {
		dir = routing.ShedWrites
	}
	now := e.clock.Now()
	refused := ""
	command.ForEachKey(args, func(i int) bool {
		p := ix.plans[unsafeString(args[i])]
		if p == nil || p.lim == nil || !write && p.entry.LocalCache != nil {
			return true
		}
		if !p.lim.admit(now, p.entry.Shed, dir) {
			refused = p.key
			return false
		}
		return true
	})
	if refused != "" {
		if write {
			e.m.shedWrites.Inc()
		} else {
			e.m.shedReads.Inc()
		}
	}
	return refused
}
