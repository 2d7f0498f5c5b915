package decide

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

func autoSpec(mut ...func(*v1alpha1.HotKeyPolicySpec)) *v1alpha1.HotKeyPolicySpec {
	return testSpec(append([]func(*v1alpha1.HotKeyPolicySpec){func(s *v1alpha1.HotKeyPolicySpec) {
		s.Thresholds.Auto = &v1alpha1.AutoThresholds{}
	}}, mut...)...)
}

// byPrefix maps keys "<shard>:..." to shards by their first letter: a…
func byPrefix(key string) int { return int(key[0] - 'a') }

// autoRun decides twice, sustainFor apart, from the same observations on
// the same shards, and returns the keys hot after the second pass.
func autoRun(spec *v1alpha1.HotKeyPolicySpec, shards []Shard, obs map[string]Observation, state State) (Output, []string) {
	in := Input{Now: t0, Spec: spec, Observations: obs, State: state, Shards: shards, ShardOf: byPrefix}
	out := Decide(in)
	in.Now, in.State = t0.Add(spec.Thresholds.SustainFor.Duration), out.State
	out = Decide(in)
	return out, hotKeys(out)
}

func hotKeys(out Output) []string {
	var hot []string
	for _, k := range out.State.Keys {
		if k.ReadHot || k.WriteHot {
			hot = append(hot, k.Key)
		}
	}
	slices.Sort(hot)
	return hot
}

func shard(capacity, confidence, utilization float64) Shard {
	return Shard{Addr: fmt.Sprintf("%.0f", capacity), LearnedShard: v1alpha1.LearnedShard{Capacity: capacity, Confidence: confidence, Utilization: utilization}}
}

