//go:build linux

package proxy

import (
	"bytes"
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// The event loop's upstream side: one connection per node and RESP
// version, dialled on a goroutine, the replies it owes in order, cluster
// redirections, and failing what a lost connection owed.

// fent is one reply an upstream connection owes, in order.
type fent struct {
	c   *lclient
	seq uint64 // the client's sequence number of the command
	// off and end locate the raw command in the connection's rawlog
	// (cluster mode: a MOVED or ASK reply sends it again elsewhere).
	off, end int32
	key      string   // reads, for the Observer: reported with the reply size
	inval    []string // mitigated keys whose cached copy the write drops
}

type lupstream struct {
	node  int
	proto int
	// rawlog holds the commands in flight, in cluster mode.
	rawlog []byte
	fd     int
	r      *resp.Reader
	wbuf   []byte
	woff   int
	fifo   []fent
	head   int
	hello  []byte
	// waiting are the clients whose HELLO waits for this connection to open.
	waiting []*lclient
	// since is the last sign of progress while replies are owed; a stall
	// longer than Config.Timeout fails the connection.
	since    time.Time
	events   uint32
	wblocked bool
}

func (u *lupstream) owed() int { return len(u.fifo) - u.head }

// open reports a connection dialed and not failed (not while dialing).
func (u *lupstream) open() bool { return u.fd >= 0 }

// up returns the upstream connection to node for RESP version v, opening
// one when there is none.
func (l *loop) up(node, v int) *lupstream {
	for len(l.ups) <= node {
		l.ups = append(l.ups, [4]*lupstream{})
	}
	if u := l.ups[node][v]; u != nil {
		return u
	}
	return l.dial(node, v)
}

func (l *loop) forward(c *lclient, node int, raw []byte, key string, inval []string) {
	u := l.up(node, c.proto)
	if u.owed() == 0 {
		u.since = l.now
	}
	u.wbuf = append(u.wbuf, raw...)
	f := fent{c: c, seq: c.sent, key: key, inval: inval}
	if l.p.cfg.Cluster {
		f.off = int32(len(u.rawlog))
		u.rawlog = append(u.rawlog, raw...)
		f.end = int32(len(u.rawlog))
	}
	u.fifo = append(u.fifo, f)
	c.sent++
	l.nFwd++
}

// dial opens the upstream connection for RESP version v on a goroutine;
// commands queue meanwhile.
func (l *loop) dial(node, v int) *lupstream {
	u := &lupstream{node: node, proto: v, fd: -1}
	l.ups[node][v] = u
	p := l.p
	go func() {
		fd, hello, err := p.dialLoopUpstream(node, v)
		if !l.post(func() { l.dialed(u, fd, hello, err) }) && err == nil {
			unix.Close(fd)
		}
	}()
	return u
}

func (l *loop) dialed(u *lupstream, fd int, hello []byte, err error) {
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
		for _, c := range u.waiting {
			if c.state == cWaitUp {
				c.state = cHandoff
				l.markDirty(c)
			}
		}
		u.waiting = nil
		return
	}
	u.fd, u.hello, u.events = fd, hello, unix.EPOLLIN
	u.r = resp.NewReader(fdIO(fd), 64<<10, resp.DefaultLimits())
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
}

// dialLoopUpstream connects and authenticates (dialRaw), opens the
// connection in RESP version v, and returns its descriptor.
func (p *Proxy) dialLoopUpstream(node, v int) (fd int, hello []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	defer cancel()
	u, err := p.dialRaw(ctx, p.topo.addr(node))
	if err != nil {
		return -1, nil, err
	}
	u.conn.SetDeadline(time.Now().Add(p.cfg.Timeout))
	u.w.Buf = resp.AppendArgs(u.w.Buf, [][]byte{[]byte("HELLO"), {byte('0' + v)}})
	var rep resp.Reply
	if err = u.w.Flush(); err == nil {
		err = u.r.ReadReply(&rep)
	}
	if err != nil {
		u.close()
		return -1, nil, err
	}
	if !rep.IsError() {
		hello = append([]byte(nil), rep.Raw...)
	} else if v == 3 {
		u.close()
		return -1, nil, errors.New("upstream does not speak RESP3: " + string(rep.Line))
	}
	u.conn.SetDeadline(time.Time{})
	fd, err = takeFD(u.conn)
	return fd, hello, err
}

