//go:build linux

package proxy

import "time"

// Clients already handed to sessions, in the loop's order. A client the
// loop has handed to a session (it sent CLIENT SETNAME, SELECT, MULTI,
// ...) is read by that session on a goroutine Go's netpoller wakes when
// it will: a SUBSCRIBE it sent before another client's PUBLISH was read
// after the loop had read and written the PUBLISH, and the message was
// lost (about 900 of 1,000 tries). So those sessions' client sockets are
// in the order of arrivals (arrivals_linux.go), as with sessions only,
// and before the loop writes commands it has read, it takes that order's
// arrivals: while a session whose bytes came before that moment, and
// that is reading, has a first command not yet handled that may take
// another connection than the shared one (a SUBSCRIBE, MONITOR, SELECT,
// a blocking command, ...), the loop holds its writes as it does under a
// fence (it keeps reading). Once the session has handled it (its own
// fence is up then, if it wrote it on a connection of its own), the loop
// goes on; a hold lasts at most orderMax (fence.go). Without sessions the cost is an
// atomic load per write.

// loopArrivals is the loop's part of arrivals.
type loopArrivals struct {
	a *arrivals
	// hold: the loop holds its writes for a session; upTo numbers the
	// arrivals at the hold's start; passed: arrivals numbered up to it
	// are no longer waited for (a hold that lasted orderMax).
	hold         bool
	upTo, passed uint64
	gen          uint64 // the hold's number, for its timer
	timer        *time.Timer
}

// orderSessions puts the loop's writes in the order of a's arrivals.
func (l *loop) orderSessions(a *arrivals) {
	if a == nil {
		return
	}
	l.arr.a = a
	a.loopWake = func() { l.post(l.sessionsMoved) }
}

// held reports whether the loop holds its writes: a fence is up, or a
// session's command came before them (sessionsAhead). The fences are
// looked at again after the sessions: a session raises its fence before
// it counts as having handled its command, so one that sessionsAhead no
// longer finds may have raised it since the first look.
func (l *loop) held() bool {
	return l.p.fences.held() || l.sessionsAhead() || l.p.fences.held()
}

// sessionsAhead reports whether a session's bytes that came before now
// hold the loop's writes, and starts the hold if they do.
func (l *loop) sessionsAhead() bool {
	la := &l.arr
	if la.hold {
		return true
	}
	if la.a == nil || la.a.size.Load() == 0 {
		return false
	}
	found, upTo := la.a.ahead(la.passed)
	if !found {
		return false
	}
	la.hold, la.upTo = true, upTo
	la.gen++
	gen := la.gen
	la.timer = time.AfterFunc(orderMax, func() { l.post(func() { l.sessionsTimedOut(gen) }) })
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

// sessionsTimedOut ends a hold that lasted orderMax: the arrivals it
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