func TestInForce(t *testing.T) {
	cases := map[string]struct {
		th   v1alpha1.Thresholds
		s    v1alpha1.LearnedShard
		want v1alpha1.InForce
	}{
		"nothing typed, no auto: fallback": {
			s:    v1alpha1.LearnedShard{Capacity: 100_000, Confidence: 1},
			want: v1alpha1.InForce{ReadsPerSecond: 5000, WritesPerSecond: 1000, Reads: v1alpha1.ThresholdFallback, Writes: v1alpha1.ThresholdFallback},
		},
		"auto, confident: 25 % of the capacity, both directions, floor 5 %": {
			th:   v1alpha1.Thresholds{Auto: &v1alpha1.AutoThresholds{}},
			s:    v1alpha1.LearnedShard{Capacity: 123_456, Confidence: 0.5, Utilization: 0.71},
			want: v1alpha1.InForce{ReadsPerSecond: 31_000, WritesPerSecond: 31_000, Reads: v1alpha1.ThresholdLearned, Writes: v1alpha1.ThresholdLearned, ShardRuleFloor: 6200, OverTarget: true},
		},
		"auto, low confidence: fallback": {
			th:   v1alpha1.Thresholds{Auto: &v1alpha1.AutoThresholds{}},
			s:    v1alpha1.LearnedShard{Capacity: 123_456, Confidence: 0.49, Utilization: 0.9},
			want: v1alpha1.InForce{ReadsPerSecond: 5000, WritesPerSecond: 1000, Reads: v1alpha1.ThresholdFallback, Writes: v1alpha1.ThresholdFallback},
		},
		"typed reads win, writes learned": {
			th:   v1alpha1.Thresholds{ReadsPerSecond: 700, Auto: &v1alpha1.AutoThresholds{KeySharePercent: 10, TargetUtilizationPercent: 95}},
			s:    v1alpha1.LearnedShard{Capacity: 2000, Confidence: 1, Utilization: 0.9},
			want: v1alpha1.InForce{ReadsPerSecond: 700, WritesPerSecond: 200, Reads: v1alpha1.ThresholdTyped, Writes: v1alpha1.ThresholdLearned, ShardRuleFloor: 40},
		},
		"both typed: the shard rule is off": {
			th:   v1alpha1.Thresholds{ReadsPerSecond: 700, WritesPerSecond: 70, Auto: &v1alpha1.AutoThresholds{}},
			s:    v1alpha1.LearnedShard{Capacity: 2000, Confidence: 1, Utilization: 0.99},
			want: v1alpha1.InForce{ReadsPerSecond: 700, WritesPerSecond: 70, Reads: v1alpha1.ThresholdTyped, Writes: v1alpha1.ThresholdTyped},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.th.InForce(tc.s); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestAutoDearShardLowerThresholds: the same rate is hot on a shard of low
// capacity and not on one of high capacity.
func TestAutoDearShardLowerThresholds(t *testing.T) {
	shards := []Shard{shard(8_000, 1, 0.3), shard(400_000, 1, 0.3)}
	obs := map[string]Observation{"a:k": {Families: strFams, ReadsPerSecond: 5_000}, "b:k": {Families: strFams, ReadsPerSecond: 5_000}}
	_, hot := autoRun(autoSpec(), shards, obs, State{})
	if !slices.Equal(hot, []string{"a:k"}) {
		t.Fatalf("hot %v, want only the dear shard's key", hot)
	}
	// Without auto both are at the fallback's 5000: not over.
	if _, hot := autoRun(testSpec(), shards, obs, State{}); len(hot) != 0 {
		t.Fatalf("hot %v without auto", hot)
	}
}

// TestAutoTypedWins: a typed number is the threshold whatever the shard
// learned; the direction not typed is derived.
func TestAutoTypedWins(t *testing.T) {
	spec := autoSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Thresholds.ReadsPerSecond = 1_000 })
	shards := []Shard{shard(400_000, 1, 0.3)} // derived 100,000
	obs := map[string]Observation{"a:reads": {Families: strFams, ReadsPerSecond: 1_500}, "a:writes": {Families: strFams, WritesPerSecond: 50_000}}
	out, hot := autoRun(spec, shards, obs, State{})
	if !slices.Equal(hot, []string{"a:reads"}) {
		t.Fatalf("hot %v, want the key over the typed reads threshold only", hot)
	}
	if k := out.State.Keys[0]; k.ReadThreshold != 0 {
		t.Fatalf("a typed threshold froze: %+v", k)
	}
}

// TestAutoLowConfidenceFallsBack: under MinAutoConfidence the fallback
// numbers decide, and a key hot by them is hot.
func TestAutoLowConfidenceFallsBack(t *testing.T) {
	shards := []Shard{shard(400_000, 0.2, 0.3)}
	obs := map[string]Observation{"a:r": {Families: strFams, ReadsPerSecond: 6_000}, "a:w": {Families: strFams, WritesPerSecond: 900}}
	if _, hot := autoRun(autoSpec(), shards, obs, State{}); !slices.Equal(hot, []string{"a:r"}) {
		t.Fatalf("hot %v, want a:r (over 5000), not a:w (under 1000)", hot)
	}
	shards[0].Confidence = 0.9 // derived 100,000: neither
	if _, hot := autoRun(autoSpec(), shards, obs, State{}); len(hot) != 0 {
		t.Fatalf("hot %v once confident", hot)
	}
}

// TestAutoShardRulePicksFewest: a shard at 90 % with a 70 % target needs
// 20 % of its capacity relieved: the two hottest keys (15 % + 8 %), not
// the third (6 %), not the keys under the 5 % floor, and nothing on the
// shard under target with the same keys. Once hot, the picked keys keep
// the floor they became hot at after the shard falls under its target.
func TestAutoShardRulePicksFewest(t *testing.T) {
	obs := map[string]Observation{}
	for _, s := range []string{"a", "b"} {
		obs[s+":k1"] = Observation{Families: strFams, ReadsPerSecond: 15_000}
		obs[s+":k2"] = Observation{Families: strFams, WritesPerSecond: 8_000}
		obs[s+":k3"] = Observation{Families: strFams, ReadsPerSecond: 6_000}
		for i := 0; i < 50; i++ {
			obs[fmt.Sprintf("%s:tail%d", s, i)] = Observation{Families: strFams, ReadsPerSecond: 1_000}
		}
	}
	shards := []Shard{shard(100_000, 1, 0.9), shard(100_000, 1, 0.5)}
	spec := autoSpec()
	// The hub counts with the floor of the master over target.
	if r, w := DetectionThresholds(Input{Spec: spec, Shards: shards, ShardOf: byPrefix}); r != 5000 || w != 5000 {
		t.Fatalf("detection thresholds %d/%d, want the floor 5000", r, w)
	}
	out, hot := autoRun(spec, shards, obs, State{})
	if !slices.Equal(hot, []string{"a:k1", "a:k2"}) {
		t.Fatalf("hot %v, want a:k1 and a:k2", hot)
	}
	for _, k := range out.State.Keys {
		if (k.ReadHot && k.ReadThreshold != 5000) || (k.WriteHot && k.WriteThreshold != 5000) {
			t.Fatalf("%+v: want the floor 5000 frozen", k)
		}
	}
	// The mitigation relieved the shard: it is under target now; the
	// picked keys stay hot (frozen), the rest stays cold, for a cooldown.
	shards[0].Utilization = 0.6
	in := Input{Spec: spec, Observations: obs, State: out.State, Shards: shards, ShardOf: byPrefix}
	for at := time.Duration(0); at <= 2*spec.Thresholds.Cooldown.Duration; at += 30 * time.Second {
		in.Now = t0.Add(spec.Thresholds.SustainFor.Duration + at)
		out = Decide(in)
		in.State = out.State
		if hot := hotKeys(out); !slices.Equal(hot, []string{"a:k1", "a:k2"}) {
			t.Fatalf("at +%v hot %v", at, hot)
		}
	}
	if r, w := DetectionThresholds(in); r != 25_000 || w != 25_000 {
		t.Fatalf("detection thresholds %d/%d, want 25000 (no shard over target)", r, w)
	}
}

// TestAutoShardRuleFlatTail: a shard over target with only keys under the
// floor (a flat tail) mitigates none.
func TestAutoShardRuleFlatTail(t *testing.T) {
	obs := map[string]Observation{}
	for i := 0; i < 2000; i++ {
		obs[fmt.Sprintf("a:%d", i)] = Observation{Families: strFams, ReadsPerSecond: 4_900, WritesPerSecond: 4_900}
	}
	_, hot := autoRun(autoSpec(), []Shard{shard(100_000, 1, 0.99)}, obs, State{})
	if len(hot) != 0 {
		t.Fatalf("%d tail keys hot", len(hot))
	}
}

// TestAutoFrozenWhileHot: a key hot at a learned threshold stays hot when
// the estimate doubles (or a new leader has not learned it: fallback) and
// cools by its own rate against the frozen threshold.
func TestAutoFrozenWhileHot(t *testing.T) {
	spec := autoSpec()
	obs := map[string]Observation{"a:k": {Families: strFams, ReadsPerSecond: 30_000}}
	out, hot := autoRun(spec, []Shard{shard(100_000, 1, 0.3)}, obs, State{})
	if !slices.Equal(hot, []string{"a:k"}) || out.State.Keys[0].ReadThreshold != 25_000 {
		t.Fatalf("hot %v state %+v", hot, out.State.Keys)
	}
	durable := out.State.Durable()
	if durable.Keys[0].ReadThreshold != 25_000 {
		t.Fatalf("durable state loses the frozen threshold: %+v", durable.Keys[0])
	}
	for _, shards := range [][]Shard{{shard(200_000, 1, 0.3)}, nil} {
		in := Input{Spec: spec, Observations: obs, State: durable, Shards: shards, ShardOf: byPrefix}
		for at := time.Duration(0); at <= 2*spec.Thresholds.Cooldown.Duration; at += time.Minute {
			in.Now = t0.Add(time.Hour + at)
			out = Decide(in)
			in.State = out.State
			if hot := hotKeys(out); !slices.Equal(hot, []string{"a:k"}) {
				t.Fatalf("shards %v at +%v: hot %v", shards, at, hot)
			}
		}
	}
	// Under 25,000 × 0.8 for a cooldown: cold, and the freeze is gone.
	in := Input{Spec: spec, Observations: map[string]Observation{"a:k": {Families: strFams, ReadsPerSecond: 19_000}}, State: durable, Shards: []Shard{shard(100_000, 1, 0.3)}, ShardOf: byPrefix}
	for _, at := range []time.Duration{0, spec.Thresholds.Cooldown.Duration} {
		in.Now = t0.Add(time.Hour + at)
		out = Decide(in)
		in.State = out.State
	}
	if hot := hotKeys(out); len(hot) != 0 || len(out.State.Keys) != 0 {
		t.Fatalf("hot %v state %+v after the cooldown", hot, out.State.Keys)
	}
}

// TestAutoSizing: with auto and confident masters, splits and replicas are
// sized from the least learned capacity's key share; typed capacity.* wins.
func TestAutoSizing(t *testing.T) {
	shards := []Shard{shard(40_000, 1, 0.3), shard(400_000, 1, 0.3)} // per key: 10,000
	obs := map[string]Observation{"b:counter": {Families: strFams, WritesPerSecond: 150_000}}
	out, _ := autoRun(autoSpec(), shards, obs, State{})
	if len(out.Keys) != 1 || out.Keys[0].Shards != 19 { // ceil(150,000 × 1.25 ÷ 10,000)
		t.Fatalf("keys %+v, want 19 shards", out.Keys)
	}
	typed := autoSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Capacity.PerShardWritesPerSecond = 50_000 })
	out, _ = autoRun(typed, shards, obs, State{})
	if len(out.Keys) != 1 || out.Keys[0].Shards != 4 { // ceil(187,500 ÷ 50,000)
		t.Fatalf("keys %+v, want 4 shards with the typed capacity", out.Keys)
	}
	out, _ = autoRun(testSpec(), shards, obs, State{})
	if len(out.Keys) != 1 || out.Keys[0].Shards != 10 { // fallback 20,000
		t.Fatalf("keys %+v, want 10 shards without auto", out.Keys)
	}
}

