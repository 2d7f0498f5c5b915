//go:build linux

package order

import (
	"io"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's receive stamps: the one reader of the order in which
// clients' bytes came, for the event loop's clients and sessions' alike
// (docs/proxy-internals.md, Ordering). The kernel stamps each packet as it
// is sent on loopback or received by the interface (SO_TIMESTAMPNS),
// before it waits in any socket's backlog: bytes that reach a socket while
// its lock is held (a write of a reply to that client, a read) are
// announced to epoll only when the lock is let go, after bytes another
// client sent later, but their stamp is the moment they came.

// stampOn turns receive stamps on for fd; refused, reads report no stamp
// (0), and the order falls back to the order of reading.
func stampOn(fd int) {
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
}

// stampRecv is recvmsg(2) with its buffers, so a call allocates nothing.
type stampRecv struct {
	iov unix.Iovec
	msg unix.Msghdr
	ctl [64]byte
}

// recv reads (or with MSG_PEEK looks at) fd's bytes into b; ts is the
// receive stamp of the last packet read (nanoseconds, CLOCK_REALTIME; 0:
// none). n == 0 with no error is the end of the stream.
func (s *stampRecv) recv(fd int, b []byte, flags int) (n int, ts int64, err error) {
	if len(b) == 0 {
		return 0, 0, nil
	}
	for {
		s.iov.Base = &b[0]
		s.iov.SetLen(len(b))
		s.msg = unix.Msghdr{Iov: &s.iov, Control: &s.ctl[0]}
		s.msg.Iovlen = 1
		s.msg.SetControllen(len(s.ctl))
		r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&s.msg)), uintptr(flags))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, 0, e
		}
		return int(r), s.stamp(), nil
	}
}

// stamp finds SCM_TIMESTAMPNS among the control messages of the last call.
func (s *stampRecv) stamp() int64 {
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

// StampIO reads a non-blocking client socket (the event loop's), keeping
// the receive stamp of the last read (TS).
type StampIO struct {
	fd int
	TS int64
	rc stampRecv
}

// NewStampIO turns receive stamps on for fd.
func NewStampIO(fd int) *StampIO {
	stampOn(fd)
	return &StampIO{fd: fd}
}

func (s *StampIO) Read(b []byte) (int, error) {
	n, ts, err := s.rc.recv(s.fd, b, 0)
	switch {
	case err != nil:
		return 0, err
	case n == 0 && len(b) > 0:
		return 0, io.EOF
	}
	if n > 0 {
		s.TS = ts
	}
	return n, nil
}
