//go:build linux

package proxy

import (
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/rawsys"
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
const loopMaxOut = 256 << 10

// loopClientBudget bounds the replies one client may have in flight: its
// commands in flight are capped at this over the mean size of its replies
// (at most maxBatch), so a client that asks for large values and does not
// read them cannot make the loop hold more than about loopMaxOut plus this.
const loopClientBudget = 256 << 10

// maxInflight bounds the commands in flight on all upstream connections.
const maxInflight = 1 << 17

type owner struct {
	c  *lclient
	u  *lupstream
	pi *lpipe // a piped client's input (loop_pipe_linux.go)
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

	// spares are idle connections for blocking commands and scripts, by
	// node and RESP version (sparing: being dialled); excls are those in
	// use, each by one client.
	spares  [][4][]*lupstream
	sparing [][4]int
	excls   []*lupstream

	// outBytes are the replies held for clients (not yet written to them,
	// or waiting for earlier ones); inflight the commands sent upstream
	// and not answered. Above Config.MaxBuffered (or maxInflight) the loop
	// is under pressure: it reads only clients that are keeping up.
	outBytes int64
	inflight int
	pressure bool
	// again are clients with commands read and not yet taken, to take in
	// the next round; resumes are upstream connections to read again.
	again   []*lclient
	resumes []*lupstream
	// presenting is the command being presented (at most one at a time);
	// fenceWait the clients waiting to present theirs.
	presenting *presenting
	fenceWait  []*lclient
	// pipeWait are piped clients not read while a fence is up.
	pipeWait []*lpipe
	// arr holds the loop's writes for sessions (loop_arrivals_linux.go).
	arr loopArrivals

	cmd resp.Command
	rep resp.Reply
	// scratch is the read buffer of piped clients' input.
	scratch []byte

	nFwd, nBatches, nLocal, nEng float64

	// pr follows the sampled command (loop_overhead_linux.go) on the clock
	// started at epoch.
	pr    probe
	epoch time.Time

	// spinReply and spinCmd size the spins before parking (spin.go) while
	// a reply is owed, and after a round that wrote replies to clients;
	// replied says the last round did; active counts the clients sending.
	spinReply, spinCmd spinner
	// reads are the round's clients that read new bytes, parsed at the
	// round's end in the order they were sent (order/stamp_linux.go).
	reads   []*lclient
	replied bool
	active  activity
}

// loopEligible reports whether the configuration lets the event loop serve
// clients: multiplexing on, plaintext or TLS upstream (the loop runs
// crypto/tls itself: tlsloop_linux.go).
func loopEligible(cfg *Config) bool {
	return cfg.SharedConns >= 0 && !cfg.NoEventLoop
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
	l := &loop{p: p, ep: ep, wakefd: wfd, done: make(chan struct{}), epoch: time.Now()}
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
	l.post(func() {
		l.up(0, 2)
		for _, node := range l.p.topo.masters() {
			l.fillSpares(node, 2) // blocking commands find a connection ready
		}
	})
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

func (l *loop) own(fd int, o owner) {
	for len(l.owners) <= fd {
		l.owners = append(l.owners, owner{})
	}
	l.owners[fd] = o
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
		l.active.tick(l.now)
		for _, c := range l.again {
			if c.state != cClosed {
				l.markDirty(c)
			}
		}
		l.again = l.again[:0]
		for _, u := range l.resumes {
			if !u.dead {
				l.resumeUp(u)
			}
		}
		l.resumes = l.resumes[:0]
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
			case o.pi != nil:
				l.pipeEvent(o.pi)
			}
		}
		l.parseReads()
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
	if l.spin() {
		if l.pollErr != nil {
			return 0, l.pollErr
		}
		return l.pollN, nil
	}
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
		l.pollN, l.pollErr = rawsys.EpollWaitNow(int(fd), l.pollEvents)
		if l.pollErr != unix.EINTR {
			return l.pollN > 0 || l.pollErr != nil
		}
	}
}

// spin polls the epoll set for as long as the spinner of the wait allows
// (spin.go), yielding the CPU between polls (Redis may be waiting for it);
// true means it found events (or an error) in l.pollN, l.pollErr.
func (l *loop) spin() bool {
	var s *spinner
	switch {
	case !l.active.few():
		l.replied = false
		return false
	case l.inflight > 0:
		s = &l.spinReply
	case l.replied:
		s = &l.spinCmd
	default:
		return false
	}
	l.replied = false
	budget := s.budget()
	if budget == 0 {
		return false
	}
	start := time.Now()
	for first := true; ; first = false {
		n, err := rawsys.EpollWaitNow(l.ep, l.pollEvents)
		if n > 0 || err != nil && err != unix.EINTR {
			l.pollN, l.pollErr = n, err
			if !first {
				s.done(true, time.Since(start))
			}
			return true
		}
		if spent := time.Since(start); spent >= budget {
			s.done(false, spent)
			return false
		}
		rawsys.SchedYield()
	}
}

// armDeadline makes the wait end when the oldest owed reply would be a
// stall. A deadline that passes too early costs one check and is set again.
func (l *loop) armDeadline() {
	if !l.deadline.IsZero() || l.p.cfg.Timeout <= 0 {
		return
	}
	var due time.Time
	l.eachUp(func(u *lupstream) {
		if u.excl != nil || !u.open() || u.owed() == 0 {
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
	if l.p.cfg.Timeout <= 0 {
		return
	}
	l.eachUp(func(u *lupstream) {
		if u.excl == nil && u.open() && u.owed() > 0 && l.now.Sub(u.since) > l.p.cfg.Timeout {
			l.failUp(u, os.ErrDeadlineExceeded)
		}
	})
}

// eachUp calls f for every upstream connection in use, open or being
// opened: the shared ones and those serving one client's command.
func (l *loop) eachUp(f func(u *lupstream)) {
	for i := range l.ups {
		for _, u := range l.ups[i] {
			if u != nil {
				f(u)
			}
		}
	}
	for _, u := range l.excls {
		f(u)
	}
}

// drain stops taking commands: every client gets the replies it is owed,
// then is closed; the loop stops when none is left.
func (l *loop) drain() {
	l.draining = true
	for _, o := range l.owners {
		if o.pi != nil {
			l.endPipe(o.pi)
		}
		c := o.c
		switch {
		case c == nil || c.state == cEngine:
		case c.state == cBlocked:
			// Blocked for as long as it asked: closed now, as Redis closes
			// its clients when it shuts down.
			l.closeClient(c)
		default:
			c.state = cClosing
			l.markDirty(c)
		}
	}
	for _, bySpare := range l.spares {
		for v := range bySpare {
			for _, u := range bySpare[v] {
				l.closeUp(u)
			}
			bySpare[v] = nil
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
	for _, o := range l.owners {
		if pi := o.pi; pi != nil {
			// A session that holds a chunk finds the loop stopped when it
			// has written it, and ends the input then.
			select {
			case pi.in.chunks <- pipeChunk{eof: true}:
			default:
			}
			l.dropPipe(pi)
		}
	}
	for _, bySpare := range l.spares {
		for _, list := range bySpare {
			for _, u := range list {
				if u.fd >= 0 {
					unix.Close(u.fd)
					u.fd = -1
				}
			}
		}
	}
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
