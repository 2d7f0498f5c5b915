package hub

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
)

// TestSparseCounterCount: the count (the exact estimate) of a key sparse on
// every node is unbiased. A counter spread evenly over 1,000 simulated
// nodes, about one write a second on each (Poisson), as the agents see it:
// each node's sidecar flushes every sidecarlink.FlushInterval at its own
// phase, a batch carrying the writes since the last one; each agent ticks
// every nodeagent.DefaultTick from its own start, sends its summary when
// the agent's send rule says so (the fleet model, fleet_test.go) and
// applies pins at once; the hub's view,
// its pins every pinEvery and a decision pass (decide.Decide) every 50 ms,
// over a Zipf background that fills every store (so the estimate is a bound
// until the key is pinned), with one sidecar a node or four, reports at
// random phases or just after a flush. Then:
//   - at 0.88 × the threshold the counter is never mitigated, whatever
//     sustainFor (50 ms here, the shortest), and its count, once exact,
//     stays within 3 % of the truth on average and under the threshold;
//   - at 1.1 × it is mitigated within max(sustainFor, pinEvery) + one
//     report interval of its estimate first going over.
func TestSparseCounterCount(t *testing.T) {
	nodes := fleetNodes(200)
	for _, c := range []sparseCase{
		{name: "one sidecar a node", senders: 1},
		// A report just after the node's only sidecar flushed: the case
		// that an estimator whose span depends on the key's own last batch
		// reads high.
		{name: "reports just after a flush", senders: 1, aligned: true},
		// The last batch's sender is ahead of the others: reads low a little.
		{name: "four sidecars a node", senders: 4},
	} {
		for _, factor := range []float64{0.88, 1.1} {
			c.factor = factor
			t.Run(fmt.Sprintf("%s/%v × threshold", c.name, factor), func(t *testing.T) {
				checkSparse(t, nodes, c, 7)
			})
		}
	}
}

type sparseCase struct {
	name    string
	senders int // sidecars a node, each flushing at its own phase
	aligned bool
	factor  float64 // of the threshold
}

func checkSparse(t *testing.T, nodes int, c sparseCase, seed uint64) {
	factor := c.factor
	const (
		step    = 10 * time.Millisecond
		pass    = 50 * time.Millisecond
		warmup  = 3 * time.Second
		hotFor  = 12 * time.Second
		bgRate  = 10.0 // ops/s per node
		sustain = 50 * time.Millisecond
		counter = "counter"
	)
	rng := rand.New(rand.NewPCG(seed, 0x5a125e))
	// The deployed flush and tick.
	f := newFleet(t, fleetConfig{nodes: nodes, fraction: DefaultFloorFraction, sustain: sustain,
		step: step, pass: pass, senders: c.senders}, rng, seed)
	th, interval, flush := f.th, f.p.ReportInterval, f.flush
	if c.aligned {
		// Each agent ticks in the step its first sidecar flushed in.
		flushSteps := int(flush / step)
		for _, a := range f.agents {
			if a.start = a.start/flushSteps*flushSteps + a.flushAt[0]; a.start < 1 {
				a.start += flushSteps
			}
		}
	}
	perNode := factor * float64(th.Writes) / float64(nodes)
	t0 := time.Unix(1_000_000, 0)
	start := t0.Add(warmup)
	f.traffic = func(i, _ int, now time.Time, sk *sketch.Sketch) {
		// A batch: the sidecar's traffic since its last flush. Never empty:
		// a sidecar sends a batch at every flush while its pod has traffic
		// (see docs/node-agent.md on nodes where it has none).
		for range max(1, poisson(rng, bgRate*flush.Seconds()/float64(c.senders))) {
			sk.Update(f.background(i), 1, 0, 64)
		}
		if !now.Before(start) {
			if k := poisson(rng, perNode*flush.Seconds()/float64(c.senders)); k > 0 {
				sk.Update(counter, 0, uint32(k), 64)
			}
		}
	}
	var exactAt time.Time
	var sumAvg, sumRecent, sumExact, minExact, maxExact, maxAvg, maxRecent float64
	minExact = math.Inf(1)
	exactPasses := 0
	f.observe = func(now time.Time, _ *Snapshot) {
		if s := f.v.keys[counter]; s != nil {
			if e := f.v.estimate(s); e.exact {
				if exactAt.IsZero() {
					exactAt = now
				}
				exactPasses++
				sumExact += e.lower.Writes
				minExact, maxExact = min(minExact, e.lower.Writes), max(maxExact, e.lower.Writes)
				maxAvg, maxRecent = max(maxAvg, s.writes), max(maxRecent, s.rwrites)
				sumAvg, sumRecent = sumAvg+s.writes, sumRecent+s.rwrites
			}
		}
	}
	f.run(t0, start.Add(hotFor), start)
	hotAt, detected := f.hotAt[counter], f.detected[counter]
	truth := factor * float64(th.Writes)
	if exactPasses == 0 {
		t.Fatalf("the counter's count never became exact")
	}
	mean := sumExact / float64(exactPasses)
	t.Logf("%d nodes, counter at %.0f writes/s (%.2f/s a node): exact %v after it started; count %.0f–%.0f, mean %.0f (%+.1f %%); Σ averages mean %+.1f %%, max %.0f; Σ one-slot rates mean %+.1f %%, max %.0f",
		nodes, truth, perNode, exactAt.Sub(start), minExact, maxExact, mean, 100*(mean/truth-1),
		100*(sumAvg/float64(exactPasses)/truth-1), maxAvg, 100*(sumRecent/float64(exactPasses)/truth-1), maxRecent)
	// The mean's sampling noise is about 1 %; a span ending at the key's
	// own last batch read +3.9 % with reports just after a flush.
	if math.Abs(mean/truth-1) > 0.03 {
		t.Errorf("mean count %.0f is %+.1f %% off the true %.0f, want within 3 %%", mean, 100*(mean/truth-1), truth)
	}
	switch {
	case factor < 1 && !hotAt.IsZero():
		t.Errorf("counter at %.2f × its threshold mitigated %v after it started (count up to %.0f)", factor, hotAt.Sub(start), maxExact)
	case factor < 1 && maxExact > float64(th.Writes):
		t.Errorf("counter at %.2f × its threshold counted up to %.0f, over the threshold", factor, maxExact)
	case factor >= 1.1 && hotAt.IsZero():
		t.Errorf("counter at %.2f × its threshold never mitigated", factor)
	case factor >= 1.1:
		took, limit := hotAt.Sub(detected), max(sustain, pinEvery)+interval
		if took > limit {
			t.Errorf("counter at %.2f × its threshold mitigated %v after its estimate went over, want at most %v", factor, took, limit)
		}
		t.Logf("over in the estimate %v after it started, mitigated %v after that (bound %v)", detected.Sub(start), took, limit)
	}
}
