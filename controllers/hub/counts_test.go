package hub

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
)

// TestDecisionsOnCounts: decisions are on counts, not bounds, for every
// sustainFor. Many simulated nodes (the fleet model, fleet_test.go: the
// agent's sketch, summary and send rule, each node starting at its own
// phase, applying the pins at once), the hub's view, its pins every pinEvery and a decision pass
// (decide.Decide) every tick, over random trials: a random sustainFor in
// [50 ms, 3 s] (log-uniform), a random floor fraction in [0.1, 0.5] (how large Σ Unseen
// is: at 0.1 the floors' share, larger where full stores add their tracking
// levels), two read keys and two counters at random rates in
// [0.5, 0.95] × their threshold and a read key and a counter in
// [1.1, 1.3] ×, each spread over the nodes at random (evenly, over a few
// nodes only, 1/i, or just under every floor but one node's). Then:
//   - no key at or below 0.95 × its threshold is ever mitigated, though the
//     bound puts some of them over it (checked: the trials exercise that);
//   - every key at 1.1 × or more is, within pinEvery, one report interval
//     and sustainFor of the estimate first going over (its DetectedAt): the
//     bound gets it pinned within pinEvery, every node has counted it
//     exactly within one interval after the pin, and its count must then stay over
//     for sustainFor (TestSustainedOnEveryCount).
func TestDecisionsOnCounts(t *testing.T) {
	nodes, trials := 1000, 5
	if testing.Short() {
		nodes, trials = 100, 3
	}
	boundOver := 0
	for trial := range trials {
		t.Run(fmt.Sprint("trial ", trial), func(t *testing.T) {
			boundOver += checkCounts(t, nodes, uint64(trial), reactionModel{})
		})
	}
	if boundOver == 0 {
		t.Errorf("no key under its threshold was ever over it on the bound: the trials do not exercise the rule")
	}
}

type countsKey struct {
	name   string
	writes bool
	factor float64 // of the threshold
	share  []float64
}

// reactionModel is how the simulated fleet reacts to a key crossing its
// threshold, besides what the agents' send rule does (the fleet model,
// fleet_test.go: a summary at the tick after a directive newly pins a key,
// or a key newly reaches its alert level):
//   - the hub chooses the pins again as soon as a key not pinned enters the
//     warm or hot band (Hub.repinSoon), besides every pinEvery;
//   - each node starts, and so reports, at its own random phase within the
//     interval.
//
// The zero model is the older, slower one (pins every pinEvery only, node
// i starting at step i mod the interval's steps), whose bound is measured
// from the estimate first going over.
type reactionModel struct {
	repinOnCandidate, randomPhases bool
	// budget, if set, is the bound on the time from a key's traffic starting
	// to its decision (the detection part of the reaction budget);
	// detected reports the largest time seen, per key name.
	budget   time.Duration
	detected map[string]time.Duration
	// afterOver, if set, bounds the time from the estimate first going over
	// (DetectedAt) to the decision: the budget's 2 × tick + sustainFor, plus
	// the tick a pass waits for here.
	afterOver time.Duration
}

