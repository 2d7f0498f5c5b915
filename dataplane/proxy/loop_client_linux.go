//go:build linux

package proxy

import (
	"errors"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy/order"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// The event loop's client side: taking connections in, parsing their
// commands and classifying each (classify), delivering replies in order,
// engine commands on a goroutine, and handing a client to a session.

type cstate uint8

const (
	// cOpen: commands are parsed as they arrive.
	cOpen cstate = iota
	// cWaitDrain: the next command must wait for every reply owed (a local
	// reply, an engine command, HELLO); it is parsed again once they came.
	cWaitDrain
	// cWaitUp: the next command (HELLO) waits for an upstream connection
	// being opened.
	cWaitUp
	// cWaitFence: the next command is to be presented (presend) once the
	// fence up now is down.
	cWaitFence
	// cEngine: an engine command runs on a goroutine.
	cEngine
	// cBlocked: a blocking command or a script runs on a connection of its
	// own (excl); the next commands wait for its reply, as Redis makes
	// them wait. Only the client's closing is watched meanwhile.
	cBlocked
	// cHandoff: the client goes to a session goroutine once its replies
	// are written.
	cHandoff
	// cClosing: closed once its replies are written (QUIT, EOF, a
	// malformed frame, shutdown). final is written last.
	cClosing
	cClosed
)

type lclient struct {
	fd    int
	in    *order.StampIO // r's source
	r     *resp.Reader
	out   []byte
	woff  int
	proto int
	// sent and recv count the commands forwarded and the replies delivered
	// (in order); the client owes no reply when they are equal.
	sent, recv uint64
	state      cstate
	final      []byte
	events     uint32
	dirty      bool
	// wblocked: the last write found the socket buffer full.
	wblocked bool
	// ooo holds replies that came before earlier ones (cluster mode: a
	// pipeline spread over several nodes), by sequence number.
	ooo map[uint64][]byte
	// excl is the connection its blocking command or script runs on.
	excl *lupstream
	// avgReply is the running mean size of its replies.
	avgReply uint32
	// pausing is the upstream connection not read until c writes the large
	// reply it streams.
	pausing *lupstream
	// handFence is the fence of the command c's session is handed
	// (fenceUnpresented), taken down by that session.
	handFence *order.Fence
	// pre is the command written for the session c is handed to;
	// noPresend: its next handoff goes without (no spare came in time).
	pre       *presented
	noPresend bool
	// seen is the last activity window it sent commands in (spin.go).
	seen uint32
}

func (c *lclient) owed() uint64 { return c.sent - c.recv }

// pending is the reply bytes not yet written to the client.
func (c *lclient) pending() int { return len(c.out) - c.woff }

// maxOwed is how many commands the client may have in flight: as many as
// replies of its usual size fit in loopClientBudget, between 1 and
// maxBatch. A new client starts at 128.
func (c *lclient) maxOwed() uint64 {
	return uint64(min(max(loopClientBudget/max(int(c.avgReply), 16), 1), maxBatch))
}

// mayRead reports whether the loop may take more commands from c: it is
// open, within its in-flight and buffered-reply bounds, and, under
// pressure, keeping up (nothing unwritten) and within pressureOwed.
func (l *loop) mayRead(c *lclient) bool {
	if c.state != cOpen || c.pending() >= loopMaxOut {
		return false
	}
	limit := c.maxOwed()
	if l.pressure {
		// Only clients that keep up are read, a few commands at a time:
		// one that turns out not to read its replies holds little.
		if c.pending() > 0 {
			return false
		}
		limit = min(limit, pressureOwed)
	}
	return c.owed() < limit
}

// pressureOwed is the most commands a client may have in flight while the
// loop is under pressure.
const pressureOwed = 16

// appendOut adds b to c's replies.
func (l *loop) appendOut(c *lclient, b []byte) {
	c.out = append(c.out, b...)
	l.outBytes += int64(len(b))
}

// adopt takes an accepted connection into the loop. It reports false when
// the connection's descriptor cannot be taken (the caller serves it with a
// session instead).
func (l *loop) adopt(c net.Conn) bool {
	fd, err := takeFD(c)
	if err != nil {
		if isResourceError(err) {
			// No descriptor to serve it with: answer as Redis does at
			// maxclients, and close; the connections already held go on.
			c.Write([]byte("-" + errMaxClients + "\r\n"))
			c.Close()
			l.p.m.connections.Dec()
			l.p.log.Warn("closing a new client connection: out of file descriptors", "err", err)
			return true
		}
		return false
	}
	if !l.post(func() { l.add(fd) }) {
		unix.Close(fd)
		l.p.m.connections.Dec()
	}
	return true
}

func (l *loop) add(fd int) {
	if l.draining {
		unix.Close(fd)
		l.p.m.connections.Dec()
		return
	}
	in := order.NewStampIO(fd)
	c := &lclient{fd: fd, in: in, r: resp.NewReader(in, 16<<10, l.p.cfg.Limits), proto: 2, events: unix.EPOLLIN, avgReply: 2048}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: c.events, Fd: int32(fd)}); err != nil {
		unix.Close(fd)
		l.p.m.connections.Dec()
		return
	}
	l.own(fd, owner{c: c})
	l.clients++
}

