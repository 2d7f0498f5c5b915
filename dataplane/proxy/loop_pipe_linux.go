//go:build linux

package proxy

import (
	"net"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/order"
	"github.com/heatsink-dev/heatsink/dataplane/proxy/rawsys"
	"golang.org/x/sys/unix"
)

// A subscribed client's commands in the loop's order. A client that
// subscribed (or sent MONITOR) is a raw pipe to its own upstream
// connection, served by its session. If the session read the client's
// input, Go's netpoller would decide when: a PUNSUBSCRIBE sent before
// another client's PUBLISH was read after it, and the message reached the
// unsubscribed client (Redis' own test "PUBLISH/PSUBSCRIBE after
// PUNSUBSCRIBE without arguments": about 250 of 900 messages through the
// loop). So the loop reads that input with everyone else's, in the order
// the bytes came: it writes out the commands read before, raises a fence
// (order/fence.go) and gives the bytes to the session, which writes them to its
// connection; the fence is down once Redis has answered them, and holds
// the commands read after them meanwhile.

// lpipe is a piped client's input, read by the loop.
type lpipe struct {
	fd   int // the loop's descriptor of the client's socket (a duplicate)
	in   *pipeIn
	off  bool // out of the epoll set
	busy bool // a chunk is with the session, not yet written
	// closing: end the input once the session has written its chunk.
	closing bool
}

// pipeInput makes the loop read c's input for its session (nil when the
// loop does not run or cannot take the socket: the session reads it).
func (l *loop) pipeInput(c net.Conn) *pipeIn {
	if l == nil {
		return nil
	}
	fd, err := dupFD(c)
	if err != nil {
		return nil
	}
	pi := &lpipe{fd: fd, in: &pipeIn{chunks: make(chan pipeChunk, 1)}}
	pi.in.resume = func() bool { return l.post(func() { l.resumePipe(pi) }) }
	pi.in.stop = func() {
		if !l.post(func() { l.dropPipe(pi) }) {
			unix.Close(fd) // the loop has stopped: nobody else holds it
		}
	}
	if !l.post(func() { l.addPipe(pi) }) {
		unix.Close(fd)
		return nil
	}
	return pi.in
}

func (l *loop) addPipe(pi *lpipe) {
	if pi.fd < 0 {
		return // stopped before it started
	}
	if l.draining {
		l.endPipe(pi)
		return
	}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, pi.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(pi.fd)}); err != nil {
		l.endPipe(pi)
		return
	}
	l.own(pi.fd, owner{pi: pi})
	// What the client sent before this ran came before whatever the loop
	// reads after it: it is read now, not in the next round.
	l.pipeEvent(pi)
}

// pipeEvent reads what the client sent and gives it to its session.
func (l *loop) pipeEvent(pi *lpipe) {
	if pi.off || pi.busy || pi.fd < 0 {
		return
	}
	if l.held() {
		// The commands read before these are held (flushUp): these wait
		// for the fence too, out of the epoll set until it is down
		// (fenceDown), rather than go ahead of them.
		l.pipeOff(pi)
		l.pipeWait = append(l.pipeWait, pi)
		return
	}
	n, err := rawsys.Read(pi.fd, l.pipeBuf())
	for err == unix.EINTR {
		n, err = rawsys.Read(pi.fd, l.pipeBuf())
	}
	if err == unix.EAGAIN {
		return
	}
	if err != nil || n == 0 {
		l.endPipe(pi) // the client is gone, or sends no more
		return
	}
	b := append([]byte(nil), l.scratch[:n]...)
	// The commands read before these go first; those read after them
	// wait until Redis has answered these. A chunk that does not end a
	// line cannot end a command: Redis answers nothing until the rest
	// comes, so it raises no fence (the chunk that ends the command does).
	l.eachUp(func(x *lupstream) {
		if x.open() && len(x.wbuf) > x.woff && !x.wblocked {
			l.flushUp(x)
		}
	})
	var f *order.Fence
	if b[len(b)-1] == '\n' {
		f = l.p.fences.RaiseUnsent() // the session's goroutine writes it (orderedPipe)
	}
	l.pipeOff(pi)
	pi.busy = true
	pi.in.chunks <- pipeChunk{b: b, fence: f} // never blocks: one chunk at a time
}

// pipeBuf is the loop's read buffer for piped clients.
func (l *loop) pipeBuf() []byte {
	if l.scratch == nil {
		l.scratch = make([]byte, pipeChunkMax)
	}
	return l.scratch
}

// pipeOff takes the client out of the epoll set while its session holds a
// chunk (it is read again on resumePipe), so a client that sends faster
// than Redis takes it is not read into memory.
func (l *loop) pipeOff(pi *lpipe) {
	if !pi.off {
		pi.off = true
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, pi.fd, nil)
	}
}

// resumePipe reads the client again: its session has written the chunk.
func (l *loop) resumePipe(pi *lpipe) {
	if pi.fd < 0 || !pi.busy {
		return
	}
	pi.busy = false
	l.pipeOn(pi)
}

// pipesAgain reads again the piped clients that waited for the fences
// (fenceDown, once none is up).
func (l *loop) pipesAgain() {
	for _, pi := range l.pipeWait {
		if pi.fd >= 0 && pi.off && !pi.busy {
			l.pipeOn(pi)
		}
	}
	l.pipeWait = l.pipeWait[:0]
}

// pipeOn puts the client back in the epoll set.
func (l *loop) pipeOn(pi *lpipe) {
	if pi.closing || l.draining {
		l.endPipe(pi)
		return
	}
	pi.off = false
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, pi.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(pi.fd)}); err != nil {
		l.endPipe(pi)
	}
}

// endPipe ends the client's input: the session half-closes its upstream
// connection, so Redis ends the subscription as the client's EOF would.
// While the session holds a chunk, that waits until it has written it.
func (l *loop) endPipe(pi *lpipe) {
	if pi.fd < 0 {
		return
	}
	if pi.busy {
		pi.closing = true // resumePipe ends it
		return
	}
	select {
	case pi.in.chunks <- pipeChunk{eof: true}:
	default: // cannot be full: the session took every chunk (busy is false)
	}
	l.dropPipe(pi)
}

// dropPipe closes the loop's descriptor of the client.
func (l *loop) dropPipe(pi *lpipe) {
	if pi.fd < 0 {
		return
	}
	if !pi.off {
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, pi.fd, nil)
		pi.off = true
	}
	if pi.fd < len(l.owners) && l.owners[pi.fd].pi == pi {
		l.owners[pi.fd] = owner{}
	}
	unix.Close(pi.fd)
	pi.fd = -1
}
