//go:build linux

package proxy

import (
	"crypto/tls"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// The event loop reads and writes raw descriptors; a TLS connection to
// Redis is not one (crypto/tls encrypts in user space, and the kernel's
// TLS offload, kTLS, is not something the proxy can count on: it needs the
// tls module, crypto/tls cannot hand it its keys, and post-handshake
// messages such as session tickets and key updates then need handling
// outside crypto/tls). So a TLS upstream connection gets a bridge: the
// loop holds one end of a Unix socket pair, exactly as it holds a TCP
// connection, and two goroutines copy between the other end and the TLS
// connection, one each way.
//
// Everything the loop does with an upstream connection then works as for
// plaintext: its batching (one write per round for every client's
// commands, here one TLS write too), back-pressure (the socket pair's
// buffer fills when Redis stops reading), stall detection, failures (the
// bridge closes its end when the TLS connection fails, and the loop reads
// end-of-file), a presented command's connection handed to a session (the
// session reads and writes the socket pair), and closing (the loop closes
// its end, and the bridge closes the TLS connection). The cost is two
// more system calls and two goroutine wake-ups per round trip per
// upstream connection, shared by every command of the round; docs/proxy.md
// gives the throughput measured against plaintext.

// bridgeBuf is the bridge's copy buffer each way: a TLS record carries at
// most 16 KiB, and the loop writes a round's commands in one write, which
// the bridge passes on in one TLS write when it fits.
const bridgeBuf = 64 << 10

// isTLS reports whether c, or the connection a trackedConn wraps, is TLS.
func isTLS(c net.Conn) bool {
	if tc, ok := c.(*trackedConn); ok {
		c = tc.Conn
	}
	_, ok := c.(*tls.Conn)
	return ok
}

// bridgeFD returns the event loop's descriptor for c: its own (takeFD) for
// a plaintext connection, one end of a bridge for a TLS one. c then
// belongs to the bridge, which closes it when the loop closes the
// descriptor or either side fails.
func bridgeFD(c net.Conn) (int, error) {
	if !isTLS(c) {
		return takeFD(c)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		c.Close()
		return -1, os.NewSyscallError("socketpair", err)
	}
	f := os.NewFile(uintptr(fds[1]), "tls-bridge")
	pc, err := net.FileConn(f) // a duplicate of fds[1], in Go's netpoller
	f.Close()
	if err != nil {
		unix.Close(fds[0])
		c.Close()
		return -1, err
	}
	go pump(c, pc) // the loop's commands to Redis
	go pump(pc, c) // Redis' replies to the loop
	return fds[0], nil
}

// pump copies src to dst until either fails or ends, then closes both, so
// that the other pump and the loop see the end too. Closing a TLS
// connection sends close_notify unless a write is blocked on it (then
// crypto/tls just closes the socket), so a dead Redis holds no pump.
func pump(dst, src net.Conn) {
	buf := make([]byte, bridgeBuf)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
}
