//go:build linux

package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
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
	key      string     // reads, for the Observer: reported with the reply size
	inval    []string   // mitigated keys whose cached copy the write drops
	shed     *shedTimer // the reply's wait, for a shed key's limiter (nil: none)
}

type lupstream struct {
	node  int
	proto int
	// spare: a connection for one client's blocking command or script at
	// a time (excl), idle in the loop's spares in between.
	spare bool
	excl  *lclient
	// rawlog holds the commands in flight, in cluster mode.
	rawlog []byte
	fd     int
	// tls and tio, over a TLS upstream: the connection the loop runs
	// crypto/tls on, and its transport over fd (tlsloop_linux.go).
	tls   *tls.Conn
	tio   *tlsTransport
	r     *resp.Reader
	wbuf  []byte
	woff  int
	fifo  []fent
	head  int
	hello []byte
	// waiting are the clients whose HELLO waits for this connection to open.
	waiting []*lclient
	// filling: a spare being dialled to refill the idle spares.
	filling bool
	// dead: closed while its dial was in flight; the dial's descriptor is
	// closed when it comes.
	dead bool
	// paused: not read while this client writes a large reply it streams;
	// streamed counts that reply's bytes already passed on.
	paused   *lclient
	streamed int
	// since is the last sign of progress while replies are owed; a stall
	// longer than Config.Timeout fails the connection.
	since    time.Time
	events   uint32
	wblocked bool
	// presented: a command written for this client's session-to-be, not
	// yet answered (loop_presend_linux.go).
	presented *lclient
}

func (u *lupstream) owed() int { return len(u.fifo) - u.head }

// wantsWrite reports commands not yet written (or, over TLS, encrypted
// bytes the socket has not taken).
func (u *lupstream) wantsWrite() bool {
	return len(u.wbuf) > u.woff || u.tio != nil && u.tio.pending()
}

// attach makes fd (over TLS, the descriptor under tc) u's connection.
func (u *lupstream) attach(fd int, tc *tls.Conn, hello []byte, size int) {
	u.fd, u.hello, u.events = fd, hello, unix.EPOLLIN
	var rd io.Reader = fdIO(fd)
	if tc != nil {
		u.tls, u.tio = tc, tc.NetConn().(*tlsTransport)
		rd = tlsIO{tc}
	}
	u.r = resp.NewReader(rd, size, resp.ReplyLimits())
}

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
	l.forwardOn(l.up(node, c.proto), c, raw, key, inval)
}

// forwardOn queues raw on u, to be written at the end of the round.
func (l *loop) forwardOn(u *lupstream, c *lclient, raw []byte, key string, inval []string) {
	if u.owed() == 0 {
		u.since = l.now
	}
	u.wbuf = append(u.wbuf, raw...)
	l.probeForward(u, c)
	f := fent{c: c, seq: c.sent, key: key, inval: inval}
	if l.p.cfg.Cluster {
		f.off = int32(len(u.rawlog))
		u.rawlog = append(u.rawlog, raw...)
		f.end = int32(len(u.rawlog))
	}
	u.fifo = append(u.fifo, f)
	c.sent++
	l.inflight++
	l.nFwd++
}

// exclusive forwards a blocking command or a script on a spare connection
// of its own, taken in the order the loop reads commands, so two clients'
// blocking commands reach Redis in the order they came and a long script
// holds no shared connection (the other clients get Redis' own BUSY, and
// SCRIPT KILL reaches Redis). The client's next commands wait for its
// reply, as Redis would make them wait.
func (l *loop) exclusive(c *lclient, node int, raw []byte, key string, inval []string) {
	u := l.takeSpare(node, c.proto)
	u.excl = c
	c.excl = u
	c.state = cBlocked
	l.excls = append(l.excls, u)
	l.forwardOn(u, c, raw, key, inval)
	if u.open() {
		l.flushUp(u) // ahead of the commands read after it, sent at the round's end
	}
}

