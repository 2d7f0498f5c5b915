package proxy

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing/command"
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
//     the connections its filters match on Redis (its CLIENT LIST, matched
//     as Redis matches: killMatches) are none (Redis would answer 0) or the
//     client's own alone. Then the kill goes to Redis on that connection
//     with ID <own id> added (the filters are ANDed, so a connection that
//     appeared since the list cannot be matched); Redis applies SKIPME (yes
//     by default) and answers the count.
//
// An LADDR equal to the proxy's address as the client sees it is matched as
// its own connection's local address (the laddr its CLIENT INFO shows): a
// kill of "every connection to this address" through the proxy names the
// proxy's upstream connections, which the rule above then refuses unless
// only the client's own matches.
//
// Any other kill (one whose filters match another connection: another
// client's, a shared one, one not through the proxy) is refused with
// refuseClientKill. Redis validates the filters first, with its own error
// texts, by a probe that cannot match anything but the caller, which it
// skips (the client's filters plus ID <own id> SKIPME yes: Redis keeps the
// last of a repeated filter).

// errNoSuchClient is Redis' reply to the old form naming no connection.
const errNoSuchClient = "ERR No such client"

// clientKill serves CLIENT KILL (opClientKill; at least one argument after
// KILL). done ends the session after the reply: the client's own
// connection was killed, and Redis closes a killed connection.
func (s *session) clientKill() (done bool, err error) {
	if s.inTx || s.pinPending {
		s.localError(refuseClientKillInTx)
		s.refusedInTx()
		return false, nil
	}
	args := s.cmd.Args
	node := 0 // where the client's CLIENT ID, INFO and LIST go
	if s.p.cfg.Cluster && s.pinned >= 0 {
		node = s.pinned
	}
	info := s.askStrings(node, "CLIENT", "INFO")
	own, ok := ownConn(info)
	if !ok {
		s.relayOr(info, refuseClientKill)
		return false, nil
	}
	if len(args) == 3 { // CLIENT KILL addr
		switch {
		case bytes.Equal(args[2], own["addr"]):
			return s.killOwn(node, s.cmd.Raw)
		case s.addrExists(node, args[2]):
			s.localError(refuseClientKill)
		default:
			s.localError(errNoSuchClient)
		}
		return false, nil
	}
	filters := s.ownLaddr(args[2:], own["laddr"])
	probe := [][]byte{[]byte("CLIENT"), []byte("KILL")}
	mine := [][]byte{[]byte("ID"), own["id"], []byte("SKIPME"), []byte("yes")}
	if len(filters)%2 == 0 {
		probe = append(append(probe, filters...), mine...)
	} else {
		// A filter without its value: Redis refuses it whatever comes
		// before, so the probe's own filter goes first.
		probe = append(append(probe, mine...), filters...)
	}
	zero := s.ask(node, probe...)
	if zero.IsError() || len(filters)%2 != 0 {
		s.relay(zero.Raw)
		return false, nil
	}
	list, ok := textOf(s.askStrings(node, "CLIENT", "LIST"))
	if !ok {
		s.localError(refuseClientKill)
		return false, nil
	}
	switch killMatches(filters, clientList(list), own["id"]) {
	case killNone:
		s.relay(zero.Raw) // nothing can match: Redis' 0
	case killOwnOnly:
		kill := append([][]byte{[]byte("CLIENT"), []byte("KILL")}, filters...)
		return s.killOwn(node, resp.AppendArgs(nil, append(kill, []byte("ID"), own["id"])))
	default:
		s.localError(refuseClientKill)
	}
	return false, nil
}

// ownLaddr returns filters with an LADDR naming the proxy's address as the
// client sees it (its connection's local address) replaced by laddr, the
// local address of the client's own upstream connection.
func (s *session) ownLaddr(filters [][]byte, laddr []byte) [][]byte {
	local := []byte(s.conn.LocalAddr().String())
	out := append([][]byte(nil), filters...) // the command's own stay as they are
	for i := 0; i+1 < len(out); i += 2 {
		if command.EqFold(out[i], "LADDR") && bytes.Equal(out[i+1], local) {
			out[i+1] = laddr
		}
	}
	return out
}

