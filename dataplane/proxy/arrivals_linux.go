//go:build linux

package proxy

import (
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The order commands came in, for sessions (docs/proxy.md, Ordering).
// Sessions read their clients on goroutines that Go's netpoller wakes in
// no guaranteed order, often the reverse of the order the bytes came: a
// SUBSCRIBE sent before another client's PUBLISH was read tens of
// microseconds after it, and the message was lost (about 100 in 1,000
// tries), though the session that subscribes raises a fence (fence.go) as
// soon as it has read it. So the kernel's order is kept apart from the
// goroutines': every session's client socket is also in one epoll set,
// edge-triggered, whose ready list is the order in which clients' bytes
// came; before a session writes the commands it read, it takes that
// list, numbering each arrival, and waits until every session whose bytes
// came before its own and that is reading has handled them (written
// them, or raised its fence). A session waiting for Redis' replies is not
// waited for: its next commands come after those replies anyway, as a
// pipeline's do. A wait lasts at most orderMax (fence.go): between its
// read and its handling a session does only the proxy's own work.

type arrivals struct {
	ep   int
	mu   sync.Mutex
	next uint64 // the last arrival's number
	byFD map[int32]*session
	// pending are the sessions with a ticket; writers those writing to
	// their client (write).
	pending, writers map[*session]struct{}
	// peek and args are mayHandOff's buffers.
	peek   []byte
	args   [][]byte
	events []unix.EpollEvent
	// changed is closed (and replaced) when a session has handled what it
	// read, if a session waits for that (waiters > 0).
	changed chan struct{}
	waiters int
	// size counts the sessions in the set (the event loop's cheap test).
	size atomic.Int32
	// loopWake, if set, is called (under mu) when a session has handled
	// what it read and the event loop holds its writes for it
	// (loopWaits; loop_arrivals_linux.go).
	loopWake  func()
	loopWaits bool
	// bound is called when a wait ends by orderMax (proxy metrics).
	bound func()
	// cluster: commands are classified as in cluster mode (handsOff).
	cluster bool
}

// arrivalState is a session's part of arrivals (under arrivals.mu).
type arrivalState struct {
	on bool // the session is in the set
	fd int32
	// ticket numbers the oldest arrival the session has not handled
	// (0: none); latest the newest. Arrivals are numbered in steps of
	// two: bytes that came while the session wrote to its client get
	// the odd number after wmark, the last number when the write began.
	ticket, latest, wmark uint64
	// writing: a write to the client is under way (write).
	writing bool
	// reading: the session reads or handles its client's commands (not
	// waiting for Redis).
	reading bool
	rc      syscall.RawConn
	// rb, rn, rerr are read's buffer and result, wb, wn, werr write's, and
	// wwas the reading state a blocked write set aside (functions made
	// once: a closure per call would allocate).
	rb, wb     []byte
	rn, wn     int
	rerr, werr error
	wblocked   bool
	wwas       bool
	rfn, wfn   func(fd uintptr) bool
	// boundary: the session's next bytes begin a command (it holds no
	// part of one); handoff: its first pending command may take another
	// connection than the shared one (handsOff), known once known;
	// pipe: a subscribed client's input, every command of which counts.
	boundary, handoff, known, pipe bool
}

func newArrivals(bound func(), cluster bool) *arrivals {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	return &arrivals{ep: ep, byFD: map[int32]*session{}, pending: map[*session]struct{}{}, writers: map[*session]struct{}{}, events: make([]unix.EpollEvent, 256), bound: bound, cluster: cluster}
}

func (a *arrivals) close() {
	if a != nil {
		unix.Close(a.ep)
	}
}

// add puts the session's client socket in the set; it reports false when
// it cannot (the session is then not ordered against the others).
func (a *arrivals) add(s *session) bool {
	if a == nil {
		return false
	}
	sc, ok := s.conn.(syscall.Conn) // a TCP socket, not TLS
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var fd int32 = -1
	a.mu.Lock()
	defer a.mu.Unlock()
	rc.Control(func(d uintptr) {
		// The socket's own descriptor, not a duplicate: an epoll set may
		// hold a descriptor that Go's netpoller holds too.
		if unix.EpollCtl(a.ep, unix.EPOLL_CTL_ADD, int(d), &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(d)}) == nil {
			fd = int32(d)
		}
	})
	if fd < 0 {
		return false
	}
	s.arr = arrivalState{on: true, fd: fd, reading: true, rc: rc, boundary: true}
	a.byFD[fd] = s
	a.size.Add(1)
	return true
}