func (l *loop) upEvent(u *lupstream, ev uint32) {
	if u.presented != nil {
		l.presentAnswered(u) // the session reads the answer
		return
	}
	if ev&unix.EPOLLOUT != 0 {
		u.wblocked = false
	}
	if ev&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP) == 0 || u.paused != nil {
		return
	}
	l.probeUpRead(u)
	if u.tio != nil {
		u.tio.drained = false
	}
	l.readUp(u)
}

// readUp reads u and hands out its replies. Over TLS it reads on until
// crypto/tls needs the socket and finds it empty: it may hold whole
// records, of which epoll knows nothing.
func (l *loop) readUp(u *lupstream) {
	for {
		if err := u.r.Fill(); err != nil {
			if !errors.Is(err, unix.EAGAIN) {
				l.failUp(u, err)
			}
			return
		}
		l.upReplies(u)
		if u.tio == nil || u.paused != nil || !u.open() || u.presented != nil {
			return
		}
	}
}

// upReplies hands out every reply u has buffered, and streams the part of
// a large one received so far to its client.
func (l *loop) upReplies(u *lupstream) {
	e := l.p.cfg.Engine
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
		l.inflight--
		size := len(l.rep.Raw) + u.streamed
		redir := l.p.cfg.Cluster && !l.rep.Partial && isRedirect(&l.rep) && f.c.state != cClosed
		l.probeReply(u, &f, len(l.rep.Raw), u.streamed == 0 && !l.rep.Partial && !redir)
		u.streamed = 0
		if redir {
			l.redirect(f, u.rawlog[f.off:f.end])
			continue
		}
		l.deliver(f.c, f.seq, l.rep.Raw)
		l.p.observeRaw(&l.rep, f.key != "")
		for _, k := range f.inval {
			e.Invalidate(k)
		}
		if f.shed != nil {
			f.shed.done(e)
		}
		if f.key != "" {
			l.p.observe(f.key, 1, 0, size)
		}
	}
	if u.r.Pending() >= streamAbove && u.head < len(u.fifo) {
		l.stream(u, u.fifo[u.head])
	}
	u.since = l.now
	u.compact()
	if u.excl != nil && u.owed() == 0 {
		l.release(u)
	}
}

// stream passes the received part of the large reply at the head of u's
// queue to its client, if that client is owed nothing before it, instead
// of holding the whole reply (a value may be up to 512 MiB). While the
// client has more than loopMaxOut unread, u is not read: its other
// clients' replies come after this one anyway.
func (l *loop) stream(u *lupstream, f fent) {
	c := f.c
	switch {
	case c.state == cClosed:
		u.streamed += len(u.r.TakePartial()) // nobody reads it: drop it as it comes
		return
	case f.seq != c.recv:
		return // replies owed before it come first (cluster): it is held
	}
	chunk := u.r.TakePartial()
	u.streamed += len(chunk)
	l.appendOut(c, chunk)
	l.markDirty(c)
	if c.pending() > loopMaxOut {
		l.pauseUp(u, c)
	}
}

// pauseUp stops reading u until c has written most of what it holds.
func (l *loop) pauseUp(u *lupstream, c *lclient) {
	u.paused, c.pausing = c, u
	l.upEvents(u)
}

// resumeUp reads u again, starting with what it has buffered.
func (l *loop) resumeUp(u *lupstream) {
	if c := u.paused; c != nil {
		c.pausing = nil
	}
	u.paused = nil
	if u.open() {
		l.upEvents(u)
		l.upReplies(u)
		if u.tio != nil && u.paused == nil && u.open() {
			l.readUp(u) // what crypto/tls holds raises no event
		}
	}
}

// upEvents sets the events the loop waits for on u.
func (l *loop) upEvents(u *lupstream) {
	var want uint32
	if u.paused == nil {
		want |= unix.EPOLLIN
	}
	if u.wblocked {
		want |= unix.EPOLLOUT
	}
	if want != u.events && u.fd >= 0 {
		u.events = want
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, u.fd, &unix.EpollEvent{Events: want, Fd: int32(u.fd)})
	}
}

