//go:build linux

package proxy

import (
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/order"
	"github.com/heatsink-dev/heatsink/dataplane/proxy/rawsys"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// Handing a client to a session in command order. A command that makes
// the loop hand its client to a session (SUBSCRIBE, MONITOR, SELECT,
// MULTI, an unknown command, ...) used to reach Redis only once the
// session had started and taken a connection, after commands that other
// clients sent later and the loop had already written: a PUBLISH sent
// right after another client's SUBSCRIBE was lost (998 of 1,000 tries).
// Now the loop writes such a command at the moment it reads it, as it
// writes a blocking command, on one of its idle spare connections, which
// it then gives to the session as that client's own connection to the
// node; the session handles the command as it would, except that its
// bytes are already on the wire (session.pre).

// presented is a command the loop wrote for a session-to-be.
type presented struct {
	u     *lupstream
	node  int
	hello bool   // a HELLO 3 went ahead of the command (a RESP2 spare for a RESP3 client)
	rest  []byte // the part of the command the socket did not take
	// waiting: Redis has not answered yet; the client is handed over once
	// it has (or once the fence is down).
	waiting bool
}

// presendable reports whether the session's handling of the command
// (handle, for a client handed over by the loop) sends it as it is to
// cl.node and nothing before it. The session's own route says so: it
// forwards, pipes or remembers the command, where it does not answer it
// itself or from several replies (CLIENT REPLY, CLIENT KILL, node-wide
// commands, fan-outs, topology, INFO's patch). Nor a cluster MULTI (held
// back until its node is known), or a command on a mitigated key (the
// engine's).
func (l *loop) presendable(c *lclient, cl *classified, args [][]byte) bool {
	switch {
	case cl.mitigated:
		return false
	case l.p.cfg.Cluster && cl.info.Kind == command.Multi:
		return false
	}
	switch decide(cl.info, cl.known, args, mode{cluster: l.p.cfg.Cluster, proto: c.proto}).op {
	case opForward, opPipe, opState:
		return true
	}
	return false
}

// presenting is the command the loop is presenting: from the moment it
// read it until Redis has answered it, its fence is up, so no command read
// after it is written. u is nil while no spare connection is idle.
type presenting struct {
	c     *lclient
	u     *lupstream
	fence *order.Fence
}

// presend writes the command at off (l.cmd) for the session the client is
// handed to, on a spare connection taken out of the loop's set, keeps a
// fence up until Redis answers it, and hands the client over. It reports
// false when it does not present the command (the session then sends it).
// A client that still owes replies waits for them first (its command's
// effects must follow theirs), as a blocking command does; one that comes
// while a fence is up waits for it to be down; with no idle spare, the
// command waits for one with its fence up (at most order.Max, then it goes
// without).
func (l *loop) presend(c *lclient, cl *classified, args [][]byte, off int) bool {
	if c.noPresend {
		c.noPresend = false
		return false
	}
	if !l.presendable(c, cl, args) {
		l.fenceUnpresented(c, args)
		return false
	}
	if c.owed() > 0 {
		// Pipelined behind its client's commands still unanswered, it
		// waits for their replies (its effects must follow theirs); the
		// commands other clients send after it wait with it, as while a
		// spare is awaited: its fence is up from now, once the commands
		// read before it are written (Redis would have read it before
		// theirs). Not behind a blocking command, which may not be
		// answered for long, nor while another fence is up.
		if l.mayFenceAtRead(c) {
			l.presenting = &presenting{c: c, fence: l.p.fences.RaiseUnsent()}
		}
		l.waitDrain(c, off)
		return true
	}
	pg, wait := l.presentNext(c, off)
	if wait {
		return true
	}
	node := cl.node
	l.growSpares(node)
	v, hello := c.proto, false
	if len(l.spares[node][v]) == 0 && v == 3 {
		v, hello = 2, true // the RESP3 spares are still being dialled
	}
	list := l.spares[node][v]
	if len(list) == 0 {
		l.fillSpares(node, c.proto)
		c.r.Rewind(off)
		c.state = cWaitFence // taken again when one comes (spareCame)
		return true
	}
	u := list[len(list)-1]
	l.spares[node][v] = list[:len(list)-1]
	l.fillSpares(node, v)
	raw := l.cmd.Raw
	if hello {
		raw = append(append([]byte(nil), hello3...), raw...)
	}
	pr := &presented{u: u, node: node, hello: hello}
	raw = writePresented(u, raw)
	c.pre = pr
	l.p.fences.Sent(pg.fence)
	if len(raw) > 0 || u.tio != nil && u.tio.pending() {
		// Redis answers once the session has written the rest: the fence
		// comes down now.
		pr.rest = append([]byte(nil), raw...)
		l.unwatch(u)
		l.presenting = nil
		l.p.fences.Release(pg.fence)
	} else {
		// The loop watches for the answer (it does not read it: the
		// session does).
		pr.waiting = true
		u.presented = c
		pg.u = u
	}
	l.handoff(c, off)
	return true
}

// presentNext is the presentation c's command takes part in: a new one,
// its fence raised once the commands read before it are written, or c's
// own already waiting for a spare connection. wait is true (the command
// un-parsed, c waiting) while another presentation or fence, or a
// session's command that came first, goes before it.
func (l *loop) presentNext(c *lclient, off int) (pg *presenting, wait bool) {
	pg = l.presenting
	others := l.p.fences.Up()
	if pg != nil {
		others--
	}
	if pg != nil && pg.c != c || others > 0 || pg == nil && l.sessionsAhead() {
		c.r.Rewind(off)
		c.state = cWaitFence
		l.fenceWait = append(l.fenceWait, c)
		return nil, true
	}
	if pg == nil {
		// The commands read before it go first; those read after it wait.
		l.flushUps()
		// Unsent: while no spare is idle the command waits for one (a TLS
		// spare's handshake took over 50 ms on a loaded machine, and a
		// fence counted from here ran out first, so the session wrote the
		// command after a PUBLISH read later); bounded by order.Max until
		// written, by order.FenceMax from then on (order/fence.go).
		pg = &presenting{c: c, fence: l.p.fences.RaiseUnsent()}
		l.presenting = pg
	}
	return pg, false
}

// writePresented writes raw on the spare connection u as far as its socket
// takes it, and returns the rest, which the session writes first
// (presented.rest). Any error but a full socket leaves the rest too: the
// session finds the connection broken and answers so.
func writePresented(u *lupstream, raw []byte) []byte {
	if u.tls != nil {
		// Encrypted and written; what the socket did not take, the
		// session writes first (toBlocking).
		if _, err := u.tls.Write(raw); err == nil {
			raw = nil
		}
		return raw
	}
	for len(raw) > 0 {
		n, err := rawsys.Write(u.fd, raw)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// EAGAIN: the session writes the rest first. Any other error:
			// the session finds the connection broken and answers so.
			break
		}
		raw = raw[n:]
	}
	return raw
}

