package capture

import (
	"net/netip"
	"slices"
)

// Target is one policy's Redis as the capture sees it: the endpoints its
// clients connect to, and the namespace and database whose traffic counts.
type Target struct {
	// Policy is "<namespace>/<name>".
	Policy string
	// Namespace is the policy's: only pods of that namespace are counted
	// for it, as only they may be injected for it.
	Namespace string
	// Database is the policy's Redis database (spec.target.database):
	// commands after a SELECT of another database are not counted, as the
	// sidecar does not count them.
	Database int
	// Endpoints are the addresses clients connect to: Service IPs, pod IPs,
	// node addresses, with the Redis port.
	Endpoints []netip.AddrPort
	// Slots is the slot map of a Redis Cluster target (nil: standalone).
	// Its nodes are endpoints too. A command sent to a node is counted
	// only if that node serves its key's slot (slotTable.serves), so a
	// command redirected by MOVED or ASK and sent again is counted once.
	Slots []SlotRange
}

// endpoints are the target's endpoints and its cluster nodes.
func (t *Target) endpoints() []netip.AddrPort {
	out := slices.Clone(t.Endpoints)
	for _, r := range t.Slots {
		out = append(out, r.Master)
		out = append(out, r.Replicas...)
	}
	for i, a := range out {
		out[i] = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

// Scope is what the capture counts: the targets, and the pods of the node
// that carry no sidecar (their address and namespace). A pod with the
// sidecar is not in Pods, so its traffic is never counted twice: the
// sidecar already counts it (its upstream connections leave from the pod's
// address too, so addresses alone could not tell).
type Scope struct {
	Targets []Target
	// Pods maps the address of each pod of the node without a sidecar to
	// its namespace.
	Pods map[netip.Addr]string
}

// Endpoints lists every target's endpoints once, sorted (for the filter).
func (s *Scope) Endpoints() []netip.AddrPort {
	var out []netip.AddrPort
	for _, t := range s.Targets {
		out = append(out, t.endpoints()...)
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

// attribute is the targets (indices in s.Targets) a connection from client
// to server counts for: the server is one of the target's endpoints, and
// the client a pod without a sidecar in the target's namespace. Empty: the
// connection is not counted.
func (s *Scope) attribute(client netip.Addr, server netip.AddrPort) []int {
	ns, ok := s.Pods[client.Unmap()]
	if !ok {
		return nil
	}
	var out []int
	for i := range s.Targets {
		t := &s.Targets[i]
		if t.Namespace == ns && (slices.Contains(t.Endpoints, server) || s.isNode(i, server)) {
			out = append(out, i)
		}
	}
	return out
}

// isNode says whether server is a node of target i's slot map.
func (s *Scope) isNode(i int, server netip.AddrPort) bool {
	for _, r := range s.Targets[i].Slots {
		if r.Master == server || slices.Contains(r.Replicas, server) {
			return true
		}
	}
	return false
}
