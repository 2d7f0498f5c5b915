package proxy

import (
	"hash/fnv"
	"math/bits"
	"strconv"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// SCAN in cluster mode iterates the masters one after the other, each with
// its own SCAN, so a full iteration has Redis' own guarantee on every node
// (a key present throughout is returned at least once) and so on the
// whole keyspace. The cursor the client gets carries where the iteration
// is, as one unsigned 64-bit number (Redis' cursors are; clients keep them
// as uint64 or as decimal strings):
//
//	cursor = nodeCursor << (16+p) | tag << p | node
//
// node (p bits, p = bits.Len(masters-1), 0 for one master) is the master's
// position in the node set: the masters ordered by the first slot they
// serve, so the order is the same for every proxy that sees the same slot
// map, and stays the same as long as the map does.
//
// tag (16 bits, never 0) is a hash of the slot map (each run of slots with
// its master's address): a cursor made for another slot map (a failover, a
// resharding, or another cluster) is refused with errScanCursor, never
// continued on the wrong node or with a cursor of another process' hash
// table. A number that was never a cursor is refused with a probability of
// 1-2^-16 (any number is a cursor to Redis itself, so one Redis has no such
// check at all).
//
// nodeCursor is the node's own SCAN cursor, in the remaining 48-p bits (a
// Redis cursor is below its hash table's size, 2^14 times that on a Redis
// 7.4+ cluster node); one that does not fit gets errScanCursorTooLarge,
// never a truncated cursor.
//
// Cursor 0 starts at the first master and is returned once the last
// master's SCAN is done. The proxy keeps nothing between calls: the cursor
// works on any connection, and through any proxy of the same cluster.
const scanTagBits = 16

// nodeSet is the masters of the slot map in force, ordered by their first
// slot, and the map's tag (see scan above). Before the first slot-map load
// it is node 0 alone.
func (t *topology) nodeSet() (nodes []int, tag uint64) {
	h := fnv.New64a()
	m := t.Map()
	if m == nil {
		h.Write([]byte(t.addr(0)))
		return []int{0}, tagOf(h.Sum64())
	}
	seen := map[uint16]bool{}
	var buf []byte
	for slot, n := range m {
		if slot > 0 && m[slot-1] == n {
			continue
		}
		// A run of slots starts here.
		buf = strconv.AppendInt(buf[:0], int64(slot), 10)
		buf = append(buf, ' ')
		buf = append(buf, t.addr(int(n))...)
		buf = append(buf, '\n')
		h.Write(buf)
		if !seen[n] {
			seen[n] = true
			nodes = append(nodes, int(n))
		}
	}
	return nodes, tagOf(h.Sum64())
}

// tagOf folds a hash into a tag of scanTagBits bits that is never 0, so a
// small number (1, 2, ...) is never a valid cursor.
func tagOf(h uint64) uint64 { return h%(1<<scanTagBits-1) + 1 }

// encodeScan is the client's cursor for node position pos of n masters at
// its own cursor nc; ok is false when nc does not fit.
func encodeScan(pos int, nc uint64, n int, tag uint64) (c uint64, ok bool) {
	p := bits.Len(uint(n - 1))
	if nc >= 1<<(64-scanTagBits-p) {
		return 0, false
	}
	return nc<<(scanTagBits+p) | tag<<p | uint64(pos), true
}

// decodeScan takes a client's cursor apart for n masters and the slot map
// of tag; ok is false for a cursor the proxy would not have made.
func decodeScan(c uint64, n int, tag uint64) (pos int, nc uint64, ok bool) {
	if c == 0 {
		return 0, 0, true
	}
	p := bits.Len(uint(n - 1))
	pos = int(c & (1<<p - 1))
	nc = c >> (scanTagBits + p)
	if (c>>p)&(1<<scanTagBits-1) != tag || pos >= n || pos == 0 && nc == 0 {
		return 0, 0, false
	}
	return pos, nc, true
}

// scan serves SCAN cursor [MATCH pattern] [COUNT n] [TYPE t] in cluster
// mode: the node's own SCAN with the client's options, the node's next
// cursor folded into the client's.
func (s *session) scan() {
	args := s.cmd.Args
	nodes, tag := s.p.topo.nodeSet()
	if len(args) < 2 {
		// Redis' own arity error.
		s.relay(s.roundTripNodes([][]byte{append([]byte(nil), s.cmd.Raw...)}, nodes[:1])[0].Raw)
		return
	}
	c, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		s.localError(errInvalidCursor)
		return
	}
	pos, nc, ok := decodeScan(c, len(nodes), tag)
	if !ok {
		s.localError(errScanCursor(args[1]))
		return
	}
	fwd := make([][]byte, len(args))
	copy(fwd, args)
	for {
		fwd[1] = strconv.AppendUint(nil, nc, 10)
		rep := s.roundTripNodes([][]byte{resp.AppendArgs(nil, fwd)}, []int{nodes[pos]})[0]
		if rep.IsError() {
			s.relay(rep.Raw)
			return
		}
		next, keys, ok := scanReply(rep.Raw)
		if !ok {
			s.localError(errUnreadable)
			return
		}
		var out uint64 // 0: the last node is done
		switch {
		case next != 0:
			if out, ok = encodeScan(pos, next, len(nodes), tag); !ok {
				s.localError(errScanCursorTooLarge(s.p.topo.addr(nodes[pos])))
				return
			}
		case pos+1 < len(nodes):
			if len(keys) == 0 {
				// This node is done and gave nothing more: go on with the
				// next in the same call (at most one SCAN per master), so
				// an empty keyspace ends at once, as on one Redis.
				pos, nc = pos+1, 0
				continue
			}
			out, _ = encodeScan(pos+1, 0, len(nodes), tag)
		}
		b := resp.AppendArrayHeader(nil, 2)
		b = resp.AppendBulk(b, strconv.AppendUint(nil, out, 10))
		b = resp.AppendArrayHeader(b, len(keys))
		b = appendKeys(b, keys)
		s.relay(b)
		return
	}
}

// scanReply takes a node's SCAN reply apart: its next cursor and its keys.
func scanReply(raw []byte) (next uint64, keys []any, ok bool) {
	v, _, err := resp.Decode(raw, resp.ReplyLimits())
	arr, _ := v.([]any)
	if err != nil || len(arr) != 2 {
		return 0, nil, false
	}
	cur, _ := arr[0].([]byte)
	if keys, ok = arr[1].([]any); !ok {
		return 0, nil, false
	}
	next, err = strconv.ParseUint(string(cur), 10, 64)
	return next, keys, err == nil
}
