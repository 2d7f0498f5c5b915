package hub

import (
	"math"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/controllers/decide"
)

// movedReport is one summary's outcomes of the commands keys' moves served
// on a node since its previous summary, with their baseline
// (agentlink.PolicySummary.Moved), and when the hub received it.
type movedReport struct {
	at   time.Time
	keys []agentlink.KeyMoved
}

// longestMoveWindow is decide's longest window, in report intervals: how
// far back a node's movedReports are kept.
var longestMoveWindow = decide.MoveWindowIntervals[len(decide.MoveWindowIntervals)-1]

// keepMoved is a node's movedReports after one received at now: the
// previous ones still inside the longest window (decide.MoveHistory),
// then this one if it holds any outcome. Every summary replaces the node's
// rates, but outcomes are counts of commands since the previous summary:
// judging only the last one would judge a sliver of an interval whenever
// an urgent summary follows a regular one closely (22 commands, too few to
// tell a fifth failing from noise), so the hub keeps them, with their
// times, for decide.MoveFailing's windows.
func keepMoved(prev []movedReport, now time.Time, interval time.Duration, keys []agentlink.KeyMoved) []movedReport {
	if len(prev) == 0 && len(keys) == 0 {
		return nil // no move served anything here lately: nothing to keep
	}
	cut := now.Add(-time.Duration(longestMoveWindow) * interval)
	out := prev[:0] // the previous nodeState is dropped: its array is free
	for _, r := range prev {
		if r.at.After(cut) {
			out = append(out, r)
		}
	}
	if len(keys) > 0 {
		out = append(out, movedReport{at: now, keys: keys})
	}
	return out
}

// moveSums are a key's sums over decide's windows: of all its commands
// its move served, of its reads and of its other commands (everything
// not reported as a read, so a report that tells no reads counts whole
// among the others), each with its own kind of baseline
// (decide.MoveFailingApart).
type moveSums struct {
	all, reads, others [len(decide.MoveWindowIntervals)]decide.MoveSum
}

// addMoved adds a fresh node's movedReports to the keys' sums (only the
// keys in only, when only is not nil): a report belongs to the window of
// k report intervals when it came within k intervals of the node's last
// summary. Windows are counted back from the node's own last summary, not
// from the snapshot's time, so a node whose summary is a little late is
// judged on as many intervals as the others; each window then covers from
// k to k+1 intervals of the node's commands (the report just outside
// began its interval before the window did). Each report is added on its
// own (decide.MoveSum weighs its baseline to its move's commands).
func addMoved(sums map[string]*moveSums, n *nodeState, interval time.Duration, only map[string]bool) {
	for _, r := range n.moved {
		for w, k := range decide.MoveWindowIntervals {
			if !r.at.After(n.lastSeen.Add(-time.Duration(k) * interval)) {
				continue
			}
			for _, km := range r.keys {
				if only != nil && !only[km.Key] {
					continue
				}
				s := sums[km.Key]
				if s == nil {
					s = &moveSums{}
					sums[km.Key] = s
				}
				all, reads := outcomes(km)
				s.all[w].Add(all)
				s.reads[w].Add(reads)
				s.others[w].Add(decide.MoveOutcomes{Served: all.Served - reads.Served, Failed: all.Failed - reads.Failed,
					BaseTotal: all.BaseTotal - reads.BaseTotal, BaseFailed: all.BaseFailed - reads.BaseFailed})
			}
		}
	}
}

// outcomes are a report's outcomes of a key, all and its reads, each
// part bounded by its whole (the decoder checks it; a report made in
// process may not).
func outcomes(km agentlink.KeyMoved) (all, reads decide.MoveOutcomes) {
	all = decide.MoveOutcomes{Served: count(km.Served), BaseTotal: count(km.BaseTotal)}
	all.Failed, all.BaseFailed = min(count(km.Failed), all.Served), min(count(km.BaseFailed), all.BaseTotal)
	reads = decide.MoveOutcomes{Served: min(count(km.ReadServed), all.Served), BaseTotal: min(count(km.BaseReads), all.BaseTotal)}
	reads.Failed = min(count(km.ReadFailed), reads.Served, all.Failed)
	reads.BaseFailed = min(count(km.BaseReadsFailed), reads.BaseTotal, all.BaseFailed)
	// The others' failures are all's less the reads': at most their served.
	reads.Failed = max(reads.Failed, all.Failed-(all.Served-reads.Served))
	reads.BaseFailed = max(reads.BaseFailed, all.BaseFailed-(all.BaseTotal-reads.BaseTotal))
	return all, reads
}

// histories are the key's decide.MoveHistory of all its commands, its
// reads and its other commands.
func (s *moveSums) histories() (all, reads, others decide.MoveHistory) {
	for w := range s.all {
		all[w], reads[w], others[w] = s.all[w].Outcomes(), s.reads[w].Outcomes(), s.others[w].Outcomes()
	}
	return all, reads, others
}

// count is a reported count, bounded so that no sum overflows.
func count(n uint64) int64 {
	return int64(min(n, math.MaxInt64/1024))
}

// moveInterval is the report interval the view's windows are counted in
// (one second, the agents' default, before the policy's is known).
func (v *view) moveInterval() time.Duration {
	if v.interval > 0 {
		return v.interval
	}
	return time.Second
}

// outcomeDue reports whether an eighth of a report interval has passed
// since last: how often summaries' move outcomes are checked, or ask for a
// pass, at most (movesFailing, refusalsReported).
func (v *view) outcomeDue(last, now time.Time) bool {
	return now.Sub(last) >= v.moveInterval()/8
}

// movesFailing reports whether, after a summary that reported failures
// on a move's path (failing: its keys with a failed command), one of
// those keys' histories over the fresh nodes now passes the failure rule
// (decide.MoveFailingApart): the hub then asks for a decision pass at once
// rather than at the pass's next scheduled check, so that a failing move
// is withdrawn within a report interval of the summary that showed it.
// Checks are at most one per eighth of a report interval: with thousands
// of nodes, each sending failures, a check per summary would cost
// O(nodes²) per interval; the next summary checks soon enough.
func (v *view) movesFailing(now time.Time, failing map[string]bool) bool {
	if len(failing) == 0 || !v.outcomeDue(v.movedCheckAt, now) {
		return false
	}
	v.movedCheckAt = now
	sums := map[string]*moveSums{}
	for _, n := range v.nodes {
		if now.Sub(n.lastSeen) <= StaleAfterIntervals*v.moveInterval() {
			addMoved(sums, n, v.moveInterval(), failing)
		}
	}
	for _, s := range sums {
		if _, _, fails := decide.MoveFailingApart(s.histories()); fails {
			return true
		}
	}
	return false
}

// refusalsReported reports whether a summary that lists commands refused
// because of a key's move should make the hub ask for a decision pass at
// once: the pass withdraws a move on any refusal (decide's holdMoves), and
// its next scheduled check could come a report interval later. At most
// one per eighth of a report interval, as movesFailing: while a withdrawn
// move's table is on its way, every node may go on reporting refusals.
func (v *view) refusalsReported(now time.Time, refused []agentlink.KeyCount) bool {
	if len(refused) == 0 || !v.outcomeDue(v.refusedAt, now) {
		return false
	}
	v.refusedAt = now
	return true
}

// failedKeys are the keys of a summary's outcomes with a command failed on
// their move's path (nil if none).
func failedKeys(moved []agentlink.KeyMoved) map[string]bool {
	var out map[string]bool
	for _, km := range moved {
		if km.Failed > 0 {
			if out == nil {
				out = map[string]bool{}
			}
			out[km.Key] = true
		}
	}
	return out
}
