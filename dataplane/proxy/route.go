package proxy

import (
	"github.com/heatsink-dev/heatsink/routing/command"
)

// op is what the proxy does with one client command, before the engine
// looks at its keys (see mitigated).
type op uint8

const (
	// opForward sends the command to Redis: on the client's path (a
	// shared upstream connection, or its own), to its first key's node in
	// a cluster. A command naming a mitigated key may still be served by
	// the engine.
	opForward op = iota
	// opOwnConn: the command leaves state on its connection, blocks it,
	// or may keep Redis busy, so the client needs an upstream connection
	// of its own before it is sent (decided only in shared mode: the
	// event loop hands the client to a session, a shared session becomes
	// dedicated; then the command is decided again).
	opOwnConn
	// opExclusive: the command leaves no state but may hold its connection
	// for long (a blocking command, a script), so it goes on a connection
	// of its own for this one command, taken from a warm pool in the order
	// the commands came (decided only in shared mode; a shared session
	// becomes dedicated instead).
	opExclusive
	// opReplyMode is CLIENT REPLY ON, OFF or SKIP: the proxy itself stops
	// (or resumes) sending replies to the client, as Redis would, on every
	// upstream connection of the client.
	opReplyMode
	// opHello answers HELLO with at most a protocol version from the
	// shared connection of that version (shared mode): route.proto.
	opHello
	// opRefuse answers route.err without sending anything.
	opRefuse
	// opQuit answers +OK and closes the connection after the replies owed.
	opQuit
	// opPipe turns the connection into a raw pipe to an upstream
	// connection of its own (pub/sub, MONITOR: Redis sends frames nobody
	// asked for, and any number per command).
	opPipe
	// opState forwards AUTH, SELECT, HELLO or RESET and remembers it for
	// the upstream connections the client opens later.
	opState
	// opFanout sends a script or function management command to every
	// master of a cluster, as a cluster client does, and answers one reply
	// (mergeFanout).
	opFanout
	// opNodeWide serves a command that acts on a whole server (KEYS, SCAN,
	// DBSIZE, RANDOMKEY, FLUSHALL, FLUSHDB, INFO keyspace) in a cluster by
	// asking every master and answering as one Redis holding all the keys
	// would (nodewide.go).
	opNodeWide
	// opClientKill serves CLIENT KILL when it names only the client's own
	// connection, and refuses it otherwise (clientkill.go).
	opClientKill
	// opTopology answers a cluster topology command (CLUSTER SLOTS, ...,
	// READONLY) as the one-node cluster the sidecar presents (topology.go).
	opTopology
	// opInfo forwards INFO and patches its reply (standalone mode:
	// patchClusterEnabled; cluster mode: the keyspace of every master).
	opInfo
	// opWait serves WAIT (the proxy waits for the replicas itself) and
	// WAITAOF (wait.go).
	opWait
)

// route is the decision for one command.
type route struct {
	op    op
	proto int    // opHello
	err   string // opRefuse
}

// mode is what the decision needs to know of the client's connection.
type mode struct {
	// shared: the client's commands go through upstream connections shared
	// with other clients (the event loop, or a session that never touched
	// connection state), so no command may leave state there.
	shared  bool
	cluster bool
	// proto is the client's RESP version (2 or 3).
	proto int
	// inTx: inside MULTI (or a cluster MULTI the session holds back until
	// it knows the node), where Redis must queue every command, so the
	// engine cannot serve one (classify; decide ignores it).
	inTx bool
	// db is the connection's database (session_db.go; 0 in the event
	// loop): a command in another database than the table's is only
	// forwarded (classify; decide ignores it).
	db int32
}

