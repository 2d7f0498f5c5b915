package decide

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// decideHot runs Decide twice, sustainFor apart, so that the keys of obs
// over a threshold are hot in the second pass, whose output it returns.
func decideHot(spec *v1alpha1.HotKeyPolicySpec, obs map[string]Observation, current *routing.Table) Output {
	in := Input{Now: t0, Spec: spec, Observations: obs, Current: current, Margin: time.Second}
	out := Decide(in)
	in.Now, in.State = t0.Add(spec.Thresholds.SustainFor.Duration), out.State
	return Decide(in)
}

func shedOf(out Output, key string) *routing.Shed {
	for _, e := range out.Entries {
		if e.Key == key {
			return e.Shed
		}
	}
	return nil
}

func TestShedIsTheLastResort(t *testing.T) {
	shed := func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.Enabled = ptr.To(true) }
	noSplit := func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Split.Enabled = ptr.To(false) }
	noReplicate := func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Replicate.Enabled = ptr.To(false) }
	cache := func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.LocalCache.Enabled = ptr.To(true) }
	tests := map[string]struct {
		mut  []func(*v1alpha1.HotKeyPolicySpec)
		obs  Observation
		want *routing.Shed // nil: not shed
	}{
		"not enabled: never shed": {
			mut: []func(*v1alpha1.HotKeyPolicySpec){noSplit}, obs: Observation{Families: strFams, WritesPerSecond: 100000},
		},
		"a write-hot key that may not be split, at 5 × its shard": {
			mut: []func(*v1alpha1.HotKeyPolicySpec){shed, noSplit}, obs: Observation{Families: strFams, WritesPerSecond: 100000},
			want: &routing.Shed{WritesPerSecond: 16000, DemandWrites: 100000, MinPerSecond: 10},
		},
		"a split that suffices: not shed": {
			mut: []func(*v1alpha1.HotKeyPolicySpec){shed}, obs: Observation{Families: strFams, WritesPerSecond: 100000},
		},
		"a split capped by maxShards: shed at what its shards take": {
			mut:  []func(*v1alpha1.HotKeyPolicySpec){shed, func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Split.MaxShards = 2 }},
			obs:  Observation{Families: strFams, WritesPerSecond: 100000},
			want: &routing.Shed{WritesPerSecond: 32000, DemandWrites: 100000, MinPerSecond: 10},
		},
		"write-hot under the budget: not shed": {
			mut: []func(*v1alpha1.HotKeyPolicySpec){shed, noSplit}, obs: Observation{Families: strFams, WritesPerSecond: 15000},
		},
		"an explicit budget wins": {
			mut:  []func(*v1alpha1.HotKeyPolicySpec){shed, noSplit, func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.WritesPerSecond = 5000 }},
			obs:  Observation{Families: strFams, WritesPerSecond: 10000},
			want: &routing.Shed{WritesPerSecond: 5000, DemandWrites: 10000, MinPerSecond: 10},
		},
		"an uncached read-hot key past its replicas": {
			mut: []func(*v1alpha1.HotKeyPolicySpec){shed, noReplicate}, obs: Observation{Families: strFams, ReadsPerSecond: 100000},
			want: &routing.Shed{ReadsPerSecond: 40000, DemandReads: 100000, MinPerSecond: 10},
		},
		"the reads of a cached key are never shed": {
			mut: []func(*v1alpha1.HotKeyPolicySpec){shed, noReplicate, cache}, obs: Observation{Families: strFams, ReadsPerSecond: 100000},
		},
		"reads not shed when the policy says so": {
			mut: []func(*v1alpha1.HotKeyPolicySpec){shed, noReplicate, func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.Reads = ptr.To(false) }},
			obs: Observation{Families: strFams, ReadsPerSecond: 100000},
		},
		"an excluded key is never shed": {
			mut: []func(*v1alpha1.HotKeyPolicySpec){shed, noSplit, func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.Exclude = []string{"orders:*"} }},
			obs: Observation{Families: strFams, WritesPerSecond: 100000},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec := testSpec(tc.mut...)
			key := "k"
			if name == "an excluded key is never shed" {
				key = "orders:1"
			}
			out := decideHot(spec, map[string]Observation{key: tc.obs}, nil)
			got := shedOf(out, key)
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("shed %+v, want none", *got)
			case tc.want != nil && (got == nil || *got != *tc.want):
				t.Fatalf("shed %+v, want %+v (entries %+v)", got, *tc.want, out.Entries)
			}
			if tc.want != nil {
				ms := out.Keys[0].Mitigations
				if ms[len(ms)-1] != v1alpha1.MitigationShed {
					t.Fatalf("status mitigations %v: Shed must come last", ms)
				}
			}
		})
	}
}

