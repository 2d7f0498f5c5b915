//go:build linux

package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/dataplane/command"
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// The event loop serves every client that only sends commands leaving no
// connection state, standalone or cluster, from one goroutine around one
// epoll set that holds the clients and the upstream connections (one per
// node and RESP version).
//
// Why not a goroutine per client (the session): at pipeline depth 1 each
// command then costs two goroutine hand-offs and a read that finds nothing
// (Go's netpoller reads until EAGAIN before it parks), and the commands of
// different clients reach the shared upstream connection one write at a
// time. Here one epoll_wait returns every client that has sent something;
// their commands go to Redis in one write, Redis answers them with one read
// and one write, and each client gets its replies with one write. On two
// cores shared by Redis, the proxy and the load generator, that is the
// difference between 55 % and about 100 % of direct Redis throughput (see
// docs/benchmarks.md).
//
// A client that needs more than forwarding is handed, with every byte it
// has sent, to a session goroutine (connection state, blocking commands,
// pub/sub, HELLO the loop cannot answer); commands on mitigated keys run
// the engine on a goroutine and the client's next commands wait for it, so
// a pipeline's order and effects hold exactly as in a session. In cluster
// mode a pipeline may span nodes: each reply carries the client's sequence
// number and replies that come early wait for the ones before them.

// loopMaxOut bounds the replies waiting for a slow client before the loop
// stops reading its commands.
const loopMaxOut = 1 << 20

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
	// cEngine: an engine command runs on a goroutine.
	cEngine
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
}

func (c *lclient) owed() uint64 { return c.sent - c.recv }

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

type owner struct {
	c *lclient
	u *lupstream
}

type loop struct {
	p      *Proxy
	ep     int
	epf    *os.File        // ep, registered with Go's netpoller
	eprc   syscall.RawConn // waits for ep to have events
	wakefd int
	// deadline is the wait's deadline in force: a stall check is due.
	deadline time.Time
	// pollFn is l.poll; pollEvents, pollN and pollErr its input and output.
	pollFn     func(fd uintptr) bool
	pollEvents []unix.EpollEvent
	pollN      int
	pollErr    error

	mu      sync.Mutex
	inbox   []func()
	stopped bool // under mu: wakefd is closed, posts are dropped

	owners   []owner // by fd
	clients  int
	ups      [][4]*lupstream // by node, then RESP version (2, 3)
	dirty    []*lclient
	now      time.Time
	draining bool
	done     chan struct{}

	cmd resp.Command
	rep resp.Reply

	nFwd, nBatches, nLocal, nEng float64
}

// fdIO reads a non-blocking descriptor; EAGAIN comes back as an error.
type fdIO int

func (f fdIO) Read(b []byte) (int, error) {
	for {
		n, err := rawRead(int(f), b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// loopEligible reports whether the configuration lets the event loop serve
// clients: plaintext upstream, multiplexing on.
func loopEligible(cfg *Config) bool {
	return cfg.TLS == nil && cfg.SharedConns >= 0 && !cfg.NoEventLoop
}

func newLoop(p *Proxy) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, err
	}
	l := &loop{p: p, ep: ep, wakefd: wfd, done: make(chan struct{})}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wfd)}); err != nil {
		unix.Close(ep)
		unix.Close(wfd)
		return nil, err
	}
	// The loop waits for its epoll set through Go's netpoller (an epoll
	// set is readable while it has events), never in a blocking
	// epoll_wait: a thread blocked in a system call holds its P until the
	// runtime's monitor takes it away, and with GOMAXPROCS=1 (a sidecar
	// limited to one CPU) that happens on almost every wait and keeps the
	// monitor waking every 20 µs, costing about a fifth of the proxy's CPU.
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		unix.Close(wfd)
		return nil, err
	}
	l.epf = os.NewFile(uintptr(ep), "epoll")
	rc, err := l.epf.SyscallConn()
	if err != nil {
		l.epf.Close()
		unix.Close(wfd)
		return nil, err
	}
	l.eprc = rc
	l.pollFn = l.poll
	return l, nil
}

// start runs the loop and opens the RESP2 upstream connection ahead of the
// first client (RESP3 is opened on the first HELLO 3).
func (l *loop) start() {
	go l.run()
	l.post(func() { l.up(0, 2) })
}

