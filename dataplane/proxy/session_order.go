package proxy

import "errors"

// A session's part of the Ordering rule (docs/proxy.md): the command the
// event loop wrote for it, and its fence.

// send queues raw on u, unless it is the command the event loop already
// wrote there (s.pre): then only what the socket did not take.
func (s *session) send(u *upstream, raw []byte) {
	if u != s.pre {
		u.w.Write(raw)
		return
	}
	u.w.Write(s.preRest)
	s.pre, s.preRest = nil, nil
}

// fenceClusterWide raises the fence of a command the session sends to
// every master (unless the event loop raised it when it read the command:
// handFence): until it is handled, what other clients sent after it waits
// (a SET after another client's FLUSHALL is not wiped).
func (s *session) fenceClusterWide() {
	if s.fence == nil {
		s.fence = s.p.fences.RaiseUnsent()
	}
}

// releaseFence takes the session's fence down, if it has one up.
func (s *session) releaseFence() {
	if s.fence != nil {
		s.p.fences.Release(s.fence)
		s.fence = nil
	}
}

// checkPresented runs after the session's first command: if the command
// the event loop wrote for it was not the one it sent (presendable
// predicts what handle does; this is its safety net), that connection's
// reply would answer nothing, so the connection is failed instead.
func (s *session) checkPresented() {
	if u := s.pre; u != nil {
		s.pre, s.preRest = nil, nil
		s.p.log.Error("a command the event loop sent for a session was not the session's; closing that connection")
		s.fail(u, errors.New("presented command not sent by the session"))
	}
}