// fenceUnpresented raises, for a cluster-wide command the loop hands over
// without writing it (FLUSHALL, FLUSHDB, KEYS, SCRIPT LOAD, ...: the
// session sends it to every master and answers from their replies), a
// fence that the session takes down once it has handled it (handFence):
// the commands other clients send after it wait, as for a presented
// command. Without it a SET sent right after another client's FLUSHALL
// was written first and wiped (198 of 200 through the loop). Only once the
// commands read before it are written, and not while another fence is up.
func (l *loop) fenceUnpresented(c *lclient, args [][]byte) {
	if !l.p.cfg.Cluster || !nodeWide(args) && !command.IsFanout(args) {
		return
	}
	if c.handFence == nil && l.mayFenceAtRead(c) {
		c.handFence = l.p.fences.RaiseUnsent()
	}
}

// mayFenceAtRead reports whether c's command, not written at once, may put
// its fence up now: no other fence is up or presenting, no session's
// command came first, c is not behind its own blocking command (whose
// reply may take long), and the commands read before it are all written
// (flushed here; a fence up with some left would hold them).
func (l *loop) mayFenceAtRead(c *lclient) bool {
	return l.presenting == nil && l.p.fences.Up() == 0 && c.excl == nil && !l.sessionsAhead() && l.flushUps()
}

// flushUps writes the commands read so far; it reports whether every one
// is written.
func (l *loop) flushUps() bool {
	all := true
	l.eachUp(func(x *lupstream) {
		if x.open() && x.wantsWrite() && !x.wblocked {
			l.flushUp(x)
		}
		if x.wantsWrite() { // unwritten, or its connection still being opened
			all = false
		}
	})
	return all
}