// remove takes the session out, before its socket is closed.
func (a *arrivals) remove(s *session) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !s.arr.on {
		return
	}
	s.arr.on = false
	s.arr.writing = false
	delete(a.writers, s)
	a.size.Add(-1)
	if a.byFD[s.arr.fd] == s {
		delete(a.byFD, s.arr.fd)
		unix.EpollCtl(a.ep, unix.EPOLL_CTL_DEL, int(s.arr.fd), nil)
	}
	a.setTicket(s, 0)
	s.arr.reading = false
	a.notify()
}

// harvest numbers the arrivals since the last call, in the kernel's order.
func (a *arrivals) harvest() {
	for {
		n, err := rawEpollWaitNow(a.ep, a.events)
		if err == unix.EINTR {
			continue
		}
		for _, ev := range a.events[:max(n, 0)] {
			if x := a.byFD[ev.Fd]; x != nil {
				a.next += 2
				if x.arr.ticket == 0 {
					a.setTicket(x, a.next)
				}
				x.arr.latest = a.next
			}
		}
		if n < len(a.events) {
			return
		}
	}
}

// setTicket gives s ticket t (0: none), keeping pending.
func (a *arrivals) setTicket(s *session, t uint64) {
	s.arr.ticket, s.arr.known = t, false
	if t == 0 {
		delete(a.pending, s)
	} else {
		a.pending[s] = struct{}{}
	}
}

// notify wakes the sessions waiting in wait, and the event loop if it
// holds its writes for a session (ahead).
func (a *arrivals) notify() {
	if a.waiters > 0 {
		close(a.changed)
		a.changed = make(chan struct{})
	}
	if a.loopWaits {
		a.loopWaits = false
		a.loopWake()
	}
}

// ahead runs on the event loop before it writes commands it has read:
// it reports whether a session whose bytes came before that moment (any
// with a ticket above after, numbered now) and that is reading has not
// handled a first command that may take another connection than the
// shared one, as wait does for a session; then the loop is woken
// (loopWake) at the next change, and upTo numbers the arrivals so far.
func (a *arrivals) ahead(after uint64) (found bool, upTo uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.harvest()
	for x := range a.pending {
		if x.arr.reading && x.arr.ticket > after && a.mayHandOff(x) {
			a.loopWaits = true
			return true, a.next
		}
	}
	if len(a.writers) > 0 {
		// A session's client bytes may wait in its socket's backlog
		// until its write ends (write).
		a.loopWaits = true
		return true, a.next
	}
	return false, a.next
}

