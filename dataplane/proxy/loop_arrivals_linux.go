//go:build linux

package proxy

import (
	"cmp"
	"slices"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/order"
)

// The event loop's part of the order of arrival (order/stamp_linux.go,
// order/arrivals_linux.go). Its own clients: it reads every ready client of a
// round first and takes their commands in the order of their reads'
// receive stamps, not epoll's order (a closed-loop client's SUBSCRIBE,
// sent as the loop wrote it a PONG, waited in the socket's backlog and
// was listed after another client's PUBLISH sent later: the message was
// lost in about one round of 10,000 on two loaded cores).
//
// Clients already handed to sessions (they sent CLIENT SETNAME, SELECT,
// MULTI, ...) are read by those sessions on goroutines Go's netpoller
// wakes when it will: a SUBSCRIBE such a client sent before another
// client's PUBLISH was read after the loop had read and written the
// PUBLISH, and the message was lost (about 900 of 1,000 tries). So before
// the loop writes commands it has read, it asks the sessions' order
// (order.Arrivals.Ahead): while a session that is reading has a first command
// not yet handled that may take another connection than the shared one
// (a SUBSCRIBE, MONITOR, SELECT, a blocking command, ...), read or still
// in its socket, the loop holds its writes as it does under a fence (it
// keeps reading). Once the session has handled it (its own fence is up
// then, if it wrote it on a connection of its own), the loop goes on; a
// hold lasts at most order.Max (order/fence.go). Without sessions the cost is an
// atomic load per write.

// parseReads takes the commands of the round's clients that read, in the
// order their bytes were sent: by stamp, or epoll's order if one has none.
func (l *loop) parseReads() {
	rs := l.reads
	if len(rs) > 1 && !slices.ContainsFunc(rs, func(c *lclient) bool { return c.in.TS == 0 }) {
		slices.SortStableFunc(rs, func(a, b *lclient) int { return cmp.Compare(a.in.TS, b.in.TS) })
	}
	for _, c := range rs {
		if c.state != cClosed {
			l.parseRead(c)
		}
	}
	clear(rs)
	l.reads = rs[:0]
}

// loopArrivals is the loop's part of arrivals.
type loopArrivals struct {
	a *order.Arrivals
	// hold: the loop holds its writes for a session; upTo is the stamp
	// bound of the hold's start; passed: bytes stamped up to it are no
	// longer waited for (a hold that lasted order.Max).
	hold         bool
	upTo, passed int64
	gen          uint64 // the hold's number, for its timer
	timer        *time.Timer
}

// orderSessions puts the loop's writes in the order of a's arrivals.
func (l *loop) orderSessions(a *order.Arrivals) {
	if a == nil {
		return
	}
	l.arr.a = a
	a.LoopWake = func() { l.post(l.sessionsMoved) }
}

// held reports whether the loop holds its writes: a fence is up, or a
// session's command came before them (sessionsAhead). The fences are
// looked at again after the sessions: a session raises its fence before
// it counts as having handled its command, so one that sessionsAhead no
// longer finds may have raised it since the first look.
func (l *loop) held() bool {
	return l.p.fences.Held() || l.sessionsAhead() || l.p.fences.Held()
}

// sessionsAhead reports whether a session's bytes that came before now
// hold the loop's writes, and starts the hold if they do.
func (l *loop) sessionsAhead() bool {
	la := &l.arr
	if la.hold {
		return true
	}
	if la.a == nil || la.a.Size.Load() == 0 {
		return false
	}
	found, upTo := la.a.Ahead(la.passed)
	if !found {
		return false
	}
	la.hold, la.upTo = true, upTo
	la.gen++
	gen := la.gen
	la.timer = time.AfterFunc(order.Max, func() { l.post(func() { l.sessionsTimedOut(gen) }) })
	return true
}

// sessionsMoved runs when a session has handled what it read: the hold
// ends, unless another session holds the writes still.
func (l *loop) sessionsMoved() {
	la := &l.arr
	if !la.hold {
		return
	}
	la.hold = false
	la.timer.Stop()
	l.fenceDown() // writes what was held, unless something still holds it
}

// sessionsTimedOut ends a hold that lasted order.Max: the arrivals it
// waited for are not waited for again.
func (l *loop) sessionsTimedOut(gen uint64) {
	la := &l.arr
	if !la.hold || la.gen != gen {
		return
	}
	la.hold = false
	la.passed = la.upTo
	l.p.m.orderBounds.Inc()
	l.fenceDown()
}
