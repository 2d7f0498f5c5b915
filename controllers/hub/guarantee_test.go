package hub

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
	"github.com/heatsink-dev/heatsink/nodeagent/summary"
)

// The detection guarantee (docs/node-agent.md), end to end over the pure
// parts that carry it: every simulated node runs the agent's sketch and
// summary decisions, the hub's view sums them and pins what is near a
// threshold. Whatever the number of nodes and however a key's traffic is
// spread over them:
//   - a key whose cluster-wide rate is over its threshold is over it in the
//     manager's estimate (upper bound) at once;
//   - once pins are applied, no key below threshold × (1 − hysteresis) is
//     over the threshold in the estimate.
//
// Background: 200,000 reads/s in all, Zipf(1.1) over 200,000 keys, so some
// background keys are themselves hot, and the stores are full (the sketch's
// tracking level counts in the bound). Viral: 1.1 × threshold; near: 0.75 ×
// threshold (inside no band that may be mitigated); both spread by the
// scenario's rule.
func TestGuaranteeAtAnyNodeCount(t *testing.T) {
	spreads := map[string]func(node, nodes int, total float64, floor float64) float64{
		"one node": func(node, nodes int, total, _ float64) float64 {
			if node == 0 {
				return total
			}
			return 0
		},
		"even": func(_, nodes int, total, _ float64) float64 { return total / float64(nodes) },
		"skewed": func(node, nodes int, total, _ float64) float64 {
			h := 0.0
			for i := 1; i <= nodes; i++ {
				h += 1 / float64(i)
			}
			return total / float64(node+1) / h
		},
		// The adversary's spread: every node but one just under its floor (so
		// it does not list the key), the rest on one node.
		"under every floor": func(node, nodes int, total, floor float64) float64 {
			under := 0.95 * floor
			if node == 0 {
				return max(total-under*float64(nodes-1), 0)
			}
			return min(under, total/float64(nodes))
		},
	}
	nodeCounts := []int{1, 10, 100, 1000}
	th := Thresholds{Reads: 5000, Writes: 1000, Hysteresis: 0.2}
	for name, spread := range spreads {
		for _, n := range nodeCounts {
			// A thousand nodes for the spreads the node count stresses; the
			// others meet the same code paths at a hundred.
			if n == 1000 && (testing.Short() || name == "one node" || name == "skewed") {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d nodes", name, n), func(t *testing.T) {
				t.Parallel()
				checkGuarantee(t, n, th, spread)
			})
		}
	}
}

