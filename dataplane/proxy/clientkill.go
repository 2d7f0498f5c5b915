package proxy

import (
	"bytes"
	"strconv"

	"github.com/heatsink-dev/heatsink/dataplane/command"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// CLIENT KILL through the proxy. The connections Redis sees are the
// proxy's: the client's own upstream connection (the one its CLIENT ID,
// CLIENT INFO and CLIENT LIST name: to the first master in a cluster),
// other clients' connections, and the shared connections that carry many
// clients. The proxy serves a kill only when it can name nothing but the
// client's own connection, so that it cannot cut off anybody else:
//
//   - the old form, CLIENT KILL addr, when addr is the client's own
//     connection (Redis kills it, even though it is the caller's: +OK, and
//     the connection closes after the reply) or no connection's at all
//     (Redis' own -ERR No such client);
//   - the filter form (ID, ADDR, LADDR, TYPE, USER, MAXAGE, SKIPME), when
//     its ID or ADDR is the client's own connection (the filters are ANDed,
//     so nothing else can match; Redis applies the rest, SKIPME yes by
//     default, and answers the count), or names a connection that does not
//     exist (nothing can match: 0).
//
// Any other kill (only TYPE/USER/LADDR/MAXAGE filters, or an ID or ADDR of
// another connection) is refused with refuseClientKill. Redis validates the
// filters first, with its own error texts, by a probe that cannot match
// anything but the caller, which it skips (the client's filters plus ID
// <own id> SKIPME yes: Redis keeps the last of a repeated filter).

// errNoSuchClient is Redis' reply to the old form naming no connection.
const errNoSuchClient = "ERR No such client"

// clientKill serves CLIENT KILL (opClientKill; at least one argument after
// KILL). done ends the session after the reply: the client's own
// connection was killed, and Redis closes a killed connection.
func (s *session) clientKill() (done bool, err error) {
	if s.inTx || s.pinPending {
		s.localError(refuseClientKillInTx)
		return false, nil
	}
	args := s.cmd.Args
	node := 0 // where the client's CLIENT ID, INFO and LIST go
	if s.p.cfg.Cluster && s.pinned >= 0 {
		node = s.pinned
	}
	info := s.askStrings(node, "CLIENT", "INFO")
	ownID, ownAddr, ok := ownConn(info)
	if !ok {
		s.relayOr(info, refuseClientKill)
		return false, nil
	}
	if len(args) == 3 { // CLIENT KILL addr
		switch {
		case bytes.Equal(args[2], ownAddr):
			return s.killOwn(node)
		case s.addrExists(node, args[2]):
			s.localError(refuseClientKill)
		default:
			s.localError(errNoSuchClient)
		}
		return false, nil
	}
	probe := [][]byte{[]byte("CLIENT"), []byte("KILL")}
	mine := [][]byte{[]byte("ID"), ownID, []byte("SKIPME"), []byte("yes")}
	if (len(args)-2)%2 == 0 {
		probe = append(append(probe, args[2:]...), mine...)
	} else {
		// A filter without its value: Redis refuses it whatever comes
		// before, so the probe's own filter goes first.
		probe = append(append(probe, mine...), args[2:]...)
	}
	zero := s.ask(node, probe...)
	if zero.IsError() || len(args)%2 != 0 {
		s.relay(zero.Raw)
		return false, nil
	}
	var id, addr []byte
	for i := 2; i+1 < len(args); i += 2 {
		switch {
		case command.EqFold(args[i], "ID"):
			id = args[i+1]
		case command.EqFold(args[i], "ADDR"):
			addr = args[i+1]
		}
	}
	switch {
	case id != nil && sameID(id, ownID), addr != nil && bytes.Equal(addr, ownAddr):
		return s.killOwn(node)
	case id != nil && !s.idExists(node, id), addr != nil && !s.addrExists(node, addr):
		s.relay(zero.Raw) // nothing can match
	default:
		s.localError(refuseClientKill)
	}
	return false, nil
}

// killOwn sends the client's CLIENT KILL, which names only its own
// connection, on that connection; when Redis killed it (+OK, or a count of
// 1), the client's connection closes after the reply, as Redis closes it.
func (s *session) killOwn(node int) (bool, error) {
	rep := s.roundTripNodes([][]byte{append([]byte(nil), s.cmd.Raw...)}, []int{node})[0]
	s.relay(rep.Raw)
	if rep.Type == '+' || rep.Type == ':' && string(rep.Line) != "0" {
		return true, errQuit
	}
	return false, nil
}

// ask sends one command to node on the session's connection and returns
// Redis' reply.
func (s *session) ask(node int, args ...[]byte) resp.Reply {
	return s.roundTripNodes([][]byte{resp.AppendArgs(nil, args)}, []int{node})[0]
}

func (s *session) askStrings(node int, args ...string) resp.Reply {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return s.ask(node, b...)
}

// relayOr relays rep if it is an error, else answers msg.
func (s *session) relayOr(rep resp.Reply, msg string) {
	if rep.IsError() {
		s.relay(rep.Raw)
		return
	}
	s.localError(msg)
}

// idExists reports whether Redis has a connection with this ID (CLIENT
// LIST ID); an unreadable answer counts as existing, so the kill is
// refused rather than answered 0.
func (s *session) idExists(node int, id []byte) bool {
	text, ok := textOf(s.ask(node, []byte("CLIENT"), []byte("LIST"), []byte("ID"), id))
	return !ok || len(bytes.TrimSpace(text)) > 0
}

// addrExists reports whether Redis has a connection from addr (its
// CLIENT LIST); an unreadable answer counts as existing.
func (s *session) addrExists(node int, addr []byte) bool {
	text, ok := textOf(s.askStrings(node, "CLIENT", "LIST"))
	if !ok {
		return true
	}
	want := append([]byte("addr="), addr...)
	for _, line := range bytes.Split(text, []byte("\n")) {
		for _, f := range bytes.Fields(line) {
			if bytes.Equal(f, want) {
				return true
			}
		}
	}
	return false
}

// ownConn takes the id and addr of the client's own connection from its
// CLIENT INFO.
func ownConn(info resp.Reply) (id, addr []byte, ok bool) {
	text, ok := textOf(info)
	if !ok {
		return nil, nil, false
	}
	for _, f := range bytes.Fields(text) {
		switch {
		case bytes.HasPrefix(f, []byte("id=")):
			id = f[3:]
		case bytes.HasPrefix(f, []byte("addr=")):
			addr = f[5:]
		}
	}
	return id, addr, id != nil && addr != nil
}

// sameID compares a client's ID argument with the connection's, as
// numbers (Redis parses the argument).
func sameID(arg, own []byte) bool {
	a, err1 := strconv.ParseInt(string(arg), 10, 64)
	b, err2 := strconv.ParseInt(string(own), 10, 64)
	return err1 == nil && err2 == nil && a == b
}

// textOf is the text of a bulk or RESP3 verbatim string reply (CLIENT
// INFO, CLIENT LIST); ok is false for any other reply.
func textOf(rep resp.Reply) (text []byte, ok bool) {
	v, _, err := resp.Decode(rep.Raw, resp.ReplyLimits())
	text, ok = v.([]byte)
	if err != nil || !ok {
		return nil, false
	}
	if rep.Type == '=' {
		text = bytes.TrimPrefix(text, []byte("txt:"))
	}
	return text, true
}
