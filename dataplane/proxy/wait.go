package proxy

import (
	"bytes"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// WAIT through the proxy. Redis answers WAIT numreplicas timeout with the
// number of replicas that acknowledged the replication offset of the
// calling connection's last write (its woff), blocking until numreplicas
// did or the timeout passed. Through the proxy a client's writes reach
// Redis on connections that are not the one a WAIT would go on: shared
// connections (the event loop, sessions in standalone mode), several
// masters (a cluster). A WAIT sent as it is would measure the wrong
// connection: one that wrote nothing answers at once that every replica
// has acknowledged, whatever the client's writes.
//
// So the proxy waits for an offset no smaller than the client's: once
// every command the client sent before WAIT has been answered, each
// master's current offset is past all of its writes; the answer is, over
// the masters (one in standalone mode), the fewest online replicas that
// acknowledged it.
//
// Redis before 7.2 sets a connection's offset after every command it runs:
// there the proxy sends, on its own connection to each master, a PING and
// then the client's WAIT, all masters at once, and Redis waits (waitNative).
// Redis 7.2 and later set it only after a command that propagated, so the
// proxy waits itself: it reads each master's master_repl_offset and its
// replicas' acknowledged offsets (INFO replication), and while too few
// have reached it and the timeout has not passed, it sends each master a
// short WAIT it cannot satisfy (numreplicas above its replica count,
// waitStep), which makes Redis ask its replicas for their offsets at once
// (REPLCONF GETACK), as the client's own WAIT would have.
//
// When no other client writes meanwhile, this is Redis' answer. When
// others do, the target offset also covers their writes made before the
// WAIT: the count can be lower, or reached later, than directly, never
// higher: a count of N always means N replicas of every master hold all the
// client's writes. Redis checks the arguments itself (they are sent inside
// MULTI first, where WAIT answers at once: its errors are Redis' own).

// waitStep is how long each prompting WAIT blocks on Redis: Redis answers
// it once its replicas' acknowledgements come in (or its own timers fire).
const waitStep = 10 * time.Millisecond

// waitEmulated makes every WAIT take the path of Redis 7.2 and later (the
// proxy waits itself), so that it is tested against the Redis 7.0 of the
// tests (export_test.go).
var waitEmulated atomic.Bool

// wait serves WAIT and WAITAOF (opWait).
func (s *session) wait() {
	args := s.cmd.Args
	if command.EqFold(args[0], "WAITAOF") {
		s.waitAOF()
		return
	}
	if s.waitRefused() {
		return
	}
	numReplicas, _ := strconv.ParseInt(string(args[1]), 10, 64)
	timeoutMs, _ := strconv.ParseInt(string(args[2]), 10, 64)
	var deadline time.Time
	// Redis takes any timeout up to the end of its clock; past a century
	// (and past time.Duration's range) it is for ever here.
	if timeoutMs > 0 && timeoutMs < 100*365*24*int64(time.Hour/time.Millisecond) {
		deadline = time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	}
	nodes := []int{0}
	if s.p.cfg.Cluster {
		nodes = s.p.topo.masters()
	}
	if s.woffEveryCommand() {
		s.waitNative(nodes)
		return
	}
	s.waitReplicas(nodes, numReplicas, deadline)
}

// waitRefused asks Redis' own checks of the WAIT's arguments (and of a
// replica's refusal) inside MULTI, where WAIT answers at once, and relays
// Redis' error if there is one: it reports whether it answered.
func (s *session) waitRefused() bool {
	probe := s.roundTripNodes([][]byte{
		resp.AppendArgs(nil, [][]byte{[]byte("MULTI")}),
		append([]byte(nil), s.cmd.Raw...),
		resp.AppendArgs(nil, [][]byte{[]byte("EXEC")}),
	}, []int{0, 0, 0})
	if len(probe) != 3 {
		s.localError(errConnectionLost)
		return true
	}
	if probe[1].IsError() { // queued or not: the arity, a replica
		s.relay(probe[1].Raw)
		return true
	}
	v, _, err := resp.Decode(probe[2].Raw, resp.ReplyLimits())
	if arr, ok := v.([]any); err != nil || !ok || len(arr) != 1 {
		s.relay(probe[2].Raw) // EXECABORT, a lost connection: as it came
		return true
	} else if _, ok := arr[0].(int64); !ok {
		s.relay(innerReply(probe[2].Raw))
		return true
	}
	return false
}

// waitReplicas answers WAIT once every node's replicas acknowledged
// numReplicas (the least of the nodes' counts), or at the deadline (zero:
// none), asking in steps of waitStep.
func (s *session) waitReplicas(nodes []int, numReplicas int64, deadline time.Time) {
	// A client that hangs up meanwhile closes the upstream connections,
	// which ends the wait, as Redis drops a closed client's WAIT.
	defer s.watchClient()()
	targets, _, ok := s.replication(nodes, nil)
	if !ok {
		s.localError(errUnreadable)
		return
	}
	for {
		acked, online, ok := s.replication(nodes, targets)
		if !ok {
			s.localError(errUnreadable)
			return
		}
		least := int64(-1)
		for _, n := range acked {
			if least < 0 || n < least {
				least = n
			}
		}
		if least >= numReplicas || !deadline.IsZero() && !time.Now().Before(deadline) {
			s.local(func(b []byte) []byte { return resp.AppendInt(b, least) })
			return
		}
		step := waitStep
		if !deadline.IsZero() {
			step = min(step, time.Until(deadline))
		}
		cmds := make([][]byte, len(nodes))
		for i := range nodes {
			cmds[i] = resp.AppendArgs(nil, [][]byte{[]byte("WAIT"),
				strconv.AppendInt(nil, online[i]+1, 10), strconv.AppendInt(nil, max(step.Milliseconds(), 1), 10)})
		}
		for _, r := range s.roundTripNodes(cmds, nodes) {
			if r.IsError() {
				s.relay(r.Raw)
				return
			}
		}
	}
}

// woffEveryCommand reports whether Redis (the first master) sets a
// connection's write offset after every command it runs, as Redis before
// 7.2 does (processCommand), rather than after those that propagate only
// (call, 7.2 and later): then a WAIT on the proxy's own connection, after
// any command on it, waits for the master's offset at that command. Asked
// once per session (INFO server's redis_version).
func (s *session) woffEveryCommand() bool {
	if waitEmulated.Load() {
		return false
	}
	if s.woffKnown == 0 {
		s.woffKnown = 2
		if text, ok := textOf(s.askStrings(0, "INFO", "server")); ok && versionBefore(text, 7, 2) {
			s.woffKnown = 1
		}
	}
	return s.woffKnown == 1
}

// versionBefore reports whether INFO server's redis_version is below
// major.minor (false if it has none).
func versionBefore(info []byte, major, minor int) bool {
	for _, line := range bytes.Split(info, []byte("\n")) {
		v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("redis_version:"))
		if !ok {
			continue
		}
		parts := bytes.SplitN(v, []byte("."), 3)
		if len(parts) < 2 {
			return false
		}
		ma, err1 := strconv.Atoi(string(parts[0]))
		mi, err2 := strconv.Atoi(string(parts[1]))
		return err1 == nil && err2 == nil && (ma < major || ma == major && mi < minor)
	}
	return false
}

