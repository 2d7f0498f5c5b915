package engine

import (
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// The shard's queueing. A budget is a fraction of the shard's capacity at
// one core; a shard that does not get its core (a host shared with other
// work) saturates below it, its clients wait in its queue instead of
// asking more, and nothing would be shed while the other keys of the shard
// queue behind the hot one. So each limiter also follows how long its
// admitted commands wait for their reply (ShedLatency), window by window
// (at least shedLatencyWindow and shedLatencyMin replies; a window that
// has not its replies after shedLatencyLong ends with too few to tell),
// and moves the fraction of its share it admits by shedStep.
//
// The rule has two marks and a band between them (hysteresis), and
// recovers only after quiet windows in a row: one mark at which both
// cutting and doubling were decided made a limiter whose replies wait
// around it halve and double in turn (behind 7 ms scripts, half-second
// windows admitted 355, 400 ... 356, 123, 20, 6, 10, 22, 141 of a 400/s
// share over 9 s; 3 to over 11 s to settle behind 20 ms ones on a loaded
// machine). The marks are fixed, not relative to a wait at rest the
// limiter would measure: a limiter exists only once its key is shed, that
// is once the key is hot and its shard loaded, so it never sees the shard
// at rest, and a slowly updated low percentile of its waits would take a
// queue that lasts for the rest. The fixed marks cost what the known limit
// says: a shard whose replies take over shedSlow at rest (a far network)
// is taken for queueing.
const (
	// shedSlow is the high mark: a window in which most replies waited
	// over it halves the fraction (down to shedMinFactor).
	shedSlow = 10 * time.Millisecond
	// shedQuick is the low mark: a window is quiet when most of its
	// replies waited under it, or none over shedSlow (a shard farther away
	// whose replies take some milliseconds at rest is not stuck at a cut);
	// any other window holds the fraction. A reply from a shard at rest
	// takes well under a millisecond on loopback (p50 0.08-0.12 ms, p90
	// 0.1-0.2 ms, measured on the 2-core machine at load average 12-13);
	// behind 20 ms scripts one client's waits were p10 13.8 ms, p50 21 ms
	// (1 % under 3 ms, 98 % over 10 ms); behind 5 ms scripts p50 6.8 ms
	// (21 % under 3 ms, 12 % over 10 ms: held).
	shedQuick = 3 * time.Millisecond
	// shedQuietWindows is how many quiet windows in a row double the
	// fraction (up to 1): a small window (5 replies at the floor) is
	// quiet by chance now and then behind a queue that lasts (7 ms
	// scripts: additive steps of 1/8 on each quiet window took the admitted
	// rate from 6 to 163 of 400/s), two in a row seldom are; so the
	// share comes back gently, and from shedMinFactor whole within 12
	// quiet windows (about 3.5 s at 6 replies/s at the floor).
	shedQuietWindows  = 2
	shedLatencyWindow = 100 * time.Millisecond
	shedLatencyLong   = time.Second
	shedLatencyMin    = 5
	shedMinFactor     = 1.0 / 64
)

// waitWindow is one window of a bucket's replies: since start, n replies,
// slow of them over shedSlow and quick of them under shedQuick.
type waitWindow struct {
	start          time.Time
	n, slow, quick int
}

// shedStep is the fraction of its share a limiter admits after a window
// w of its replies, from f (in (0, 1]: it never admits over its share, so
// the fleet's bound holds), and the quiet windows in a row after it, from
// quiet before it. A window with too few replies to tell, after
// shedLatencyLong, counts as quiet: a share too small to fill a window
// must not stay cut.
func shedStep(f float64, quiet int, w waitWindow) (float64, int) {
	switch {
	case w.n >= shedLatencyMin && 2*w.slow > w.n:
		return max(f/2, shedMinFactor), 0
	case w.n < shedLatencyMin || 2*w.quick > w.n || w.slow == 0:
		if quiet+1 >= shedQuietWindows {
			return min(2*f, 1), 0
		}
		return f, quiet + 1
	default:
		return f, 0
	}
}

// waited counts one admitted command's wait d for its reply, at now, and
// moves the fraction of the share admitted at the end of a window.
func (l *limiter) waited(now time.Time, dir int, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dir[dir].waited(now, d)
}

func (b *bucket) waited(now time.Time, d time.Duration) {
	w := &b.lat
	if w.start.IsZero() {
		w.start = now
	}
	w.n++
	if d > shedSlow {
		w.slow++
	}
	if d < shedQuick {
		w.quick++
	}
	el := now.Sub(w.start)
	if el < shedLatencyWindow || w.n < shedLatencyMin && el < shedLatencyLong {
		return
	}
	f, quiet := shedStep(1-b.cut, b.quiet, *w)
	b.cut, b.quiet = 1-f, quiet
	*w = waitWindow{start: now}
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
// queueing), and more again once they wait under shedQuick (shedStep).
// The sidecar and the go-redis hook both call it: one rule for both.
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
