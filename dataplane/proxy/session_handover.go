package proxy

import (
	"net"

	"github.com/heatsink-dev/heatsink/routing/command"
)

// A client the event loop hands to a session is served on connections of
// its own from the start: where the loop runs, no session goes on the
// shared connections (shared.go), which serve stateless clients only where
// the loop does not (--event-loop=false, no epoll). The loop writes most
// hand-over commands itself (loop_presend_linux.go) and gives the session
// the connection it wrote on; the others (a large value still arriving, a
// HELLO the loop has no reply for, a command presend does not write) the
// session writes, on a connection it takes from the warm pool.

// handedOver makes a session the loop hands a client to, without a command
// written for it, dedicated before its first command, which is the
// hand-over's (fenceHandOver).
func (s *session) handedOver() {
	s.dedicated = true
	s.handing = true
	s.p.m.dedicated.Inc()
}

// fenceHandOver raises, for the command the loop handed the client over
// with and did not write, the fence a session on the shared connections
// raises when that command makes it take a connection of its own
// (handle): one that leaves state on its connection (opOwnConn), or a
// HELLO that no shared connection answers (opHello; the loop hands one
// over only then). Until Redis answers it, nothing read after it is
// written (order/fence.go). A blocking command or a script (opExclusive) is not
// answered at once and keeps no fence; a large value (a plain write)
// needs none: Redis runs it only once it has all come.
func (s *session) fenceHandOver(args [][]byte) {
	if s.fence != nil {
		return // raised by the loop (a cluster-wide command)
	}
	info, known := command.Lookup(args[0])
	switch decide(info, known, args, mode{shared: true, cluster: s.p.cfg.Cluster, proto: s.proto}).op {
	case opOwnConn, opHello:
		s.fence = s.p.fences.RaiseUnsent()
	}
}

// acceptedSession is the session of a client the event loop did not take:
// every client where the loop does not run (on the shared connections
// until it touches state, unless SharedConns < 0); where it runs, one
// whose connection it cannot take (not a socket it can duplicate), which
// gets a connection of its own, as every session there.
func (p *Proxy) acceptedSession(c net.Conn) *session {
	s := newSession(p, c)
	s.dedicated = s.dedicated || p.loop != nil
	return s
}
