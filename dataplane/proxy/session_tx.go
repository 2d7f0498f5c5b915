package proxy

// A transaction with a command the proxy refused.
//
// Redis refuses some commands at queue time (an unknown command, a wrong
// number of arguments, an ACL denial): the command gets its error, the
// transaction is marked, and EXEC answers EXECABORT and runs nothing. The
// proxy refuses commands inside MULTI too (one the mitigation cannot
// serve there, a shed key's command over its share, a node-wide command in
// a cluster transaction) and answers them itself, so Redis never queues
// them: forwarding EXEC then would run the rest and answer with fewer
// replies than the client queued commands, and a client that counts them
// (go-redis' TxPipeline) waits for the missing ones until its read times
// out. So a refusal inside MULTI marks the transaction as Redis would, and
// its EXEC becomes a DISCARD upstream and EXECABORT for the client: nothing
// of it runs, the watched keys are released, the connection stays usable
// (TestTxWithRefusedCommandAborts, test/clients TestTxRefusedCommandAborts).

// execAbortErr is Redis' own reply to the EXEC of a transaction with a
// command refused at queue time.
const execAbortErr = "EXECABORT Transaction discarded because of previous errors."

var discardCmd = []byte("*1\r\n$7\r\nDISCARD\r\n")

// refusedInTx is told that the proxy answered the current command with an
// error instead of sending it: inside MULTI the transaction is then
// aborted at its EXEC.
func (s *session) refusedInTx() {
	if s.inTx {
		s.txRefused = true
	}
}

// execAborted answers the EXEC of a transaction with a refused command
// (node: EXEC's own node, outside a cluster transaction's pin): the
// transaction Redis holds, if the MULTI reached it (a cluster MULTI waits
// for its first keyed command), is discarded, and the client gets
// EXECABORT after every reply owed before it.
func (s *session) execAborted(node int) {
	s.endTxDB([]byte("DISCARD")) // a queued SELECT does not apply
	if s.p.cfg.Cluster {
		node = s.pinned
	}
	if node >= 0 && !s.pinPending {
		s.forward(node, discardCmd, true, "")
	}
	s.localError(execAbortErr)
	s.inTx, s.watching, s.txRefused, s.pinPending = false, false, false, false
	s.unpin()
}
