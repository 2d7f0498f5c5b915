//go:build linux

package order

import (
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/rawsys"
	"golang.org/x/sys/unix"
)

// The order commands came in, for sessions (docs/proxy-internals.md,
// Ordering). Sessions read their clients on goroutines that Go's
// netpoller wakes in no guaranteed order, often the reverse of the order
// the bytes came: a SUBSCRIBE sent before another client's PUBLISH was
// read tens of microseconds after it, and the message was lost (about 100
// in 1,000 tries), though the session that subscribes raises a fence
// (fence.go) as soon as it has read it. So a session reads its client
// with the kernel's receive stamp (stamp_linux.go), as the event loop
// reads its own, and before it handles what it read it waits until every
// session that is reading and whose first command not yet handled came
// earlier (by stamp) and may take another connection than the shared one
// has handled it (written it, or raised its fence). Commands still in a
// socket are found by one level-triggered epoll set of every session's
// client socket (its ready list: the sockets holding bytes not yet read)
// and stamped by a one-byte peek. A session waiting for Redis' replies is
// not waited for: its next commands come after those replies anyway, as a
// pipeline's do. A wait lasts at most Max (fence.go): between its
// read and its handling a session does only the proxy's own work.

type Arrivals struct {
	ep   int
	mu   sync.Mutex
	byFD map[int32]*Member
	// pending are the sessions that read a command not yet handled;
	// writers those writing to their client (write).
	pending, writers map[*Member]struct{}
	// peek and rc are mayHandOff's buffers.
	peek   []byte
	rc     stampRecv
	events []unix.EpollEvent
	// changed is closed (and replaced) when a session has handled what it
	// read, if a session waits for that (waiters > 0).
	changed chan struct{}
	waiters int
	// Size counts the sessions in the set (the event loop's cheap test).
	Size atomic.Int32
	// LoopWake, if set, is called (under mu) when a session has handled
	// what it read and the event loop holds its writes for it
	// (loopWaits; loop_arrivals_linux.go).
	LoopWake  func()
	loopWaits bool
	// bound is called when a wait ends by Max (proxy metrics).
	bound func()
	// handsOff reports whether bytes a client sent, from a command's
	// start, may take another connection than the shared one (called
	// under mu).
	handsOff func([]byte) bool
}

// Member is a session's part of Arrivals (under its mu): its
// client's connection.
type Member struct {
	conn net.Conn
	on   bool // the session is in the set
	fd   int32
	// stamp is the receive stamp of the bytes the session read and has
	// not handled (0: none); peeked that of the first bytes in its
	// socket, not read (0: not looked at since the last read).
	stamp, peeked int64
	// writing: a write to the client is under way since wstart (write).
	writing bool
	wstart  int64
	// reading: the session reads or handles its client's commands (not
	// waiting for Redis).
	reading bool
	rc      syscall.RawConn
	in      stampRecv
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

func New(bound func(), handsOff func([]byte) bool) *Arrivals {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	return &Arrivals{ep: ep, byFD: map[int32]*Member{}, pending: map[*Member]struct{}{}, writers: map[*Member]struct{}{}, events: make([]unix.EpollEvent, 256), bound: bound, handsOff: handsOff}
}

func (a *Arrivals) Close() {
	if a != nil {
		unix.Close(a.ep)
	}
}

// Add puts a session's client socket in the set; it returns nil when it
// cannot (the session is then not ordered against the others).
func (a *Arrivals) Add(c net.Conn) *Member {
	if a == nil {
		return nil
	}
	sc, ok := c.(syscall.Conn) // a TCP socket, not TLS
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var fd int32 = -1
	a.mu.Lock()
	defer a.mu.Unlock()
	rc.Control(func(d uintptr) {
		// The socket's own descriptor, not a duplicate: an epoll set may
		// hold a descriptor that Go's netpoller holds too.
		if unix.EpollCtl(a.ep, unix.EPOLL_CTL_ADD, int(d), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(d)}) == nil {
			fd = int32(d)
			stampOn(int(d))
		}
	})
	if fd < 0 {
		return nil
	}
	s := &Member{conn: c, on: true, fd: fd, reading: true, rc: rc, boundary: true}
	a.byFD[fd] = s
	if n := int(a.Size.Add(1)); n > len(a.events) {
		a.events = make([]unix.EpollEvent, 2*n)
	}
	return s
}