// post runs f on the loop's goroutine; it reports false when the loop has
// stopped (f will never run).
func (l *loop) post(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false
	}
	if len(l.inbox) == 0 {
		one := [8]byte{1}
		unix.Write(l.wakefd, one[:])
	}
	l.inbox = append(l.inbox, f)
	return true
}

// adopt takes an accepted connection into the loop. It reports false when
// the connection's descriptor cannot be taken (the caller serves it with a
// session instead).
func (l *loop) adopt(c net.Conn) bool {
	fd, err := takeFD(c)
	if err != nil {
		return false
	}
	if !l.post(func() { l.add(fd) }) {
		unix.Close(fd)
		l.p.m.connections.Dec()
	}
	return true
}

// takeFD duplicates c's descriptor (non-blocking, close-on-exec) and closes
// c, so that the descriptor belongs to the loop's epoll set alone.
func takeFD(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	c.Close()
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (l *loop) own(fd int, o owner) {
	for len(l.owners) <= fd {
		l.owners = append(l.owners, owner{})
	}
	l.owners[fd] = o
}

func (l *loop) add(fd int) {
	if l.draining {
		unix.Close(fd)
		l.p.m.connections.Dec()
		return
	}
	c := &lclient{fd: fd, r: resp.NewReader(fdIO(fd), 16<<10, l.p.cfg.Limits), proto: 2, events: unix.EPOLLIN}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: c.events, Fd: int32(fd)}); err != nil {
		unix.Close(fd)
		l.p.m.connections.Dec()
		return
	}
	l.own(fd, owner{c: c})
	l.clients++
}

func (l *loop) run() {
	defer close(l.done)
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := l.wait(events)
		if err != nil {
			l.p.log.Error("event loop stopped", "err", err)
			l.stop()
			return
		}
		l.now = time.Now()
		for i := 0; i < n; i++ {
			ev := events[i]
			fd := int(ev.Fd)
			if fd == l.wakefd {
				if l.runInbox() {
					return
				}
				continue
			}
			if fd >= len(l.owners) {
				continue
			}
			switch o := l.owners[fd]; {
			case o.u != nil:
				l.upEvent(o.u, ev.Events)
			case o.c != nil:
				l.clientEvent(o.c, ev.Events)
			}
		}
		l.checkStalls()
		l.endOfRound()
		if l.draining && l.clients == 0 {
			l.stop()
			return
		}
	}
}

// runInbox runs what other goroutines posted; it reports true when the
// loop was told to stop at once.
func (l *loop) runInbox() (stop bool) {
	var b [8]byte
	unix.Read(l.wakefd, b[:])
	l.mu.Lock()
	work := l.inbox
	l.inbox = nil
	l.mu.Unlock()
	for _, f := range work {
		f()
	}
	return l.ep < 0
}

// wait returns the next events, parking the goroutine (not its thread)
// until there are some or a stall check is due.
func (l *loop) wait(events []unix.EpollEvent) (int, error) {
	l.armDeadline()
	l.pollEvents, l.pollN, l.pollErr = events, 0, nil
	err := l.eprc.Read(l.pollFn)
	switch {
	case l.pollErr != nil:
		return 0, l.pollErr
	case err == nil:
		return l.pollN, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		// A stall check is due: clear the passed deadline and return no
		// events, so that the caller runs it.
		l.deadline = time.Time{}
		l.epf.SetReadDeadline(l.deadline)
		return 0, nil
	default:
		return 0, err
	}
}

// poll takes the events ready now; false parks the loop until the epoll
// set is readable. (A method value made once: a closure per wait would
// allocate.)
func (l *loop) poll(fd uintptr) bool {
	for {
		l.pollN, l.pollErr = rawEpollWaitNow(int(fd), l.pollEvents)
		if l.pollErr != unix.EINTR {
			return l.pollN > 0 || l.pollErr != nil
		}
	}
}

// armDeadline makes the wait end when the oldest owed reply would be a
// stall. A deadline that passes too early costs one check and is set again.
func (l *loop) armDeadline() {
	if !l.deadline.IsZero() {
		return
	}
	var due time.Time
	l.eachUp(func(u *lupstream) {
		if !u.open() || u.owed() == 0 {
			return
		}
		if t := u.since.Add(l.p.cfg.Timeout); due.IsZero() || t.Before(due) {
			due = t
		}
	})
	if !due.IsZero() {
		l.deadline = due
		l.epf.SetReadDeadline(due)
	}
}

