package proxy

import (
	"strconv"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// A session's connection state: AUTH, SELECT, HELLO and RESET remembered
// and replayed on the upstream connections it opens later, and the CLIENT
// REPLY mode the proxy applies itself.

// sessionCommand forwards AUTH/SELECT/HELLO/RESET and remembers it so that
// upstream connections opened later (another cluster node, a reconnect)
// get the same state. In cluster mode it also goes to every node
// connection already open; the client sees the first node's reply.
func (s *session) sessionCommand() error {
	args := s.cmd.Args
	raw := append([]byte(nil), s.cmd.Raw...)
	var un undo // how to take the remembered state back if Redis refuses
	if command.EqFold(args[0], "RESET") {
		s.prelude.reset()
		s.stickyState = false
		s.proto = 2
		s.pinned, s.pinPending, s.inTx, s.watching, s.txRefused = -1, false, false, false, false
	} else {
		un = s.prelude.setUndoable(stateSlot(args[0]), raw, s.proto)
		if command.EqFold(args[0], "HELLO") && len(args) > 1 {
			if v, err := strconv.Atoi(string(args[1])); err == nil && (v == 2 || v == 3) {
				s.proto = v
			}
		}
	}
	s.stateDB(args, &un)
	home := 0
	if s.pinned >= 0 {
		home = s.pinned
	}
	if err := s.forward(home, raw, false, ""); err != nil {
		if un.active {
			s.undoState(un)
		}
		return nil
	}
	s.pend[len(s.pend)-1].undo = un
	if s.p.cfg.Cluster {
		for i, u := range s.ups {
			if i != home && u != nil {
				s.forward(i, raw, true, "")
			}
		}
	}
	return nil
}

// undoState takes back a remembered AUTH, HELLO or SELECT that Redis (or
// the proxy, for an unreachable upstream) refused.
func (s *session) undoState(u undo) {
	s.prelude.undo(u)
	s.proto = u.proto
	s.undoDB(u)
}

// keepProto makes the state replayed on a new upstream connection open it
// in the client's protocol: a client that switched to RESP3 with a HELLO
// the proxy answered itself (the event loop, the shared pool) has no HELLO
// of its own to replay.
func (s *session) keepProto() {
	if s.proto == 3 && s.prelude.cmds[slotHello] == nil {
		s.prelude.set(slotHello, hello3)
	}
}

// hello3 opens a connection in RESP3.
var hello3 = []byte("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")

// setReplyMode applies CLIENT REPLY ON, OFF or SKIP as Redis does: ON
// answers OK; OFF and SKIP answer nothing, and SKIP (unless OFF is in
// force) silences the next command.
func (s *session) setReplyMode(m int) {
	switch m {
	case replyOn:
		s.replyOff = false
		s.quiet = false
		s.local(func(b []byte) []byte { return resp.AppendStatus(b, "OK") })
	case replyOff:
		s.replyOff = true
	case replySkip:
		s.skipNext = !s.replyOff
	}
}