// TestAutoFieldsTakeEffect: each field of thresholds.auto changes the
// decision.
func TestAutoFieldsTakeEffect(t *testing.T) {
	obs := map[string]Observation{"a:k": {Families: strFams, ReadsPerSecond: 15_000}}
	t.Run("keySharePercent", func(t *testing.T) {
		shards := []Shard{shard(100_000, 1, 0.3)}
		if _, hot := autoRun(autoSpec(), shards, obs, State{}); len(hot) != 0 {
			t.Fatalf("hot %v at the default 25 %% (15 %% of the capacity)", hot)
		}
		spec := autoSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Thresholds.Auto.KeySharePercent = 10 })
		if _, hot := autoRun(spec, shards, obs, State{}); !slices.Equal(hot, []string{"a:k"}) {
			t.Fatalf("hot %v at 10 %%", hot)
		}
	})
	t.Run("targetUtilizationPercent", func(t *testing.T) {
		shards := []Shard{shard(100_000, 1, 0.8)}
		if _, hot := autoRun(autoSpec(), shards, obs, State{}); !slices.Equal(hot, []string{"a:k"}) {
			t.Fatalf("hot %v at 80 %% with the default target 70 %%", hot)
		}
		spec := autoSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Thresholds.Auto.TargetUtilizationPercent = 90 })
		if _, hot := autoRun(spec, shards, obs, State{}); len(hot) != 0 {
			t.Fatalf("hot %v at 80 %% with a 90 %% target", hot)
		}
	})
}