func (l *loop) checkStalls() {
	l.eachUp(func(u *lupstream) {
		if u.open() && u.owed() > 0 && l.now.Sub(u.since) > l.p.cfg.Timeout {
			l.failUp(u, os.ErrDeadlineExceeded)
		}
	})
}

// eachUp calls f for every upstream connection, open or being opened.
func (l *loop) eachUp(f func(u *lupstream)) {
	for i := range l.ups {
		for _, u := range l.ups[i] {
			if u != nil {
				f(u)
			}
		}
	}
}

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

func (l *loop) markDirty(c *lclient) {
	if !c.dirty {
		c.dirty = true
		l.dirty = append(l.dirty, c)
	}
}

func (l *loop) clientEvent(c *lclient, ev uint32) {
	if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		l.closeClient(c)
		return
	}
	if ev&unix.EPOLLOUT != 0 {
		c.wblocked = false
		l.markDirty(c)
	}
	if ev&unix.EPOLLIN == 0 || c.state != cOpen {
		return
	}
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
	l.nBatches++
	l.parse(c)
	l.markDirty(c)
}

// parse takes every complete command the client has sent, while it may.
func (l *loop) parse(c *lclient) {
	for c.state == cOpen && c.owed() < maxBatch {
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
	args := l.cmd.Args
	info, known := command.Lookup(args[0])
	r := decide(info, known, args, mode{shared: true, cluster: l.p.cfg.Cluster, proto: c.proto})
	switch r.op {
	case opHello:
		if l.waitDrain(c, off) {
			return
		}
		u := l.up(0, r.proto)
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
		c.proto = r.proto
		l.localReply(c, u.hello)
		return
	case opOK:
		if !l.waitDrain(c, off) {
			l.localReply(c, resp.AppendStatus(nil, "OK"))
		}
		return
	case opRefuse:
		if !l.waitDrain(c, off) {
			l.localReply(c, resp.AppendError(nil, r.err))
		}
		return
	case opQuit:
		c.state = cClosing
		c.final = resp.AppendStatus(nil, "OK")
		l.nLocal++
		return
	case opOwnConn, opPipe, opState:
		l.handoff(c, off)
		return
	}
	key := info.FirstKey(args)
	var inval []string
	if key != nil {
		if e := l.p.cfg.Engine; e != nil && e.Names(info, args, key) {
			d := e.Decide(args, false)
			if d.Op != engine.OpRaw {
				if !l.waitDrain(c, off) && !l.cacheHit(c, d, args) {
					l.runEngine(c, d, invalidates(e, args, d))
				}
				return
			}
			inval = invalidates(e, args, d)
		}
		if o := l.p.cfg.Observer; o != nil && info.Write {
			o.Observe(l.p.cfg.Policy, string(key), 0, 1, uint32(len(l.cmd.Raw)))
		}
	}
	var rk string
	if l.p.cfg.Observer != nil && key != nil && !info.Write {
		rk = string(key)
	}
	node := 0
	if l.p.cfg.Cluster && key != nil {
		node = l.p.topo.nodeOf(slotOf(key))
	}
	l.forward(c, node, l.cmd.Raw, rk, inval)
}

// cacheHit answers a GET from the engine's local cache, inline, when the
// value is cached (the client owes no reply, so none of its own writes is
// in flight).
func (l *loop) cacheHit(c *lclient, d engine.Decision, args [][]byte) bool {
	if d.Op != engine.OpGet {
		return false
	}
	val, found, ok := l.p.cfg.Engine.Cached(unsafeString(args[1]))
	if !ok {
		return false
	}
	if found {
		c.out = resp.AppendBulk(c.out, val)
	} else {
		c.out = resp.AppendNull(c.out, c.proto)
	}
	if o := l.p.cfg.Observer; o != nil {
		o.Observe(l.p.cfg.Policy, string(args[1]), 1, 0, uint32(len(val)))
	}
	l.nEng++
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
	c.out = append(c.out, b...)
	l.nLocal++
}

// handoff un-parses the command at off and hands the client to a session
// goroutine once its owed replies are written.
func (l *loop) handoff(c *lclient, off int) {
	c.r.Rewind(off)
	c.state = cHandoff
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

// deliver hands the client the reply to its command seq: at once if it is
// the next one owed, else kept until the ones before it came.
func (l *loop) deliver(c *lclient, seq uint64, b []byte) {
	if c.state == cClosed {
		c.recv++ // nobody reads it; keep the count
		return
	}
	if seq != c.recv {
		if c.ooo == nil {
			c.ooo = map[uint64][]byte{}
		}
		c.ooo[seq] = append([]byte(nil), b...)
		return
	}
	c.out = append(c.out, b...)
	c.recv++
	for len(c.ooo) > 0 {
		next, ok := c.ooo[c.recv]
		if !ok {
			break
		}
		delete(c.ooo, c.recv)
		c.out = append(c.out, next...)
		c.recv++
	}
	l.markDirty(c)
}

// runEngine serves an engine command on a goroutine with a session of its
// own (sharing the multiplexed pool); the client's later commands wait.
func (l *loop) runEngine(c *lclient, d engine.Decision, inval []string) {
	c.state = cEngine
	raw := append([]byte(nil), l.cmd.Raw...)
	args := make([][]byte, len(l.cmd.Args))
	for i, a := range l.cmd.Args {
		args[i] = append([]byte(nil), a...)
	}
	proto := c.proto
	p := l.p
	go func() {
		s := &session{p: p, proto: proto, pinned: -1, wake: make(chan struct{}, 1),
			cw: resp.NewWriter(nil, 512), poolSlot: int(p.sessionSeq.Add(1))}
		defer s.closeUpstreams() // cluster mode: its own node connections
		if !s.execEngine(d, args) {
			node := 0 // malformed for the engine: Redis gives its own error
			if p.cfg.Cluster && len(args) > 1 {
				node = p.topo.nodeOf(slotOf(args[1]))
			}
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
	c.out = append(c.out, out...)
	c.state = cOpen
	if l.draining {
		c.state = cClosing
	}
	l.markDirty(c)
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

func (l *loop) forget(c *lclient) {
	unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	l.owners[c.fd] = owner{}
	c.state = cClosed
	c.out, c.final = nil, nil
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
	l.forget(c)
	f := os.NewFile(uintptr(fd), "client")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		l.p.log.Info("closing client connection: handing it to a session failed", "err", err)
		l.p.m.connections.Dec()
		return
	}
	s := newSession(l.p, nc)
	c.r.SetSource(nc)
	s.cr = c.r
	s.proto = proto
	if !l.p.startSession(s) {
		l.p.m.connections.Dec()
	}
}

// drain stops taking commands: every client gets the replies it is owed,
// then is closed; the loop stops when none is left.
func (l *loop) drain() {
	l.draining = true
	for _, o := range l.owners {
		if c := o.c; c != nil && c.state != cEngine {
			c.state = cClosing
			l.markDirty(c)
		}
	}
}

// closeAll closes every client and stops the loop (drain timeout).
func (l *loop) closeAll() {
	for _, o := range l.owners {
		if o.c != nil {
			l.closeClient(o.c)
		}
	}
	l.stop()
}

// stop closes the upstream connections and the epoll set.
func (l *loop) stop() {
	if l.ep < 0 {
		return
	}
	l.eachUp(func(u *lupstream) {
		if u.fd >= 0 {
			unix.Close(u.fd)
			u.fd = -1
		}
	})
	l.epf.Close()
	l.ep = -1
	l.mu.Lock()
	l.stopped = true
	unix.Close(l.wakefd)
	l.mu.Unlock()
}

// shutdown drains the loop, closing whatever remains at the deadline, and
// waits for it to stop.
func (l *loop) shutdown(deadline <-chan time.Time) bool {
	l.post(l.drain)
	select {
	case <-l.done:
		return true
	case <-deadline:
	}
	l.post(l.closeAll)
	<-l.done
	return false
}

// rawRead, rawWrite and rawEpollWaitNow are read(2), write(2) and
// epoll_wait(2) with a zero timeout on non-blocking descriptors: they
// return at once, so they are made without entering the scheduler's system
// call state (RawSyscall). That state would let the runtime's monitor take
// the loop's P and, after every idle spell, wake the monitor into polling
// every 20 µs again, which costs several per cent of a CPU under load.
func rawRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawWrite(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawEpollWaitNow(ep int, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
