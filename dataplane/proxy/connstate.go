package proxy

import "github.com/heatsink-dev/heatsink/routing/command"

// connState is the connection state a session can replay on an upstream
// connection it opens later (another cluster node, a reconnect): the
// latest AUTH, HELLO and SELECT, each replacing the one before, so it is
// bounded by construction and never replays stale state.
//
// They are replayed in the order the client last sent them, because HELLO
// may authenticate too (HELLO 3 AUTH user pass): whichever of AUTH and
// HELLO came last decides the user.
type connState struct {
	cmds [3][]byte // by stateSlot; nil when never sent
	seq  [3]uint64
	n    uint64
}

const (
	slotAuth = iota
	slotHello
	slotSelect
)

// stateSlot maps a command.State command other than RESET to its slot.
func stateSlot(name []byte) int {
	switch {
	case eqFold(name, "AUTH"):
		return slotAuth
	case eqFold(name, "HELLO"):
		return slotHello
	}
	return slotSelect
}

// set records raw (which the caller no longer mutates) as the latest
// command of its slot.
func (c *connState) set(slot int, raw []byte) {
	c.n++
	c.cmds[slot], c.seq[slot] = raw, c.n
}

func (c *connState) reset() { *c = connState{} }

// undo is what set replaced, to restore when Redis refuses the command
// (a failed AUTH must not be replayed on the next connection: the client's
// connection is still authenticated as before).
type undo struct {
	active bool
	slot   int8
	seq    uint64 // the seq set gave; a later set of the slot wins
	prev   []byte
	pseq   uint64
	proto  int // the session's protocol before a HELLO
	// db is the session's database before a SELECT, restored unless
	// another change (dbSeq) came after (session_db.go).
	db    int32
	dbSeq uint64
}

// setUndoable is set, returning how to take it back.
func (c *connState) setUndoable(slot int, raw []byte, proto int) undo {
	u := undo{active: true, slot: int8(slot), prev: c.cmds[slot], pseq: c.seq[slot], proto: proto}
	c.set(slot, raw)
	u.seq = c.seq[slot]
	return u
}

// undo takes back a set whose command Redis refused, unless the slot has
// been set again since.
func (c *connState) undo(u undo) {
	if c.seq[u.slot] == u.seq {
		c.cmds[u.slot], c.seq[u.slot] = u.prev, u.pseq
	}
}

// len is the number of commands a replay sends.
func (c *connState) len() int {
	n := 0
	for _, b := range c.cmds {
		if b != nil {
			n++
		}
	}
	return n
}

// each calls f with each command to replay, oldest first.
func (c *connState) each(f func([]byte)) {
	var done [3]bool
	for range c.cmds {
		best := -1
		for i, b := range c.cmds {
			if b != nil && !done[i] && (best < 0 || c.seq[i] < c.seq[best]) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		done[best] = true
		f(c.cmds[best])
	}
}

// leavesState reports whether a forwarded command leaves connection state
// the proxy cannot replay (client name, tracking, READONLY, reply mode...).
// A dedicated session that sent one cannot silently move to a new upstream
// connection: the client would keep using state that no longer exists.
func leavesState(args [][]byte) bool {
	switch {
	case eqFold(args[0], "READONLY"), eqFold(args[0], "READWRITE"):
		return true
	case eqFold(args[0], "CLIENT"):
		if len(args) < 2 {
			return false
		}
		for _, ro := range [...]string{"ID", "GETNAME", "INFO", "LIST", "GETREDIR", "TRACKINGINFO", "HELP", "KILL", "UNBLOCK", "PAUSE", "UNPAUSE"} {
			if eqFold(args[1], ro) {
				return false
			}
		}
		return true
	}
	return false
}

func eqFold(b []byte, s string) bool { return command.EqFold(b, s) }
