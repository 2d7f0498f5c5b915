package hub

import "time"

// DetectionBudget is the detection part of a policy's reaction budget
// (docs/design.md, "The reaction budget"): the longest a key whose
// cluster-wide rate goes over its threshold (to stay there) takes to be
// decided hot, from the moment it crosses, at any node count and spread.
//
//	slot + interval           one slot of the sketch's window (window ÷
//	   + flush + tick         its slots: the report interval for windows of
//	                          2 to 60 intervals) holds only the key's new
//	                          traffic, so its one-slot rate is at least its
//	                          share on every node; every node's next summary
//	                          (at its own phase in the interval) lists it or
//	                          bounds it by its Unseen: the key's upper bound
//	                          is then over its threshold, which starts its
//	                          sustainFor timer and gets it pinned at once
//	                          (Hub.repinSoon); flush is the sidecars' counts
//	                          period, tick the agents' summary loop. A key
//	                          new to the nodes is usually over far sooner
//	                          (its rate is measured from its first count, and
//	                          a node seeing its share of the alert level
//	                          sends at once), but the estimate of a key at
//	                          1.1 × may take the slot to climb over
//	+ flush + 2 × tick        the pin reaches every agent, whose first tick
//	+ sustainFor              after a batch has counted the key since the
//	                          pin, or after a flush period without one,
//	                          sends the summary that makes the count exact
//	                          (nodeagent: a new pin makes a summary urgent;
//	                          sketch.PinsCounted: sent before, the count of
//	                          a node whose traffic still waits in its
//	                          sidecars would read zero);
//	                          the count, measured from the pin, is over the
//	                          threshold from then, and must stay over at
//	                          every summary for sustainFor
//	                          (TestSustainedOnEveryCount). A key pinned
//	                          before (on entering the warm band) is exact
//	                          already, and hot max(sustainFor, 2 × tick)
//	                          after its bound went over.
//
// The node count does not appear: every node reports within one interval
// whatever their number, and the floor keeps Σ Unseen within the warm band
// (docs/node-agent.md, "The guarantee"). Window matters only through the
// slot (Slot). TestDetectionWithinBudget checks it on
// generated traffic. A key spread so thinly that no node sees it in an
// interval is still bounded by the nodes' Unseen, so the bound holds for it
// too, but it becomes hot only once its exact count is over.
func DetectionBudget(window, reportInterval, sustainFor, flush, tick time.Duration) time.Duration {
	return Slot(window, reportInterval) + reportInterval + 2*flush + 3*tick + sustainFor
}

// Slot is the span a key's recent rate is measured over: the window over
// its slots, as nodeagent.SketchConfig divides it (window ÷ interval
// slots, from 2 to 60).
func Slot(window, reportInterval time.Duration) time.Duration {
	slots := 10
	if reportInterval > 0 {
		slots = min(max(int(window/reportInterval), 2), 60)
	}
	return window / time.Duration(slots)
}
