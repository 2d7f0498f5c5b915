//go:build linux

package proxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// The event loop's part of the one-node cluster (topology.go).

// sockName is the local address of the client connection fd: the address
// the client connected to, which the topology replies advertise.
func sockName(fd int) net.Addr {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	}
	return nil
}

// runInfo answers the client's INFO (infoReply: patched, or its keyspace
// merged in a cluster) on a goroutine, as an engine command runs: the
// client's later commands wait, so its replies stay in order.
func (l *loop) runInfo(c *lclient) {
	c.state = cEngine
	raw := append([]byte(nil), l.cmd.Raw...)
	args := make([][]byte, len(l.cmd.Args))
	for i, a := range l.cmd.Args {
		args[i] = append([]byte(nil), a...)
	}
	proto, p := c.proto, l.p
	go func() {
		s, done := p.loopSession(proto)
		defer done()
		out := s.infoReply(raw, args)
		s.flushMetrics()
		l.post(func() { l.engineDone(c, out) })
	}()
}
