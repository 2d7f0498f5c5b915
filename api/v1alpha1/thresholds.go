package v1alpha1

import "math"

// The one place where a threshold or a per-key capacity that is not typed
// gets its value. Before thresholds.auto these were the schema's defaults,
// so policies stored then hold them as typed numbers and keep them (see
// docs/manager.md, Upgrading).
const (
	// FallbackReadsPerSecond and FallbackWritesPerSecond are the thresholds
	// of a key whose threshold is not typed and not derived (thresholds.auto
	// unset, or its shard's learned capacity not confident).
	FallbackReadsPerSecond  = 5000
	FallbackWritesPerSecond = 1000
	// FallbackPerShardReads and FallbackPerShardWrites are what one physical
	// key may take when capacity.* is not typed and not learned.
	FallbackPerShardReads  = 50000
	FallbackPerShardWrites = 20000

	DefaultTargetUtilizationPercent = 70
	DefaultKeySharePercent          = 25

	// MinAutoConfidence is the confidence from which a shard's learned
	// capacity derives thresholds: half of full confidence (15 CPU-seconds
	// of counted load with the manager's defaults). Below it the estimate
	// rests on a few busy seconds and the fallback is safer.
	MinAutoConfidence = 0.5

	// ShardRuleDivisor: the shard rule (a shard over its target) considers
	// only keys that alone take at least keySharePercent ÷ ShardRuleDivisor
	// of their shard's capacity (5 % with the defaults). The rule picks the
	// fewest keys hottest first, so a shard with a few heavy keys sheds
	// them; a shard busy with a flat tail (a Zipf tail, uniform traffic)
	// has no key that large, and mitigating a few of its thousands of keys
	// would cost every one of their reads a lookup without relieving it.
	ShardRuleDivisor = 5
)

// ThresholdSource says where a threshold in force comes from.
// +kubebuilder:validation:Enum=Typed;Learned;Fallback
type ThresholdSource string

const (
	// ThresholdTyped: the policy types the number.
	ThresholdTyped ThresholdSource = "Typed"
	// ThresholdLearned: keySharePercent of the shard's learned capacity.
	ThresholdLearned ThresholdSource = "Learned"
	// ThresholdFallback: the built-in number (auto unset, or the shard's
	// capacity not confident).
	ThresholdFallback ThresholdSource = "Fallback"
)

// LearnedShard is what the manager learned of one Redis master, as the
// thresholds need it (see controllers/capacity).
type LearnedShard struct {
	// Capacity is ops/s at one full core for the observed mix (0: unknown).
	Capacity float64
	// Confidence in [0, 1].
	Confidence float64
	// Utilization is the main thread's busy fraction of a core.
	Utilization float64
}

// Confident reports whether s may derive thresholds.
func (s LearnedShard) Confident() bool {
	return s.Capacity > 0 && !math.IsInf(s.Capacity, 0) && s.Confidence >= MinAutoConfidence
}

// InForce are the thresholds of the keys of one shard.
type InForce struct {
	ReadsPerSecond, WritesPerSecond int64
	Reads, Writes                   ThresholdSource
	// ShardRuleFloor is the least rate at which the shard rule may make a
	// key hot in a direction not typed, 0 when the rule cannot apply (auto
	// unset, or the capacity not confident).
	ShardRuleFloor int64
	// OverTarget: the shard is over targetUtilizationPercent, and the
	// shard rule applies.
	OverTarget bool
}

// Target is targetUtilizationPercent as a fraction (default applied).
func (a *AutoThresholds) Target() float64 {
	if a.TargetUtilizationPercent <= 0 {
		return DefaultTargetUtilizationPercent / 100.0
	}
	return float64(a.TargetUtilizationPercent) / 100
}

// Cores is shardCPU in cores: 1 when auto or shardCPU is unset, or when
// the value is outside (0, 1] (admission refuses such values).
func (a *AutoThresholds) Cores() float64 {
	if a == nil || a.ShardCPU == nil {
		return 1
	}
	c := a.ShardCPU.AsApproximateFloat64()
	if c <= 0 || c > 1 || math.IsNaN(c) {
		return 1
	}
	return c
}

// KeyShare is keySharePercent as a fraction (default applied).
func (a *AutoThresholds) KeyShare() float64 {
	if a.KeySharePercent <= 0 {
		return DefaultKeySharePercent / 100.0
	}
	return float64(a.KeySharePercent) / 100
}

// InForce is the thresholds of the keys of a shard that learned s: a typed
// number wins; else, with auto set and s confident, keySharePercent of the
// learned capacity; else the fallback. Writes take the same share as
// reads, in commands: the capacity is learned for the observed mix, writes
// and their propagation to replicas included, so a write weighs the mix's
// mean cost, and a shard whose writes are dear learns a lower capacity as a
// whole.
func (t *Thresholds) InForce(s LearnedShard) InForce {
	out := InForce{ReadsPerSecond: FallbackReadsPerSecond, WritesPerSecond: FallbackWritesPerSecond, Reads: ThresholdFallback, Writes: ThresholdFallback}
	if t.Auto != nil && s.Confident() {
		d := derived(s.Capacity, t.Auto.KeyShare())
		out.ReadsPerSecond, out.WritesPerSecond, out.Reads, out.Writes = d, d, ThresholdLearned, ThresholdLearned
		out.ShardRuleFloor = derived(s.Capacity, t.Auto.KeyShare()/ShardRuleDivisor)
		out.OverTarget = s.Utilization > t.Auto.Target()
	}
	if t.ReadsPerSecond > 0 {
		out.ReadsPerSecond, out.Reads = t.ReadsPerSecond, ThresholdTyped
	}
	if t.WritesPerSecond > 0 {
		out.WritesPerSecond, out.Writes = t.WritesPerSecond, ThresholdTyped
	}
	if out.Reads == ThresholdTyped && out.Writes == ThresholdTyped {
		out.ShardRuleFloor, out.OverTarget = 0, false
	}
	return out
}

// PerKeyCapacity is what one physical key (a split's shard, a replicated
// copy) may take, which sizes splits, replica counts and shed budgets: a
// typed capacity.* wins; else, with thresholds.auto set and some master's
// capacity confident, keySharePercent of the least confident capacity (a
// split's shards spread over every master, so the weakest bounds them, and
// a shard key so sized is never hot by itself); else the fallback.
func PerKeyCapacity(spec *HotKeyPolicySpec, shards []LearnedShard) (reads, writes int64) {
	reads, writes = FallbackPerShardReads, FallbackPerShardWrites
	if a := spec.Thresholds.Auto; a != nil {
		least := math.Inf(1)
		for _, s := range shards {
			if s.Confident() {
				least = math.Min(least, s.Capacity)
			}
		}
		if !math.IsInf(least, 1) {
			d := derived(least, a.KeyShare())
			reads, writes = d, d
		}
	}
	if c := spec.Capacity.PerShardReadsPerSecond; c > 0 {
		reads = c
	}
	if c := spec.Capacity.PerShardWritesPerSecond; c > 0 {
		writes = c
	}
	return reads, writes
}

// derived is share of capacity, at two significant digits so that a
// threshold moves when the estimate does, not at every sample; at least 1.
func derived(capacity, share float64) int64 {
	v := capacity * share
	if v < 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v))-1)
	return max(int64(math.Round(v/p)*p), 1)
}
