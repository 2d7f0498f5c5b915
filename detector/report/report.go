// Package report holds the detector's pure decisions about reports: which
// keys are candidates, when a report is worth writing, and what it is
// called. They take the time and the sketch's view as arguments, so they are
// table-tested without a clock or an API server.
package report

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/detector/sketch"
)

// Thresholds are a policy's thresholds as the detector applies them.
type Thresholds struct {
	// ReadsPerSecond and WritesPerSecond are the policy's thresholds, summed
	// over every node by the manager.
	ReadsPerSecond, WritesPerSecond int64
	// Fraction of a threshold a key must reach on this node to be a
	// candidate. The manager sums nodes, so a key spread evenly over n nodes
	// is seen while n ≤ 1/Fraction.
	Fraction float64
}

// hotness is a key's largest rate relative to its threshold.
func (th Thresholds) hotness(r, w float64) float64 {
	return max(r/float64(max(th.ReadsPerSecond, 1)), w/float64(max(th.WritesPerSecond, 1)))
}

// Candidates picks, from the sketch's items, the top k by read rate and the
// top k by write rate among those at or above Fraction of their threshold,
// hottest first (by rate relative to threshold), ties by key.
func Candidates(items []sketch.Item, k int, th Thresholds) []v1alpha1.Candidate {
	minR := th.Fraction * float64(th.ReadsPerSecond)
	minW := th.Fraction * float64(th.WritesPerSecond)
	var byR, byW []sketch.Item
	for _, it := range items {
		if it.ReadRate > 0 && it.ReadRate >= minR {
			byR = append(byR, it)
		}
		if it.WriteRate > 0 && it.WriteRate >= minW {
			byW = append(byW, it)
		}
	}
	top := func(its []sketch.Item, rate func(sketch.Item) float64) []sketch.Item {
		slices.SortFunc(its, func(a, b sketch.Item) int {
			if c := cmpDesc(rate(a), rate(b)); c != 0 {
				return c
			}
			return strings.Compare(a.Key, b.Key)
		})
		return its[:min(k, len(its))]
	}
	chosen := map[string]sketch.Item{}
	for _, it := range top(byR, func(i sketch.Item) float64 { return i.ReadRate }) {
		chosen[it.Key] = it
	}
	for _, it := range top(byW, func(i sketch.Item) float64 { return i.WriteRate }) {
		chosen[it.Key] = it
	}
	out := make([]v1alpha1.Candidate, 0, len(chosen))
	for _, it := range chosen {
		out = append(out, v1alpha1.Candidate{
			Key:             it.Key,
			ReadsPerSecond:  round(it.ReadRate),
			WritesPerSecond: round(it.WriteRate),
			BytesPerSecond:  round(it.ByteRate),
		})
	}
	slices.SortFunc(out, func(a, b v1alpha1.Candidate) int {
		ha := th.hotness(float64(a.ReadsPerSecond), float64(a.WritesPerSecond))
		hb := th.hotness(float64(b.ReadsPerSecond), float64(b.WritesPerSecond))
		if c := cmpDesc(ha, hb); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func round(f float64) int64 {
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(math.Round(f))
}

// State is what the detector remembers of its last report for a policy.
type State struct {
	// Written is set once a report was written (or found).
	Written bool
	// At is when it was written.
	At time.Time
	// Candidates are what it said.
	Candidates []v1alpha1.Candidate
}

// Change is the relative change of a rate that is material. Smaller changes
// do not trigger a write: the manager's hysteresis is far coarser.
const Change = 0.2

// Decision says whether to write a report now.
type Decision int

const (
	// Skip: nothing to write.
	Skip Decision = iota
	// Write the candidates.
	Write
)

// Decide says whether to write now. It writes
//   - never within interval of the last write (the rate limit);
//   - when the candidates changed materially: a key came or went, or a rate
//     moved by more than Change;
//   - when there are candidates and the last write is 2 intervals old, so
//     the report stays fresh (the manager ignores reports older than 3
//     intervals);
//   - an empty report once, when the last candidates went away; then nothing
//     while no key is near a threshold.
func Decide(now time.Time, st State, cands []v1alpha1.Candidate, interval time.Duration) Decision {
	if st.Written && now.Sub(st.At) < interval {
		return Skip
	}
	if len(cands) == 0 {
		if st.Written && len(st.Candidates) > 0 {
			return Write
		}
		return Skip
	}
	if !st.Written || now.Sub(st.At) >= 2*interval || Material(st.Candidates, cands) {
		return Write
	}
	return Skip
}

// Material reports whether new differs materially from old.
func Material(old, new []v1alpha1.Candidate) bool {
	if len(old) != len(new) {
		return true
	}
	prev := make(map[string]v1alpha1.Candidate, len(old))
	for _, c := range old {
		prev[c.Key] = c
	}
	for _, c := range new {
		p, ok := prev[c.Key]
		if !ok || moved(p.ReadsPerSecond, c.ReadsPerSecond) || moved(p.WritesPerSecond, c.WritesPerSecond) ||
			moved(p.BytesPerSecond, c.BytesPerSecond) {
			return true
		}
	}
	return false
}

func moved(a, b int64) bool {
	d := math.Abs(float64(a - b))
	return d > Change*float64(max(a, 1))
}

// Name is the deterministic name of node's report for policy. Both are DNS
// subdomains, so "<policy>-<node>" is one too; when it is longer than 253
// bytes it is cut and suffixed with a hash of the full name so that it stays
// unique.
func Name(policy, node string) string {
	n := policy + "-" + node
	if len(n) <= 253 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	head := strings.TrimRight(n[:253-1-10], "-.")
	return head + "-" + hex.EncodeToString(sum[:5])
}