func (l *loop) upEvent(u *lupstream, ev uint32) {
	if ev&unix.EPOLLOUT != 0 {
		u.wblocked = false
	}
	if ev&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
		return
	}
	if err := u.r.Fill(); err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		l.failUp(u, err)
		return
	}
	e, o := l.p.cfg.Engine, l.p.cfg.Observer
	for {
		ok, err := u.r.TryReply(&l.rep)
		if err != nil {
			l.failUp(u, err)
			return
		}
		if !ok {
			break
		}
		if l.rep.IsPush() {
			continue
		}
		if u.head == len(u.fifo) {
			l.failUp(u, errors.New("reply without a request"))
			return
		}
		f := u.fifo[u.head]
		u.fifo[u.head] = fent{}
		u.head++
		if l.p.cfg.Cluster && isRedirect(&l.rep) && f.c.state != cClosed {
			l.redirect(f, u.rawlog[f.off:f.end])
			continue
		}
		l.deliver(f.c, f.seq, l.rep.Raw)
		for _, k := range f.inval {
			e.Invalidate(k)
		}
		if f.key != "" {
			o.Observe(l.p.cfg.Policy, f.key, 1, 0, uint32(len(l.rep.Raw)))
		}
	}
	u.since = l.now
	if u.head == len(u.fifo) {
		u.fifo, u.head, u.rawlog = u.fifo[:0], 0, u.rawlog[:0]
	}
}

// isRedirect reports a cluster MOVED or ASK reply.
func isRedirect(r *resp.Reply) bool {
	return r.IsError() && (bytes.HasPrefix(r.Line, []byte("MOVED ")) || bytes.HasPrefix(r.Line, []byte("ASK ")))
}

// redirect follows a MOVED or ASK reply (after a resharding or a failover;
// rare) on a goroutine, as a session does, on a one-shot connection; the
// client's later replies wait in order.
func (l *loop) redirect(f fent, raw []byte) {
	raw = append([]byte(nil), raw...)
	line := append([]byte(nil), l.rep.Line...)
	proto := f.c.proto
	p := l.p
	go func() {
		s := &session{p: p, proto: proto, pinned: -1, cw: resp.NewWriter(nil, 512)}
		s.rep.Line = line
		s.redirect(raw)
		out := s.cw.Buf
		l.post(func() {
			l.deliver(f.c, f.seq, out)
			for _, k := range f.inval {
				p.cfg.Engine.Invalidate(k)
			}
			if f.key != "" {
				p.cfg.Observer.Observe(p.cfg.Policy, f.key, 1, 0, uint32(len(out)))
			}
		})
	}()
}

// failUp closes an upstream connection and answers every reply it owed
// with an error, so that no client waits for it.
func (l *loop) failUp(u *lupstream, err error) {
	if !l.draining {
		kind := "io"
		if isTimeout(err) {
			kind = "timeout"
		}
		l.p.m.upstreamErrors.WithLabelValues(kind).Inc()
	}
	if u.fd >= 0 {
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, u.fd, nil)
		l.owners[u.fd] = owner{}
		unix.Close(u.fd)
		u.fd = -1
	}
	l.forgetUp(u)
	if l.p.cfg.Cluster {
		l.p.topo.refreshAsync() // the node may have failed over
	}
	l.failOwed(u, errUpstream(l.p.topo.addr(u.node), err))
}

// forgetUp drops u from the connections in use: the next command for its
// node dials again.
func (l *loop) forgetUp(u *lupstream) {
	if u.node < len(l.ups) && l.ups[u.node][u.proto] == u {
		l.ups[u.node][u.proto] = nil
	}
}

// failOwed answers every reply u owed with the error msg. A write among
// them may have been applied, so cached copies of its keys go.
func (l *loop) failOwed(u *lupstream, msg string) {
	reply := resp.AppendError(nil, msg)
	for _, f := range u.fifo[u.head:] {
		l.deliver(f.c, f.seq, reply)
		for _, k := range f.inval {
			l.p.cfg.Engine.Invalidate(k)
		}
	}
	u.fifo, u.head, u.wbuf, u.woff, u.rawlog = nil, 0, nil, 0, nil
}
