package summary

import "github.com/heatsink-dev/heatsink/agentlink"

// MinUrgentMoveFailures is the fewest failures on a move's path, counted
// since the last summary, that can make a summary urgent: the manager's
// failure rule judges nothing on fewer (controllers/decide minFailed), so
// an early summary with fewer could not change its decision.
const MinUrgentMoveFailures = 5

// MovesUrgent reports whether a policy's move outcomes counted since the
// last summary (one per key, as the summary lists them) make the summary
// urgent (MoveUrgent).
func MovesUrgent(moved []agentlink.KeyMoved) bool {
	for i := range moved {
		if MoveUrgent(&moved[i]) {
			return true
		}
	}
	return false
}

// MoveUrgent reports whether one key's move outcomes counted since the
// last summary make the next summary urgent: at least
// MinUrgentMoveFailures of its commands failed on the move's path, and
// their failed fraction is above the same sidecars' direct commands' by
// the manager's margin (twice, and one point more), judged on the counts
// as they are. The manager withdraws a move whose path fails (decide's
// MoveFailing, asked for at once by the hub on the summary that shows it):
// sent at the report interval, that summary waited up to an interval
// (250 ms on average at 500 ms) after the failures began, and each
// further summary as long again while the evidence grew, so that the
// split of TestFailingSplitPathRolledBack was withdrawn 1.8-3.5 s after
// its node stopped. The manager's rule, with its statistical bounds over
// its windows (decide.MoveWindowIntervals), decides; this only says that the counts
// could have changed its answer. Whatever fails alike on both paths (a
// failover of the whole upstream) makes nothing urgent beyond noise, and
// each urgent summary needs as many new failures again (the counts are
// since the last summary), so a failing path sends a summary per
// MinUrgentMoveFailures failures at most, and no more than one per tick.
// Outcomes without direct commands beside them are no evidence to the
// manager (decide.MoveSum leaves them out) and make nothing urgent. As the
// manager does (decide.MoveFailingApart, controllers/hub moveSums), the
// key's reads and its other commands (all that are not reported as reads)
// are judged apart, each against its own kind of direct commands.
func MoveUrgent(m *agentlink.KeyMoved) bool {
	rs, bs := min(m.ReadServed, m.Served), min(m.BaseReads, m.BaseTotal)
	rf, bf := min(m.ReadFailed, rs, m.Failed), min(m.BaseReadsFailed, bs, m.BaseFailed)
	return worse(rs, rf, bs, bf) || worse(m.Served-rs, m.Failed-rf, m.BaseTotal-bs, m.BaseFailed-bf)
}

// worse reports whether failed of served fail clearly more than baseFailed
// of baseTotal, on at least MinUrgentMoveFailures failures.
func worse(served, failed, baseTotal, baseFailed uint64) bool {
	if failed < MinUrgentMoveFailures || served == 0 || baseTotal == 0 {
		return false
	}
	f := float64(min(failed, served)) / float64(served)
	b := float64(min(baseFailed, baseTotal)) / float64(baseTotal)
	return f > max(2*b, b+0.01)
}