// wait runs when s has read a batch of commands, before it handles them:
// it waits until the sessions whose bytes came before s's and that are
// reading have handled theirs (at most orderMax).
func (a *arrivals) wait(s *session) {
	if a == nil || !s.arr.on {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// No harvest here: the bytes that came before s's were in the ready
	// list when s took it, just before reading (read), or had been read.
	mine := s.arr.ticket
	var deadline time.Time
	for mine != 0 {
		ahead := false
		for x := range a.pending {
			if x != s && x.arr.reading && x.arr.ticket != 0 && x.arr.ticket < mine && a.mayHandOff(x) {
				ahead = true
				break
			}
		}
		for x := range a.writers {
			// Its client's bytes may wait in its socket's backlog since
			// before s's were numbered: they are numbered when the write
			// ends (write).
			if x != s && x.arr.wmark < mine {
				ahead = true
				break
			}
		}
		if !ahead {
			return
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(orderMax)
		} else if !now.Before(deadline) {
			a.bound()
			return
		}
		if a.changed == nil {
			a.changed = make(chan struct{})
		}
		ch := a.changed
		a.waiters++
		a.mu.Unlock()
		t := time.NewTimer(deadline.Sub(now))
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		a.mu.Lock()
		a.waiters--
	}
}

// handled runs once s has handled what it read (it is about to write it,
// with its fence up if it took a connection of its own, or has answered
// it): the sessions whose bytes came after go on.
func (a *arrivals) handled(s *session) {
	if a == nil || !s.arr.on {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.arr.ticket == 0 && !s.arr.reading {
		return
	}
	old := s.arr.ticket
	a.setTicket(s, 0)
	if s.arr.latest > old {
		// Bytes that came after the ones s read may wait in its socket:
		// they keep a number, so the commands that came after them wait.
		if rawReadable(int(s.arr.fd)) { // not SIOCINQ, which takes the socket's lock
			a.setTicket(s, s.arr.latest)
		}
	}
	s.arr.reading = false
	a.notify()
}

// read reads s's client. The arrivals are taken in the moment before the
// bytes are read: once read, they are no longer in the epoll set's ready
// list (epoll reports a descriptor only while it is readable), so their
// place among the others' would be lost. Bytes that came after that
// moment get the next number.
func (a *arrivals) read(s *session, b []byte) (int, error) {
	if a == nil || !s.arr.on {
		return s.conn.Read(b)
	}
	st := &s.arr
	if st.rfn == nil {
		st.rfn = func(fd uintptr) bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.harvest()
			if st.ticket == 0 && !a.numberUnharvested(s) {
				return false // nothing to read: parked until readable
			}
			for {
				st.rn, st.rerr = rawRead(int(fd), st.rb)
				if st.rerr == unix.EAGAIN && st.ticket == 0 && rawReadable(int(fd)) {
					// Bytes that came while the read held the socket's
					// lock, announced only now, after others' that came
					// meanwhile: numbered before those (as a write's are).
					a.next += 2
					a.setTicket(s, a.next)
					st.latest = a.next
					continue
				}
				if st.rerr != unix.EINTR {
					break
				}
			}
			if st.rerr == unix.EAGAIN {
				return false // parked until readable
			}
			if st.rn > 0 {
				if st.ticket == 0 {
					a.next += 2
					a.setTicket(s, a.next)
					st.latest = a.next
				}
				if !st.known {
					st.handoff, st.known = st.pipe || st.boundary && handsOff(st.rb[:st.rn], &a.args, a.cluster), true
					if !st.handoff {
						a.notify() // a session may wait to learn it
					}
				}
			}
			return true
		}
	}
	st.rb = b
	err := st.rc.Read(st.rfn)
	st.rb = nil
	switch {
	case err != nil:
		return 0, err
	case st.rerr != nil:
		return 0, st.rerr
	case st.rn == 0 && len(b) > 0:
		return 0, io.EOF
	}
	return st.rn, nil
}

// numberUnharvested runs when the harvest gave s no number: it reports
// whether s's socket holds bytes, numbering them if they are new. Bytes
// that came after the harvest are not read before a harvest has numbered
// them: read first, they would leave the ready list, and the arrivals
// that came just before them and are still in it would be numbered after
// them (a PUBLISH, so, ahead of a SUBSCRIBE sent before it).
func (a *arrivals) numberUnharvested(s *session) bool {
	st := &s.arr
	for range 3 {
		// Not a MSG_PEEK: that takes the socket's lock, and a command
		// that arrives meanwhile (the SUBSCRIBE sent on seeing the last
		// reply, the moment the session looks) would be announced only
		// when the peek lets go, after another client's PUBLISH sent
		// after it (1 of 1,000 lost in about one run of 180).
		if !rawReadable(int(st.fd)) {
			return false // nothing yet: the read parks
		}
		a.harvest() // their arrival is being put in the ready list
		if st.ticket != 0 {
			return true
		}
	}
	// Bytes no edge announces (left after a ticket was cleared): they
	// are numbered now, as they are read.
	return true
}

// piped marks s's client as subscribed: every command it sends counts.
func (a *arrivals) piped(s *session) {
	a.mu.Lock()
	s.arr.pipe = true
	a.mu.Unlock()
}

// mayHandOff reports whether a command x has not handled may go to
// another connection than the shared one (a SUBSCRIBE, MONITOR, SELECT, a
// blocking command, ...; pipelined behind others of x's too: handsOff):
// only then do the sessions whose bytes came after wait for it. Commands
// that merely share the connection are not waited for. Bytes x has not
// read yet are peeked at.
func (a *arrivals) mayHandOff(x *session) bool {
	st := &x.arr
	if st.pipe {
		return true
	}
	if st.known {
		return st.handoff
	}
	if !st.boundary {
		return false // the rest of a command: it is handled with its start
	}
	if a.peek == nil {
		a.peek = make([]byte, 4096)
	}
	// This peek takes x's socket lock (numberUnharvested's poll does not):
	// bytes reaching x meanwhile are numbered late, but they follow a
	// command of x's not yet answered, so they are a pipeline's, which
	// the order does not cover.
	n, _, err := unix.Recvfrom(int(st.fd), a.peek, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if err != nil || n <= 0 {
		return true // x is reading its bytes: its read says (read)
	}
	st.handoff, st.known = handsOff(a.peek[:n], &a.args, a.cluster), true
	return st.handoff
}

// write writes b to s's client. While the client does not take it (a
// client that does not read its replies), the session does not count as
// reading: the others do not wait for its commands.
func (a *arrivals) write(s *session, b []byte) (int, error) {
	if a == nil || !s.arr.on {
		return s.conn.Write(b)
	}
	st := &s.arr
	if st.wfn == nil {
		st.wfn = func(fd uintptr) bool {
			a.beginWrite(s)
			for st.wn < len(st.wb) {
				n, err := rawWrite(int(fd), st.wb[st.wn:])
				switch err {
				case nil:
					st.wn += n
				case unix.EINTR:
				case unix.EAGAIN:
					a.endWrite(s) // parked: the socket's lock is let go
					if !st.wblocked {
						st.wblocked = true
						a.mu.Lock()
						st.wwas, st.reading = st.reading, false
						a.notify()
						a.mu.Unlock()
					}
					return false // parked until writable
				default:
					st.werr = err
					return true
				}
			}
			return true
		}
	}
	st.wb, st.wn, st.werr = b, 0, nil
	err := st.rc.Write(st.wfn)
	a.endWrite(s)
	if st.wblocked {
		st.wblocked = false
		a.mu.Lock()
		st.reading = st.wwas
		a.mu.Unlock()
	}
	n := st.wn
	st.wb = nil
	if err == nil {
		err = st.werr
	}
	return n, err
}

// beginWrite and endWrite bracket a write to s's client. The write takes
// the socket's lock, and bytes the client sends meanwhile (a closed-loop
// client's next command, sent the moment it reads the reply) wait in the
// socket's backlog: the kernel announces them to the epoll set only when
// the write ends, after bytes other clients sent later. Numbered by that
// announcement, a SUBSCRIBE sent on seeing a PONG came after a PUBLISH
// sent after it (8 of 100,000 tries lost on two loaded cores). So the
// write's start is marked (wmark, after a harvest: what came before it is
// numbered), the sessions numbered since, and the event loop, wait while
// it lasts, and bytes in the socket when it ends take the number right
// after the mark: before anything numbered during the write. Bytes that
// came during the write on both sockets have no order the proxy can see;
// the writer's come first.
func (a *arrivals) beginWrite(s *session) {
	a.mu.Lock()
	if a.size.Load() > 1 {
		a.harvest()
	}
	s.arr.writing, s.arr.wmark = true, a.next
	a.writers[s] = struct{}{}
	a.mu.Unlock()
}

func (a *arrivals) endWrite(s *session) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := &s.arr
	if !st.writing {
		return
	}
	st.writing = false
	delete(a.writers, s)
	if st.on && st.ticket == 0 && rawReadable(int(st.fd)) {
		a.setTicket(s, st.wmark+1)
		st.latest = max(st.latest, st.wmark+1)
	}
	a.notify()
}

// reading marks s as reading its client again (its replies are written).
// partial: the bytes s read so far are part of a command, all it can
// handle of them: they are not waited for.
func (a *arrivals) reading(s *session, partial bool) {
	if a == nil || !s.arr.on {
		return
	}
	a.mu.Lock()
	s.arr.reading = true
	s.arr.boundary = !partial
	if partial && s.arr.ticket != 0 {
		a.setTicket(s, 0)
		a.notify()
	}
	a.mu.Unlock()
}
