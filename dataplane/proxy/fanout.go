package proxy

import (
	"bytes"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// fanout sends the current command (a script or function management
// command, command.IsFanout) to every master of the cluster, as a cluster
// client does, and answers one reply (mergeFanout): a script loaded
// through the proxy is then known wherever its keys are, and SCRIPT KILL
// reaches the node running the script.
func (s *session) fanout() {
	kill := command.EqFold(s.cmd.Args[1], "KILL")
	exists := command.EqFold(s.cmd.Args[1], "EXISTS")
	out := mergeFanout(s.toEveryMaster(), kill, exists)
	s.local(func(b []byte) []byte { return append(b, out...) })
}

// mergeFanout picks the one reply a client gets for a command sent to every
// master: for a KILL, an OK from any node (the one that ran the script),
// else the first reply; for SCRIPT EXISTS, 1 for a script only every node
// has; otherwise the first error if any node refused, else the first reply
// (they are the same when the nodes agree).
func mergeFanout(replies [][]byte, kill, exists bool) []byte {
	if len(replies) == 0 {
		return resp.AppendError(nil, errNoMaster)
	}
	switch {
	case kill:
		for _, r := range replies {
			if bytes.Equal(r, []byte("+OK\r\n")) {
				return r
			}
		}
		return replies[0]
	case exists:
		return andExists(replies)
	}
	for _, r := range replies {
		if len(r) > 0 && (r[0] == '-' || r[0] == '!') {
			return r
		}
	}
	return replies[0]
}

// andExists combines SCRIPT EXISTS replies (arrays of 0/1) element by
// element: a script exists only where every node has it.
func andExists(replies [][]byte) []byte {
	var all [][]any
	for _, r := range replies {
		v, _, err := resp.Decode(r, resp.Limits{})
		arr, ok := v.([]any)
		if err != nil || !ok {
			return r // an error (or a reply of another shape): as is
		}
		all = append(all, arr)
	}
	out := resp.AppendArrayHeader(nil, len(all[0]))
	for i := range all[0] {
		n := int64(1)
		for _, arr := range all {
			if i >= len(arr) {
				n = 0
				continue
			}
			if v, _ := arr[i].(int64); v == 0 {
				n = 0
			}
		}
		out = resp.AppendInt(out, n)
	}
	return out
}

// roundTripNodes sends cmds[i] to node nodes[i] on the session's own
// connections, after every reply owed before, and returns the replies in
// order.
func (s *session) roundTripNodes(cmds [][]byte, nodes []int) []resp.Reply {
	keys := make([][]byte, len(cmds))
	s.roundTripTo = nodes
	defer func() { s.roundTripTo = nil }()
	return s.roundTrip(cmds, keys)
}

// toEveryMaster sends the client's command as it is to every master of the
// cluster and returns their raw replies, in the masters' order.
func (s *session) toEveryMaster() [][]byte {
	raw := append([]byte(nil), s.cmd.Raw...)
	nodes := s.p.topo.masters()
	cmds := make([][]byte, len(nodes))
	for i := range nodes {
		cmds[i] = raw
	}
	replies := s.roundTripNodes(cmds, nodes)
	raws := make([][]byte, len(replies))
	for i, r := range replies {
		raws[i] = r.Raw
	}
	return raws
}
