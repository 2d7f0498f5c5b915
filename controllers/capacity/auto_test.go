package capacity

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestAutoThresholdsFromMeasuredCapacity (issue 26, item 4, third bullet):
// on a real 3-master cluster, the master made expensive (SUNIONSTORE of
// two 1,000-member sets) learns a lower capacity than a cheap neighbour
// (GET of a small value), so its derived thresholds are lower, and a key
// read at a rate between the two is mitigated on the dear master and not
// on the cheap one. The capacities are measured (real load, real INFO);
// the decision runs on an injected clock over sustainFor. The confidence
// scale is shrunk to the test's short load (full at 0.05 CPU-seconds
// instead of 30).
func TestAutoThresholdsFromMeasuredCapacity(t *testing.T) {
	if err := redisproc.Available(); err != nil {
		t.Skip(err)
	}
	cl, dear, cheap := dearAndCheap(t)
	ctx := context.Background()
	master := func(key string) string { return masterOf(t, cl, key) }
	opts := Options{MinUtilization: 0.001, FullConfidenceCPU: 0.05, Memory: time.Hour}
	s := NewSampler(time.Nanosecond, opts)
	if _, err := s.Sample(ctx, Target{Client: cl}, time.Now()); err != nil {
		t.Fatal(err)
	}
	load(t, cl, 20, 100, 10*time.Second, func(p redis.Pipeliner, _ int) { p.SUnionStore(ctx, dear+"u", dear+"a", dear+"b") })
	cheapMaster := master(cheap)
	nodes := loadUntilConfident(t, cl, s, 20*time.Second, func(n Node) bool { return n.Addr == cheapMaster }, 500,
		func(p redis.Pipeliner, _ int) { p.Get(ctx, cheap+"v") })
	owners := s.Owners()
	if len(owners) != routing.SlotCount || owners[routing.Slot(dear)] != master(dear) || owners[routing.Slot(cheap)] != master(cheap) {
		t.Fatalf("slot owners do not match the client's: %d slots", len(owners))
	}
	// The slot map for capturing agents agrees with the owners, slot by slot.
	covered := 0
	for _, r := range s.Slots() {
		for slot := r.Start; slot <= r.End; slot++ {
			if len(r.Nodes) == 0 || r.Nodes[0].Addr != owners[slot] {
				t.Fatalf("CLUSTER SLOTS puts slot %d on %v, the client on %s", slot, r.Nodes, owners[slot])
			}
			covered++
		}
	}
	if covered != routing.SlotCount {
		t.Fatalf("the slot map covers %d slots, want %d", covered, routing.SlotCount)
	}
	var shards []decide.Shard
	index := map[string]int{}
	for _, n := range nodes {
		index[n.Addr] = len(shards)
		shards = append(shards, decide.Shard{Addr: n.Addr, LearnedShard: v1alpha1.LearnedShard{Capacity: n.Capacity, Confidence: n.Confidence, Utilization: n.Utilization}})
	}
	shardOf := func(key string) int {
		if i, ok := index[owners[routing.Slot(key)]]; ok {
			return i
		}
		return -1
	}
	spec := &v1alpha1.HotKeyPolicySpec{Thresholds: v1alpha1.Thresholds{Auto: &v1alpha1.AutoThresholds{}}}
	v1alpha1.SetDefaults(spec)
	th := decide.ShardThresholds(decide.Input{Spec: spec, Shards: shards, ShardOf: shardOf})
	d, ch := shardOf(dear), shardOf(cheap)
	for i, sh := range shards {
		t.Logf("%s: capacity %.0f ops/s, confidence %.2f, utilisation %.3f: thresholds %d reads/s, %d writes/s (%s)",
			sh.Addr, sh.Capacity, sh.Confidence, sh.Utilization, th[i].ReadsPerSecond, th[i].WritesPerSecond, th[i].Reads)
	}
	if th[d].Reads != v1alpha1.ThresholdLearned || th[ch].Reads != v1alpha1.ThresholdLearned {
		t.Fatalf("thresholds not learned: dear %+v cheap %+v", th[d], th[ch])
	}
	if th[d].ReadsPerSecond*4 > th[ch].ReadsPerSecond {
		t.Fatalf("dear master's threshold %d, cheap %d: want under a quarter", th[d].ReadsPerSecond, th[ch].ReadsPerSecond)
	}
	// The same rate on both: twice the dear master's threshold.
	rate := 2 * th[d].ReadsPerSecond
	obs := map[string]decide.Observation{dear + "melts": {ReadsPerSecond: rate}, cheap + "fine": {ReadsPerSecond: rate}}
	in := decide.Input{Now: time.Unix(1e9, 0), Spec: spec, Observations: obs, Shards: shards, ShardOf: shardOf}
	out := decide.Decide(in)
	in.Now, in.State = in.Now.Add(spec.Thresholds.SustainFor.Duration), out.State
	out = decide.Decide(in)
	if len(out.Keys) != 1 || out.Keys[0].Key != dear+"melts" {
		t.Fatalf("mitigated %+v at %d reads/s, want only the dear master's key", out.Keys, rate)
	}
	t.Logf("at %d reads/s: mitigated %s %v, not %s", rate, out.Keys[0].Key, out.Keys[0].Mitigations, cheap+"fine")
}