func checkGuarantee(t *testing.T, nodes int, th Thresholds, spread func(node, nodes int, total, floor float64) float64) {
	const (
		viral, near  = "viral", "near"
		background   = 100_000.0
		universe     = 200_000
		zipfS        = 1.1
		batch        = 100 * time.Millisecond
		warmup       = 12 * time.Second
		afterPinning = 2 * time.Second
	)
	p := Params{Thresholds: th, Window: 10 * time.Second, ReportInterval: time.Second, TopK: 64}
	dir := directive("ns/p", p, nodes, DefaultFloorFraction, nil, 1)
	cfg := nodeagent.SketchConfig(&dir, nodeagent.DefaultMemoryPerPolicy)
	sks := make([]*sketch.Sketch, nodes)
	rngs := make([]*rand.Rand, nodes)
	zipfs := make([]*rand.Zipf, nodes)
	acc := make([][2]float64, nodes) // fractional viral and near counts carried over
	for i := range sks {
		var err error
		if sks[i], err = sketch.New(cfg); err != nil {
			t.Fatal(err)
		}
		rngs[i] = rand.New(rand.NewPCG(uint64(i), uint64(nodes)))
		zipfs[i] = rand.NewZipf(rngs[i], zipfS, 1, universe-1)
		// Nodes are not in step: each starts its fractional counts at a
		// random phase (in step, a thousand nodes would all send their
		// one event in the same batch, which no real fleet does).
		acc[i] = [2]float64{rngs[i].Float64(), rngs[i].Float64()}
	}
	// Expected cluster-wide rate of background key k (Zipf pmf × total).
	norm := 0.0
	for k := range universe {
		norm += math.Pow(1+float64(k), -zipfS)
	}
	bgRate := func(k int) float64 { return background * math.Pow(1+float64(k), -zipfS) / norm }
	names := make([]string, universe)
	for k := range names {
		names[k] = fmt.Sprint("bg:", k)
	}
	viralRate, nearRate := 1.1*float64(th.Reads), 0.75*float64(th.Reads)
	share := make([][2]float64, nodes)
	for i := range nodes {
		share[i] = [2]float64{spread(i, nodes, viralRate, dir.Floor.Reads), spread(i, nodes, nearRate, dir.Floor.Reads)}
	}

	t0 := time.Unix(1_000_000, 0)
	now := t0
	perBatch := background / float64(nodes) * batch.Seconds()
	feed := func(d time.Duration) {
		for end := now.Add(d); now.Before(end); {
			now = now.Add(batch)
			for i, sk := range sks {
				sk.Advance(now)
				for range poisson(rngs[i], perBatch) {
					sk.Update(names[zipfs[i].Uint64()], 1, 0, 64)
				}
				for j, key := range [2]string{viral, near} {
					acc[i][j] += share[i][j] * batch.Seconds()
					if c := math.Floor(acc[i][j]); c > 0 {
						acc[i][j] -= c
						sk.Update(key, uint32(c), 0, 64)
					}
				}
			}
		}
	}
	v := newView()
	summarize := func(seq uint64, directive uint64) {
		for i, sk := range sks {
			sk.Advance(now)
			tr, tw := sk.Tracking()
			keys, unseen := summary.Build(sk.Top(sk.Capacity()), dir.Floor, agentlink.Rates{Reads: tr, Writes: tw}, nodeagent.DefaultMaxKeysPerSummary)
			v.apply(now, fmt.Sprint("node-", i), 1, seq, &agentlink.PolicySummary{Policy: "ns/p", Directive: directive, Unseen: unseen, Keys: keys})
		}
	}
	rate := func(snap Snapshot, key string) float64 { return float64(snap.Keys[key].ReadsPerSecond) }
	truth := func(key string) float64 {
		switch key {
		case viral:
			return viralRate
		case near:
			return nearRate
		}
		var k int
		fmt.Sscanf(key, "bg:%d", &k)
		return bgRate(k)
	}

	// Detection: every key over its threshold is over it in the estimate.
	feed(warmup)
	summarize(1, 1)
	snap := v.snapshot(now, time.Hour, time.Hour)
	t.Logf("unseen bound %.0f reads/s (%.1f%% of the threshold); %d keys in the view", snap.Unseen.Reads, 100*snap.Unseen.Reads/float64(th.Reads), len(snap.Keys))
	if got := rate(snap, viral); got <= float64(th.Reads) {
		t.Errorf("viral key at %.0f reads/s estimated %.0f: not over the %d threshold", viralRate, got, th.Reads)
	}
	for k := range 60 { // the hottest background keys
		key := fmt.Sprint("bg:", k)
		if tr := truth(key); tr > 1.05*float64(th.Reads) && rate(snap, key) <= float64(th.Reads) {
			t.Errorf("%s at %.0f reads/s estimated %.0f: missed", key, tr, rate(snap, key))
		}
	}

	// Pins, then nothing below threshold × (1 − hysteresis) is over it.
	pins := v.pinCandidates(&snap, nil, th, 2*int(p.TopK))
	v.setPins(pins, 2)
	for _, sk := range sks {
		for _, k := range pins {
			if !sk.Pin(k) {
				t.Fatalf("node refused pin %s", k)
			}
		}
	}
	feed(afterPinning)
	summarize(2, 2)
	snap = v.snapshot(now, time.Hour, time.Hour)
	if snap.Exact != len(pins) {
		t.Errorf("%d of %d pinned keys exact, want all", snap.Exact, len(pins))
	}
	for key, e := range snap.Keys {
		tr := truth(key)
		got := float64(e.ReadsPerSecond)
		if tr < 0.95*(1-th.Hysteresis)*float64(th.Reads) && got > float64(th.Reads) {
			t.Errorf("%s at %.0f reads/s (below %.0f) estimated %.0f after pinning: would be mitigated", key, tr, (1-th.Hysteresis)*float64(th.Reads), got)
		}
		if tr > 1.05*float64(th.Reads) && got <= float64(th.Reads) {
			t.Errorf("%s at %.0f reads/s estimated %.0f after pinning: lost", key, tr, got)
		}
	}
	t.Logf("pins %d; viral %.0f (true %.0f), near %.0f (true %.0f)", len(pins), rate(snap, viral), viralRate, rate(snap, near), nearRate)
}

// poisson draws a Poisson variate with mean lambda (normal approximation
// above 30).
func poisson(rng *rand.Rand, lambda float64) int {
	if lambda > 30 {
		return max(int(math.Round(lambda+math.Sqrt(lambda)*rng.NormFloat64())), 0)
	}
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}
