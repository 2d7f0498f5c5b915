//go:build linux

package proxy

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/rawsys"
	"golang.org/x/sys/unix"
)

// Descriptors of the event loop: reading a non-blocking one, taking a
// net.Conn's (the raw system calls are rawsys').

// fdIO reads a non-blocking descriptor; EAGAIN comes back as an error.
type fdIO int

func (f fdIO) Read(b []byte) (int, error) {
	for {
		n, err := rawsys.Read(int(f), b)
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

// takeFD duplicates c's descriptor (non-blocking, close-on-exec) and closes
// c, so that the descriptor belongs to the loop's epoll set alone.
func takeFD(c net.Conn) (int, error) {
	fd, err := dupFD(c)
	if err != nil {
		return -1, err
	}
	c.Close()
	return fd, nil
}

// dupFD duplicates c's descriptor, non-blocking and close-on-exec; c stays
// open.
func dupFD(c net.Conn) (int, error) {
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
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