// Remove takes the session out, before its socket is closed.
func (a *Arrivals) Remove(s *Member) {
	if a == nil || s == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !s.on {
		return
	}
	s.on = false
	s.writing = false
	delete(a.writers, s)
	a.Size.Add(-1)
	if a.byFD[s.fd] == s {
		delete(a.byFD, s.fd)
		unix.EpollCtl(a.ep, unix.EPOLL_CTL_DEL, int(s.fd), nil)
	}
	a.setStamp(s, 0)
	s.reading = false
	a.notify()
}

// setStamp gives s's read bytes stamp t (0: none), keeping pending.
func (a *Arrivals) setStamp(s *Member, t int64) {
	s.stamp, s.known, s.peeked = t, false, 0
	if t == 0 {
		delete(a.pending, s)
	} else {
		a.pending[s] = struct{}{}
	}
}

// notify wakes the sessions waiting in Wait, and the event loop if it
// holds its writes for a session (Ahead).
func (a *Arrivals) notify() {
	if a.waiters > 0 {
		close(a.changed)
		a.changed = make(chan struct{})
	}
	if a.loopWaits {
		a.loopWaits = false
		a.LoopWake()
	}
}

// first reports whether a session other than s that is reading has a
// first command not yet handled, stamped in (after, before), that may
// take another connection than the shared one, read or still in its
// socket; or writes to its client since a moment in that span: the
// client's bytes sent meanwhile wait in the socket's backlog, seen by
// neither the ready list nor a peek until the write ends.
func (a *Arrivals) first(s *Member, after, before int64) bool {
	for x := range a.pending {
		if x != s && x.reading && x.stamp > after && x.stamp < before && a.mayHandOff(x) {
			return true
		}
	}
	for x := range a.writers {
		if x != s && x.wstart > after && x.wstart < before {
			return true
		}
	}
	for {
		n, err := rawsys.EpollWaitNow(a.ep, a.events)
		if err == unix.EINTR {
			continue
		}
		for _, ev := range a.events[:max(n, 0)] {
			x := a.byFD[ev.Fd]
			if x == nil || x == s || !x.reading || x.stamp != 0 || !x.boundary {
				continue // read already (above), or not a command's start
			}
			if t := a.peekStamp(x); t > after && t < before && a.mayHandOff(x) {
				return true
			}
		}
		return false
	}
}

