// Package decide holds the manager's decisions as pure functions: from the
// time, a policy, the cluster-wide rates of its keys, the remembered per-key state
// and the routing table currently published, it computes the next routing
// table and when to look again. Nothing here talks to Kubernetes or Redis, so
// every rule of docs/design.md (cheapest move first, N sizing, hysteresis, epochs)
// is table-tested without a cluster.
package decide

import (
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// Observation is one key's cluster-wide rates, as the manager estimates them
// from every node's summary (package hub).
type Observation struct {
	ReadsPerSecond  int64
	WritesPerSecond int64
	// Bound: the rates are an upper bound, not a count (some node's bound
	// on the keys it did not list is in them, and the key is not yet
	// counted exactly by every node: see docs/node-agent.md, "The
	// guarantee"). A bound over a threshold starts the key's sustainFor
	// timer but never makes it hot; only a count does (step). The zero
	// value is a count.
	Bound bool
	// Families are the command families the key's clients sent in the
	// window, ORed over the nodes (routing.Families): the moves chosen must
	// serve every one. Unknown (FamUnknown, set for a reporter of an
	// older version) allows only the moves that refuse nothing; none (0:
	// no command seen in the window, a key cooling down) refuses nothing.
	Families routing.Families
	// Refused counts the key's commands the sidecars refused because of
	// its move (a command the move cannot serve; not a shed one, not
	// Redis' own error) in the nodes' last report interval: a move in force
	// under which it is over 0 hurts its clients, who saw no such error
	// before it, and is rolled back (holdMoves).
	Refused int64
	// ReadsOverFor and WritesOverFor, for a count (not Bound) over the
	// read (write) threshold, are how long the source has seen it over at
	// every summary it took in, up to the observation: the hub sees each,
	// where passes see only some, so sustainFor is judged on them (step).
	// A duration, not a time, because the source's clock need not be the
	// decision's. Zero: the source does not track it (or it has just gone
	// over), and the timer runs from the first pass that saw the rate over.
	ReadsOverFor, WritesOverFor time.Duration
	// Moved are the outcomes of the key's commands its move served in the
	// nodes' last 1 to 16 report intervals (MoveWindowIntervals),
	// against those of the same sidecars' commands sent raw in the same
	// intervals (the baseline): a move in force whose path fails clearly
	// more than direct traffic in any of them is rolled back
	// (MoveFailingApart, holdMoves). MovedReads are the same of its reads
	// against the direct reads, MovedOthers of its other commands against
	// the direct others.
	Moved, MovedReads, MovedOthers MoveHistory
}

// Aggregate is what the fleet says of one policy.
type Aggregate struct {
	// Keys maps a logical key to its estimated cluster-wide rates.
	Keys map[string]Observation
	// FreshNodes count the nodes whose agent sent a summary recently.
	// StaleNodes count the nodes that host the policy's pods but whose agent
	// has been silent for longer than the staleness limit: their traffic is
	// not counted, which is worth a warning.
	FreshNodes, StaleNodes int
	// NextStale is when the first fresh node turns stale if it stays silent
	// (zero if none): the estimates change then even if nothing arrives.
	NextStale time.Time
}
