package decide

import (
	"sort"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// Shard is one Redis master as the decision sees it: its address and what
// the manager learned of it (controllers/capacity).
type Shard struct {
	Addr string
	v1alpha1.LearnedShard
}

// limits are the thresholds in force for each key of one pass (see
// v1alpha1.Thresholds.InForce and docs/manager.md, Automatic thresholds):
// per shard, the typed, learned or fallback numbers, lowered for the keys
// the shard rule picks; a hot key keeps the learned threshold it became hot
// at until it cools down, so that a drifting estimate (or a leader that has
// not learned it yet) neither ends a mitigation early nor restarts it.
type limits struct {
	spec    *v1alpha1.HotKeyPolicySpec
	shardOf func(string) int
	// inForce per shard index; unknown is for keys of no known shard.
	inForce []v1alpha1.InForce
	unknown v1alpha1.InForce
	// picked are the (key, direction) pairs the shard rule makes over: their
	// threshold is their shard's ShardRuleFloor.
	picked map[pick]bool
}

type pick struct {
	key   string
	write bool
}

// newLimits computes the pass's thresholds from in.Shards, and the shard
// rule's picks (pickOverTarget).
func newLimits(in Input) *limits {
	l := &limits{spec: in.Spec, shardOf: in.ShardOf, unknown: in.Spec.Thresholds.InForce(v1alpha1.LearnedShard{})}
	for _, s := range in.Shards {
		l.inForce = append(l.inForce, in.Spec.Thresholds.InForce(s.LearnedShard))
	}
	l.picked = pickOverTarget(in, l)
	return l
}

func (l *limits) shard(key string) v1alpha1.InForce {
	if l.shardOf != nil {
		if i := l.shardOf(key); i >= 0 && i < len(l.inForce) {
			return l.inForce[i]
		}
	}
	return l.unknown
}

// of is key's thresholds in this pass; ks is its state before the pass (nil
// if none). A typed number always wins (an edit applies at once); a hot
// direction keeps its frozen threshold; a direction the shard rule picked
// takes the floor.
func (l *limits) of(key string, ks *KeyState) (reads, writes int64) {
	f := l.shard(key)
	reads, writes = f.ReadsPerSecond, f.WritesPerSecond
	if f.Reads != v1alpha1.ThresholdTyped {
		switch {
		case ks != nil && ks.ReadHot && ks.ReadThreshold > 0:
			reads = ks.ReadThreshold
		case l.picked[pick{key, false}]:
			reads = f.ShardRuleFloor
		}
	}
	if f.Writes != v1alpha1.ThresholdTyped {
		switch {
		case ks != nil && ks.WriteHot && ks.WriteThreshold > 0:
			writes = ks.WriteThreshold
		case l.picked[pick{key, true}]:
			writes = f.ShardRuleFloor
		}
	}
	return reads, writes
}

// freezes reports, per direction, whether a key that becomes hot now at
// these thresholds keeps them while hot: the learned ones and the shard
// rule's floor do; typed and fallback numbers follow the spec.
func (l *limits) freezes(key string) (reads, writes bool) {
	f := l.shard(key)
	return f.Reads == v1alpha1.ThresholdLearned, f.Writes == v1alpha1.ThresholdLearned
}

// Detection is the least threshold in force on any shard in this pass, per
// direction: the hub counts with it (floors, pins, the warm band), so that
// every key a shard may find hot is listed and counted exactly.
func (l *limits) Detection() (reads, writes int64) {
	reads, writes = l.unknown.ReadsPerSecond, l.unknown.WritesPerSecond
	first := true
	for _, f := range l.inForce {
		r, w := f.ReadsPerSecond, f.WritesPerSecond
		if f.OverTarget && f.ShardRuleFloor > 0 {
			if f.Reads != v1alpha1.ThresholdTyped {
				r = min(r, f.ShardRuleFloor)
			}
			if f.Writes != v1alpha1.ThresholdTyped {
				w = min(w, f.ShardRuleFloor)
			}
		}
		if first {
			reads, writes, first = r, w, false
			continue
		}
		reads, writes = min(reads, r), min(writes, w)
	}
	return reads, writes
}

// DetectionThresholds is limits.Detection for in: what the hub counts
// with.
func DetectionThresholds(in Input) (reads, writes int64) {
	return newLimits(in).Detection()
}

// ShardThresholds is the thresholds in force on each of in.Shards (the
// shard rule's floor aside), for status.
func ShardThresholds(in Input) []v1alpha1.InForce {
	return newLimits(in).inForce
}

// pickOverTarget is the shard rule: on a shard over its target
// utilisation, the directions not typed and not already hot of its keys,
// hottest first, each over the shard's floor, until their share of the
// capacity (rate ÷ capacity) brings the shard under the target. Hottest
// first is the fewest: no k keys relieve more than the k hottest. A shard
// whose excess no such prefix covers gets every key over the floor (they
// relieve what they can). Keys already over their key-share threshold are
// counted but not picked: they are hot by that rule, at its threshold.
func pickOverTarget(in Input, l *limits) map[pick]bool {
	type cand struct {
		pick
		rate int64
		own  bool
	}
	byShard := map[int][]cand{}
	if l.shardOf == nil {
		return nil
	}
	hot := map[pick]bool{}
	for _, k := range in.State.Keys {
		hot[pick{k.Key, false}], hot[pick{k.Key, true}] = k.ReadHot, k.WriteHot
	}
	for key, o := range in.Observations {
		i := l.shardOf(key)
		if i < 0 || i >= len(l.inForce) || !l.inForce[i].OverTarget {
			continue
		}
		f := l.inForce[i]
		for _, c := range []cand{
			{pick{key, false}, o.ReadsPerSecond, o.ReadsPerSecond > f.ReadsPerSecond},
			{pick{key, true}, o.WritesPerSecond, o.WritesPerSecond > f.WritesPerSecond},
		} {
			typed := (!c.write && f.Reads == v1alpha1.ThresholdTyped) || (c.write && f.Writes == v1alpha1.ThresholdTyped)
			if !typed && !hot[c.pick] && c.rate > f.ShardRuleFloor {
				byShard[i] = append(byShard[i], c)
			}
		}
	}
	out := map[pick]bool{}
	for i, cs := range byShard {
		sort.Slice(cs, func(a, b int) bool {
			if cs[a].rate != cs[b].rate {
				return cs[a].rate > cs[b].rate
			}
			if cs[a].key != cs[b].key {
				return cs[a].key < cs[b].key
			}
			return !cs[a].write
		})
		s := in.Shards[i]
		excess := s.Utilization - in.Spec.Thresholds.Auto.Target()
		for _, c := range cs {
			if excess <= 0 {
				break
			}
			if !c.own {
				out[c.pick] = true
			}
			excess -= float64(c.rate) / s.Capacity
		}
	}
	return out
}

// learnedShards are the LearnedShards of shards.
func learnedShards(shards []Shard) []v1alpha1.LearnedShard {
	out := make([]v1alpha1.LearnedShard, len(shards))
	for i, s := range shards {
		out[i] = s.LearnedShard
	}
	return out
}

// perKey is what one physical key may take in this pass
// (v1alpha1.PerKeyCapacity).
type perKey struct{ reads, writes int64 }

func perKeyOf(in Input) perKey {
	r, w := v1alpha1.PerKeyCapacity(in.Spec, learnedShards(in.Shards))
	return perKey{r, w}
}
