package summary

import (
	"iter"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// MinUrgentMoveFailures is the fewest failures on a move's path, in the
// manager's shortest window (MoveUrgentWithRecent), that can make a
// summary urgent: the manager's failure rule judges nothing on fewer
// (controllers/decide minFailed), so an early summary with fewer could not
// change its decision.
const MinUrgentMoveFailures = 5

// MovesUrgent reports whether a policy's move outcomes make the next
// summary urgent: those counted since the last summary (unsent, one per
// key), with those sent within the last report interval (recent, by key,
// asked only for a key with a failure not sent; nil: none), by
// MoveUrgentWithRecent.
func MovesUrgent(unsent iter.Seq[agentlink.KeyMoved], recent func(key string) agentlink.KeyMoved) bool {
	for m := range unsent {
		var r agentlink.KeyMoved
		if recent != nil && m.Failed > 0 {
			r = recent(m.Key)
		}
		if MoveUrgentWithRecent(&m, &r) {
			return true
		}
	}
	return false
}

// MoveUrgentWithRecent reports whether one key's outcomes counted since the
// last summary (unsent) make the next summary urgent, given those of the
// summaries sent within the last report interval (recent): when the unsent
// ones alone are (MoveUrgent), or when both together are and the recent
// ones alone were not. The manager's shortest window is one report
// interval, counted back from the node's last summary
// (decide.MoveWindowIntervals), so it judges both together; judging only
// the unsent ones, failures that trickle in (4 a summary, under load or at
// a low rate) never made a summary urgent, and the manager heard of them
// only at the interval: up to one report interval more. A failed command
// among the unsent ones is needed, so outcomes the manager has already
// judged make nothing urgent again, and the recent ones alone being urgent
// means the manager was told already: a failing path sends one summary
// when the window's failures first reach the rule, then one per
// MinUrgentMoveFailures more (MoveUrgent), as before.
func MoveUrgentWithRecent(unsent, recent *agentlink.KeyMoved) bool {
	if MoveUrgent(unsent) {
		return true
	}
	if unsent.Failed == 0 || MoveUrgent(recent) {
		return false
	}
	both := Add(*unsent, *recent)
	return MoveUrgent(&both)
}

// Add returns the sum of two outcome counts of one key (a's key).
func Add(a, b agentlink.KeyMoved) agentlink.KeyMoved {
	a.Served += b.Served
	a.Failed += b.Failed
	a.BaseTotal += b.BaseTotal
	a.BaseFailed += b.BaseFailed
	a.ReadServed += b.ReadServed
	a.ReadFailed += b.ReadFailed
	a.BaseReads += b.BaseReads
	a.BaseReadsFailed += b.BaseReadsFailed
	return a
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
