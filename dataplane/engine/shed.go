package engine

import (
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/command"
	"github.com/heatsink-dev/heatsink/routing"
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

// The shard's queueing. A budget is a fraction of the shard's capacity at
// one core; a shard that does not get its core (a host shared with other
// work) saturates below it, its clients wait in its queue instead of
// asking more, and nothing would be shed while the other keys of the shard
// queue behind the hot one. So each limiter also follows how long its
// admitted commands wait for their reply (ShedLatency): over each window
// of at least shedLatencyWindow and shedLatencyMin replies in which more
// than half of them were slower than shedSlow it halves the fraction of
// its share it admits (down to shedMinFactor), and otherwise doubles it,
// back to the whole share (a shard that is fast again gets its budget
// back within six windows); a window that has not its replies after
// shedLatencyLong ends as a fast one (too few to tell). The fraction is at
// most 1, so the fleet's bound (docs/engine.md) holds.
const (
	shedSlow          = 10 * time.Millisecond
	shedLatencyWindow = 100 * time.Millisecond
	shedLatencyLong   = time.Second
	shedLatencyMin    = 5
	shedMinFactor     = 1.0 / 64
)

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
	// cut is 1 − the fraction of the share admitted (0: all of it), and
	// latStart, latN and latSlow the current latency window: replies
	// measured and those slower than shedSlow.
	cut           float64
	latStart      time.Time
	latN, latSlow int
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

// waited counts one admitted command's wait d for its reply, at now, and
// moves the fraction of the share admitted at the end of a window.
func (l *limiter) waited(now time.Time, dir int, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dir[dir].waited(now, d)
}

func (b *bucket) waited(now time.Time, d time.Duration) {
	if b.latStart.IsZero() {
		b.latStart = now
	}
	b.latN++
	if d > shedSlow {
		b.latSlow++
	}
	el := now.Sub(b.latStart)
	if el < shedLatencyWindow || b.latN < shedLatencyMin && el < shedLatencyLong {
		return
	}
	if b.latN >= shedLatencyMin && 2*b.latSlow > b.latN {
		b.cut = 1 - max((1-b.cut)/2, shedMinFactor)
	} else {
		b.cut = max(1-(1-b.cut)*2, 0)
	}
	b.latStart, b.latN, b.latSlow = now, 0, 0
}

// ShedTimed is the key whose limiter wants the wait of d's command, sent
// raw: the shed key of its entry, "" when it has none (or the direction is
// not shed). Callers that send the command time its reply and hand it to
// ShedLatency.
func ShedTimed(d Decision) string {
	en := d.Entry
	if en == nil || en.Shed == nil || d.Op != OpRaw {
		return ""
	}
	dir := routing.ShedReads
	if d.Write {
		dir = routing.ShedWrites
	}
	if en.Shed.Budget(dir) <= 0 {
		return ""
	}
	return en.Key
}

// ShedLatency tells key's limiter that one of its admitted commands (write
// or read) waited d for its reply from the shard: the limiter admits less
// of its share while most of them wait over shedSlow (the shard is
// queueing), and more again once they do not.
func (e *Engine) ShedLatency(key string, write bool, d time.Duration) {
	p := e.table.Load().plans[key]
	if p == nil || p.lim == nil {
		return
	}
	dir := routing.ShedReads
	if write {
		dir = routing.ShedWrites
	}
	p.lim.waited(e.clock.Now(), dir, d)
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
