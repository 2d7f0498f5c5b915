// Package agentlink is the contract between the manager and the node agents (the
// heatsink node-agent DaemonSet): what each node agent tells the elected manager about
// its node's traffic, and what the manager tells each node agent back. Both
// sides import it, as both sides of the routing table import package routing.
//
// Why a stream to the manager rather than objects in the API server: a key is
// hot by its cluster-wide rate, so every node must be heard from every report
// interval, and 1,000 nodes writing a HotKeyReport each second would make the
// API server's load grow with the fleet. Instead:
//
//   - each node agent POSTs a Summary to the elected manager every tick
//     (PathSummary): for each policy, the keys at or above the floor the
//     manager set, with rates, plus a bound on every key it did not list,
//     and its largest keys by value size (BigKeys), whatever their rates;
//   - each node agent holds a GET stream (PathWatch) on which the manager
//     pushes Events: the detection parameters of the policies that have pods
//     on its node (with the floor and the keys to count exactly, "pins"),
//     which pod addresses may send counts for which policy, and every routing
//     table those pods follow.
//
// The API server then sees heatsink's writes grow with policies and hot keys
// only: the manager writes one aggregated HotKeyReport per policy, at a
// bounded rate, for people reading it with kubectl.
//
// The manager serves these paths only while it holds the leader lease; node
// agents try every address their manager name resolves to (a headless
// Service) until one answers, so a failover needs no API call from them.
// Requests carry a bearer token shared through a Secret (Authorization
// header); the server may also use TLS.
package agentlink

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"
)

const (
	// PathSummary is where a node agent POSTs its Summary (binary, see
	// MarshalSummary).
	PathSummary = "/fleet/v1/summary"
	// PathWatch is the node agent's event stream: GET with query parameter
	// "node"; the response is one JSON Event per line, a full snapshot first.
	PathWatch = "/fleet/v1/watch"
	// DefaultPort is the manager's fleet port.
	DefaultPort = 9444
	// HeartbeatInterval is how often the manager writes a heartbeat on an idle
	// stream; a node agent that hears nothing for 3 of them reconnects.
	HeartbeatInterval = 5 * time.Second
	// ContentTypeSummary is the media type of an encoded Summary.
	ContentTypeSummary = "application/vnd.heatsink.summary.v1"
)

// Authorized reports whether r carries the bearer token want, in constant
// time. An empty want authorizes nothing.
func Authorized(r *http.Request, want string) bool {
	if want == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// SetToken adds the bearer token to a request.
func SetToken(r *http.Request, token string) {
	r.Header.Set("Authorization", "Bearer "+token)
}