func (l *loop) clientEvent(c *lclient, ev uint32) {
	if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 || ev&unix.EPOLLRDHUP != 0 && c.state == cBlocked {
		// A blocked client that hangs up is gone, as Redis sees it: its
		// command is cancelled with its connection.
		l.closeClient(c)
		return
	}
	if ev&unix.EPOLLOUT != 0 {
		c.wblocked = false
		l.markDirty(c)
	}
	if ev&unix.EPOLLIN == 0 || !l.mayRead(c) {
		return
	}
	if c.r.Buffered() > 0 {
		// Commands read earlier and not yet taken (the client was at its
		// bound) go first: reading more before would grow its buffer.
		l.parse(c)
		l.markDirty(c)
		if !l.mayRead(c) {
			return
		}
	}
	l.active.touch(&c.seen)
	if err := c.r.Fill(); err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		// EOF: the client sent all it will; answer what it asked, then close.
		c.state = cClosing
		if !errors.Is(err, io.EOF) {
			l.closeClient(c)
			return
		}
		l.markDirty(c)
		return
	}
	// Parsed once the round's clients have all read (parseReads).
	l.reads = append(l.reads, c)
}

// parseRead takes the commands of a client that has read new bytes.
func (l *loop) parseRead(c *lclient) {
	l.nBatches++
	l.probeFill(c)
	l.parse(c)
	l.probeParsed()
	l.markDirty(c)
}

// parse takes every complete command the client has sent, while it may.
func (l *loop) parse(c *lclient) {
	for l.mayRead(c) {
		off := c.r.Offset()
		ok, err := c.r.TryCommand(&l.cmd)
		if err != nil {
			if resp.IsProtocolError(err) {
				l.p.m.protocolErrors.Inc()
				l.p.log.Info("closing client connection after a malformed frame", "err", err)
				c.final = resp.AppendError(nil, "ERR "+err.Error())
			}
			c.state = cClosing
			return
		}
		if !ok {
			return
		}
		l.command(c, off)
	}
}

// command handles l.cmd, parsed from offset off of the client's buffer.
func (l *loop) command(c *lclient, off int) {
	if l.cmd.Streamed {
		// A large value, not all here: a session passes it on as it
		// arrives, on a connection of its own (bigvalue.go).
		l.handoff(c, off)
		return
	}
	args := l.cmd.Args
	cl := l.p.classify(args, mode{shared: true, cluster: l.p.cfg.Cluster, proto: c.proto})
	if l.answer(c, &cl, args, off) {
		return
	}
	var inval []string
	if cl.mitigated {
		e := l.p.cfg.Engine
		if cl.decision.Op != engine.OpRaw {
			if !l.waitDrain(c, off) && !l.cacheHit(c, &cl, args) && !l.shed(c, &cl) {
				l.runEngine(c, &cl, invalidates(e, args, cl.decision))
			}
			return
		}
		inval = invalidates(e, args, cl.decision)
	}
	l.p.observeSent(&cl, len(l.cmd.Raw))
	if cl.route.op == opExclusive {
		l.exclusive(c, cl.node, l.cmd.Raw, cl.readKey, inval)
		return
	}
	l.forward(c, cl.node, l.cmd.Raw, cl.readKey, inval)
	if t := startShedTimer(cl.mitigated, cl.decision); t.key != "" {
		u := l.up(cl.node, c.proto) // the connection forward queued it on
		u.fifo[len(u.fifo)-1].shed = &t
	}
}

