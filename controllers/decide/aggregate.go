// Package decide holds the manager's decisions as pure functions: from the
// time, a policy, the summed detector reports, the remembered per-key state
// and the routing table currently published, it computes the next routing
// table and when to look again. Nothing here talks to Kubernetes or Redis, so
// every rule of docs/design.md (cheapest move first, N sizing, hysteresis, epochs)
// is table-tested without a cluster.
package decide

import (
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/keyfilter"
)

// StaleAfterIntervals is how many report intervals a report stays fresh. A
// detector writes at most once per interval and only when its candidates
// change materially, so a quiet but live node may skip a couple of intervals.
const StaleAfterIntervals = 3

// Observation is one key's rates summed over the fresh reports of all nodes.
type Observation struct {
	ReadsPerSecond  int64
	WritesPerSecond int64
}

// Aggregate is what the reports of one policy say.
type Aggregate struct {
	// Keys maps a logical key to its summed rates.
	Keys map[string]Observation
	// FreshNodes and StaleNodes count nodes by the age of their newest report.
	// StaleNodes counts only nodes whose old report still listed candidates:
	// they stopped reporting while keys were hot, which is worth a warning.
	FreshNodes, StaleNodes int
	// QuietNodes counts nodes whose newest report is old but listed no
	// candidate. Detectors write nothing while no key is hot, so this is the
	// normal state of a healthy, quiet cluster, not a fault.
	QuietNodes int
	// NextStale is when the first fresh report turns stale (zero if none):
	// the rates change then even if no report does.
	NextStale time.Time
}

// AggregateReports sums the candidates of the newest fresh report of every
// node. A report older than StaleAfterIntervals × reportInterval is ignored;
// its node counts as stale if the report listed candidates (it went silent
// while keys were hot) and as quiet if it listed none (detectors stay silent
// until a key turns hot, so an old empty report is what a live node leaves). Keys the filter rejects are dropped, so a
// detector with an outdated view of the policy cannot get them mitigated.
// filter may be nil (every key passes).
func AggregateReports(now time.Time, reportInterval time.Duration, reports []v1alpha1.HotKeyReport, filter *keyfilter.Filter) Aggregate {
	newest := make(map[string]*v1alpha1.HotKeyReport, len(reports))
	for i := range reports {
		r := &reports[i]
		node := r.Labels[v1alpha1.LabelNode]
		if node == "" {
			node = r.Spec.NodeName
		}
		if old, ok := newest[node]; !ok || old.Spec.GeneratedAt.Before(&r.Spec.GeneratedAt) {
			newest[node] = r
		}
	}
	agg := Aggregate{Keys: make(map[string]Observation)}
	maxAge := StaleAfterIntervals * reportInterval
	for _, r := range newest {
		if now.Sub(r.Spec.GeneratedAt.Time) > maxAge {
			if len(r.Spec.Candidates) == 0 {
				agg.QuietNodes++
			} else {
				agg.StaleNodes++
			}
			continue
		}
		agg.FreshNodes++
		agg.NextStale = earliest(agg.NextStale, r.Spec.GeneratedAt.Add(maxAge).Add(time.Nanosecond))
		for _, c := range r.Spec.Candidates {
			if filter != nil && !filter.Match(c.Key) {
				continue
			}
			o := agg.Keys[c.Key]
			o.ReadsPerSecond += c.ReadsPerSecond
			o.WritesPerSecond += c.WritesPerSecond
			agg.Keys[c.Key] = o
		}
	}
	return agg
}
