//go:build linux

package proxy

import (
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
		if c.state == cWaitDrain && c.owed() == 0 {
			c.state = cOpen
		}
		if c.state == cOpen && c.r.Buffered() > 0 {
			l.parse(c)
		}
	}
	l.eachUp(func(u *lupstream) {
		if u.open() && len(u.wbuf) > u.woff && !u.wblocked {
			l.flushUp(u)
		}
	})
	for _, c := range l.dirty {
		c.dirty = false
		if c.state == cClosed {
			continue
		}
		if len(c.out) > c.woff && !c.wblocked && !l.flushClient(c) {
			continue
		}
		if c.owed() == 0 && len(c.out) == c.woff {
			switch c.state {
			case cHandoff:
				l.toSession(c)
				continue
			case cClosing:
				if c.final != nil {
					c.out, c.final = c.final, nil
					c.woff = 0
					if !l.flushClient(c) {
						continue
					}
					if len(c.out) > c.woff {
						l.rearm(c)
						continue
					}
				}
				l.closeClient(c)
				continue
			}
		}
		l.rearm(c)
	}
	l.dirty = l.dirty[:0]
	l.flushMetrics()
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
		n, err := rawWrite(c.fd, c.out[c.woff:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			c.wblocked = true
			return true
		}
		if err != nil {
			l.closeClient(c)
			return false
		}
		c.woff += n
	}
	if cap(c.out) > 4<<20 {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	c.woff = 0
	return true
}

func (l *loop) flushUp(u *lupstream) {
	for u.woff < len(u.wbuf) {
		n, err := rawWrite(u.fd, u.wbuf[u.woff:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			u.wblocked = true
			break
		}
		if err != nil {
			l.failUp(u, err)
			return
		}
		u.woff += n
	}
	if u.woff == len(u.wbuf) {
		if cap(u.wbuf) > 4<<20 {
			u.wbuf = nil
		} else {
			u.wbuf = u.wbuf[:0]
		}
		u.woff = 0
	}
	want := uint32(unix.EPOLLIN)
	if u.wblocked {
		want |= unix.EPOLLOUT
	}
	if want != u.events {
		u.events = want
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, u.fd, &unix.EpollEvent{Events: want, Fd: int32(u.fd)})
	}
}

// rearm sets the events the loop waits for on c: its commands while it may
// send more, and writability while replies are stuck.
func (l *loop) rearm(c *lclient) {
	var want uint32
	if c.state == cOpen && c.owed() < maxBatch && len(c.out)-c.woff < loopMaxOut {
		want |= unix.EPOLLIN
	}
	if c.wblocked {
		want |= unix.EPOLLOUT
	}
	if want != c.events {
		c.events = want
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: want, Fd: int32(c.fd)})
	}
}
