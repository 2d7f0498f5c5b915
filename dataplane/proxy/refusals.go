package proxy

import (
	"bytes"
	"errors"
	"io"
	"os"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// Every reply the proxy makes up itself rather than relaying from Redis is
// written here, once; docs/proxy.md lists each with its exact text. (The
// engine's refusals of commands on mitigated keys, "ERR heatsink: ...",
// are engine.Classify's.)

func refuseReplication(name []byte) string {
	return "ERR heatsink proxy: " + command.Upper(name) + " is not supported through the proxy (it turns the connection into a replication stream)"
}

// refuseClusterWide: SWAPDB, the one node-wide command a cluster cannot
// serve (Redis Cluster has database 0 only, and swapping it on every
// master is not one atomic swap).
func refuseClusterWide(name []byte) string {
	return "ERR heatsink proxy: " + command.Upper(name) + " acts on every node of a cluster; run it against each node directly"
}

// refuseNodeWideInTx: a cluster transaction runs on one master, so a
// command answered from every master cannot be queued in it.
func refuseNodeWideInTx(name []byte) string {
	return "ERR heatsink proxy: " + command.Upper(name) + " inside MULTI is not supported in cluster mode (the transaction runs on one master)"
}

// refuseMaintNotifications: push notifications of server maintenance are
// per connection, and the proxy handles upstream reconnections itself.
// Clients (go-redis probes this by default) treat the error as "not
// supported".
const refuseMaintNotifications = "ERR heatsink proxy: CLIENT MAINT_NOTIFICATIONS is not supported through the proxy"

// refuseClientKill: the filters match, in Redis' CLIENT LIST, connections
// that are not the client's own (other clients' connections, the proxy's
// connections that carry other clients, connections not through the
// proxy); the proxy kills only the client's own (clientkill.go).
const refuseClientKill = "ERR heatsink proxy: CLIENT KILL through the proxy may match only the client's own connection, and these filters match another connection on Redis (CLIENT LIST); run it against Redis directly"

// refuseWaitAOF: WAITAOF on a Redis that has it. The client's writes went
// on connections other than the one WAITAOF would measure, and which
// offset each replica has fsynced is not in INFO, so the proxy cannot wait
// for them itself as it does for WAIT (wait.go).
const refuseWaitAOF = "ERR heatsink proxy: WAITAOF is not supported through the proxy (the client's writes go to Redis on other connections than the one it would wait on); use WAIT, or run it against Redis directly"

// refuseClientKillInTx: the kill would run at EXEC, when the proxy no
// longer decides what it names.
const refuseClientKillInTx = "ERR heatsink proxy: CLIENT KILL inside MULTI is not supported through the proxy"

// errScanCursor: a SCAN cursor the proxy did not make for the cluster's
// node set as it is now (scan.go).
func errScanCursor(cursor []byte) string {
	return "ERR heatsink proxy: SCAN cursor " + string(cursor) + " is not one this proxy made for the cluster's current slot map (the map changed during the iteration, or the cursor comes from elsewhere); start again from 0"
}

// errScanCursorTooLarge: a node's own cursor that the proxy's cursor
// encoding has no room for (scan.go).
func errScanCursorTooLarge(addr string) string {
	return "ERR heatsink proxy: SCAN cursor of node " + addr + " too large for the proxy's cursor encoding"
}

// errInvalidCursor is Redis' own reply to a SCAN cursor that is not a
// number.
const errInvalidCursor = "ERR invalid cursor"

// errMaxClients is Redis' own reply to a connection over maxclients, which
// the proxy gives a connection it has no file descriptor to serve with.
const errMaxClients = "ERR max number of clients reached"

// Errors that stand for a reply Redis could not give.

func errUnreachable(addr string, err error) string {
	return "ERR heatsink proxy: upstream " + addr + " unreachable: " + err.Error()
}

func errUpstream(addr string, err error) string {
	return "ERR heatsink proxy: upstream " + addr + ": " + errText(err)
}

const errConnectionLost = "ERR heatsink proxy: upstream connection lost"

func errRedirect(addr string, err error) string {
	return "ERR heatsink proxy: redirect to " + addr + ": " + errText(err)
}

const errTooManyRedirects = "ERR heatsink proxy: too many cluster redirections"

const errUnreadable = "ERR heatsink proxy: unreadable upstream reply"

const errNoMaster = "ERR heatsink proxy: no master known in the cluster's slot map"

// failedReply reports whether an error reply line (without its '-') says
// the command failed on its way rather than got Redis' answer: one of the
// replies above that stand for a reply Redis could not give, or Redis'
// own of a node that could not serve it (engine.FailureCode). The
// baseline a move's failures are judged against counts these.
func failedReply(line []byte) bool {
	for _, p := range failedPrefixes {
		if bytes.HasPrefix(line, p) {
			return true
		}
	}
	return engine.FailureCode(line)
}

var failedPrefixes = [][]byte{[]byte("ERR heatsink proxy: upstream "), []byte("ERR heatsink proxy: redirect to "),
	[]byte(errTooManyRedirects), []byte(errUnreadable), []byte(errNoMaster)}

// errText is an upstream error as a refusal tells it.
func errText(err error) string {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "timeout waiting for a reply"
	}
	if errors.Is(err, io.EOF) {
		return "connection closed by Redis"
	}
	return err.Error()
}
