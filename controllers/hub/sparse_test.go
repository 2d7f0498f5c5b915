package hub

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/nodeagent"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
	"github.com/heatsink-dev/heatsink/nodeagent/summary"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// TestSparseCounterCount: the count (the exact estimate) of a key sparse on
// every node is unbiased. A counter spread evenly over 1,000 simulated
// nodes, about one write a second on each (Poisson), as the agents see it:
// each node's sidecar flushes every sidecarlink.FlushInterval at its own
// phase, a batch carrying the writes since the last one; each node reports
// every interval at its own phase and applies pins at once; the hub's view,
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
	nodes := 1000
	if testing.Short() {
		nodes = 200
	}
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
		tick     = 10 * time.Millisecond
		pass     = 50 * time.Millisecond
		interval = time.Second
		warmup   = 3 * time.Second
		hotFor   = 12 * time.Second
		bgRate   = 10.0 // ops/s per node
		universe = 20_000
		sustain  = 50 * time.Millisecond
		counter  = "counter"
	)
	flush := sidecarlink.FlushInterval
	rng := rand.New(rand.NewPCG(seed, 0x5a125e))
	th := Thresholds{Reads: 5000, Writes: 1000, Hysteresis: 0.2}
	p := Params{Thresholds: th, Window: 10 * time.Second, ReportInterval: interval, TopK: 64}
	dir := directive("ns/p", p, nodes, DefaultFloorFraction, nil, 1)
	cfg := nodeagent.SketchConfig(&dir, 0) // the smallest sketch: full stores
	spec := &v1alpha1.HotKeyPolicySpec{}
	spec.Thresholds.ReadsPerSecond, spec.Thresholds.WritesPerSecond = th.Reads, th.Writes
	spec.Thresholds.HysteresisPercent = 20
	spec.Thresholds.SustainFor.Duration = sustain
	v1alpha1.SetDefaults(spec)
	perNode := factor * float64(th.Writes) / float64(nodes)

	sks := make([]*sketch.Sketch, nodes)
	zipfs := make([]*rand.Zipf, nodes)
	flushPhase := make([][]int, nodes)
	reportPhase := make([]int, nodes)
	seq := make([]uint64, nodes)
	flushTicks, reportTicks := int(flush/tick), int(interval/tick)
	for i := range sks {
		var err error
		if sks[i], err = sketch.New(cfg); err != nil {
			t.Fatal(err)
		}
		zipfs[i] = rand.NewZipf(rng, 1.1, 1, universe-1)
		flushPhase[i], reportPhase[i] = make([]int, c.senders), rng.IntN(reportTicks)
		for j := range flushPhase[i] {
			flushPhase[i][j] = rng.IntN(flushTicks)
		}
		if c.aligned {
			reportPhase[i] = reportPhase[i]/flushTicks*flushTicks + flushPhase[i][0]
		}
	}
	names := make([]string, universe)
	for k := range names {
		names[k] = fmt.Sprint("bg:", k)
	}

	v := newView()
	v.th = th
	version := uint64(1)
	var items []sketch.Item
	var st decide.State
	var pinsAt time.Time
	maxAge := StaleAfterIntervals * interval
	t0 := time.Unix(1_000_000, 0)
	start := t0.Add(warmup)
	var hotAt, detected, exactAt time.Time
	var sumAvg, sumRecent, sumExact, minExact, maxExact, maxAvg, maxRecent float64
	minExact = math.Inf(1)
	exactPasses := 0
	for n := 1; ; n++ {
		now := t0.Add(time.Duration(n) * tick)
		if now.After(start.Add(hotFor)) {
			break
		}
		on := !now.Before(start)
		for i, sk := range sks {
			for _, phase := range flushPhase[i] {
				if n%flushTicks != phase {
					continue
				}
				// A batch: the sidecar's traffic since its last flush.
				sk.Advance(now)
				// Never empty: a sidecar sends a batch at every flush
				// while its pod has traffic (see docs/node-agent.md on nodes
				// where it has none).
				for range max(1, poisson(rng, bgRate*flush.Seconds()/float64(c.senders))) {
					sk.Update(names[zipfs[i].Uint64()], 1, 0, 64)
				}
				if on {
					if k := poisson(rng, perNode*flush.Seconds()/float64(c.senders)); k > 0 {
						sk.Update(counter, 0, uint32(k), 64)
					}
				}
			}
			if n%reportTicks == reportPhase[i] {
				sk.Advance(now)
				items = sk.AppendItems(items[:0])
				tr, tw := sk.Tracking()
				ks, unseen := summary.Build(items, dir.Floor, agentlink.Rates{Reads: tr, Writes: tw}, nodeagent.DefaultMaxKeysPerSummary)
				seq[i]++
				v.apply(now, fmt.Sprint("node-", i), 1, seq[i], &agentlink.PolicySummary{Policy: "ns/p", Directive: version, Unseen: unseen, Keys: ks})
			}
		}
		if n%int(pass/tick) != 0 {
			continue
		}
		v.expire(now, maxAge)
		snap := v.snapshot(now, maxAge, maxAge)
		if !on {
			continue
		}
		if now.Sub(pinsAt) >= pinEvery {
			pinsAt = now
			var mitigated []string
			for _, k := range st.Keys {
				if k.ReadHot || k.WriteHot {
					mitigated = append(mitigated, k.Key)
				}
			}
			pins := v.pinCandidates(&snap, mitigated, th, 2*int(max(p.TopK, 8)))
			if v.setPins(pins, version+1) {
				version++
				for _, sk := range sks {
					for _, k := range sk.Pinned() {
						if !contains(pins, k) {
							sk.Unpin(k)
						}
					}
					for _, k := range pins {
						sk.Pin(k)
					}
				}
			}
		}
		out := decide.Decide(decide.Input{Now: now, Spec: spec, Observations: snap.Keys, State: st, Margin: 10 * time.Second})
		st = out.State
		if s := v.keys[counter]; s != nil {
			if e := v.estimate(s); e.exact {
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
		for _, ks := range st.Keys {
			if ks.Key == counter && ks.WriteHot && hotAt.IsZero() {
				hotAt = now
				if ks.DetectedAt != nil {
					detected = *ks.DetectedAt
				}
			}
		}
	}
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