// waitNative is WAIT on a Redis that sets the write offset after every
// command: on each master's connection of the session, a PING (its offset
// becomes the master's, past the client's writes), then the client's WAIT,
// every master at once; the answer is the fewest replicas, or the first
// error. Redis itself waits, prompts its replicas and times out.
func (s *session) waitNative(nodes []int) {
	ping := resp.AppendArgs(nil, [][]byte{[]byte("PING")})
	var cmds [][]byte
	var to []int
	for _, n := range nodes {
		cmds, to = append(cmds, ping, s.cmd.Raw), append(to, n, n)
	}
	s.blocking = true // no reply timeout; a client that hangs up cancels it
	rs := s.roundTripNodes(cmds, to)
	least := int64(-1)
	for i := 1; i < len(rs); i += 2 {
		v, _, err := resp.Decode(rs[i].Raw, resp.ReplyLimits())
		n, ok := v.(int64)
		if err != nil || !ok {
			s.relay(rs[i].Raw)
			return
		}
		if least < 0 || n < least {
			least = n
		}
	}
	s.local(func(b []byte) []byte { return resp.AppendInt(b, least) })
}

// replication asks every node for INFO replication. With targets nil it
// returns each node's master_repl_offset; else, per node, how many online
// replicas acknowledged at least targets[i], and how many are online.
func (s *session) replication(nodes []int, targets []int64) (acked, online []int64, ok bool) {
	cmds := make([][]byte, len(nodes))
	for i := range nodes {
		cmds[i] = resp.AppendArgs(nil, [][]byte{[]byte("INFO"), []byte("replication")})
	}
	replies := s.roundTripNodes(cmds, nodes)
	if len(replies) != len(nodes) {
		return nil, nil, false
	}
	acked, online = make([]int64, len(nodes)), make([]int64, len(nodes))
	for i, r := range replies {
		text, ok := textOf(r)
		if !ok {
			return nil, nil, false
		}
		offset, replicas, ok := parseReplication(text)
		if !ok {
			return nil, nil, false
		}
		if targets == nil {
			acked[i] = offset
			continue
		}
		online[i] = int64(len(replicas))
		for _, off := range replicas {
			if off >= targets[i] {
				acked[i]++
			}
		}
	}
	return acked, online, true
}