// spareCame takes again the command that waits for a spare connection.
func (l *loop) spareCame() {
	if pg := l.presenting; pg != nil && pg.u == nil && pg.c.state == cWaitFence {
		pg.c.state = cOpen
		l.markDirty(pg.c)
	}
}

// unwatch takes a presented command's connection out of the epoll set.
func (l *loop) unwatch(u *lupstream) {
	if u.fd >= 0 && l.owners[u.fd].u == u {
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, u.fd, nil)
		l.owners[u.fd] = owner{}
	}
}

// presentAnswered ends the wait for a presented command's answer: it has
// come (or the fence timed out), so the client may be handed over and the
// commands held written.
func (l *loop) presentAnswered(u *lupstream) {
	c := u.presented
	if c == nil {
		return
	}
	u.presented = nil
	l.unwatch(u)
	if c.pre != nil {
		c.pre.waiting = false
	}
	l.markDirty(c)
	l.endPresenting() // wakes the loop: fenceDown
}

// endPresenting takes the presented command's fence down.
func (l *loop) endPresenting() {
	if pg := l.presenting; pg != nil {
		l.presenting = nil
		l.p.fences.Release(pg.fence)
	}
}

// fenceDown runs on the loop once a fence is down. If it was the loop's
// own and timed out, the presented command stops being waited for (or,
// still without a spare, goes to the session unpresented); the clients
// waiting to present theirs are read again, and the round's end writes
// what was held.
func (l *loop) fenceDown() {
	if pg := l.presenting; pg != nil && l.p.fences.IsReleased(pg.fence) {
		if pg.u != nil {
			l.presentAnswered(pg.u)
		} else {
			l.presenting = nil
			if pg.c.state == cWaitFence {
				pg.c.noPresend = true
				pg.c.state = cOpen
				l.markDirty(pg.c)
			}
		}
	}
	if l.presenting != nil {
		return // the others wait for it
	}
	for _, c := range l.fenceWait {
		if c.state == cWaitFence {
			c.state = cOpen
			l.markDirty(c)
		}
	}
	l.fenceWait = l.fenceWait[:0]
	if !l.held() {
		l.pipesAgain()
	}
}

// presentedUpstream turns the connection of a presented command into the
// session's own connection to its node, with the command in flight.
func (p *Proxy) presentedUpstream(s *session, pr *presented) {
	f := os.NewFile(uintptr(pr.u.fd), "upstream")
	nc, err := net.FileConn(f)
	f.Close()
	if err == nil && pr.u.tio != nil {
		// The TLS connection goes on over the duplicate, blocking.
		if err = pr.u.tio.toBlocking(nc); err == nil {
			nc = pr.u.tls
		} else {
			nc.Close()
		}
	}
	if err != nil {
		// The command may not have reached Redis: the session sends it
		// again on a connection of its own.
		p.log.Info("handing a presented command to a session failed", "err", err)
		return
	}
	u := &upstream{node: pr.node, conn: nc}
	if p.cfg.Master != nil {
		// A switch of master must close it as it closes every other
		// upstream connection (master.go); if the master moved already,
		// the session sends the command again, to the new one.
		if err := p.track(p.topo.addr(pr.node), u); err != nil {
			p.log.Info("handing a presented command to a session failed", "err", err)
			return
		}
	}
	u.r, u.w = resp.NewReader(u.conn, 16<<10, resp.ReplyLimits()), resp.NewWriter(u.conn, 16<<10)
	for len(s.ups) <= pr.node {
		s.ups = append(s.ups, nil)
	}
	s.ups[pr.node] = u
	s.pre, s.preRest = u, pr.rest
	if pr.hello {
		// Its reply goes before the command's, to nobody.
		u.queued++
		s.pend = append(s.pend, pend{node: int32(pr.node), swallow: true})
	}
	s.dedicated = true
	p.m.dedicated.Inc()
}

// dropPresented ends the presentation of a client that goes away: its
// fence comes down, and the connection of a command presented before its
// session started is closed (Redis ends what it began, a subscription or
// a transaction, with the connection, as for the client).
func (l *loop) dropPresented(c *lclient) {
	if pg := l.presenting; pg != nil && pg.c == c {
		l.endPresenting()
	}
	pr := c.pre
	if pr == nil {
		return
	}
	c.pre = nil
	u := pr.u
	u.presented = nil
	l.unwatch(u)
	unix.Close(u.fd)
	u.fd = -1
}
