//go:build linux

package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// The event loop's upstream connections coming and going: the spares kept
// for blocking commands and scripts, dials on a goroutine and their
// completion (a connection dialed under a master that moved meanwhile is
// dropped), and releasing or dropping a connection.

// loopSpares is how many idle spare connections the loop keeps open per
// node and RESP version, for blocking commands and scripts.
const loopSpares = 2

// takeSpare returns an idle spare connection to node in RESP version v,
// or one being dialled for the caller when none is idle, and dials
// replacements behind it.
func (l *loop) takeSpare(node, v int) *lupstream {
	l.growSpares(node)
	var u *lupstream
	if list := l.spares[node][v]; len(list) > 0 {
		u = list[len(list)-1]
		l.spares[node][v] = list[:len(list)-1]
	} else {
		u = &lupstream{node: node, proto: v, fd: -1, spare: true}
		l.dialUp(u)
	}
	l.fillSpares(node, v)
	return u
}

func (l *loop) growSpares(node int) {
	for len(l.spares) <= node {
		l.spares = append(l.spares, [4][]*lupstream{})
		l.sparing = append(l.sparing, [4]int{})
	}
}

// fillSpares dials the idle spares node and v lack.
func (l *loop) fillSpares(node, v int) {
	if l.draining {
		return
	}
	l.growSpares(node)
	for len(l.spares[node][v])+l.sparing[node][v] < loopSpares {
		l.sparing[node][v]++
		l.dialUp(&lupstream{node: node, proto: v, fd: -1, spare: true, filling: true})
	}
}

// release returns an exclusive connection whose reply came to the idle
// spares (it carries no state: blocking commands and scripts leave none),
// or closes it when there are enough.
func (l *loop) release(u *lupstream) {
	l.unExcl(u)
	l.growSpares(u.node)
	if !u.open() || l.draining || len(l.spares[u.node][u.proto]) >= loopSpares {
		l.closeUp(u)
		return
	}
	l.spares[u.node][u.proto] = append(l.spares[u.node][u.proto], u)
}

// closeUp closes u, which owes nothing (or nothing anyone waits for).
func (l *loop) closeUp(u *lupstream) {
	u.dead = true
	l.dropUp(u)
}

// dropUp takes u's descriptor out of the loop, closes it and forgets u.
func (l *loop) dropUp(u *lupstream) {
	l.probeGone(nil, u)
	if u.fd >= 0 {
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, u.fd, nil)
		l.owners[u.fd] = owner{}
		unix.Close(u.fd)
		u.fd = -1
	}
	l.forgetUp(u)
}

// dial opens the upstream connection for RESP version v on a goroutine;
// commands queue meanwhile.
func (l *loop) dial(node, v int) *lupstream {
	u := &lupstream{node: node, proto: v, fd: -1}
	l.ups[node][v] = u
	l.dialUp(u)
	return u
}

// dialUp opens u's connection on a goroutine.
func (l *loop) dialUp(u *lupstream) {
	p := l.p
	gen := p.masterGen()
	go func() {
		fd, tc, hello, err := p.dialLoopUpstream(u.node, u.proto)
		if !l.post(func() { l.dialed(u, fd, tc, hello, p.checkGen(gen, fd, err)) }) && err == nil {
			unix.Close(fd)
		}
	}()
}

func (l *loop) dialed(u *lupstream, fd int, tc *tls.Conn, hello []byte, err error) {
	if u.dead {
		if err == nil {
			unix.Close(fd)
		}
		return
	}
	if u.filling {
		u.filling = false
		l.growSpares(u.node)
		l.sparing[u.node][u.proto]--
		if err == nil && l.ep >= 0 && !l.draining {
			if err = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err == nil {
				u.attach(fd, tc, hello, 4<<10)
				l.own(fd, owner{u: u})
				l.spares[u.node][u.proto] = append(l.spares[u.node][u.proto], u)
				l.spareCame()
				return
			}
		}
		if err == nil {
			unix.Close(fd)
		}
		return // the next take dials on demand (dialRaw backs off)
	}
	if err == nil && l.draining && u.owed() == 0 {
		unix.Close(fd)
		err = errors.New("proxy shutting down")
	}
	if err == nil {
		err = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		l.forgetUp(u)
		if l.p.cfg.Cluster {
			l.p.topo.refreshAsync() // the node may have failed over
		}
		l.failOwed(u, errUnreachable(l.p.topo.addr(u.node), err))
		l.unExcl(u)
		for _, c := range u.waiting {
			if c.state == cWaitUp {
				c.state = cHandoff
				l.markDirty(c)
			}
		}
		u.waiting = nil
		return
	}
	size := 64 << 10
	if u.spare {
		size = 4 << 10
	}
	u.attach(fd, tc, hello, size)
	u.since = l.now
	l.own(fd, owner{u: u})
	// The clients waiting on this dial go on at the end of the round.
	for _, c := range u.waiting {
		if c.state == cWaitUp {
			c.state = cOpen
			l.markDirty(c)
		}
	}
	u.waiting = nil
	if u.excl != nil {
		l.flushUp(u)
	}
}

// dialLoopUpstream connects and authenticates (dialRaw), opens the
// connection in RESP version v, and returns its descriptor (and, over
// TLS, the connection the loop goes on with: tlsloop_linux.go).
func (p *Proxy) dialLoopUpstream(node, v int) (fd int, tc *tls.Conn, hello []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	defer cancel()
	u, err := p.dialRaw(ctx, p.topo.addr(node))
	if err != nil {
		return -1, nil, nil, err
	}
	u.conn.SetDeadline(time.Now().Add(p.controlTimeout()))
	u.w.Buf = resp.AppendArgs(u.w.Buf, [][]byte{[]byte("HELLO"), {byte('0' + v)}})
	var rep resp.Reply
	if err = u.w.Flush(); err == nil {
		err = u.r.ReadReply(&rep)
	}
	if err != nil {
		u.close()
		return -1, nil, nil, err
	}
	if !rep.IsError() {
		hello = append([]byte(nil), rep.Raw...)
	} else if v == 3 {
		u.close()
		return -1, nil, nil, errors.New("upstream does not speak RESP3: " + string(rep.Line))
	}
	u.conn.SetDeadline(time.Time{})
	if tc = loopTLS(u.conn); tc != nil {
		fd, err = takeTLS(tc)
		return fd, tc, hello, err
	}
	fd, err = takeFD(u.conn)
	return fd, nil, hello, err
}
