package decide

import (
	"fmt"
	"math"
)

// MoveOutcomes are the outcomes of a key's commands served by its move,
// and of the baseline: the commands the same sidecars sent raw (keys no
// move serves) in the same report intervals, summed over the nodes.
type MoveOutcomes struct {
	// Served counts the key's commands the data plane served by its move
	// (split, pre-aggregate, replicate, the read moves), and Failed those
	// of them that failed on the move's path: an i/o error, a timeout, a
	// pool exhausted, a place answering LOADING, MASTERDOWN, CLUSTERDOWN...
	// (engine.Failure), never Redis' own semantic errors (WRONGTYPE), which
	// the unmitigated key would have got too.
	Served, Failed int64
	// BaseTotal counts the commands the same sidecars sent raw in the
	// intervals they served the key by its move, and BaseFailed those of
	// them that failed by the same test.
	BaseTotal, BaseFailed int64
}

// The failure rule's bounds (docs/engine.md, "A move whose path fails is
// undone"). A fraction is judged only on enough failures: one or a few say
// nothing either way, whatever share of few commands they are. The
// commands served need no floor of their own beyond that: the Wilson
// bound of a few commands is wide (5 failed of 5 served is at least 36 %,
// against a baseline's upper bound that must be under half of it), and a
// floor of 20 kept a split whose reads all failed, 4 to 8 a second, for
// 1-2 s more than their failures took to tell (its reads judged apart:
// MoveFailingApart; the window's reads before the failure began count
// too). A baseline measured on fewer than minBaseline commands is no
// baseline (a sidecar that sends only the mitigated key cannot tell a
// failover of the whole upstream from a failure of the move's path, and
// a failover must not withdraw every split).
const (
	minServed     = minFailed
	minFailed     = 5
	minBaseline   = 20
	failureMargin = 0.01 // one percentage point above the baseline
)

// MoveSum sums the reports of a key's outcomes (one per node and summary)
// into the MoveOutcomes of a window, its baseline weighted to the move's
// commands. Each report's baseline stands for the commands its move
// served in the same sidecars and the same interval: summed as plain
// counts, reports whose move and direct commands are in different
// proportions would compare different times (a failover that began after
// one node's last summary and before another's: the first node sending
// mostly direct commands, all succeeding, the second mostly the move's,
// all failing, and the move "fails" 10 times more than direct traffic,
// in hub's TestFailoverThroughTheHubNeverWithdraws). So the baseline's
// failed fraction is the average of the reports' own, weighted by the
// commands each report's move served, and its count the effective number
// of direct commands behind that average (Kish's: a report whose move
// served many commands against few direct ones weighs a noisy fraction
// heavily, and counts as few). A single report is its own counts. Reports
// without direct commands say nothing of what failed alike, and are left
// out of both sides.
type MoveSum struct {
	served, failed int64
	// wFailed is Σ served·baseFailed/baseTotal, wSq Σ served²/baseTotal.
	wFailed, wSq float64
}

// Add adds one report.
func (s *MoveSum) Add(m MoveOutcomes) {
	if m.BaseTotal <= 0 || m.Served <= 0 {
		return
	}
	s.served += m.Served
	s.failed += min(max(m.Failed, 0), m.Served)
	sv, bt := float64(m.Served), float64(m.BaseTotal)
	s.wFailed += sv * float64(min(max(m.BaseFailed, 0), m.BaseTotal)) / bt
	s.wSq += sv * sv / bt
}

// Outcomes are the window's outcomes, what moveFails judges.
func (s *MoveSum) Outcomes() MoveOutcomes {
	if s.served == 0 {
		return MoveOutcomes{}
	}
	sv := float64(s.served)
	n := sv * sv / s.wSq
	b := s.wFailed / sv
	// Rounded against withdrawing: fewer direct commands, more of them
	// failed (a single report's own counts come back exactly).
	total := int64(math.Floor(n + 1e-6))
	return MoveOutcomes{Served: s.served, Failed: s.failed, BaseTotal: total, BaseFailed: min(int64(math.Ceil(b*n-1e-6)), total)}
}

// MoveWindowIntervals are the windows the failure rule is judged on, in
// report intervals, shortest first (MoveHistory). One interval's commands
// may be too few to tell a failure rate of a fifth from noise (22 served,
// 5 failed, at 45 commands a second and 500-ms intervals), and a summary
// sent early (urgent) right after a regular one holds only a sliver of an
// interval: the longer windows gather enough, while the shortest reacts at
// once to a path that fails most of what it serves. The longest are for a
// path that fails a small share of what it serves at a low rate: a split
// counter whose reads (a tenth of its commands) all fail while its
// increments go to the places still up, at 90 commands a second, failed
// 8 % of what it served against none of the direct commands, 16 of 170 in
// 4 intervals, which no window up to 4 intervals tells from noise; its
// clients saw those errors for as long as the node was down
// (TestFailingSplitPathRolledBack, under load). 8 intervals hold 32 of
// 340, enough; 16 leave room for half that rate.
var MoveWindowIntervals = [...]int{1, 2, 4, 8, 16}

// MoveHistory holds a key's MoveOutcomes over each of the windows of
// MoveWindowIntervals: MoveHistory[i] sums the outcomes the nodes reported
// in the last MoveWindowIntervals[i] report intervals.
type MoveHistory [len(MoveWindowIntervals)]MoveOutcomes

