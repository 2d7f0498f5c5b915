package controllers

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
)

// TestReportDue: the aggregated report is rewritten at most once an
// interval, and then only for a change worth reading; the noise of
// background keys under the warm band is not one.
func TestReportDue(t *testing.T) {
	th := hub.Thresholds{Reads: 5000, Writes: 1000, Hysteresis: 0.2} // warm band: 4,000 reads/s or 800 writes/s
	c := func(key string, r, w int64) v1alpha1.Candidate {           // counted exactly (pinned)
		return v1alpha1.Candidate{Key: key, ReadsPerSecond: r, WritesPerSecond: w, Exact: true}
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	last := reportState{at: at, nodes: 100, cands: []v1alpha1.Candidate{c("viral", 9000, 0), c("bg:1", 2100, 0), c("bg:2", 0, 400)}}
	later := at.Add(10 * time.Second)
	for name, tc := range map[string]struct {
		now   time.Time
		last  reportState
		nodes int32
		cands []v1alpha1.Candidate
		want  bool
	}{
		"never written":                     {now: at, nodes: 100, want: true},
		"within the interval, whatever":     {now: at.Add(9 * time.Second), last: last, nodes: 3, cands: []v1alpha1.Candidate{c("new", 90000, 0)}},
		"nothing changed":                   {now: later, last: last, nodes: 100, cands: last.cands},
		"background keys came and went":     {now: later, last: last, nodes: 100, cands: []v1alpha1.Candidate{c("viral", 9000, 0), c("bg:3", 3900, 0), c("bg:4", 0, 790)}},
		"a background key moved by a third": {now: later, last: last, nodes: 100, cands: []v1alpha1.Candidate{c("viral", 9000, 0), c("bg:1", 1400, 0), c("bg:2", 0, 400)}},
		"a background key moved by a third of the threshold": {now: later, last: last, nodes: 100,
			cands: []v1alpha1.Candidate{c("viral", 9000, 0), c("bg:1", 3800, 0), c("bg:2", 0, 400)}},
		"a background key rose into the warm band": {now: later, last: last, nodes: 100,
			cands: []v1alpha1.Candidate{c("viral", 9000, 0), c("bg:1", 2100, 0), c("bg:2", 0, 800)}, want: true},
		"a warm key came":          {now: later, last: last, nodes: 100, cands: append([]v1alpha1.Candidate{c("warm", 0, 800)}, last.cands...), want: true},
		"the hot key went":         {now: later, last: last, nodes: 100, cands: last.cands[1:], want: true},
		"the hot key moved by 20%": {now: later, last: last, nodes: 100, cands: []v1alpha1.Candidate{c("viral", 10800, 0), c("bg:1", 2100, 0), c("bg:2", 0, 400)}},
		"the hot key moved by 25%": {now: later, last: last, nodes: 100, cands: []v1alpha1.Candidate{c("viral", 6750, 0), c("bg:1", 2100, 0), c("bg:2", 0, 400)}, want: true},
		"an upper bound alone in the warm band": {now: later, last: last, nodes: 100,
			cands: append([]v1alpha1.Candidate{{Key: "bg:9", ReadsPerSecond: 4500}}, last.cands...)},
		"counted exactly, it is in the warm band": {now: later, last: reportState{at: at, nodes: 100, cands: []v1alpha1.Candidate{{Key: "bg:9", ReadsPerSecond: 4500}}},
			nodes: 100, cands: []v1alpha1.Candidate{c("bg:9", 4400, 0)}, want: true},
		"counted exactly, it is not": {now: later, last: reportState{at: at, nodes: 100, cands: []v1alpha1.Candidate{{Key: "bg:9", ReadsPerSecond: 4500}}},
			nodes: 100, cands: []v1alpha1.Candidate{c("bg:9", 3000, 0)}},
		"a tenth of the nodes more": {now: later, last: last, nodes: 111, cands: last.cands, want: true},
		"one node less":             {now: later, last: last, nodes: 99, cands: last.cands},
	} {
		if got := reportDue(tc.now, tc.last, tc.nodes, tc.cands, th, 10*time.Second); got != tc.want {
			t.Errorf("%s: reportDue = %v, want %v", name, got, tc.want)
		}
	}
}
