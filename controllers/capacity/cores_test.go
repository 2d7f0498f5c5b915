package capacity

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

func TestOnCores(t *testing.T) {
	nodes := []Node{
		{Addr: "a", Estimate: Estimate{Capacity: 40000, Utilization: 0.2, OpsPerSecond: 8000, Confidence: 0.6}},
		{Addr: "b", Replica: true, Estimate: Estimate{Capacity: 10000, Utilization: 0.05, OpsPerSecond: 500, Confidence: 0.1}},
	}
	for _, tc := range []struct {
		shardCPU       string // "" for unset
		capA, utilA    float64
		capB, utilB    float64
		confA, confB   float64
		thresholdReads int64
		overTarget     bool
	}{
		// One core: what Redis reports. 25 % of 40,000.
		{shardCPU: "", capA: 40000, utilA: 0.2, capB: 10000, utilB: 0.05, confA: 0.6, confB: 0.1, thresholdReads: 10000},
		{shardCPU: "1", capA: 40000, utilA: 0.2, capB: 10000, utilB: 0.05, confA: 0.6, confB: 0.1, thresholdReads: 10000},
		// Half a core: half the ops/s, twice as busy, CPU-seconds count
		// twice.
		{shardCPU: "500m", capA: 20000, utilA: 0.4, capB: 5000, utilB: 0.1, confA: 1, confB: 0.2, thresholdReads: 5000},
		// A quarter of a core: 0.2 of a core is 80 % of it, over the
		// default 70 % target.
		{shardCPU: "250m", capA: 10000, utilA: 0.8, capB: 2500, utilB: 0.2, confA: 1, confB: 0.4, thresholdReads: 2500, overTarget: true},
	} {
		t.Run("shardCPU="+tc.shardCPU, func(t *testing.T) {
			auto := &v1alpha1.AutoThresholds{}
			if tc.shardCPU != "" {
				q := resource.MustParse(tc.shardCPU)
				auto.ShardCPU = &q
			}
			got := OnCores(nodes, auto.Cores())
			if got[0].Capacity != tc.capA || got[0].Utilization != tc.utilA || got[1].Capacity != tc.capB || got[1].Utilization != tc.utilB ||
				got[0].Confidence != tc.confA || got[1].Confidence != tc.confB {
				t.Fatalf("got %+v / %+v", got[0].Estimate, got[1].Estimate)
			}
			if got[0].OpsPerSecond != 8000 || got[1].Replica != true {
				t.Errorf("ops/s and role must not change: %+v", got)
			}
			if nodes[0].Capacity != 40000 {
				t.Fatalf("the sampler's nodes were changed")
			}
			th := v1alpha1.Thresholds{Auto: auto}
			f := th.InForce(v1alpha1.LearnedShard{Capacity: got[0].Capacity, Confidence: got[0].Confidence, Utilization: got[0].Utilization})
			if f.ReadsPerSecond != tc.thresholdReads || f.OverTarget != tc.overTarget {
				t.Errorf("in force %+v, want %d reads/s, over target %v", f, tc.thresholdReads, tc.overTarget)
			}
		})
	}
	t.Run("a nil auto and an out-of-range value are one core", func(t *testing.T) {
		var nilAuto *v1alpha1.AutoThresholds
		q := resource.MustParse("2")
		for _, c := range []float64{nilAuto.Cores(), (&v1alpha1.AutoThresholds{ShardCPU: &q}).Cores()} {
			if c != 1 {
				t.Errorf("cores %v, want 1", c)
			}
		}
	})
}
