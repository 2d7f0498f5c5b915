//go:build linux

package proxy

import (
	"github.com/heatsink-dev/heatsink/dataplane/proxy/rawsys"
	"golang.org/x/sys/unix"
)

// The end of an event-loop round: every upstream connection sends its
// batch in one write, every client gets its replies in one write, and the
// loop re-arms what it waits for.

func (l *loop) markDirty(c *lclient) {
	if !c.dirty {
		c.dirty = true
		l.dirty = append(l.dirty, c)
	}
}

// endOfRound writes what the round produced: clients that may take more
// commands do, every upstream connection sends its batch in one write, and
// every client gets its replies in one write.
func (l *loop) endOfRound() {
	for i := 0; i < len(l.dirty); i++ {
		c := l.dirty[i]
		if (c.state == cWaitDrain || c.state == cBlocked) && c.owed() == 0 {
			c.state = cOpen
		}
		if c.state == cOpen && c.r.Buffered() > 0 {
			l.parse(c)
		}
	}
	l.eachUp(func(u *lupstream) {
		if u.open() && u.wantsWrite() && !u.wblocked {
			l.flushUp(u)
		}
	})
	for _, c := range l.dirty {
		c.dirty = false
		l.finishClient(c)
		// Writing its replies may let it send more: the commands it has
		// already sent are taken next round (no event would wake the loop
		// for bytes it has read).
		if c.state == cOpen && c.r.Buffered() > 0 && l.mayRead(c) {
			l.again = append(l.again, c)
		}
	}
	l.dirty = l.dirty[:0]
	l.checkPressure()
	l.flushMetrics()
	if len(l.again) > 0 || len(l.resumes) > 0 {
		one := [8]byte{1}
		unix.Write(l.wakefd, one[:])
	}
}

// resumeLater resumes u at the start of the next round (resuming hands out
// replies, which must not happen while a round writes its clients).
func (l *loop) resumeLater(u *lupstream) {
	if c := u.paused; c != nil {
		c.pausing = nil
	}
	l.resumes = append(l.resumes, u)
}

// finishClient writes c's replies and, once it owes nothing, hands it to a
// session or closes it as its state says; otherwise it re-arms its events.
func (l *loop) finishClient(c *lclient) {
	if c.state == cClosed {
		return
	}
	if len(c.out) > c.woff && !c.wblocked && !l.flushClient(c) {
		return
	}
	if c.owed() == 0 && len(c.out) == c.woff {
		switch c.state {
		case cHandoff:
			if c.pre != nil && c.pre.waiting {
				break // Redis is answering its presented command
			}
			l.toSession(c)
			return
		case cClosing:
			if c.final != nil {
				l.outBytes += int64(len(c.final) - c.pending())
				c.out, c.final = c.final, nil
				c.woff = 0
				if !l.flushClient(c) {
					return
				}
				if len(c.out) > c.woff {
					l.rearm(c)
					return
				}
			}
			l.closeClient(c)
			return
		}
	}
	l.rearm(c)
}

// checkPressure turns pressure on when the replies held for clients, the
// commands not yet written upstream and the commands in flight pass their
// bounds, and off again below half of them. Under pressure the loop reads
// only clients that owe nothing and hold nothing (see mayRead), so the
// clients that keep up are served while those that do not stop being
// read, and memory stays bounded whatever clients do.
func (l *loop) checkPressure() {
	held := l.outBytes
	l.eachUp(func(u *lupstream) { held += int64(len(u.wbuf) - u.woff) })
	limit := l.p.cfg.MaxBuffered
	on := held > limit || l.inflight > maxInflight
	off := held < limit/2 && l.inflight < maxInflight/2
	if on == l.pressure || !on && !off {
		return
	}
	l.pressure = on
	if on {
		l.p.m.pressure.Inc()
	}
	// Every client's reading changes: re-arm them all, once per change.
	for _, o := range l.owners {
		if c := o.c; c != nil && c.state != cClosed {
			l.rearm(c)
		}
	}
}

func (l *loop) flushMetrics() {
	m := l.p.m
	if l.nFwd > 0 {
		m.forwarded.Add(l.nFwd)
		m.batches.Add(l.nBatches)
	}
	if l.nLocal > 0 {
		m.local.Add(l.nLocal)
	}
	if l.nEng > 0 {
		m.engine.Add(l.nEng)
	}
	l.nFwd, l.nBatches, l.nLocal, l.nEng = 0, 0, 0, 0
}

// flushClient writes the client's replies; false means it was closed.
func (l *loop) flushClient(c *lclient) bool {
	for c.woff < len(c.out) {
		n, err := rawsys.Write(c.fd, c.out[c.woff:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			c.wblocked = true
			l.probeClientWritten(c)
			return true
		}
		if err != nil {
			l.closeClient(c)
			return false
		}
		c.woff += n
		l.outBytes -= int64(n)
	}
	l.probeClientWritten(c)
	l.replied = true

	if cap(c.out) > 64<<10 {
		c.out = nil // a burst is over: give its memory back
	} else {
		c.out = c.out[:0]
	}
	c.woff = 0
	if u := c.pausing; u != nil {
		l.resumeLater(u) // it has written what it held
	}
	return true
}

func (l *loop) flushUp(u *lupstream) {
	if l.held() {
		return // written once the fence is down (fenceDown)
	}
	if u.tio != nil {
		if !l.flushTLS(u) {
			return
		}
	} else {
		l.flushRaw(u)
		if !u.open() {
			return
		}
	}
	l.probeWritten(u)
	switch {
	case u.woff == len(u.wbuf):
		if cap(u.wbuf) > 256<<10 {
			u.wbuf = nil // a burst is over: give its memory back
		} else {
			u.wbuf = u.wbuf[:0]
		}
		u.woff = 0
	case u.woff >= 64<<10 && u.woff >= len(u.wbuf)/2:
		// Redis takes the commands slower than they come: reclaim what
		// it took, or the buffer would only ever grow.
		n := copy(u.wbuf, u.wbuf[u.woff:])
		u.wbuf, u.woff = u.wbuf[:n], 0
	}
	l.upEvents(u)
}

// flushRaw writes u's commands to its descriptor until the socket is
// full; a failed write fails u.
func (l *loop) flushRaw(u *lupstream) {
	for u.woff < len(u.wbuf) {
		n, err := rawsys.Write(u.fd, u.wbuf[u.woff:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			u.wblocked = true
			return
		}
		if err != nil {
			l.failUp(u, err)
			return
		}
		u.woff += n
	}
}

// rearm sets the events the loop waits for on c: its commands while it may
// send more, and writability while replies are stuck.
func (l *loop) rearm(c *lclient) {
	var want uint32
	switch {
	case l.mayRead(c):
		want |= unix.EPOLLIN
	case c.state == cBlocked:
		want |= unix.EPOLLRDHUP // its hanging up cancels its command
	}
	if c.wblocked {
		want |= unix.EPOLLOUT
	}
	if want != c.events {
		c.events = want
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: want, Fd: int32(c.fd)})
	}
}
