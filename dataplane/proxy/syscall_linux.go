//go:build linux

package proxy

import (
	"errors"
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// System calls of the event loop: raw reads and writes on non-blocking
// descriptors, epoll_wait without a timeout, taking a net.Conn's descriptor.

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

// rawSchedYield lets another thread waiting for this CPU run (the loop's
// spin, loop_linux.go).
func rawSchedYield() {
	unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
