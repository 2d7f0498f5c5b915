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
// of the two sums. 6,000 nodes, Poisson traffic, batches every 100 ms at each
// node's own phase carrying the traffic since the last one, as sidecars send
// them.
func TestRatesUnbiasedAcrossNodes(t *testing.T) {
	const nodes = 6000
	// Read between two batches, or just after one: where a span that ends
	// at the key's own last batch read high.
	for _, readAt := range []time.Duration{30 * time.Millisecond, 0} {
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
					s.Update("other", 1, 0, 0) // the node's other traffic: no batch is empty
				}
				s.Advance(t0.Add(149*100*time.Millisecond + readAt))
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
			t.Logf("read %v after a batch, per node %5.1f/s: per-node max %+5.1f%%, sum of averages %+5.1f%%, sum of one-slot rates %+5.1f%%",
				readAt, perNode, 100*bias(sumMax), 100*bias(sumAvg), 100*bias(sumRecent))
			// Sampling noise of the one-slot sum is under 1 % at 2/s per node
			// (12,000 events in a slot); 3 % leaves room for it. A span ending
			// at the key's own last batch read up to −5.5 % here.
			if math.Abs(bias(sumAvg)) > 0.03 || math.Abs(bias(sumRecent)) > 0.03 {
				t.Errorf("read %v after a batch, per node %v/s: sums off by %+.1f%% (averages) and %+.1f%% (one-slot rates), want within 3%%",
					readAt, perNode, 100*bias(sumAvg), 100*bias(sumRecent))
			}
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

// TestRatesUnbiasedWithLateBatches: the same sum when senders' flushes are
// irregular, as on a busy node (a sidecar descheduled or in a GC pause, the
// fleet simulator behind real time): a third of the flushes do not happen
// (their traffic goes with the next) and the others are up to 60 ms late.
// A slot boundary falls more often in a long gap between two batches than in
// a short one, so the first batch of a slot carries traffic from further
// before the boundary than a regular sender's half flush period: a one-slot
// rate that took its current slot to cover from half a flush period before
// the boundary read +5 % summed over 1,000 nodes at 0.95 writes/s each,
// enough to put a counter at 0.95 × its threshold over it (the fleet
// simulator's 0.95 × row at 1,000 nodes).
//
// And a key new 0.8 s before and pinned 0.2 s later ( the manager pins a key as soon as
// it nears a threshold, and decides on its first exact counts), counted
// from the pin: where the traffic counted so far ended, not a flush period
// before the pin when the last batch came earlier (then the first batch
// after the pin carried traffic from before that: +9 % at 0.95/s).
func TestRatesUnbiasedWithLateBatches(t *testing.T) {
	const nodes = 3000
	for _, c := range []struct {
		perNode float64
		pinAt   int // batch at which "x", new from batch pinAt-2, is pinned (0: never; x from the start)
	}{{0.95, 0}, {5, 0}, {20, 0}, {0.95, 142}, {5, 142}} {
		perNode := c.perNode
		var sumAvg, sumRecent float64
		for n := range nodes {
			s := mustNew(t, Config{K: 64, MemoryBytes: 64 << 10, Lead: 100 * time.Millisecond, MinSpan: 100 * time.Millisecond})
			rng := rand.New(rand.NewPCG(uint64(n), 11))
			t0 := time.Unix(1000, 0).Add(time.Duration(rng.Int64N(int64(100 * time.Millisecond))))
			// Paced traffic (the simulator's: operation k of the fleet at
			// node k mod nodes), delivered at the flushes that happen.
			phase := rng.Float64()
			sent := 0
			var last time.Time
			for b := range 150 {
				if b == c.pinAt {
					// The directive comes whether or not a batch does, between
					// the previous batch and this one: its summary tick
					// advanced the clock.
					s.Advance(t0.Add(time.Duration(b-1)*100*time.Millisecond + 60*time.Millisecond + time.Duration(rng.Int64N(int64(40*time.Millisecond)))))
					s.Pin("x")
				}
				if b < 149 && rng.IntN(3) == 0 {
					continue // no flush: the traffic waits for the next
				}
				at := t0.Add(time.Duration(b) * 100 * time.Millisecond)
				if b < 149 {
					at = at.Add(time.Duration(rng.Int64N(int64(60 * time.Millisecond))))
				}
				s.Advance(at)
				from := t0
				if c.pinAt > 0 {
					from = t0.Add(time.Duration(c.pinAt-2) * 100 * time.Millisecond)
				}
				owed := int(phase + perNode*max(at.Sub(from), 0).Seconds())
				if owed > sent {
					s.Update("x", 0, uint32(owed-sent), 0)
					sent = owed
				}
				s.Update("other", 1, 0, 0)
				last = at
			}
			s.Advance(last.Add(time.Duration(rng.Int64N(int64(100 * time.Millisecond)))))
			for _, it := range s.Top(10) {
				if it.Key == "x" {
					sumAvg += it.WriteAvg
					sumRecent += it.WriteRecent
				}
			}
		}
		want := perNode * nodes
		bias := func(v float64) float64 { return v/want - 1 }
		t.Logf("per node %5.2f/s, pinned at batch %d: sum of averages %+5.1f%%, sum of one-slot rates %+5.1f%%", perNode, c.pinAt, 100*bias(sumAvg), 100*bias(sumRecent))
		if math.Abs(bias(sumAvg)) > 0.03 || math.Abs(bias(sumRecent)) > 0.03 {
			t.Errorf("per node %v/s, pinned at batch %d: sums off by %+.1f%% (averages) and %+.1f%% (one-slot rates), want within 3%%",
				perNode, c.pinAt, 100*bias(sumAvg), 100*bias(sumRecent))
		}
	}
}