// answer serves a command the loop does not forward as it is: it answers
// it itself, or hands the client to a session for it. It reports false for
// a command to forward (a blocking command or a script once its client
// owes no reply: on a connection of its own).
func (l *loop) answer(c *lclient, cl *classified, args [][]byte, off int) bool {
	switch cl.route.op {
	case opHello:
		l.hello(c, cl, off)
	case opRefuse:
		if !l.waitDrain(c, off) {
			l.localReply(c, resp.AppendError(nil, cl.route.err))
		}
	case opTopology:
		if !l.waitDrain(c, off) {
			l.localReply(c, topologyReply(args, sockName(c.fd), c.proto))
		}
	case opInfo:
		if !l.waitDrain(c, off) {
			l.runInfo(c)
		}
	case opQuit:
		c.state = cClosing
		c.final = resp.AppendStatus(nil, "OK")
		l.nLocal++
	case opOwnConn, opPipe, opState, opReplyMode:
		if !l.presend(c, cl, args, off) {
			l.handoff(c, off)
		}
	case opExclusive:
		// Its effects must follow those of the client's earlier commands,
		// which went on another connection.
		return l.waitDrain(c, off)
	default:
		return false
	}
	return true
}

// hello answers a HELLO with at most a protocol version from the loop's
// connection of that version, or hands the client to a session when Redis
// gave that connection no HELLO reply.
func (l *loop) hello(c *lclient, cl *classified, off int) {
	if l.waitDrain(c, off) {
		return
	}
	u := l.up(0, cl.route.proto)
	if !u.open() {
		// Being opened: the HELLO is taken again once it is (or goes
		// to a session, which reports the error, if it fails).
		c.r.Rewind(off)
		c.state = cWaitUp
		u.waiting = append(u.waiting, c)
		return
	}
	if u.hello == nil {
		l.handoff(c, off)
		return
	}
	c.proto = cl.route.proto
	l.localReply(c, u.hello)
	if cl.route.proto == 3 {
		for _, node := range l.p.topo.masters() {
			l.fillSpares(node, 3) // its blocking commands find a connection ready
		}
	}
}

// cacheHit answers a GET or another cacheable read from the engine's local
// cache, inline, when its reply is cached (the client owes no reply, so
// none of its own writes is in flight).
func (l *loop) cacheHit(c *lclient, cl *classified, args [][]byte) bool {
	if cl.decision.Op == engine.OpRead {
		b, ok := l.p.cfg.Engine.CachedRead(args, c.proto)
		if !ok {
			return false
		}
		l.appendOut(c, b)
		if l.p.cfg.Observer != nil {
			l.p.observe(cl.readKey, 1, 0, len(b)) // a cacheable read names one key, its first
		}
		l.nEng++
		return true
	}
	if cl.decision.Op != engine.OpGet {
		return false
	}
	val, found, ok := l.p.cfg.Engine.Cached(unsafeString(args[1]))
	if !ok {
		return false
	}
	n := len(c.out)
	if found {
		c.out = resp.AppendBulk(c.out, val)
	} else {
		c.out = resp.AppendNull(c.out, c.proto)
	}
	l.outBytes += int64(len(c.out) - n)
	if l.p.cfg.Observer != nil {
		l.p.observe(cl.readKey, 1, 0, len(val)) // a GET's key is its first
	}
	l.nEng++
	return true
}

// shed answers a command the engine's shed limiter refused, inline: the
// excess of a shed key is answered at once, never queued, and costs no
// goroutine.
func (l *loop) shed(c *lclient, cl *classified) bool {
	d := cl.decision
	if d.Op != engine.OpRefuse || d.Shed == "" {
		return false
	}
	n := len(c.out)
	c.out = appendEngineError(c.out, errors.New(d.Err))
	l.outBytes += int64(len(c.out) - n)
	if d.Write {
		l.p.observe(d.Shed, 0, 1, 0)
	} else {
		l.p.observe(d.Shed, 1, 0, 0)
	}
	l.nLocal++
	return true
}

// waitDrain reports true (and un-parses the command) when the client still
// owes replies: the command is taken again once they came.
func (l *loop) waitDrain(c *lclient, off int) bool {
	if c.owed() == 0 {
		return false
	}
	c.r.Rewind(off)
	c.state = cWaitDrain
	return true
}

func (l *loop) localReply(c *lclient, b []byte) {
	l.appendOut(c, b)
	l.nLocal++
}

