package hub

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
)

// TestUrgentSummariesKeepCountsUnbiased: the fleet simulator's 0.95 × row,
// as the agents send it. A counter and a read key at 0.95 × their
// thresholds, spread evenly over 1,000 nodes and paced as the simulator
// paces them (operation k of the fleet at node k mod nodes, so about one
// write a second on each node), each node flushing its sidecars every
// sidecarlink.FlushInterval at its own phase; each agent ticks every
// nodeagent.DefaultTick from its own start and sends a summary when the
// agent's send rule says so (the fleet model, fleet_test.go: summary.Sender
// and summary.Schedule, the code nodeagent runs), and the hub's view, its
// pins (at once on a new candidate, and every pinEvery) and a decision
// pass every tick with sustainFor 1 s, as in the simulator. Neither key is
// ever mitigated, and the counter's exact count stays under its threshold.
//
// What it catches: a pinned key sparse on every node reads as a sawtooth
// on each (its count since the pin jumps at each write, then decays as its
// span grows); a summary made urgent by the jump over the alert level
// replaced the node's last one at the top of the tooth, while its decay
// was reported only at the interval, so the sum over the nodes' last
// summaries read high for the first seconds after the pin.
func TestUrgentSummariesKeepCountsUnbiased(t *testing.T) {
	nodes := fleetNodes(300)
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			checkUrgentFleet(t, nodes, 0.95, seed)
		})
	}
	t.Run("1.1 ×", func(t *testing.T) { checkUrgentFleet(t, nodes, 1.1, 0) })
}

func checkUrgentFleet(t *testing.T, nodes int, factor float64, seed uint64) {
	const (
		step    = 10 * time.Millisecond
		warmup  = 4 * time.Second
		hotFor  = 12 * time.Second
		bgRate  = 20.0 // ops/s per node: every batch has some
		sustain = time.Second
		counter = "counter"
		viral   = "viral"
	)
	rng := rand.New(rand.NewPCG(seed, 0x0e6e))
	// The deployed flush and tick; a hub pass every tick.
	f := newFleet(t, fleetConfig{nodes: nodes, fraction: DefaultFloorFraction, sustain: sustain,
		step: step, repinOnCandidate: true}, rng, seed)
	th, interval, flush, tick := f.th, f.p.ReportInterval, f.flush, f.tick
	for i, a := range f.agents {
		a.flushAt[0] = i * int(flush/step) / nodes // the simulator's phases
	}
	// share is node i's part of the first total operations of the fleet
	// (simproto's pacing: operation k at node k mod nodes).
	share := func(total uint64, i int) uint64 {
		if total <= uint64(i) {
			return 0
		}
		return (total-uint64(i)-1)/uint64(nodes) + 1
	}
	t0 := time.Unix(1_000_000, 0)
	start := t0.Add(warmup)
	writesSent, readsSent := make([]uint64, nodes), make([]uint64, nodes) // paced traffic handed out so far
	f.traffic = func(i, _ int, now time.Time, sk *sketch.Sketch) {
		for range max(1, poisson(rng, bgRate*flush.Seconds())) {
			sk.Update(f.background(i), 1, 0, 64)
		}
		hot := max(now.Sub(start), 0).Seconds()
		if w := share(uint64(factor*float64(th.Writes)*hot), i); w > writesSent[i] {
			sk.Update(counter, 0, uint32(w-writesSent[i]), 64)
			writesSent[i] = w
		}
		if r := share(uint64(factor*float64(th.Reads)*hot), i); r > readsSent[i] {
			sk.Update(viral, uint32(r-readsSent[i]), 0, 64)
			readsSent[i] = r
		}
	}
	maxExact := map[string]float64{}
	var sumExact float64
	exactPasses := 0
	f.observe = func(time.Time, *Snapshot) {
		for _, k := range []string{counter, viral} {
			if s := f.v.keys[k]; s != nil {
				if e := f.v.estimate(s); e.exact {
					maxExact[k] = max(maxExact[k], e.lower.Reads, e.lower.Writes)
					if k == counter {
						sumExact += e.lower.Writes
						exactPasses++
					}
				}
			}
		}
	}
	f.run(t0, start.Add(hotFor), t0)
	hotAt, urgent, regular := f.hotAt, f.early, f.regular
	t.Logf("%d nodes, keys at %.2f ×: summaries %d at the interval, %d urgent; exact counts up to %.0f writes/s (counter, mean %.0f), %.0f reads/s (viral)",
		nodes, factor, regular, urgent, maxExact[counter], sumExact/float64(max(exactPasses, 1)), maxExact[viral])
	if maxExact[counter] == 0 || maxExact[viral] == 0 {
		t.Fatalf("the keys' counts never became exact: the test does not exercise pins")
	}
	if factor > 1 {
		// The same agents and hub at 1.1 ×: both keys are still mitigated,
		// within the detection budget from their traffic's start.
		budget := DetectionBudget(f.p.Window, interval, sustain, flush, tick)
		for _, k := range []string{counter, viral} {
			at, ok := hotAt[k]
			switch {
			case !ok:
				t.Errorf("%s at %.2f × its threshold never mitigated", k, factor)
			case at.Sub(start) > budget:
				t.Errorf("%s at %.2f × its threshold mitigated %v into the hot event, over the budget %v", k, factor, at.Sub(start), budget)
			default:
				t.Logf("%s mitigated %v into the hot event (budget %v)", k, at.Sub(start), budget)
			}
		}
		return
	}
	for k, at := range hotAt {
		t.Errorf("%s at %.2f × its threshold mitigated %v into the hot event", k, factor, at.Sub(start))
	}
	// One pass's count can be over (a summary per node over a few hundred
	// milliseconds since the pin counts one write or none: 1,030-1,200 on
	// single passes here); its sustainFor is what the decision takes.
	// The mean is what a bias moves: about 1 % of noise.
	truth := factor * float64(th.Writes)
	if mean := sumExact / float64(exactPasses); mean > 1.03*truth {
		t.Errorf("counter at %.2f × its threshold counted %.0f writes/s on average (%+.1f %%), want within 3 %% of %.0f", factor, mean, 100*(mean/truth-1), truth)
	}
}
