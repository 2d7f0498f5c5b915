package proxy

import "github.com/heatsink-dev/heatsink/routing/command"

// Databases. A routing table governs one logical database (the policy's
// spec.target.database, engine.Database). A client connection starts in
// database 0 and moves with SELECT; RESET brings it back to 0; HELLO and
// AUTH leave it. The proxy hands the engine a command, and reports it to
// the Observer, only when the connection's database is the table's: a
// command in any other database goes to Redis untouched, so no reply ever
// comes from another database than the client's.
//
// The event loop serves only connections in database 0 (SELECT and RESET
// hand a client to a session), so only sessions track a database:
//
//   - SELECT n outside a transaction sets it when the proxy sends it (the
//     commands pipelined after it are in n), and takes it back if Redis
//     refuses it. The engine is called only once every reply owed before
//     the command came (session.mitigated), so a refused SELECT is known
//     by then.
//   - SELECT inside MULTI is queued by Redis and applies at EXEC, unless
//     the transaction is aborted (WATCH, an error while queueing). The
//     proxy does not read EXEC's reply for it: after an EXEC of a
//     transaction holding a SELECT the database is unknown, and every
//     command goes raw until the next SELECT or RESET. DISCARD keeps the
//     database.
//   - An argument the proxy cannot read as an index (Redis will most
//     likely refuse it) makes the database unknown too.
//   - SWAPDB exchanges the contents of two databases under every client:
//     the proxy does not follow it (docs/proxy.md, Databases).

// unknownDB is a session's database when the proxy cannot tell it: no
// table's database, so the engine is never called.
const unknownDB = -1

// tableDB reports whether db is the database of the engine's table (0
// without an engine): only then may a command be served by the engine or
// counted for the policy.
func (p *Proxy) tableDB(db int32) bool {
	if e := p.cfg.Engine; e != nil {
		return db == e.Database()
	}
	return db == 0
}

// selectIndex is SELECT's index as Redis reads it (decimal digits, no
// sign, no leading zero), or unknownDB for anything else (which Redis
// refuses: a negative index is out of range).
func selectIndex(args [][]byte) int32 {
	if len(args) != 2 {
		return unknownDB
	}
	a := args[1]
	if len(a) == 0 || len(a) > 9 || len(a) > 1 && a[0] == '0' {
		return unknownDB
	}
	n := int32(0)
	for _, c := range a {
		if c < '0' || c > '9' {
			return unknownDB
		}
		n = n*10 + int32(c-'0')
	}
	return n
}

// stateDB applies a state command (SELECT, RESET; AUTH and HELLO leave the
// database) to the session's database as it is sent, and records in u how
// to take a SELECT back if Redis refuses it.
func (s *session) stateDB(args [][]byte, u *undo) {
	switch {
	case command.EqFold(args[0], "RESET"):
		s.txSelect = false
		s.setDB(0)
	case !command.EqFold(args[0], "SELECT"):
	case s.inTx || s.pinPending:
		s.txSelect = true // applies at EXEC, if the transaction runs
	default:
		u.db = s.db
		u.dbSeq = s.setDB(selectIndex(args))
	}
}

// setDB sets the session's database and returns the change's sequence
// number.
func (s *session) setDB(db int32) uint64 {
	s.db = db
	s.dbSeq++
	return s.dbSeq
}

// undoDB takes back a refused SELECT unless another change came after it.
func (s *session) undoDB(u undo) {
	if u.dbSeq != 0 && u.dbSeq == s.dbSeq {
		s.db = u.db
		s.dbSeq++
	}
}

// endTxDB is told of EXEC and DISCARD: an EXEC of a transaction holding a
// SELECT leaves the database unknown (see above).
func (s *session) endTxDB(name []byte) {
	if s.txSelect && s.inTx && command.EqFold(name, "EXEC") {
		s.setDB(unknownDB)
	}
	s.txSelect = false
}