// parseReplication reads INFO replication: the master's
// master_repl_offset and the acknowledged offset of each online replica
// (slaveN:ip=...,state=online,offset=N,...).
func parseReplication(text []byte) (offset int64, replicas []int64, ok bool) {
	found := false
	for _, line := range bytes.Split(text, []byte("\n")) {
		line = bytes.TrimSpace(line)
		name, rest, _ := bytes.Cut(line, []byte(":"))
		switch {
		case string(name) == "master_repl_offset":
			var err error
			offset, err = strconv.ParseInt(string(rest), 10, 64)
			found = err == nil
		case bytes.HasPrefix(name, []byte("slave")):
			if _, err := strconv.Atoi(string(name[5:])); err != nil {
				continue
			}
			var state string
			off := int64(-1)
			for _, kv := range bytes.Split(rest, []byte(",")) {
				k, v, _ := bytes.Cut(kv, []byte("="))
				switch string(k) {
				case "state":
					state = string(v)
				case "offset":
					off, _ = strconv.ParseInt(string(v), 10, 64)
				}
			}
			if state == "online" {
				replicas = append(replicas, off)
			}
		}
	}
	return offset, replicas, found
}

// innerReply is the one element of an EXEC reply of one command.
func innerReply(execReply []byte) []byte {
	_, n, err := resp.Decode(execReply, resp.ReplyLimits())
	if err != nil || n != len(execReply) {
		return execReply
	}
	// Skip the array header (*1\r\n or RESP3's same).
	if i := bytes.Index(execReply, []byte("\r\n")); i >= 0 {
		return execReply[i+2:]
	}
	return execReply
}

// waitAOF serves WAITAOF: a Redis that does not know it (before 7.2)
// answers it with its own error; one that does cannot be asked faithfully
// through the proxy (which replicas fsynced which offset is not in INFO),
// so it is refused.
func (s *session) waitAOF() {
	info := s.askStrings(0, "COMMAND", "INFO", "WAITAOF")
	v, _, err := resp.Decode(info.Raw, resp.ReplyLimits())
	if arr, ok := v.([]any); err == nil && ok && len(arr) == 1 && arr[0] == nil {
		s.relay(s.ask(0, s.cmd.Args...).Raw)
		return
	}
	s.localError(refuseWaitAOF)
}
