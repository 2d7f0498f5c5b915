package hub

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
)

// TestSustainedOnEveryCount: a key is hot once its count has been over its
// threshold at every summary the hub took in for sustainFor, whatever the
// decision passes saw. Passes run when the hub asks and when the last one
// said its decision would change by itself (decide.Output.NextCheck), and a
// pass takes a while at a thousand nodes, so passes see only some of the
// summaries. Two ways a key was hot on less, both here on the hub's view
// and decide.Decide, two nodes, sustainFor 1 s:
//   - its upper bound over the threshold started the timer, and the first
//     count over it, half a second later, made it hot;
//   - its count went under between two passes a second apart, over at
//     both, and the second made it hot.
func TestSustainedOnEveryCount(t *testing.T) {
	spec := &v1alpha1.HotKeyPolicySpec{}
	spec.Thresholds.ReadsPerSecond, spec.Thresholds.WritesPerSecond = 1000, 1_000_000
	spec.Thresholds.HysteresisPercent = 20
	spec.Thresholds.SustainFor.Duration = time.Second
	v1alpha1.SetDefaults(spec)
	v := newView()
	v.th = Thresholds{Reads: 1000, Writes: 1_000_000, Hysteresis: 0.2}
	v.setExpected(t0, map[string]bool{"a": true, "b": true})
	var st decide.State
	hot := func(at time.Duration) bool {
		now := t0.Add(at)
		snap := v.snapshot(now, time.Minute, time.Minute)
		out := decide.Decide(decide.Input{Now: now, Spec: spec, Observations: snap.Keys, State: st, Margin: 10 * time.Second})
		st = out.State
		for _, k := range st.Keys {
			if k.Key == "k" && k.ReadHot {
				return true
			}
		}
		return false
	}
	seq := map[string]uint64{}
	report := func(at time.Duration, node string, directive uint64, unseen, reads float64) {
		seq[node]++
		ps := psum(directive, unseen)
		if reads >= 0 {
			ps.Keys = append(ps.Keys, kr("k", reads))
		}
		v.apply(t0.Add(at), node, 1, seq[node], ps)
	}
	ms := time.Millisecond

	// The bound: a lists k at 600, b bounds it by its Unseen (500).
	report(0, "a", 1, 50, 600)
	report(0, "b", 1, 500, -1)
	if hot(0) {
		t.Fatal("hot on its bound")
	}
	// Pinned; every node counts it from 500 ms: 1,010, over.
	v.setPins([]string{"k"}, 2)
	report(500*ms, "a", 2, 50, 505)
	report(500*ms, "b", 2, 50, 505)
	if hot(1000 * ms) {
		t.Fatal("hot 1 s after its bound went over, on a count over for 0.5 s")
	}
	// Under between two passes, over at both.
	report(1200*ms, "a", 2, 50, 485) // 990
	report(1400*ms, "a", 2, 50, 505) // 1,010
	if hot(1500 * ms) {
		t.Fatal("hot on a count over at two passes 1 s apart, under between them")
	}
	if hot(2300 * ms) {
		t.Fatal("hot 0.9 s after its count last went over")
	}
	// Over at every summary since 1.4 s: hot at 2.4 s.
	report(2000*ms, "b", 2, 50, 506)
	if !hot(2400 * ms) {
		t.Fatal("not hot after its count was over at every summary for sustainFor")
	}
}