// decide is the proxy's one routing decision for a client command, the
// route of its classification (classify). It is pure: c and known come
// from command.Lookup(args[0]).
func decide(c command.Info, known bool, args [][]byte, m mode) route {
	switch {
	case c.Kind == command.Quit:
		return route{op: opQuit}
	case c.Kind == command.Replication:
		return route{op: opRefuse, err: refuseReplication(args[0])}
	case c.Kind == command.ClusterWide && m.cluster && !nodeWide(args):
		return route{op: opRefuse, err: refuseClusterWide(args[0])}
	case isClientSub(args, "MAINT_NOTIFICATIONS", 2):
		return route{op: opRefuse, err: refuseMaintNotifications}
	case m.cluster && m.inTx && nodeWide(args):
		return route{op: opRefuse, err: refuseNodeWideInTx(args[0])}
	case !m.inTx && isTopology(args):
		// Inside MULTI Redis queues it: it goes there, as it would.
		return route{op: opTopology}
	case isInfo(args) && (!m.cluster || !m.inTx && !nodeWide(args)):
		// In a cluster inside MULTI it is queued on the transaction's
		// master; INFO keyspace alone is node-wide.
		return route{op: opInfo}
	}
	if !m.inTx && isWait(args) {
		// Several round trips on connections of its own (inside MULTI
		// Redis queues it, and answers it at once at EXEC).
		if m.shared {
			return route{op: opOwnConn}
		}
		return route{op: opWait}
	}
	if m.cluster && nodeWide(args) || isClientSub(args, "KILL", 3) {
		// Answered from several replies, or from what the proxy knows
		// of the client's connection: on a session, which can wait for
		// them.
		switch {
		case m.shared:
			return route{op: opOwnConn}
		case isClientSub(args, "KILL", 3):
			return route{op: opClientKill}
		}
		return route{op: opNodeWide}
	}
	fanout := m.cluster && command.IsFanout(args)
	if m.shared {
		switch {
		case fanout:
			return route{op: opOwnConn}
		case command.EqFold(args[0], "HELLO") && len(args) <= 2:
			if v, ok := helloVersion(args, m.proto); ok {
				return route{op: opHello, proto: v}
			}
			return route{op: opOwnConn}
		case isClientSub(args, "SETINFO", 4) && len(args) == 4:
			// Informational only (library name and version): sent on the
			// shared connection, so the client gets Redis' own answer.
			return route{op: opForward}
		case c.Kind == command.Plain && known && (c.IsBlocking(args) || c.Scripting):
			return route{op: opExclusive}
		case !known || !c.Shareable:
			return route{op: opOwnConn}
		}
		return route{op: opForward}
	}
	if replyMode(args) != 0 {
		return route{op: opReplyMode}
	}
	if fanout {
		return route{op: opFanout}
	}
	switch c.Kind {
	case command.PubSub:
		return route{op: opPipe}
	case command.State:
		return route{op: opState}
	}
	return route{op: opForward}
}

// isClientSub reports CLIENT <sub> with at least min arguments in all.
func isClientSub(args [][]byte, sub string, min int) bool {
	return len(args) >= min && len(args) >= 2 && command.EqFold(args[0], "CLIENT") && command.EqFold(args[1], sub)
}

// helloVersion is the protocol a HELLO with at most a version asks for
// (cur when it names none); ok is false for any version but 2 and 3.
func helloVersion(args [][]byte, cur int) (v int, ok bool) {
	if len(args) < 2 {
		return cur, true
	}
	switch string(args[1]) {
	case "2":
		return 2, true
	case "3":
		return 3, true
	}
	return 0, false
}

// Reply modes of CLIENT REPLY.
const (
	replyOn = iota + 1
	replyOff
	replySkip
)

// replyMode is the mode CLIENT REPLY ON|OFF|SKIP sets, 0 for any other
// command (a malformed CLIENT REPLY goes to Redis for its own error).
func replyMode(args [][]byte) int {
	if len(args) != 3 || !isClientSub(args, "REPLY", 3) {
		return 0
	}
	switch {
	case command.EqFold(args[2], "ON"):
		return replyOn
	case command.EqFold(args[2], "OFF"):
		return replyOff
	case command.EqFold(args[2], "SKIP"):
		return replySkip
	}
	return 0
}

// isWait reports WAIT and WAITAOF (served by opWait outside MULTI).
func isWait(args [][]byte) bool {
	return command.EqFold(args[0], "WAIT") || command.EqFold(args[0], "WAITAOF")
}
