package demo

import (
	"testing"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/cpulimit"
)

// TestAutoRelievesSmallShards: the demo's story with a policy that types no
// rate, on shards small enough for its keys to hurt. Every Redis node is
// held to a twentieth of a core by a CPU cgroup, as a pod's limits.cpu would
// hold it, and the policy says so (thresholds.auto.shardCPU: 50m). The
// manager learns each master's capacity at that allotment, and both viral
// keys are relieved on learned thresholds, as TestEndToEnd relieves them on
// typed ones: routed within 3 s of their spike (the capacity is trusted
// before the spikes: its CPU-seconds count in the allotment's seconds,
// capacity.OnCores), the busiest master under
// 1.5 × the mean afterwards, the counter exact.
func TestAutoRelievesSmallShards(t *testing.T) {
	if err := cpulimit.Available(); err != nil {
		t.Skipf("the shards cannot be held under a core here: %v", err)
	}
	cfg := Short()
	cfg.Auto = DefaultAuto()
	cfg.ShardCPU = 0.05
	res := runScenario(t, cfg)
	checkRelieved(t, res)
	for _, m := range []Moments{res.ViralRead, res.Counter} {
		if f := m.InForce; f == nil || f.ReadsFrom != v1alpha1.ThresholdLearned || f.WritesFrom != v1alpha1.ThresholdLearned {
			t.Errorf("%s: thresholds in force when routed %+v, want learned", m.Key, f)
		} else {
			t.Logf("%s: routed %v after its spike at %d reads/s, %d writes/s (learned)", m.Key, m.SpikeToRouted(), f.ReadsPerSecond, f.WritesPerSecond)
		}
	}
	for _, sh := range res.Shards {
		t.Logf("shard %s (replica %v): %d%% busy, capacity %d ops/s, confidence %d%%", sh.Address, sh.Replica, sh.UtilizationPercent, sh.CapacityOpsPerSecond, sh.ConfidencePercent)
	}
}
