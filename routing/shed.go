package routing

import "math"

// The two directions a shed budget covers.
const (
	ShedReads  = 0
	ShedWrites = 1
)

// Budget is the cluster-wide budget of direction dir (ShedReads or
// ShedWrites); 0 means the direction is not shed.
func (s *Shed) Budget(dir int) int64 {
	if dir == ShedWrites {
		return s.WritesPerSecond
	}
	return s.ReadsPerSecond
}

// Demand is the published cluster-wide demand of direction dir.
func (s *Shed) Demand(dir int) int64 {
	if dir == ShedWrites {
		return s.DemandWrites
	}
	return s.DemandReads
}

// Share is the rate (per second) one reader admits in direction dir, given
// its own demand in that direction (attempts per second, admitted and shed,
// over its last measured interval; measured false while it has none): its
// proportional part of the budget, Budget × own ÷ Demand. A reader whose
// share reaches its demand sheds nothing, so no reader sheds while the
// cluster's demand is within the budget; an idle reader's share is 0, which
// leaves its part to the busy ones (they are what Demand is made of). A
// Demand below the reader's own (stale, or not published yet) counts as
// the reader's own, so a share never exceeds the budget. An unmeasured
// reader, or any reader while no demand is published, gets MinPerSecond,
// capped by the budget. It returns +Inf for a
// direction that is not shed.
//
// Summed over readers whose own demands sum to D, the shares sum to at
// most Budget × max(1, D ÷ Demand); the overshoot of a fleet is bounded by
// that, what its unmeasured readers admit and one command per reader
// (docs/engine.md, Shed).
func (s *Shed) Share(dir int, own float64, measured bool) float64 {
	b := float64(s.Budget(dir))
	if b <= 0 {
		return math.Inf(1)
	}
	d := float64(s.Demand(dir))
	if !measured || d <= 0 {
		// No demand published (a table written by hand, or one from
		// before the manager measured the key) is no ground for a share
		// of the whole budget: every reader would take all of it.
		return min(float64(s.MinPerSecond), b)
	}
	if own <= 0 {
		return 0
	}
	return b * own / max(d, own)
}

// ShedDemandStep is how far the measured demand may move either way from
// the published one before the manager publishes it again: a steady
// overload keeps the same table, so shedding adds no ConfigMap write per
// interval, and the shares sum to within this much of the budget.
const ShedDemandStep = 0.05

// PublishDemand is the demand the manager publishes for a shed direction,
// given the one published now (prev, 0 for none) and the rate measured
// over the fresh reports (attempts, shed ones included): prev while
// measured stays within ShedDemandStep of it either way, measured
// otherwise.
func PublishDemand(prev, measured int64) int64 {
	if measured <= 0 {
		return 0
	}
	if prev > 0 && math.Abs(float64(measured)-float64(prev)) <= float64(prev)*ShedDemandStep {
		return prev
	}
	return measured
}