// handoff un-parses the command at off and hands the client to a session
// goroutine once its owed replies are written.
func (l *loop) handoff(c *lclient, off int) {
	c.r.Rewind(off)
	c.state = cHandoff
}

// deliver hands the client the reply to its command seq: at once if it is
// the next one owed, else kept until the ones before it came.
func (l *loop) deliver(c *lclient, seq uint64, b []byte) {
	if c.state == cClosed {
		c.recv++ // nobody reads it; keep the count
		return
	}
	c.avgReply = uint32((uint64(c.avgReply)*7 + uint64(len(b))) / 8)
	if seq != c.recv {
		if c.ooo == nil {
			c.ooo = map[uint64][]byte{}
		}
		c.ooo[seq] = append([]byte(nil), b...)
		l.outBytes += int64(len(b))
		return
	}
	l.appendOut(c, b)
	c.recv++
	for len(c.ooo) > 0 {
		next, ok := c.ooo[c.recv]
		if !ok {
			break
		}
		delete(c.ooo, c.recv)
		c.out = append(c.out, next...) // counted when it came
		c.recv++
	}
	if len(c.ooo) == 0 {
		c.ooo = nil // maps keep their buckets: let a burst's go
	}
	l.markDirty(c)
}

// runEngine serves an engine command on a goroutine with a session of its
// own (loopSession); the client's later commands wait.
func (l *loop) runEngine(c *lclient, cl *classified, inval []string) {
	c.state = cEngine
	raw := append([]byte(nil), l.cmd.Raw...)
	args := make([][]byte, len(l.cmd.Args))
	for i, a := range l.cmd.Args {
		args[i] = append([]byte(nil), a...)
	}
	proto := c.proto
	p := l.p
	d, node := cl.decision, cl.node
	go func() {
		s, done := p.loopSession(proto)
		defer done()
		if !s.execEngine(d, args) {
			// Malformed for the engine: Redis gives its own error.
			s.forward(node, raw, false, "")
			s.pend[len(s.pend)-1].invalidate = inval
			s.drain()
		}
		s.flushMetrics()
		out := s.cw.Buf
		l.post(func() { l.engineDone(c, out) })
	}()
}

func (l *loop) engineDone(c *lclient, out []byte) {
	if c.state != cEngine {
		return // closed meanwhile
	}
	l.appendOut(c, out)
	c.state = cOpen
	if l.draining {
		c.state = cClosing
	}
	l.markDirty(c)
}

func (l *loop) forget(c *lclient) {
	unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	l.owners[c.fd] = owner{}
	l.dropExclusive(c)
	l.dropPresented(c)
	if c.handFence != nil { // closed before its session started
		l.p.fences.Release(c.handFence)
		c.handFence = nil
	}
	l.probeGone(c, nil)
	c.state = cClosed
	if u := c.pausing; u != nil {
		l.resumeLater(u)
	}
	l.outBytes -= int64(c.pending())
	for _, b := range c.ooo {
		l.outBytes -= int64(len(b))
	}
	c.out, c.final, c.ooo, c.woff = nil, nil, nil, 0
	l.clients--
}

func (l *loop) closeClient(c *lclient) {
	if c.state == cClosed {
		return
	}
	l.forget(c)
	unix.Close(c.fd)
	c.fd = -1
	l.p.m.connections.Dec()
}

// toSession hands the client, with the bytes it sent and not yet parsed,
// to a session goroutine.
func (l *loop) toSession(c *lclient) {
	fd := c.fd
	proto := c.proto
	pr, hf := c.pre, c.handFence
	c.pre, c.handFence = nil, nil
	l.forget(c)
	f := os.NewFile(uintptr(fd), "client")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		l.p.log.Info("closing client connection: handing it to a session failed", "err", err)
		l.p.m.connections.Dec()
		if pr != nil {
			unix.Close(pr.u.fd)
		}
		l.p.fences.Release(hf)
		return
	}
	s := newSession(l.p, nc)
	s.fence = hf
	c.r.SetSource(nc)
	s.cr = c.r
	s.proto = proto
	if pr != nil {
		l.p.presentedUpstream(s, pr)
	}
	if !s.dedicated {
		s.handedOver()
	}
	if !l.p.startSession(s) {
		l.p.m.connections.Dec()
		l.p.fences.Release(hf)
	}
}
