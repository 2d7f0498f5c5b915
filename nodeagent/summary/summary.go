// Package summary holds the node agent's pure decisions about what it tells
// the manager: which keys a policy's summary lists, the bound on every key
// it leaves out, and when a summary is worth sending before its interval is
// up. They take the sketch's view and the manager's directive as arguments,
// so they are table-tested without a clock, a socket or a manager.
package summary

import (
	"cmp"
	"slices"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
)

// Build lists, from the sketch's items, every pinned key and every key at
// or above floor in either direction (by the larger of its average and
// recent rates), hottest first (by rate relative to
// floor), at most maxKeys of them, and returns the bound on every key it
// does not list: the floor, the sketch's tracking level when that is higher
// (a key the sketch does not hold is below it), and the rates of the first
// key cut by maxKeys. Pinned keys are always listed and never cut.
func Build(items []sketch.Item, floor, tracking agentlink.Rates, maxKeys int) (keys []agentlink.KeyRates, unseen agentlink.Rates) {
	unseen = agentlink.Rates{Reads: max(floor.Reads, tracking.Reads), Writes: max(floor.Writes, tracking.Writes)}
	heat := func(it *sketch.Item) float64 {
		return max(it.ReadRate/max(floor.Reads, 1e-9), it.WriteRate/max(floor.Writes, 1e-9))
	}
	var listed []*sketch.Item
	pinned := 0
	for i := range items {
		it := &items[i]
		switch {
		case it.Pinned:
			pinned++
			listed = append(listed, it)
		case (it.ReadRate > 0 && it.ReadRate >= floor.Reads) || (it.WriteRate > 0 && it.WriteRate >= floor.Writes):
			listed = append(listed, it)
		}
	}
	slices.SortFunc(listed, func(a, b *sketch.Item) int {
		if a.Pinned != b.Pinned { // pinned first: never cut
			if a.Pinned {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(heat(b), heat(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	limit := max(maxKeys, pinned)
	if len(listed) > limit {
		for _, it := range listed[limit:] {
			unseen.Reads = max(unseen.Reads, it.ReadRate)
			unseen.Writes = max(unseen.Writes, it.WriteRate)
		}
		listed = listed[:limit]
	}
	keys = make([]agentlink.KeyRates, len(listed))
	for i, it := range listed {
		keys[i] = rates(it)
	}
	return keys, unseen
}

// rates is how a summary lists an item: the window average and the
// one-slot rate apart, so the manager can sum each over the nodes.
func rates(it *sketch.Item) agentlink.KeyRates {
	return agentlink.KeyRates{Key: it.Key, Reads: it.ReadAvg, Writes: it.WriteAvg,
		RecentReads: it.ReadRecent, RecentWrites: it.WriteRecent, Bytes: it.ByteRate, Pinned: it.Pinned,
		Families: it.Families}
}

// MinUrgentCount is the fewest counts (reads and writes) on which a key can
// make a summary urgent. A key's first batch is rated over one flush period
// (Lead and MinSpan: 100 ms), so one read reads as 10/s: over the alert
// level of a key spread over 1,000 nodes (4/s per node at the default
// 5,000/s threshold). Every new background key would then make a summary
// urgent: in the fleet simulator at 1,000 nodes, agents sent 3 urgent
// summaries a second each, on noise. A second count within the key's span
// is evidence: a background key that newly enters a node's store rarely
// has it, a key hot everywhere has it within a few flush periods (10/s per
// node, twice its threshold over 1,000 nodes: 59 % of nodes by 200 ms,
// 80 % by 300 ms; the rest report at their interval).
const MinUrgentCount = 2

// Sent is what an agent keeps of the last summary it sent for a policy,
// for Urgent: its keys, and which of them were at or above an alert level
// (worked out once per summary and alert level, not at every tick).
type Sent struct {
	keys  []agentlink.KeyRates
	alert agentlink.Rates
	over  map[string]bool // keys at or above alert; nil until asked
}

// Set records the keys of the summary just sent.
func (s *Sent) Set(keys []agentlink.KeyRates) { s.keys, s.over = keys, nil }

// wasOver reports whether key was at or above alert in the summary.
func (s *Sent) wasOver(key string, alert agentlink.Rates) bool {
	if s.over == nil || s.alert != alert {
		s.alert, s.over = alert, make(map[string]bool)
		for i := range s.keys {
			if over(s.keys[i].Reads, s.keys[i].Writes, alert) {
				s.over[s.keys[i].Key] = true
			}
		}
	}
	return s.over[key]
}

// Urgent reports whether a summary should go before its interval is up: a
// key among now (the sketch's items) is Alerting but was not at or above
// alert in the summary last sent. alert is the manager's estimate of a
// key's share of the warm band on one node (threshold × (1 − hysteresis) ÷
// nodes), so a key turning hot is sent at once from every node that sees
// its share of it, whether it is spread over one node or a thousand; keys
// that stay hot do not make summaries urgent again.
func Urgent(last *Sent, now []sketch.Item, alert agentlink.Rates) bool {
	for i := range now {
		if Alerting(&now[i], alert) && !last.wasOver(now[i].Key, alert) {
			return true
		}
	}
	return false
}

// Alerting reports whether it is at or above alert in either direction
// (by its window average, as summaries list it) on at least MinUrgentCount
// counts, and not pinned: the keys Urgent looks at.
//
// A pinned key never makes a summary urgent (its pin did, once: the
// Sender's new-pin mark). Urgency exists to get a key pinned; once it is, the
// manager sums its exact counts from every node's last summary, and that
// sum is unbiased only if when a node sends does not depend on the count.
// A key sparse on each node reads as a sawtooth there (its count since the
// pin jumps at each count, then decays as the span grows): sent at once
// when a jump lifted it over the alert level, and only at the interval once
// it had decayed, the nodes' last summaries held the tops of the teeth: a
// counter at 0.95 × its threshold over 1,000 nodes summed to 1,180-1,190
// and was mitigated (hub's TestUrgentSummariesKeepCountsUnbiased; the fleet
// simulator's 0.95 × row).
func Alerting(it *sketch.Item, alert agentlink.Rates) bool {
	return !it.Pinned && it.Reads+it.Writes >= MinUrgentCount && over(it.ReadAvg, it.WriteAvg, alert)
}

func over(reads, writes float64, alert agentlink.Rates) bool {
	return (alert.Reads > 0 && reads >= alert.Reads) || (alert.Writes > 0 && writes >= alert.Writes)
}

// Due reports whether a summary is due at now: its interval has passed
// since the last one, or it is urgent and at least minGap has.
func Due(now, last time.Time, interval, minGap time.Duration, urgent bool) bool {
	if last.IsZero() {
		return true
	}
	age := now.Sub(last)
	return age >= interval || (urgent && age >= minGap)
}