// TestShedDemandKeepsTheTable: a steady overload republishes nothing (the
// published demand holds while the measured rate stays within
// routing.ShedDemandStep of it), and the published demand is never further
// than that from the measured one (property, over random walks of the
// rate).
func TestShedDemandKeepsTheTable(t *testing.T) {
	spec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) {
		s.Mitigations.Shed.Enabled = ptr.To(true)
		s.Mitigations.Split.Enabled = ptr.To(false)
	})
	rate := int64(100000)
	out := decideHot(spec, map[string]Observation{"k": {Families: strFams, WritesPerSecond: rate}}, nil)
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 500; i++ {
		cur := &routing.Table{SchemaVersion: 1, EpochMillis: 60000, Entries: out.Entries}
		prev := *shedOf(out, "k")
		rate = max(rate+int64(r.NormFloat64()*2000), 20000)
		in := Input{Now: t0.Add(time.Duration(i+3) * time.Second), Spec: spec, Observations: map[string]Observation{"k": {Families: strFams, WritesPerSecond: rate}}, State: out.State, Current: cur, Margin: time.Second}
		out = Decide(in)
		got := shedOf(out, "k")
		if got == nil {
			t.Fatalf("step %d: rate %d no longer shed", i, rate)
		}
		if d := float64(got.DemandWrites - rate); d > routing.ShedDemandStep*float64(got.DemandWrites) || -d > routing.ShedDemandStep*float64(got.DemandWrites) {
			t.Fatalf("step %d: published demand %d too far from the measured %d", i, got.DemandWrites, rate)
		}
		if d := float64(rate - prev.DemandWrites); d <= routing.ShedDemandStep*float64(prev.DemandWrites) && -d <= routing.ShedDemandStep*float64(prev.DemandWrites) && got.DemandWrites != prev.DemandWrites {
			t.Fatalf("step %d: rate %d inside the band of %d, republished %d", i, rate, prev.DemandWrites, got.DemandWrites)
		}
	}
}

// TestShedMinimumCappedByTheFleet: the minimum a sidecar admits before it
// has measured its own demand is capped so that every sidecar of the
// fleet (SidecarsPerNode per reporting node) starting at once admits at
// most the budget.
func TestShedMinimumCappedByTheFleet(t *testing.T) {
	spec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) {
		s.Mitigations.Shed.Enabled = ptr.To(true)
		s.Mitigations.Split.Enabled = ptr.To(false)
	})
	for nodes, want := range map[int]int64{0: 10, 100: 10, 1000: 1, 400: 4} {
		in := Input{Now: t0, Spec: spec, Observations: map[string]Observation{"k": {Families: strFams, WritesPerSecond: 100000}}, Nodes: nodes}
		out := Decide(in)
		in.Now, in.State = t0.Add(spec.Thresholds.SustainFor.Duration), out.State
		if got := shedOf(Decide(in), "k"); got == nil || got.MinPerSecond != want {
			t.Errorf("%d nodes: shed %+v, want minPerSecond %d (budget 16000)", nodes, got, want)
		}
	}
}

// TestEachShedFieldChangesTheDecision is TestEachSpecFieldChangesTheDecision's
// row for every field of spec.mitigations.shed: the same traffic decided
// with and without the change.
func TestEachShedFieldChangesTheDecision(t *testing.T) {
	shedOn := func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.Enabled = ptr.To(true) }
	noSplit := func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Split.Enabled = ptr.To(false) }
	noReplicate := func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Replicate.Enabled = ptr.To(false) }
	writes := Observation{Families: strFams, WritesPerSecond: 100000}
	reads := Observation{Families: strFams, ReadsPerSecond: 100000}
	probe := func(out Output) string {
		s := shedOf(out, "k")
		if s == nil {
			return "not shed"
		}
		return fmt.Sprintf("reads %d/s of %d, writes %d/s of %d, min %d", s.ReadsPerSecond, s.DemandReads, s.WritesPerSecond, s.DemandWrites, s.MinPerSecond)
	}
	tests := map[string]struct {
		base  []func(*v1alpha1.HotKeyPolicySpec)
		field func(*v1alpha1.HotKeyPolicySpec)
		obs   Observation
		want  string
	}{
		"mitigations.shed.enabled": {base: []func(*v1alpha1.HotKeyPolicySpec){noSplit}, field: shedOn, obs: writes,
			want: "reads 0/s of 0, writes 16000/s of 100000, min 10"},
		"mitigations.shed.budgetPercent": {base: []func(*v1alpha1.HotKeyPolicySpec){noSplit, shedOn},
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.BudgetPercent = 50 }, obs: writes,
			want: "reads 0/s of 0, writes 10000/s of 100000, min 10"},
		"mitigations.shed.writesPerSecond": {base: []func(*v1alpha1.HotKeyPolicySpec){noSplit, shedOn},
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.WritesPerSecond = 5000 }, obs: writes,
			want: "reads 0/s of 0, writes 5000/s of 100000, min 10"},
		"mitigations.shed.readsPerSecond": {base: []func(*v1alpha1.HotKeyPolicySpec){noReplicate, shedOn},
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.ReadsPerSecond = 30000 }, obs: reads,
			want: "reads 30000/s of 100000, writes 0/s of 0, min 10"},
		"mitigations.shed.reads": {base: []func(*v1alpha1.HotKeyPolicySpec){noReplicate, shedOn},
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.Reads = ptr.To(false) }, obs: reads,
			want: "not shed"},
		"mitigations.shed.exclude": {base: []func(*v1alpha1.HotKeyPolicySpec){noSplit, shedOn},
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.Exclude = []string{"[jk]"} }, obs: writes,
			want: "not shed"},
		"mitigations.shed.minPerSecond": {base: []func(*v1alpha1.HotKeyPolicySpec){noSplit, shedOn},
			field: func(s *v1alpha1.HotKeyPolicySpec) { s.Mitigations.Shed.MinPerSecond = ptr.To[int64](3) }, obs: writes,
			want: "reads 0/s of 0, writes 16000/s of 100000, min 3"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obs := map[string]Observation{"k": tc.obs}
			without := probe(decideHot(testSpec(tc.base...), obs, nil))
			with := probe(decideHot(testSpec(append(tc.base, tc.field)...), obs, nil))
			if with != tc.want {
				t.Errorf("with the change: %s, want %s", with, tc.want)
			}
			if with == without {
				t.Errorf("the change makes no difference: %s either way", with)
			}
		})
	}
}
