package proxy

import (
	"github.com/heatsink-dev/heatsink/dataplane/command"
)

// Every reply the proxy makes up itself rather than relaying from Redis is
// written here, once; docs/proxy.md lists each with its exact text. (The
// engine's refusals of commands on mitigated keys, "ERR heatsink: ...",
// are engine.Classify's.)

func refuseReplication(name []byte) string {
	return "ERR heatsink sidecar: " + command.Upper(name) + " is not supported through the proxy (it turns the connection into a replication stream)"
}

func refuseClusterWide(name []byte) string {
	return "ERR heatsink sidecar: " + command.Upper(name) + " acts on every node of a cluster; run it against each node directly"
}

// refuseMaintNotifications: push notifications of server maintenance are
// per connection, and the proxy handles upstream reconnections itself.
// Clients (go-redis probes this by default) treat the error as "not
// supported".
const refuseMaintNotifications = "ERR heatsink sidecar: CLIENT MAINT_NOTIFICATIONS is not supported through the proxy"

// refuseClientKill: the connections Redis sees are the proxy's, shared by
// many clients; killing one would cut off others (and a client's own
// address or id is not what Redis knows).
const refuseClientKill = "ERR heatsink sidecar: CLIENT KILL is not supported through the proxy (the connections Redis sees are the proxy's); run it against Redis directly"

// errMaxClients is Redis' own reply to a connection over maxclients, which
// the proxy gives a connection it has no file descriptor to serve with.
const errMaxClients = "ERR max number of clients reached"

// Errors that stand for a reply Redis could not give.

func errUnreachable(addr string, err error) string {
	return "ERR heatsink sidecar: upstream " + addr + " unreachable: " + err.Error()
}

func errUpstream(addr string, err error) string {
	return "ERR heatsink sidecar: upstream " + addr + ": " + errText(err)
}

const errConnectionLost = "ERR heatsink sidecar: upstream connection lost"

func errRedirect(addr string, err error) string {
	return "ERR heatsink sidecar: redirect to " + addr + ": " + errText(err)
}

const errTooManyRedirects = "ERR heatsink sidecar: too many cluster redirections"

const errUnreadable = "ERR heatsink sidecar: unreadable upstream reply"

const errNoMaster = "ERR heatsink sidecar: no master known in the cluster's slot map"
