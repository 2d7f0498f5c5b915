//go:build linux

package proxy

import (
	"cmp"
	"io"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The order of one round's clients is the order their bytes were sent,
// not the order epoll lists them (docs/proxy-internals.md, Ordering). The loop
// writes a reply to a client while that client's socket is locked (a
// write takes it), and a closed-loop client may read the reply and send
// its next command before the write has returned: the kernel then keeps
// those bytes in the socket's backlog and announces them (to epoll) only
// when the write lets the lock go, after bytes another client sent later.
// A SUBSCRIBE sent right after a PONG, then another client's PUBLISH,
// came listed PUBLISH first in about one round of 10,000 on two loaded
// cores, and the message was lost though the loop fences a hand-off
// (fence.go) the moment it reads it. The kernel stamps each packet as it
// is sent on loopback or received by the interface, before any socket
// backlog (SO_TIMESTAMPNS); the loop reads every ready client of a round
// first and then takes their commands in the order of those stamps.

// stampIO reads a non-blocking client socket with recvmsg(2), keeping the
// receive time of the read's last packet (0: none). Its buffers are its
// own, so a read allocates nothing.
type stampIO struct {
	fd  int
	ts  int64 // nanoseconds, CLOCK_REALTIME
	iov unix.Iovec
	msg unix.Msghdr
	ctl [64]byte
}

// newStampIO turns receive timestamps on for fd; without them (the option
// refused) reads report no stamp and the round keeps epoll's order.
func newStampIO(fd int) *stampIO {
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	return &stampIO{fd: fd}
}

func (s *stampIO) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		s.iov.Base = &b[0]
		s.iov.SetLen(len(b))
		s.msg = unix.Msghdr{Iov: &s.iov, Control: &s.ctl[0]}
		s.msg.Iovlen = 1
		s.msg.SetControllen(len(s.ctl))
		n, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.msg)), 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		if n == 0 {
			return 0, io.EOF
		}
		s.ts = s.stamp()
		return int(n), nil
	}
}

// stamp finds SCM_TIMESTAMPNS among the control messages of the last read.
func (s *stampIO) stamp() int64 {
	ctl := s.ctl[:min(int(s.msg.Controllen), len(s.ctl))]
	for len(ctl) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		if h.Len < unix.SizeofCmsghdr || int(h.Len) > len(ctl) {
			return 0
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SO_TIMESTAMPNS && int(h.Len) >= unix.CmsgLen(int(unsafe.Sizeof(unix.Timespec{}))) {
			ts := (*unix.Timespec)(unsafe.Pointer(&ctl[unix.CmsgLen(0)]))
			return ts.Nano()
		}
		ctl = ctl[min(unix.CmsgSpace(int(h.Len)-unix.CmsgLen(0)), len(ctl)):]
	}
	return 0
}

// parseReads takes the commands of the round's clients that read, in the
// order their bytes were sent: by stamp, or epoll's order if one has none.
func (l *loop) parseReads() {
	rs := l.reads
	if len(rs) > 1 && !slices.ContainsFunc(rs, func(c *lclient) bool { return c.in.ts == 0 }) {
		slices.SortStableFunc(rs, func(a, b *lclient) int { return cmp.Compare(a.in.ts, b.in.ts) })
	}
	for _, c := range rs {
		if c.state != cClosed {
			l.parseRead(c)
		}
	}
	clear(rs)
	l.reads = rs[:0]
}
