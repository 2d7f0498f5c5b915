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
// undone"). A fraction is judged only on enough commands: at 20 commands
// one failure is already 5 %, so fewer say nothing either way, and a
// baseline measured on fewer than minBaseline commands is no baseline (a
// sidecar that sends only the mitigated key cannot tell a failover of
// the whole upstream from a failure of the move's path, and a failover
// must not withdraw every split).
const (
	minServed     = 20
	minFailed     = 5
	minBaseline   = 20
	failureMargin = 0.01 // one percentage point above the baseline
)

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
// none in a thousand (TestFailingPathWithdrawsAMove). The pure rule of
// holdMoves.
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

// whyFailed is the reason a move withdrawn by moveFails gives, for status,
// `heatsink top` and the MoveWithheld Event.
func whyFailed(moves string, m MoveOutcomes) string {
	return fmt.Sprintf("%s withdrawn: %d of the %d commands it served failed on its path (%.1f %%), against %.1f %% of the sidecars' direct commands, in the last report interval",
		moves, m.Failed, m.Served, 100*float64(m.Failed)/float64(m.Served), 100*float64(m.BaseFailed)/float64(max(m.BaseTotal, 1)))
}