// MoveFailing is the failure rule over a key's history: the move is
// withdrawn when moveFails holds on any of its windows, and i is the
// shortest such window (its index in MoveWindowIntervals). Each window is
// judged by the same conservative test, so a failover that fails the
// move's path and the direct traffic alike passes on none of them
// (TestFailoverNeverWithdrawsAMove judges histories too). The one
// implementation of the rule: the manager's decision (holdMoves) and the
// hub's early trigger of a decision pass both call it.
func MoveFailing(h MoveHistory) (i int, failing bool) {
	for i, m := range h {
		if moveFails(m) {
			return i, true
		}
	}
	return 0, false
}

// MoveCommands are the commands of a key whose outcomes the failure rule
// judges together (AllCommands) or apart (MoveFailingApart).
type MoveCommands int

const (
	// AllCommands are every command of the key its move served.
	AllCommands MoveCommands = iota
	// ReadCommands are its reads (commands that write nothing), judged
	// against the same sidecars' direct reads.
	ReadCommands
	// OtherCommands are the others, judged against the direct others.
	OtherCommands
)

func (c MoveCommands) String() string {
	return [...]string{"commands", "reads", "other commands"}[c]
}

// MoveFailingApart is the failure rule over a key's histories: its reads
// (reads) and its other commands (others) apart, each against the same
// kind of the sidecars' direct commands, or all its commands together
// (all) when neither tells anything (a caller that does not tell the
// kinds apart); c names the history MoveFailing holds on, i its window.
// Apart, because a move may fail one kind of command only, while summed
// with the rest that kind's failures are too few a share to tell from
// noise: a split counter whose shard's node is down fails every read
// (a read sums every shard) while its increments go to the places still
// up; in TestFailingSplitPathRolledBack the reads were a tenth of the
// counter's commands, 8-10 % of them failed, and the rule needed 30-40
// failed reads over 2 to 16 report intervals (a split kept for the 60 s
// the test waits when its clients sent few commands), where its reads
// alone fail all of theirs. Each kind is judged against its own kind of
// direct commands: in a failover, direct writes fail (READONLY,
// MASTERDOWN) where direct reads may not, and a move's writes compared
// with a baseline of mostly reads would fail clearly more
// (TestFailoverOfOneKindNeverWithdraws). The hub counts as others every
// command not reported as a read, so reports of sidecars and agents of
// release 5, which tell no reads, are judged whole among the others.
func MoveFailingApart(all, reads, others MoveHistory) (c MoveCommands, i int, failing bool) {
	if reads == (MoveHistory{}) && others == (MoveHistory{}) {
		i, failing = MoveFailing(all)
		return AllCommands, i, failing
	}
	if i, failing = MoveFailing(reads); failing {
		return ReadCommands, i, true
	}
	i, failing = MoveFailing(others)
	return OtherCommands, i, failing
}

// moveFails reports whether the key's commands fail clearly more under its
// move than the same sidecars' direct traffic. With at least minServed
// commands served, minFailed of them failed and a baseline of at least
// minBaseline commands, it compares F, the lower bound of the move's
// failed fraction, with B, the upper bound of the baseline's (Wilson
// score bounds at 3 standard deviations, so that the noise of a few
// hundred commands is not taken for a difference), and withdraws when
// F > max(2·B, B + 1 %). A failover that fails everything alike never
// passes it (TestFailoverNeverWithdrawsAMove); a path that fails while
// direct traffic succeeds does, from 5 failures in 20 commands against
// none in a thousand (TestFailingPathWithdrawsAMove). The rule of one
// window of MoveFailing.
func moveFails(m MoveOutcomes) bool {
	if m.Served < minServed || m.Failed < minFailed || m.BaseTotal < minBaseline {
		return false
	}
	f, _ := wilson(min(m.Failed, m.Served), m.Served)
	_, b := wilson(min(max(m.BaseFailed, 0), m.BaseTotal), m.BaseTotal)
	return f > math.Max(2*b, b+failureMargin)
}

// wilsonZ is the bounds' width in standard deviations.
const wilsonZ = 3

// wilson is the Wilson score interval of a proportion of k in n (n > 0).
func wilson(k, n int64) (lo, hi float64) {
	kf, nf := float64(k), float64(n)
	z2 := float64(wilsonZ * wilsonZ)
	center := (kf + z2/2) / (nf + z2)
	half := wilsonZ / (nf + z2) * math.Sqrt(kf*(nf-kf)/nf+z2/4)
	return max(0, center-half), min(1, center+half)
}

// whyFailed is the reason a move withdrawn by MoveFailing on window i of
// h, the history of its commands c, gives, for status, `heatsink top` and
// the MoveWithheld Event.
func whyFailed(moves string, c MoveCommands, h MoveHistory, i int) string {
	m := h[i]
	in := "in the last report interval"
	if n := MoveWindowIntervals[i]; n > 1 {
		in = fmt.Sprintf("in the last %d report intervals", n)
	}
	return fmt.Sprintf("%s withdrawn: %d of the %d %s it served failed on its path (%.1f %%), against %.1f %% of the sidecars' direct %s, %s",
		moves, m.Failed, m.Served, c, 100*float64(m.Failed)/float64(m.Served), 100*float64(m.BaseFailed)/float64(max(m.BaseTotal, 1)), c, in)
}
