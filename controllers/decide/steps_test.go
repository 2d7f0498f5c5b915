package decide

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// These test Decide's four steps one by one (TestDecide* test them
// together), with testSpec's thresholds: 5000 reads/s, 1000 writes/s,
// sustainFor 2s, cooldown 5m, hysteresis 20 %.

// at is t0 + d, as a timer holds it.
func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

func TestAdvanceKeys(t *testing.T) {
	reads := func(n int64) Observation { return Observation{Families: strFams, ReadsPerSecond: n} }
	for name, tc := range map[string]struct {
		spec  *v1alpha1.HotKeyPolicySpec
		state []KeyState
		obs   map[string]Observation
		want  keyStates
	}{
		"a key newly over a threshold starts its sustain timer": {
			obs:  map[string]Observation{"k": reads(6000)},
			want: keyStates{byKey: map[string]*KeyState{"k": {Key: "k", ReadOverSince: at(0)}}, hottest: []string{"k"}, next: t0.Add(2 * time.Second)}},
		"a key under every threshold is not remembered": {
			obs:  map[string]Observation{"cold": reads(5000)},
			want: keyStates{byKey: map[string]*KeyState{}, hottest: []string{}}},
		"sustained: hot, detected when it went over": {
			state: []KeyState{{Key: "k", ReadOverSince: at(-2 * time.Second)}},
			obs:   map[string]Observation{"k": reads(6000)},
			want: keyStates{byKey: map[string]*KeyState{"k": {Key: "k", ReadHot: true, Since: at(0), DetectedAt: at(-2 * time.Second)}},
				hottest: []string{"k"}, started: 1}},
		"a dip resets the sustain timer": {
			state: []KeyState{{Key: "k", ReadOverSince: at(-time.Second)}},
			obs:   map[string]Observation{"k": reads(4000)},
			want:  keyStates{byKey: map[string]*KeyState{"k": {Key: "k"}}, hottest: []string{"k"}}},
		"a hot key within the hysteresis band stays hot, no timer": {
			state: []KeyState{{Key: "k", ReadHot: true, Since: at(-time.Hour)}},
			obs:   map[string]Observation{"k": reads(4000)},
			want:  keyStates{byKey: map[string]*KeyState{"k": {Key: "k", ReadHot: true, Since: at(-time.Hour)}}, hottest: []string{"k"}}},
		"a hot key under the band starts cooling": {
			state: []KeyState{{Key: "k", ReadHot: true, Since: at(-time.Hour)}},
			obs:   map[string]Observation{"k": reads(3999)},
			want: keyStates{byKey: map[string]*KeyState{"k": {Key: "k", ReadHot: true, Since: at(-time.Hour), ReadUnderSince: at(0)}},
				hottest: []string{"k"}, next: t0.Add(5 * time.Minute)}},
		"cooled after the cooldown, unobserved": {
			state: []KeyState{{Key: "k", ReadHot: true, Since: at(-time.Hour), DetectedAt: at(-time.Hour), ReadUnderSince: at(-5 * time.Minute)}},
			want:  keyStates{byKey: map[string]*KeyState{"k": {Key: "k"}}, hottest: []string{"k"}, ended: 1}},
		"hottest first, relative to each threshold, by name among equals": {
			obs: map[string]Observation{"a": reads(6000), "b": {Families: strFams, WritesPerSecond: 2000}, "c": reads(6000)},
			want: keyStates{byKey: map[string]*KeyState{"a": {Key: "a", ReadOverSince: at(0)}, "b": {Key: "b", WriteOverSince: at(0)}, "c": {Key: "c", ReadOverSince: at(0)}},
				hottest: []string{"b", "a", "c"}, next: t0.Add(2 * time.Second)}},
		"the cap keeps the hot key; a hotter newcomer waits, counted": {
			spec:  testSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Capacity.MaxMitigatedKeys = 1 }),
			state: []KeyState{{Key: "a", ReadHot: true, Since: at(-time.Hour)}, {Key: "b", ReadOverSince: at(-time.Minute)}},
			obs:   map[string]Observation{"a": reads(6000), "b": reads(7000)},
			want: keyStates{byKey: map[string]*KeyState{"a": {Key: "a", ReadHot: true, Since: at(-time.Hour)}, "b": {Key: "b", ReadOverSince: at(-time.Minute)}},
				hottest: []string{"b", "a"}, capped: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			spec := tc.spec
			if spec == nil {
				spec = testSpec()
			}
			in := Input{Now: t0, Spec: spec, Observations: tc.obs, State: State{Keys: tc.state}}
			got := advanceKeys(in, newLimits(in))
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(keyStates{})); diff != "" {
				t.Errorf("keyStates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMitigate(t *testing.T) {
	coalesce := testSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Coalesce.Enabled = ptr.To(true) })
	hot := func(ks ...KeyState) keyStates {
		out := keyStates{byKey: map[string]*KeyState{}}
		for i := range ks {
			out.byKey[ks[i].Key] = &ks[i]
			out.hottest = append(out.hottest, ks[i].Key)
		}
		return out
	}
	start, end := t0.Add(time.Minute), t0.Add(time.Hour)
	sched := func(prewarm time.Duration) ScheduledKey {
		return ScheduledKey{Key: "s", Schedule: "launch", PrewarmAt: t0.Add(prewarm), Start: start, End: end,
			Mitigation: v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 4}}}
	}
	splitOf := func(n int32) *routing.Split { return &routing.Split{Generations: []routing.Generation{{Shards: n}}} }
	for name, tc := range map[string]struct {
		spec      *v1alpha1.HotKeyPolicySpec
		keys      keyStates
		obs       map[string]Observation
		current   *routing.Table
		scheduled []ScheduledKey
		want      mitigations
	}{
		"a read-hot key gets the cheapest mitigation": {spec: coalesce,
			keys: hot(KeyState{Key: "k", ReadHot: true, Since: at(-time.Hour)}),
			obs:  map[string]Observation{"k": {Families: strFams, ReadsPerSecond: 6000}},
			want: mitigations{
				entries: map[string]*routing.Entry{"k": {Key: "k", Source: routing.SourceDetected, Coalesce: true}},
				decisions: map[string]*KeyDecision{"k": {Key: "k", ReadsPerSecond: 6000, Since: at(-time.Hour), Source: v1alpha1.SourceDetected, Families: strFams,
					Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce}}}}},
		"a key not hot yet gets nothing": {spec: coalesce,
			keys: hot(KeyState{Key: "k", ReadOverSince: at(-time.Second)}),
			obs:  map[string]Observation{"k": {Families: strFams, ReadsPerSecond: 6000}},
			want: mitigations{entries: map[string]*routing.Entry{}, decisions: map[string]*KeyDecision{}}},
		"a write-hot key is split, sized for its rate": {
			keys: hot(KeyState{Key: "k", WriteHot: true}),
			obs:  map[string]Observation{"k": {Families: strFams, WritesPerSecond: 50000}}, // 50k × 1.25 / 20k: 4
			want: mitigations{
				entries: map[string]*routing.Entry{"k": {Key: "k", Source: routing.SourceDetected, Split: splitOf(4)}},
				decisions: map[string]*KeyDecision{"k": {Key: "k", WritesPerSecond: 50000, Shards: 4, Source: v1alpha1.SourceDetected, Families: strFams,
					Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}}}}},
		"a split shrinks only after sustainFor": {
			keys:    hot(KeyState{Key: "k", WriteHot: true}),
			obs:     map[string]Observation{"k": {Families: strFams, WritesPerSecond: 20000}},
			current: &routing.Table{Entries: []routing.Entry{{Key: "k", Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 990, Shards: 8}}}}}},
			want: mitigations{
				entries: map[string]*routing.Entry{"k": {Key: "k", Source: routing.SourceDetected, Split: splitOf(8)}},
				decisions: map[string]*KeyDecision{"k": {Key: "k", WritesPerSecond: 20000, Shards: 8, Source: v1alpha1.SourceDetected, Families: strFams,
					Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationSplit}}},
				next: t0.Add(2 * time.Second)}},
		"a scheduled key in its window is merged in, bounded to its event": {
			keys:      hot(),
			scheduled: []ScheduledKey{sched(-time.Minute)},
			want: mitigations{
				entries: map[string]*routing.Entry{"s": {Key: "s", Source: routing.SourceScheduled, NotBefore: &start, NotAfter: &end,
					Replicate: &routing.Replicate{Replicas: 4, TTLMillis: 300000}}},
				decisions: map[string]*KeyDecision{"s": {Key: "s", Replicas: 4, Since: &start, Source: v1alpha1.SourceScheduled,
					Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationReplicate}}}}},
		"a scheduled key before its prewarm is left out": {
			keys:      hot(),
			scheduled: []ScheduledKey{sched(time.Second)},
			want:      mitigations{entries: map[string]*routing.Entry{}, decisions: map[string]*KeyDecision{}}},
	} {
		t.Run(name, func(t *testing.T) {
			spec := tc.spec
			if spec == nil {
				spec = testSpec()
			}
			got := mitigate(Input{Now: t0, Spec: spec, Observations: tc.obs, Current: tc.current, Scheduled: tc.scheduled}, tc.keys)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(mitigations{})); diff != "" {
				t.Errorf("mitigations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanSplits(t *testing.T) {
	gens := func(g ...routing.Generation) *routing.Split { return &routing.Split{Generations: g} }
	g := func(from int64, n int32) routing.Generation { return routing.Generation{FromEpoch: from, Shards: n} }
	nb, na := t0.Add(-time.Hour), t0.Add(time.Hour)
	for name, tc := range map[string]struct {
		now         time.Duration
		current     []routing.Entry
		entries     map[string]*routing.Entry
		wantEntries map[string]*routing.Entry
		want        splitPlan
	}{
		"a new split is announced at the next boundary": {now: 5 * time.Second,
			entries:     map[string]*routing.Entry{"k": {Key: "k", Split: gens(g(0, 4))}},
			wantEntries: map[string]*routing.Entry{"k": {Key: "k", Split: gens(g(1001, 4))}},
			want:        splitPlan{next: routing.EpochStart(1001, 60000)}},
		"a steady split keeps its generations": {now: 5 * time.Second,
			current:     []routing.Entry{{Key: "k", Split: gens(g(990, 4))}},
			entries:     map[string]*routing.Entry{"k": {Key: "k", Split: gens(g(0, 4))}},
			wantEntries: map[string]*routing.Entry{"k": {Key: "k", Split: gens(g(990, 4))}}},
		"a key no longer mitigated keeps only its split, with its source and bounds": {now: 5 * time.Second,
			current: []routing.Entry{{Key: "k", Source: routing.SourceScheduled, NotBefore: &nb, NotAfter: &na, Coalesce: true, Split: gens(g(990, 4))}},
			entries: map[string]*routing.Entry{},
			wantEntries: map[string]*routing.Entry{"k": {Key: "k", Source: routing.SourceScheduled, NotBefore: &nb, NotAfter: &na,
				Split: gens(g(990, 4), g(1001, 0))}},
			want: splitPlan{next: routing.EpochStart(1001, 60000)}},
		"a key still mitigated but no longer split is unsplit": {now: 5 * time.Second,
			current:     []routing.Entry{{Key: "k", Split: gens(g(990, 4))}},
			entries:     map[string]*routing.Entry{"k": {Key: "k", Coalesce: true}},
			wantEntries: map[string]*routing.Entry{"k": {Key: "k", Coalesce: true, Split: gens(g(990, 4), g(1001, 0))}},
			want:        splitPlan{next: routing.EpochStart(1001, 60000)}},
		"once the unsplit is in effect the old shards are folded": {now: time.Minute,
			current:     []routing.Entry{{Key: "k", Source: routing.SourceDetected, Split: gens(g(990, 4), g(1000, 0))}},
			entries:     map[string]*routing.Entry{},
			wantEntries: map[string]*routing.Entry{"k": {Key: "k", Source: routing.SourceDetected, Split: gens(g(990, 4), g(1000, 0))}},
			want:        splitPlan{folds: []GenRef{{Key: "k", FromEpoch: 990}}}},
		"a lone unsplit generation in effect leaves, pre-aggregation with it": {now: time.Minute,
			current:     []routing.Entry{{Key: "k", Split: gens(g(1000, 0))}},
			entries:     map[string]*routing.Entry{"k": {Key: "k", Coalesce: true, PreAggregate: &routing.PreAggregate{FlushMillis: 100}}},
			wantEntries: map[string]*routing.Entry{"k": {Key: "k", Coalesce: true}}},
	} {
		t.Run(name, func(t *testing.T) {
			in := Input{Now: t0.Add(tc.now), Spec: testSpec(), Margin: 10 * time.Second}
			if tc.current != nil {
				in.Current = &routing.Table{EpochMillis: 60000, Entries: tc.current}
			}
			got := planSplits(in, tc.entries)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(splitPlan{})); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEntries, tc.entries); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssemble(t *testing.T) {
	entry := func(key string) *routing.Entry { return &routing.Entry{Key: key, Coalesce: true} }
	for name, tc := range map[string]struct {
		keys   keyStates
		m      mitigations
		splits splitPlan
		want   Output
	}{
		"entries without a mitigation are dropped, the rest sorted by key": {
			m:    mitigations{entries: map[string]*routing.Entry{"b": entry("b"), "a": entry("a"), "x": {Key: "x"}}},
			want: Output{Entries: []routing.Entry{*entry("a"), *entry("b")}}},
		"folds by key, then epoch": {
			splits: splitPlan{folds: []GenRef{{Key: "b", FromEpoch: 5}, {Key: "a", FromEpoch: 9}, {Key: "a", FromEpoch: 3}}},
			want:   Output{Folds: []GenRef{{Key: "a", FromEpoch: 3}, {Key: "a", FromEpoch: 9}, {Key: "b", FromEpoch: 5}}}},
		"mitigated keys hottest first, relative to each threshold, by name among equals": {
			m: mitigations{decisions: map[string]*KeyDecision{"a": {Key: "a", WritesPerSecond: 2000},
				"b": {Key: "b", ReadsPerSecond: 20000}, "c": {Key: "c", ReadsPerSecond: 20000}}},
			want: Output{Keys: []KeyDecision{{Key: "b", ReadsPerSecond: 20000}, {Key: "c", ReadsPerSecond: 20000}, {Key: "a", WritesPerSecond: 2000}}}},
		"idle keys are forgotten, the others kept in the order of their names": {
			keys: keyStates{byKey: map[string]*KeyState{"z": {Key: "z", WriteHot: true}, "a": {Key: "a", ReadOverSince: at(0)}, "m": {Key: "m"}}},
			want: Output{State: State{Keys: []KeyState{{Key: "a", ReadOverSince: at(0)}, {Key: "z", WriteHot: true}}}}},
		"the earliest next check of the steps, and the counts": {
			keys:   keyStates{next: t0.Add(5 * time.Minute), started: 1, ended: 2, capped: 3},
			m:      mitigations{next: t0.Add(2 * time.Second)},
			splits: splitPlan{next: t0.Add(time.Minute)},
			want:   Output{NextCheck: t0.Add(2 * time.Second), Started: 1, Ended: 2, Capped: 3}},
	} {
		t.Run(name, func(t *testing.T) {
			got := assemble(newLimits(Input{Spec: testSpec()}), tc.keys, tc.m, tc.splits)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}
