package sketch

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRatesUnbiasedAcrossNodes: the manager sums one key's rates over
// every node, so a per-node bias grows with the fleet. The window average and
// the one-slot rate must each be unbiased; their per-node maximum is not (it
// is what the sketch ranks by, and it reads high for keys with few counts per
// slot), which is why summaries carry both and the manager takes the larger
// of the two sums. 400 nodes, Poisson traffic, batches every 100 ms at each
// node's own phase carrying the traffic since the last one, as sidecars send
// them.
func TestRatesUnbiasedAcrossNodes(t *testing.T) {
	const nodes = 400
	for _, perNode := range []float64{2, 5, 20, 100} {
		var sumMax, sumAvg, sumRecent float64
		for n := range nodes {
			s := mustNew(t, Config{K: 64, MemoryBytes: 64 << 10, Lead: 100 * time.Millisecond, MinSpan: 100 * time.Millisecond})
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			// Each node's sender flushes at its own phase, independent of
			// the agent's clock (and so of its slot boundaries).
			t0 := time.Unix(1000, 0).Add(time.Duration(rng.Int64N(int64(100 * time.Millisecond))))
			for b := range 150 { // 15 s: longer than the window
				s.Advance(t0.Add(time.Duration(b) * 100 * time.Millisecond))
				if k := poisson(rng, perNode/10); k > 0 {
					s.Update("x", uint32(k), 0, 0)
				}
			}
			s.Advance(t0.Add(149*100*time.Millisecond + 30*time.Millisecond))
			for _, it := range s.Top(10) {
				if it.Key == "x" {
					sumMax += it.ReadRate
					sumAvg += it.ReadAvg
					sumRecent += it.ReadRecent
				}
			}
		}
		want := perNode * nodes
		bias := func(v float64) float64 { return v/want - 1 }
		t.Logf("per node %5.1f/s: per-node max %+5.1f%%, sum of averages %+5.1f%%, sum of one-slot rates %+5.1f%%",
			perNode, 100*bias(sumMax), 100*bias(sumAvg), 100*bias(sumRecent))
		// Sampling noise of the sum is below 1.5% at 2/s per node (12,000
		// events in the window); 5% leaves room for it.
		if math.Abs(bias(sumAvg)) > 0.05 || math.Abs(bias(sumRecent)) > 0.05 {
			t.Errorf("per node %v/s: sums off by %+.1f%% (averages) and %+.1f%% (one-slot rates), want within 5%%",
				perNode, 100*bias(sumAvg), 100*bias(sumRecent))
		}
	}
}

// poisson draws a Poisson variate with mean lambda (Knuth; small lambda).
func poisson(rng *rand.Rand, lambda float64) int {
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}
