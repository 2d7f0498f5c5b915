// Package sidecarlink is the contract between a node agent (the node agent
// DaemonSet) and the sidecars of its node (and the go-redis hook, which
// speaks for an application as a sidecar would): the formats, paths and
// limits both sides agree on, and their codecs. Both sides import it, as the
// manager and the node agents both import agentlink. The implementations
// stay with their components: the agent's server in package nodeagent, the
// sidecar's counts client in dataplane/counts and its table follower in
// dataplane/watch.
//
// Two things flow, one each way, both to or from the agent's one port
// (DefaultPort, reached at the node's address):
//
//   - sidecar → agent, counts: every FlushInterval each sidecar sends what
//     it aggregated, per key, as UDP datagrams (Encoder, Decoder; the layout
//     is in counts.go). UDP because the counts are a lossy, best-effort
//     signal by nature (a lost batch slightly lowers one node's rate
//     estimate for one interval), and because a datagram socket can never
//     block or back-pressure the proxy's hot path, needs no connection state
//     in the agent, and keeps working unchanged when the agent restarts.
//   - agent → sidecar, routing tables: each sidecar holds one HTTP request
//     over TCP (RoutingRequest) whose answer is a stream of frames
//     (AppendFrame, ReadFrames): every table of its policy newer than the
//     one it holds, as soon as the manager pushed it to the agent, and a
//     heartbeat frame while nothing changes. A stream because a table must
//     arrive whole, in order and promptly, and because one open response per
//     sidecar makes a routing change cost the agent one write per sidecar,
//     not a new request; the heartbeat lets the sidecar tell a live agent
//     with nothing new from a lost one.
//
// Entitlement: the agent accepts counts for a policy, and serves a policy's
// tables, only to a pod address the manager named for that policy (package
// fleet's Pod: the pods the injector gave a sidecar for it). Counts from any
// other address, or naming another policy, are dropped whole and counted;
// such a routing request is refused with 403, and a stream's right is
// checked again before each frame. Without it any pod on the node could make
// heatsink cache or split keys of its choosing.
//
// Bounds: a datagram is at most MaxDatagram bytes and a sender's limit at
// least MinDatagram, with at most MaxEntries entries, keys of 1 to MaxKeyLen
// bytes and a policy of at most MaxPolicyLen; a frame's header is at most 42
// bytes and its table at most routing.MaxTableBytes; a heartbeat comes every
// MinHeartbeat to MaxHeartbeat. Every decoder here is fuzzed: whatever the
// bytes, it refuses them or decodes what re-encodes the same.
package sidecarlink

// DefaultPort is the node agent's port: counts arrive on it by UDP,
// routing requests by TCP.
const DefaultPort = 7946
