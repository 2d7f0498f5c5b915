package capture

import (
	"net/netip"
	"slices"

	"github.com/heatsink-dev/heatsink/routing"
)

// SlotRange is a range of Redis Cluster hash slots and the nodes serving
// it, as CLUSTER SLOTS lists them: the master, then its replicas.
type SlotRange struct {
	// Start and End are the first and last slot (inclusive).
	Start, End uint16
	Master     netip.AddrPort
	Replicas   []netip.AddrPort
}

// slotTable is a cluster target's slot map compiled for the hot path: the
// node serving each slot, and each node's master, as small indices.
type slotTable struct {
	// nodes are the cluster's nodes; index i+1 names nodes[i] (0: none).
	nodes []netip.AddrPort
	// owner is, per slot, the master's index (0: no node serves it).
	owner [routing.SlotCount]uint16
	// master is, per index, the index of the node's master (a master's
	// own), master[0] = 0.
	master []uint16
}

// compileSlots builds the table of a cluster's ranges; nil for none (a
// standalone target).
func compileSlots(ranges []SlotRange) *slotTable {
	if len(ranges) == 0 {
		return nil
	}
	t := &slotTable{master: []uint16{0}}
	index := func(a netip.AddrPort) uint16 {
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if i := slices.Index(t.nodes, a); i >= 0 {
			return uint16(i + 1)
		}
		t.nodes = append(t.nodes, a)
		t.master = append(t.master, 0)
		return uint16(len(t.nodes))
	}
	for _, r := range ranges {
		if r.End < r.Start || int(r.End) >= routing.SlotCount || !r.Master.IsValid() {
			continue
		}
		m := index(r.Master)
		t.master[m] = m
		for _, rep := range r.Replicas {
			if rep.IsValid() {
				if i := index(rep); t.master[i] == 0 {
					t.master[i] = m
				}
			}
		}
		for s := int(r.Start); s <= int(r.End); s++ {
			t.owner[s] = m
		}
	}
	return t
}

// node is the index of a server in the table (0: not a cluster node, e.g.
// a Service address in front of the cluster).
func (t *slotTable) node(server netip.AddrPort) uint16 {
	server = netip.AddrPortFrom(server.Addr().Unmap(), server.Port())
	return uint16(slices.Index(t.nodes, server) + 1)
}

// serves decides whether a command on key sent to node is one the cluster
// serves there, so that a command redirected (MOVED, ASK) and sent again is
// counted at exactly one of the nodes it was sent to, without reading the
// replies:
//
//   - at the slot's master: yes. During resharding the master listed is
//     the migrating one until the slot is handed over (CLUSTER SETSLOT
//     NODE), and a client sends there first: a key already moved is
//     answered ASK and sent again, after ASKING, to the importing node,
//     where it is not counted (that node is not the master listed).
//   - a read at a replica of the slot's master, on a connection that sent
//     READONLY: yes (the replica answers it). A write there, or a read
//     without READONLY, is answered MOVED to the master: no.
//   - anywhere else (a node that does not serve the slot, a slot no node
//     serves, a server that is not a node of the map): no. This is what a
//     stale map costs: commands the cluster now serves at a node the map
//     does not name are not counted until the map is current.
func (t *slotTable) serves(node uint16, key []byte, write, readonly bool) bool {
	if node == 0 {
		return false
	}
	owner := t.owner[routing.SlotBytes(key)]
	switch {
	case owner == 0:
		return false
	case node == owner:
		return true
	default:
		return !write && readonly && t.master[node] == owner
	}
}