// compact reclaims the front of u's queue of owed replies (and of the
// commands kept for redirects) once the replies there have come: under a
// steady load the queue never empties, and without this it would only
// ever grow. Half the queue at least is reclaimed each time, so the copy
// costs O(1) per reply.
func (u *lupstream) compact() {
	if u.head == len(u.fifo) {
		if cap(u.fifo) > 4096 {
			u.fifo = nil // a burst is over: give its memory back
		} else {
			u.fifo = u.fifo[:0]
		}
		u.head = 0
		if cap(u.rawlog) > 64<<10 {
			u.rawlog = nil
		} else {
			u.rawlog = u.rawlog[:0]
		}
		return
	}
	if u.head < 256 || u.head < len(u.fifo)/2 {
		return
	}
	n := copy(u.fifo, u.fifo[u.head:])
	clear(u.fifo[n:])
	u.fifo = u.fifo[:n]
	u.head = 0
	if len(u.rawlog) > 0 {
		base := u.fifo[0].off
		m := copy(u.rawlog, u.rawlog[base:])
		u.rawlog = u.rawlog[:m]
		for i := range u.fifo {
			u.fifo[i].off -= base
			u.fifo[i].end -= base
		}
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
		s := &session{p: p, proto: proto, pinned: -1, cw: resp.NewWriter(nil, 512), holding: true}
		s.rep.Line = line
		s.redirect(raw)
		out := s.cw.Buf
		l.post(func() {
			l.deliver(f.c, f.seq, out)
			for _, k := range f.inval {
				p.cfg.Engine.Invalidate(k)
			}
			if f.key != "" {
				p.observe(f.key, 1, 0, len(out))
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
	l.dropUp(u)
	if l.p.cfg.Cluster {
		l.p.topo.refreshAsync() // the node may have failed over
	}
	l.failOwed(u, l.p.upstreamError(l.p.topo.addr(u.node), err))
	l.unExcl(u)
	if c := u.paused; c != nil {
		c.pausing, u.paused = nil, nil
	}
}

// unExcl ends u's use by one client.
func (l *loop) unExcl(u *lupstream) {
	c := u.excl
	if c == nil {
		return
	}
	c.excl, u.excl = nil, nil
	for i, x := range l.excls {
		if x == u {
			last := len(l.excls) - 1
			l.excls[i], l.excls[last] = l.excls[last], nil
			l.excls = l.excls[:last]
			break
		}
	}
}

// dropExclusive closes the exclusive connection of a client that went
// away: Redis then unblocks its command, as it does for a direct client
// that disconnects, rather than hand an element to nobody.
func (l *loop) dropExclusive(c *lclient) {
	u := c.excl
	if u == nil {
		return
	}
	l.unExcl(u)
	l.inflight -= u.owed()
	u.fifo, u.head, u.wbuf, u.woff, u.rawlog = nil, 0, nil, 0, nil
	l.closeUp(u)
}

// forgetUp drops u from the connections in use and the idle spares: the
// next command for its node dials again.
func (l *loop) forgetUp(u *lupstream) {
	if u.node < len(l.ups) && l.ups[u.node][u.proto] == u {
		l.ups[u.node][u.proto] = nil
	}
	if u.spare && u.node < len(l.spares) {
		list := l.spares[u.node][u.proto]
		for i, x := range list {
			if x == u {
				l.spares[u.node][u.proto] = append(list[:i], list[i+1:]...)
				break
			}
		}
	}
}

// failOwed answers every reply u owed with the error msg. A write among
// them may have been applied, so cached copies of its keys go.
func (l *loop) failOwed(u *lupstream, msg string) {
	reply := resp.AppendError(nil, msg)
	l.inflight -= u.owed()
	for _, f := range u.fifo[u.head:] {
		l.deliver(f.c, f.seq, reply)
		l.p.observeRaw(nil, f.key != "")
		for _, k := range f.inval {
			l.p.cfg.Engine.Invalidate(k)
		}
	}
	u.fifo, u.head, u.wbuf, u.woff, u.rawlog = nil, 0, nil, 0, nil
}