// checkCounts runs one trial and returns how many passes saw a key under
// its threshold over it on the bound.
func checkCounts(t *testing.T, nodes int, seed uint64, m reactionModel) int {
	const (
		tick   = 50 * time.Millisecond // the agents' tick and the hub's pass; counts arrive within it (flush 0)
		warmup = 3 * time.Second
		hotFor = 12 * time.Second
		bgRate = 10.0 // ops/s per node
	)
	rng := rand.New(rand.NewPCG(seed, 0xc0ffee))
	// Log-uniform: short ones, where the bound alone would have decided,
	// as often as long ones.
	sustain := time.Duration(50*math.Pow(3000.0/50, rng.Float64())) * time.Millisecond
	fraction := 0.1 + 0.4*rng.Float64()
	f := newFleet(t, fleetConfig{nodes: nodes, fraction: fraction, sustain: sustain,
		step: tick, flush: tick, tick: tick, pass: tick, repinOnCandidate: m.repinOnCandidate}, rng, seed)
	th, dir, interval := f.th, f.dir, f.p.ReportInterval

	spreads := []struct {
		name string
		f    func(node int, total, floor float64) float64
	}{
		{"even", func(_ int, total, _ float64) float64 { return total / float64(nodes) }},
		{"few nodes", func(node int, total, _ float64) float64 {
			few := max(nodes/20, 1)
			if node%20 == 0 {
				return total / float64(few)
			}
			return 0
		}},
		{"1/i", func(node int, total, _ float64) float64 {
			h := 0.0
			for i := 1; i <= nodes; i++ {
				h += 1 / float64(i)
			}
			return total / float64(node+1) / h
		}},
		{"under every floor", func(node int, total, floor float64) float64 {
			under := 0.95 * floor
			if node == 0 {
				return max(total-under*float64(nodes-1), 0)
			}
			return min(under, total/float64(nodes))
		}},
	}
	var keys []countsKey
	addKey := func(name string, writes bool, lo, hi float64) {
		k := countsKey{name: name, writes: writes, factor: lo + (hi-lo)*rng.Float64(), share: make([]float64, nodes)}
		total, floor := k.factor*float64(th.Reads), dir.Floor.Reads
		if writes {
			total, floor = k.factor*float64(th.Writes), dir.Floor.Writes
		}
		sp := spreads[rng.IntN(len(spreads))]
		for i := range nodes {
			k.share[i] = sp.f(i, total, floor)
		}
		keys = append(keys, k)
		t.Logf("%s: %.2f × threshold, %s", name, k.factor, sp.name)
	}
	addKey("low-read-1", false, 0.5, 0.95)
	addKey("low-read-2", false, 0.5, 0.95)
	addKey("low-counter-1", true, 0.5, 0.95)
	addKey("low-counter-2", true, 0.5, 0.95)
	addKey("hot-read", false, 1.1, 1.3)
	addKey("hot-counter", true, 1.1, 1.3)
	t.Logf("%d nodes, sustainFor %v, floor fraction %.2f", nodes, sustain, fraction)

	acc := make([][]float64, nodes)
	for i := range acc {
		acc[i] = make([]float64, len(keys))
		for j := range acc[i] {
			acc[i][j] = rng.Float64()
		}
	}
	if !m.randomPhases {
		for i, a := range f.agents {
			a.start = 1 + i%int(interval/tick)
		}
	}
	t0 := time.Unix(1_000_000, 0)
	start := t0.Add(warmup)
	f.traffic = func(i, _ int, now time.Time, sk *sketch.Sketch) {
		for range poisson(rng, bgRate*tick.Seconds()) {
			f.backgroundOp(i, sk, rng, 5)
		}
		if now.Before(start) {
			return
		}
		for j := range keys {
			acc[i][j] += keys[j].share[i] * tick.Seconds()
			if c := math.Floor(acc[i][j]); c > 0 {
				acc[i][j] -= c
				if keys[j].writes {
					sk.Update(keys[j].name, 0, uint32(c), 64)
				} else {
					sk.Update(keys[j].name, uint32(c), 0, 64)
				}
			}
		}
	}
	boundOver := 0
	f.observe = func(_ time.Time, snap *Snapshot) {
		for _, k := range keys {
			o := snap.Keys[k.name]
			rate, limit := o.ReadsPerSecond, th.Reads
			if k.writes {
				rate, limit = o.WritesPerSecond, th.Writes
			}
			if k.factor < 1 && o.Bound && rate > limit {
				boundOver++
			}
		}
	}
	f.run(t0, start.Add(hotFor), start)
	hotAt, detected := f.hotAt, f.detected
	for _, k := range keys {
		at, hot := hotAt[k.name]
		switch {
		case k.factor < 1 && hot:
			t.Errorf("%s at %.2f × its threshold mitigated %v after it started", k.name, k.factor, at.Sub(start))
		case k.factor >= 1.1 && !hot:
			t.Errorf("%s at %.2f × its threshold never mitigated", k.name, k.factor)
		case k.factor >= 1.1 && m.budget > 0:
			took := at.Sub(start)
			if took > m.budget {
				t.Errorf("%s at %.2f × its threshold mitigated %v after its traffic started, over the budget's detection part %v", k.name, k.factor, took, m.budget)
			}
			if after := at.Sub(detected[k.name]); after > m.afterOver {
				t.Errorf("%s at %.2f × its threshold mitigated %v after its estimate went over, want at most %v", k.name, k.factor, after, m.afterOver)
			}
			m.detected[k.name] = max(m.detected[k.name], took)
			t.Logf("%s: over in the estimate %v after it started, mitigated %v after it started (budget %v)", k.name, detected[k.name].Sub(start), took, m.budget)
		case k.factor >= 1.1:
			took := at.Sub(detected[k.name])
			limit := pinEvery + interval + sustain
			if took > limit {
				t.Errorf("%s at %.2f × its threshold mitigated %v after its estimate went over, want at most %v", k.name, k.factor, took, limit)
			}
			t.Logf("%s: over in the estimate %v after it started, mitigated %v after that (bound %v)", k.name, detected[k.name].Sub(start), took, limit)
		}
	}
	t.Logf("passes with a key under its threshold over it on the bound: %d", boundOver)
	return boundOver
}

func contains(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}

// TestDetectionWithinBudget checks the detection part of the reaction
// budget (DetectionBudget, docs/design.md) on generated traffic: random
// rates, spreads over the nodes and report phases, a random sustainFor and
// floor fraction (checkCounts), with the hub's immediate pins (reactionModel)
// and the agents' send rule, which echoes a new pin at the first tick
// after a batch counted it or a flush period passed (the fleet model,
// fleet_test.go). Every key at
// 1.1 × its threshold or more is decided hot within the budget from the
// moment its traffic starts; no key at or under 0.95 × ever is.
func TestDetectionWithinBudget(t *testing.T) {
	nodes, trials := 1000, 4
	if testing.Short() {
		nodes, trials = 100, 4
	}
	// checkCounts' step: the agents' tick and the sidecars' flush period
	// (counts arrive within it); a new pin's echo waits for a batch up to
	// a flush period.
	const tick, flush = 50 * time.Millisecond, 50 * time.Millisecond
	worst := map[string]time.Duration{}
	for trial := range trials {
		t.Run(fmt.Sprint("trial ", trial), func(t *testing.T) {
			// checkCounts draws sustainFor from the same seed first: the
			// budget is the trial's.
			rng := rand.New(rand.NewPCG(uint64(100+trial), 0xc0ffee))
			sustain := time.Duration(50*math.Pow(3000.0/50, rng.Float64())) * time.Millisecond
			m := reactionModel{repinOnCandidate: true, randomPhases: true,
				budget: DetectionBudget(10*time.Second, time.Second, sustain, flush, tick), detected: worst,
				afterOver: flush + 2*tick + sustain + tick}
			checkCounts(t, nodes, uint64(100+trial), m)
		})
	}
	t.Logf("slowest decisions from the traffic's start: %v", worst)
}
