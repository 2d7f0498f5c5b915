package demo

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// TestCalmClusterMitigatesNothing (issue 26, item 4, first bullet, the
// make-test length of hack/bench.d/46-demo-calm.sh's 10 minutes): the demo's
// real stack (kube-apiserver, 3-master Redis Cluster, manager, node agents,
// sidecars, go-redis clients) with only a Zipf(1.1) background over 100,000
// keys at 2,000 ops/s and a policy that types no rate. The counts go the
// real way to the manager, which decides on them at every pass; the
// masters' capacities are learned from their INFO (trusted after 0.1
// CPU-seconds here, as the run is short). Nothing may be mitigated, on
// thresholds learned on every master, with the traffic counted.
//
// Real time, not an injected clock: every component (sidecars' flushes,
// agents' summaries, the fleet server, the reconciler, the capacity
// sampler) runs on its own clock over real sockets, and the learned
// utilisation is Redis' CPU over clock time, which only real time keeps
// true.
func TestCalmClusterMitigatesNothing(t *testing.T) {
	cfg := Default()
	cfg.SetCalm()
	cfg.Duration = 25 * time.Second
	cfg.Auto = DefaultAuto()
	cfg.Auto.ConfidenceCPU = 0.2
	res := runScenario(t, cfg)
	c := res.Calm
	if len(c.Mitigated) > 0 {
		t.Errorf("mitigated %d keys of a calm Zipf background: %v", len(c.Mitigated), c.Mitigated)
	}
	// The manager counted the traffic and decided all along: at least one
	// pass per two report intervals.
	if c.CountedPerSecond < float64(cfg.BackgroundRate)/2 {
		t.Errorf("the manager counted %.0f ops/s of %d sent", c.CountedPerSecond, cfg.BackgroundRate)
	}
	if min := uint64(cfg.Duration / (2 * cfg.ReportInterval)); c.Passes < min {
		t.Errorf("%d reconcile passes in %s, want at least %d", c.Passes, cfg.Duration, min)
	}
	masters := 0
	for _, sh := range res.Shards {
		if sh.Replica {
			continue
		}
		masters++
		if sh.Thresholds == nil || sh.Thresholds.ReadsFrom != v1alpha1.ThresholdLearned || sh.Thresholds.WritesFrom != v1alpha1.ThresholdLearned {
			t.Errorf("master %s: thresholds %+v, want learned (capacity %d ops/s, confidence %d %%)", sh.Address, sh.Thresholds, sh.CapacityOpsPerSecond, sh.ConfidencePercent)
		}
	}
	if masters != 3 {
		t.Errorf("status lists %d masters, want 3: %+v", masters, res.Shards)
	}
}