// peekStamp is the receive stamp of the first bytes in x's socket: a
// one-byte peek reads the first packet's alone (a read's stamp is its
// last packet's). This takes x's socket lock: bytes reaching x meanwhile
// wait in its backlog, but they follow bytes x has not read, so they are
// a pipeline's, which the order does not cover. 1: no stamp (taken as
// before any other), 0: nothing there.
func (a *Arrivals) peekStamp(x *Member) int64 {
	if x.peeked != 0 {
		return x.peeked
	}
	var b [1]byte
	n, ts, err := a.rc.recv(int(x.fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if err != nil || n <= 0 {
		return 0 // nothing to read (or the end): no command
	}
	x.peeked = max(ts, 1)
	return x.peeked
}

// Ahead runs on the event loop before it writes commands it has read:
// it reports whether a session holds them, as Wait does for a session
// (first; stamps up to after are no longer waited for); then the loop is
// woken (loopWake) at the next change. upTo bounds the stamps seen.
func (a *Arrivals) Ahead(after int64) (found bool, upTo int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	upTo = time.Now().UnixNano()
	if a.first(nil, after, math.MaxInt64) {
		a.loopWaits = true
		return true, upTo
	}
	return false, upTo
}

// Wait runs when s has read a batch of commands, before it handles them:
// it waits until the sessions whose bytes came before s's and that are
// reading have handled theirs (at most Max).
func (a *Arrivals) Wait(s *Member) {
	if a == nil || s == nil || !s.on {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	mine := s.stamp
	var deadline time.Time
	for mine != 0 && a.first(s, 0, mine) {
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(Max)
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

// Handled runs once s has handled what it read (it is about to write it,
// with its fence up if it took a connection of its own, or has answered
// it): the sessions whose bytes came after go on. Bytes s has not read
// yet are in the ready list, and stamped when looked at.
func (a *Arrivals) Handled(s *Member) {
	if a == nil || s == nil || !s.on {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.stamp == 0 && !s.reading {
		return
	}
	a.setStamp(s, 0)
	s.reading = false
	a.notify()
}

// Read reads s's client, under the order's lock: no other session looks
// at the sessions' sockets while this one's is locked by the read (bytes
// reaching it meanwhile wait in its backlog, where neither the ready list
// nor a peek sees them).
func (a *Arrivals) Read(s *Member, b []byte) (int, error) {
	if !s.on { // taken out of the set: a plain read
		return s.conn.Read(b)
	}
	st := s
	if st.rfn == nil {
		st.rfn = func(fd uintptr) bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			var ts int64
			st.rn, ts, st.rerr = st.in.recv(int(fd), st.rb, 0)
			if st.rerr == unix.EAGAIN {
				return false // parked until readable
			}
			if st.rn > 0 {
				if st.stamp == 0 {
					if ts == 0 { // no stamps: the order of reading
						ts = time.Now().UnixNano()
					}
					a.setStamp(s, ts)
				}
				st.peeked = 0
				if !st.known {
					st.handoff, st.known = st.pipe || st.boundary && a.handsOff(st.rb[:st.rn]), true
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

// Piped marks s's client as subscribed: every command it sends counts.
func (a *Arrivals) Piped(s *Member) {
	if a == nil || s == nil {
		return
	}
	a.mu.Lock()
	s.pipe = true
	a.mu.Unlock()
}

// mayHandOff reports whether a command x has not handled may go to
// another connection than the shared one (a SUBSCRIBE, MONITOR, SELECT, a
// blocking command, ...; pipelined behind others of x's too: handsOff):
// only then do the sessions whose bytes came after wait for it. Commands
// that merely share the connection are not waited for. Bytes x has not
// read yet are peeked at.
func (a *Arrivals) mayHandOff(x *Member) bool {
	st := x
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
	n, _, err := a.rc.recv(int(st.fd), a.peek, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if err != nil || n <= 0 {
		return false // nothing there: no command
	}
	st.handoff, st.known = a.handsOff(a.peek[:n]), true
	return st.handoff
}

// Write writes b to s's client. While the client does not take it (a
// client that does not read its replies), the session does not count as
// reading: the others do not wait for its commands.
func (a *Arrivals) Write(s *Member, b []byte) (int, error) {
	if !s.on {
		return s.conn.Write(b)
	}
	st := s
	if st.wfn == nil {
		st.wfn = func(fd uintptr) bool {
			a.beginWrite(s)
			for st.wn < len(st.wb) {
				n, err := rawsys.Write(int(fd), st.wb[st.wn:])
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
// socket's backlog, seen by neither the ready list nor a peek until the
// write ends, though stamped when they came: a SUBSCRIBE sent on seeing a
// PONG would be missed by a PUBLISH sent after it (8 of 100,000 tries lost
// on two loaded cores, before the bracket). So while the write lasts, the
// sessions whose bytes came after it began, and the event loop, wait (first);
// when it ends, the bytes are in the socket with their stamps.
func (a *Arrivals) beginWrite(s *Member) {
	a.mu.Lock()
	s.writing, s.wstart = true, time.Now().UnixNano()
	a.writers[s] = struct{}{}
	a.mu.Unlock()
}

func (a *Arrivals) endWrite(s *Member) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !s.writing {
		return
	}
	s.writing = false
	delete(a.writers, s)
	a.notify()
}

// Reading marks s as reading its client again (its replies are written).
// partial: the bytes s read so far are part of a command, all it can
// handle of them: they are not waited for.
func (a *Arrivals) Reading(s *Member, partial bool) {
	if a == nil || s == nil || !s.on {
		return
	}
	a.mu.Lock()
	s.reading = true
	s.boundary = !partial
	s.peeked = 0
	if partial && s.stamp != 0 {
		a.setStamp(s, 0)
		a.notify()
	}
	a.mu.Unlock()
}