// killMatch is which connections a CLIENT KILL's filters match.
type killMatch int

const (
	killNone    killMatch = iota // none
	killOwnOnly                  // the caller's own connection alone
	killOthers                   // another connection (or a filter the proxy cannot evaluate)
)

// killMatches evaluates a CLIENT KILL's filters (name, value pairs, already
// validated by Redis) against conns, Redis' CLIENT LIST, as Redis'
// clientMatchesFilter does: ID, ADDR, LADDR, USER exactly; TYPE by the
// connection's flags (M master, S replica, P pubsub, else normal: a MONITOR
// is O, normal); MAXAGE (Redis 7.4) an age of at least it. A repeated filter
// counts once, the last (as Redis parses them). SKIPME is ignored: it only
// spares the caller, which the kill on its own connection leaves to Redis.
func killMatches(filters [][]byte, conns []map[string]string, ownID []byte) killMatch {
	want := map[string]string{}
	for i := 0; i+1 < len(filters); i += 2 {
		name := strings.ToLower(string(filters[i]))
		switch name {
		case "id", "addr", "laddr", "type", "user", "maxage":
			want[name] = string(filters[i+1])
		case "skipme":
		default:
			return killOthers
		}
	}
	own := false
	for _, c := range conns {
		if !killFilterMatch(want, c) {
			continue
		}
		if !sameID([]byte(c["id"]), ownID) {
			return killOthers
		}
		own = true
	}
	if own {
		return killOwnOnly
	}
	return killNone
}

// killFilterMatch reports whether connection c (a CLIENT LIST line's
// fields) matches every filter of want.
func killFilterMatch(want, c map[string]string) bool {
	for name, v := range want {
		switch name {
		case "id":
			if !sameID([]byte(v), []byte(c["id"])) {
				return false
			}
		case "addr", "laddr", "user":
			if c[name] != v {
				return false
			}
		case "type":
			if clientType(c["flags"]) != normalType(v) {
				return false
			}
		case "maxage":
			max, err1 := strconv.ParseInt(v, 10, 64)
			age, err2 := strconv.ParseInt(c["age"], 10, 64)
			if err1 != nil || err2 != nil {
				return true // cannot tell: counted as a match, so refused
			}
			if max != 0 && age < max {
				return false
			}
		}
	}
	return true
}

// clientType is a connection's type from its CLIENT LIST flags, as Redis'
// getClientType gives it.
func clientType(flags string) string {
	switch {
	case strings.Contains(flags, "M"):
		return "master"
	case strings.Contains(flags, "S"):
		return "replica"
	case strings.Contains(flags, "P"):
		return "pubsub"
	}
	return "normal"
}

// normalType is a TYPE filter's value as clientType names it (Redis takes
// slave for replica, any case).
func normalType(v string) string {
	v = strings.ToLower(v)
	if v == "slave" {
		return "replica"
	}
	return v
}

// clientList parses CLIENT LIST's text: one map of fields per connection.
func clientList(text []byte) []map[string]string {
	var out []map[string]string
	for _, line := range bytes.Split(text, []byte("\n")) {
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		c := make(map[string]string, len(fields))
		for _, f := range fields {
			k, v, _ := bytes.Cut(f, []byte("="))
			c[string(k)] = string(v)
		}
		out = append(out, c)
	}
	return out
}

// killOwn sends cmd, a CLIENT KILL that names only the client's own
// connection, on that connection; when Redis killed it (+OK, or a count of
// 1), the client's connection closes after the reply, as Redis closes it.
func (s *session) killOwn(node int, cmd []byte) (bool, error) {
	rep := s.roundTripNodes([][]byte{append([]byte(nil), cmd...)}, []int{node})[0]
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

// ownConn takes the fields of the client's own connection (id, addr,
// laddr, ...) from its CLIENT INFO.
func ownConn(info resp.Reply) (map[string][]byte, bool) {
	text, ok := textOf(info)
	if !ok {
		return nil, false
	}
	own := map[string][]byte{}
	for _, f := range bytes.Fields(text) {
		k, v, _ := bytes.Cut(f, []byte("="))
		own[string(k)] = v
	}
	return own, own["id"] != nil && own["addr"] != nil
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
