//go:build linux

// Package rawsys makes the system calls of the proxy's event loop that
// return at once (on non-blocking descriptors, or with a zero timeout)
// without entering the Go scheduler's system call state.
package rawsys

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read, Write and EpollWaitNow are read(2), write(2) and
// epoll_wait(2) with a zero timeout on non-blocking descriptors: they
// return at once, so they are made without entering the scheduler's system
// call state (RawSyscall). That state would let the runtime's monitor take
// the loop's P and, after every idle spell, wake the monitor into polling
// every 20 µs again, which costs several per cent of a CPU under load.
func Read(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func Write(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func EpollWaitNow(ep int, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// SchedYield lets another thread waiting for this CPU run (the event
// loop's spin).
func SchedYield() {
	unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
