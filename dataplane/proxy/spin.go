package proxy

import "time"

// A bounded spin before the event loop parks on the netpoller.
//
// At pipeline depth 1 a parked loop pays a wake-up on each of the two legs
// of every command (the netpoller's epoll_wait returns, the scheduler runs
// the loop's goroutine, the loop takes the events with its own epoll_wait):
// on the 2-core VM of docs/benchmarks.md the spin took the sidecar's added
// p50 with one client from 0.040-0.056 ms to 0.024-0.032 ms. Polling the epoll set for a few
// microseconds first, while a reply is owed (Redis answers within
// microseconds) or right after a client got its replies (a closed-loop
// client sends its next command as soon as it has read), takes the event
// without the wake-up.
//
// The spin must not cost what it saves elsewhere: it is bounded (at most
// spinMax), adaptive (a little over what recent spins that paid waited),
// backs off when it does not pay (after a spin that found nothing the
// next ones are skipped, twice as many after each further miss), and is
// off while more than spinMaxActive clients are active: with many clients
// events come by themselves, and on shared cores the time spun is taken
// from Redis and the clients (without this bound, 50 clients at depth 1
// lost up to three fifths of their throughput to it: docs/proxy-internals.md).

// spinMax bounds one spin.
const spinMax = 50 * time.Microsecond

// spinFloor is the least budget a spin gets, so that spins that paid at
// once do not shrink it below what Redis takes to answer on loopback.
const spinFloor = 10 * time.Microsecond

// spinMaxSkip bounds the back-off, in waits skipped.
const spinMaxSkip = 1 << 10

// spinMaxActive is the most clients active in a window (activity) for
// which the loop spins.
const spinMaxActive = 2

// activityWindow is the window over which active clients are counted.
const activityWindow = time.Millisecond

// activity counts the distinct clients that sent commands in the current
// window and in the last one.
type activity struct {
	win       uint32 // the current window's number (0: none yet)
	start     time.Time
	cur, last int
}

// tick starts a new window when the current one has passed.
func (a *activity) tick(now time.Time) {
	if a.win != 0 && now.Sub(a.start) < activityWindow {
		return
	}
	a.win++
	a.start, a.last, a.cur = now, a.cur, 0
}

// touch counts a client (whose last window is *seen) in the current
// window, once.
func (a *activity) touch(seen *uint32) {
	if *seen != a.win {
		*seen = a.win
		a.cur++
	}
}

// few reports whether few enough clients are active for spinning.
func (a *activity) few() bool { return max(a.cur, a.last) <= spinMaxActive }

// spinner decides the budget of the loop's spins for one kind of wait (a
// reply owed by Redis, or a client's next command). Pure: the caller
// measures the time spent and says whether the spin found an event.
type spinner struct {
	// avg is a moving average of the time paying spins waited.
	avg time.Duration
	// skip is how many waits park at once; misses the consecutive spins
	// that found nothing.
	skip, misses int
}

// budget returns how long the next wait may spin before it parks; zero
// means park at once.
func (s *spinner) budget() time.Duration {
	if s.skip > 0 {
		s.skip--
		return 0
	}
	return min(max(2*s.avg, spinFloor), spinMax)
}

// done records a spin's outcome: found, after spent.
func (s *spinner) done(found bool, spent time.Duration) {
	if found {
		s.avg += (spent - s.avg) / 8
		s.misses = 0
		return
	}
	s.misses++
	s.skip = min(1<<min(s.misses, 30), spinMaxSkip)
}
