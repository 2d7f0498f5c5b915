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

// t0 is the start of epoch 1000 of 60s epochs.
var t0 = routing.EpochStart(1000, 60000)

func testSpec(mut ...func(*v1alpha1.HotKeyPolicySpec)) *v1alpha1.HotKeyPolicySpec {
	s := &v1alpha1.HotKeyPolicySpec{}
	s.Mitigations.Coalesce.Enabled = ptr.To(false)
	s.Mitigations.LocalCache.Enabled = ptr.To(false)
	s.Mitigations.Split.Enabled = ptr.To(true)
	s.Mitigations.Replicate.Enabled = ptr.To(true)
	s.Thresholds.HysteresisPercent = 20
	s.Capacity.HeadroomPercent = 25
	s.Mitigations.LocalCache.JitterPercent = 10
	for _, m := range mut {
		m(s)
	}
	v1alpha1.SetDefaults(s)
	return s
}

func TestSize(t *testing.T) {
	tests := map[string]struct {
		rate     int64
		headroom int32
		per      int64
		max      int32
		want     int32
	}{
		"clamped up to 2":         {rate: 100, headroom: 25, per: 20000, max: 64, want: 2},
		"exact ceiling":           {rate: 32000, headroom: 25, per: 20000, max: 64, want: 2},
		"just over":               {rate: 32001, headroom: 25, per: 20000, max: 64, want: 3},
		"100k writes, 25% room":   {rate: 100000, headroom: 25, per: 20000, max: 64, want: 7},
		"clamped down to max":     {rate: 10_000_000, headroom: 25, per: 20000, max: 64, want: 64},
		"no headroom":             {rate: 60000, headroom: 0, per: 20000, max: 64, want: 3},
		"zero per key is the max": {rate: 1, headroom: 0, per: 0, max: 8, want: 8},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Size(tc.rate, tc.headroom, tc.per, tc.max); got != tc.want {
				t.Errorf("Size = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAnnounceEpoch(t *testing.T) {
	tests := map[string]struct {
		now    time.Time
		margin time.Duration
		want   int64
	}{
		"boundary far enough":   {now: t0.Add(10 * time.Second), margin: 10 * time.Second, want: 1001},
		"boundary too close":    {now: t0.Add(55 * time.Second), margin: 10 * time.Second, want: 1002},
		"exactly margin ahead":  {now: t0.Add(50 * time.Second), margin: 10 * time.Second, want: 1001},
		"on a boundary":         {now: t0, margin: 10 * time.Second, want: 1001},
		"margin over two epoch": {now: t0, margin: 130 * time.Second, want: 1003},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := AnnounceEpoch(tc.now, 60000, tc.margin); got != tc.want {
				t.Errorf("AnnounceEpoch = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPlanGenerations(t *testing.T) {
	const margin = 10 * time.Second
	g := func(from int64, n int32) routing.Generation { return routing.Generation{FromEpoch: from, Shards: n} }
	tests := map[string]struct {
		now       time.Time
		gens      []routing.Generation
		desired   int32
		want      []routing.Generation
		wantFolds []GenRef
		wantNext  time.Time
	}{
		"first split announced at next boundary": {
			now: t0.Add(5 * time.Second), desired: 4,
			want: []routing.Generation{g(1001, 4)}, wantNext: routing.EpochStart(1001, 60000),
		},
		"first split skips a boundary that is too close": {
			now: t0.Add(55 * time.Second), desired: 4,
			want: []routing.Generation{g(1002, 4)}, wantNext: routing.EpochStart(1002, 60000),
		},
		"steady": {
			now: t0.Add(5 * time.Second), gens: []routing.Generation{g(990, 4)}, desired: 4,
			want: []routing.Generation{g(990, 4)},
		},
		"resize appends a generation": {
			now: t0.Add(5 * time.Second), gens: []routing.Generation{g(990, 4)}, desired: 8,
			want: []routing.Generation{g(990, 4), g(1001, 8)}, wantNext: routing.EpochStart(1001, 60000),
		},
		"resize amends an announced generation still far ahead": {
			now: t0.Add(5 * time.Second), gens: []routing.Generation{g(990, 4), g(1001, 8)}, desired: 16,
			want: []routing.Generation{g(990, 4), g(1001, 16)}, wantNext: routing.EpochStart(1001, 60000),
		},
		"resize back withdraws an announced generation": {
			now: t0.Add(5 * time.Second), gens: []routing.Generation{g(990, 4), g(1001, 8)}, desired: 4,
			want: []routing.Generation{g(990, 4)},
		},
		"announced generation too close is kept, new one behind it": {
			now: t0.Add(55 * time.Second), gens: []routing.Generation{g(990, 4), g(1001, 8)}, desired: 16,
			want:     []routing.Generation{g(990, 4), g(1001, 8), g(1002, 16)},
			wantNext: routing.EpochStart(1001, 60000),
		},
		"replaced generation waits for the grace period": {
			now: t0.Add(5 * time.Second), gens: []routing.Generation{g(990, 4), g(1000, 8)}, desired: 8,
			want: []routing.Generation{g(990, 4), g(1000, 8)}, wantNext: t0.Add(margin),
		},
		"replaced generation is folded after grace": {
			now: t0.Add(margin), gens: []routing.Generation{g(990, 4), g(1000, 8)}, desired: 8,
			want:      []routing.Generation{g(990, 4), g(1000, 8)},
			wantFolds: []GenRef{{Key: "k", FromEpoch: 990}},
		},
		"unsplit announces a base generation": {
			now: t0.Add(5 * time.Second), gens: []routing.Generation{g(990, 4)}, desired: 0,
			want: []routing.Generation{g(990, 4), g(1001, 0)}, wantNext: routing.EpochStart(1001, 60000),
		},
		"unsplit in effect: folds the old shards and keeps listing them": {
			now: t0.Add(time.Minute), gens: []routing.Generation{g(990, 4), g(1000, 0)}, desired: 0,
			want:      []routing.Generation{g(990, 4), g(1000, 0)},
			wantFolds: []GenRef{{Key: "k", FromEpoch: 990}},
		},
		"retired base generation leaves without folding": {
			now: t0.Add(time.Minute), gens: []routing.Generation{g(980, 0), g(1000, 4)}, desired: 4,
			want: []routing.Generation{g(1000, 4)},
		},
		"lone base generation in effect is no split": {
			now: t0.Add(time.Minute), gens: []routing.Generation{g(1000, 0)}, desired: 0,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, folds, next := planGenerations(tc.now, 60000, margin, "k", tc.gens, tc.desired)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("generations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantFolds, folds); diff != "" {
				t.Errorf("folds (-want +got):\n%s", diff)
			}
			if !next.Equal(tc.wantNext) {
				t.Errorf("next = %v, want %v", next, tc.wantNext)
			}
		})
	}
}

// run feeds Decide a sequence of observations at given times, carrying state
// and the table over like the reconciler does, and returns the last output.
type tick struct {
	at  time.Duration
	obs map[string]Observation
}

func run(spec *v1alpha1.HotKeyPolicySpec, ticks []tick) Output {
	var st State
	var cur *routing.Table
	var out Output
	for _, tk := range ticks {
		out = Decide(Input{Now: t0.Add(tk.at), Spec: spec, Observations: tk.obs, State: st, Current: cur, Margin: 10 * time.Second})
		st = out.State
		cur = &routing.Table{SchemaVersion: 1, EpochMillis: 60000, Entries: out.Entries}
	}
	return out
}

func TestDecideHysteresis(t *testing.T) {
	hotReads := map[string]Observation{"k": {Families: strFams, ReadsPerSecond: 6000}}
	warmReads := map[string]Observation{"k": {Families: strFams, ReadsPerSecond: 4500}} // under 5000, over 4000
	coldReads := map[string]Observation{"k": {Families: strFams, ReadsPerSecond: 3000}} // under 4000
	tests := map[string]struct {
		ticks       []tick
		wantHot     bool
		wantStarted int
		wantEnded   int
		wantNext    time.Duration // from t0; -1 for none
	}{
		"over threshold but not sustained": {
			ticks:   []tick{{0, hotReads}, {time.Second, hotReads}},
			wantHot: false, wantNext: 2 * time.Second,
		},
		"sustained": {
			ticks:   []tick{{0, hotReads}, {2 * time.Second, hotReads}},
			wantHot: true, wantStarted: 1, wantNext: -1,
		},
		"dip resets the sustain timer": {
			ticks:   []tick{{0, hotReads}, {time.Second, coldReads}, {2 * time.Second, hotReads}, {3 * time.Second, hotReads}},
			wantHot: false, wantNext: 4 * time.Second,
		},
		"under threshold within hysteresis band stays hot": {
			ticks:   []tick{{0, hotReads}, {2 * time.Second, hotReads}, {3 * time.Second, warmReads}, {time.Hour, warmReads}},
			wantHot: true, wantStarted: 1, wantNext: -1,
		},
		"cooling, not yet cooled": {
			ticks:   []tick{{0, hotReads}, {2 * time.Second, hotReads}, {3 * time.Second, coldReads}, {4 * time.Minute, coldReads}},
			wantHot: true, wantStarted: 1, wantNext: 3*time.Second + 5*time.Minute,
		},
		"cooled after cooldown": {
			ticks:   []tick{{0, hotReads}, {2 * time.Second, hotReads}, {3 * time.Second, coldReads}, {3*time.Second + 5*time.Minute, nil}},
			wantHot: false, wantStarted: 1, wantEnded: 1, wantNext: -1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec := testSpec()
			var st State
			var out Output
			started, ended := 0, 0
			for _, tk := range tc.ticks {
				out = Decide(Input{Now: t0.Add(tk.at), Spec: spec, Observations: tk.obs, State: st, Margin: 10 * time.Second})
				st = out.State
				started += out.Started
				ended += out.Ended
			}
			if got := len(out.Entries) == 1; got != tc.wantHot {
				t.Errorf("hot = %v, want %v (entries %+v)", got, tc.wantHot, out.Entries)
			}
			if started != tc.wantStarted || ended != tc.wantEnded {
				t.Errorf("started/ended = %d/%d, want %d/%d", started, ended, tc.wantStarted, tc.wantEnded)
			}
			var want time.Time
			if tc.wantNext >= 0 {
				want = t0.Add(tc.wantNext)
			}
			if !out.NextCheck.Equal(want) {
				t.Errorf("next = %v, want %v", out.NextCheck, want)
			}
		})
	}
}

func TestDecideMitigations(t *testing.T) {
	on := func(coalesce, cache, replicate, split, preagg bool) func(*v1alpha1.HotKeyPolicySpec) {
		return func(s *v1alpha1.HotKeyPolicySpec) {
			m := &s.Mitigations
			m.Coalesce.Enabled, m.LocalCache.Enabled = ptr.To(coalesce), ptr.To(cache)
			m.Replicate.Enabled, m.Split.Enabled, m.PreAggregate.Enabled = ptr.To(replicate), ptr.To(split), ptr.To(preagg)
		}
	}
	gen := func(n int32) *routing.Split {
		return &routing.Split{Generations: []routing.Generation{{FromEpoch: 1001, Shards: n}}}
	}
	tests := map[string]struct {
		spec *v1alpha1.HotKeyPolicySpec
		obs  Observation
		want *routing.Entry // nil: not in the table
	}{
		"read-hot, everything allowed, one key can serve it: cheap moves only": {
			spec: testSpec(on(true, true, true, true, false)), obs: Observation{Families: strFams, ReadsPerSecond: 6000},
			want: &routing.Entry{Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 2000, JitterPercent: 10, RefreshAheadPercent: 10}},
		},
		"read-hot beyond one key: replicas sized from reads": {
			spec: testSpec(on(true, true, true, true, false)), obs: Observation{Families: strFams, ReadsPerSecond: 100000},
			want: &routing.Entry{Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 2000, JitterPercent: 10, RefreshAheadPercent: 10}, Replicate: &routing.Replicate{Replicas: 3, TTLMillis: 300000}},
		},
		"read-hot with only replicate allowed": {
			spec: testSpec(on(false, false, true, false, false)), obs: Observation{Families: strFams, ReadsPerSecond: 6000},
			want: &routing.Entry{Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 300000}},
		},
		"read-hot, nothing for reads allowed": {
			spec: testSpec(on(false, false, false, true, false)), obs: Observation{Families: strFams, ReadsPerSecond: 6000},
		},
		"write-hot: split sized from writes": {
			spec: testSpec(on(true, true, true, true, false)), obs: Observation{Families: strFams, WritesPerSecond: 100000},
			want: &routing.Entry{Split: gen(7)},
		},
		"write-hot with pre-aggregation": {
			spec: testSpec(on(false, false, false, true, true)), obs: Observation{Families: strFams, WritesPerSecond: 2000},
			want: &routing.Entry{Split: gen(2), PreAggregate: &routing.PreAggregate{FlushMillis: 100}},
		},
		"write-hot, split not allowed": {
			spec: testSpec(on(true, true, true, false, false)), obs: Observation{Families: strFams, WritesPerSecond: 100000},
		},
		"hot both ways gets both": {
			spec: testSpec(on(true, false, false, true, false)), obs: Observation{Families: strFams, ReadsPerSecond: 6000, WritesPerSecond: 2000},
			want: &routing.Entry{Coalesce: true, Split: gen(2)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obs := map[string]Observation{"k": tc.obs}
			out := run(tc.spec, []tick{{0, obs}, {2 * time.Second, obs}})
			var want []routing.Entry
			if tc.want != nil {
				w := *tc.want
				w.Key, w.Source = "k", routing.SourceDetected
				want = []routing.Entry{w}
			}
			if diff := cmp.Diff(want, out.Entries, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideSplitLifecycle(t *testing.T) {
	spec := testSpec()
	hot := map[string]Observation{"k": {Families: strFams, WritesPerSecond: 100000}}
	hotter := map[string]Observation{"k": {Families: strFams, WritesPerSecond: 200000}}
	cold := map[string]Observation{"k": {Families: strFams, WritesPerSecond: 10}}
	var st State
	var cur *routing.Table
	step := func(at time.Duration, obs map[string]Observation) Output {
		out := Decide(Input{Now: t0.Add(at), Spec: spec, Observations: obs, State: st, Current: cur, Margin: 10 * time.Second})
		st = out.State
		cur = &routing.Table{SchemaVersion: 1, EpochMillis: 60000, Entries: out.Entries}
		return out
	}
	gens := func(out Output) []routing.Generation {
		if len(out.Entries) == 0 || out.Entries[0].Split == nil {
			return nil
		}
		return out.Entries[0].Split.Generations
	}
	step(0, hot)
	out := step(2*time.Second, hot)
	if diff := cmp.Diff([]routing.Generation{{FromEpoch: 1001, Shards: 7}}, gens(out)); diff != "" {
		t.Fatalf("split (-want +got):\n%s", diff)
	}
	out = step(90*time.Second, hotter) // epoch 1001, 30s before 1002
	if diff := cmp.Diff([]routing.Generation{{FromEpoch: 1001, Shards: 7}, {FromEpoch: 1002, Shards: 13}}, gens(out)); diff != "" {
		t.Fatalf("resize (-want +got):\n%s", diff)
	}
	out = step(125*time.Second, hotter) // 5s into 1002: grace not over
	if len(out.Folds) != 0 {
		t.Fatalf("folds before grace: %v", out.Folds)
	}
	out = step(130*time.Second, hotter)
	if diff := cmp.Diff([]GenRef{{Key: "k", FromEpoch: 1001}}, out.Folds); diff != "" {
		t.Fatalf("folds (-want +got):\n%s", diff)
	}
	cur.Entries = Prune(t0.Add(130*time.Second), 60000, out.Entries, map[GenRef]bool{{Key: "k", FromEpoch: 1001}: true})
	if diff := cmp.Diff([]routing.Generation{{FromEpoch: 1002, Shards: 13}}, cur.Entries[0].Split.Generations); diff != "" {
		t.Fatalf("pruned (-want +got):\n%s", diff)
	}
	// A dip in the sum (one node's report arrived before the other's) does
	// not shrink the split; a lasting lower rate does, after sustainFor.
	out = step(131*time.Second, hot)
	if diff := cmp.Diff([]routing.Generation{{FromEpoch: 1002, Shards: 13}}, gens(out)); diff != "" {
		t.Fatalf("shrank on a dip (-want +got):\n%s", diff)
	}
	if want := t0.Add(133 * time.Second); !out.NextCheck.Equal(want) {
		t.Fatalf("next = %v, want %v", out.NextCheck, want)
	}
	step(132*time.Second, hotter)
	out = step(133*time.Second, hot)
	if diff := cmp.Diff([]routing.Generation{{FromEpoch: 1002, Shards: 13}}, gens(out)); diff != "" {
		t.Fatalf("shrank after a reset dip (-want +got):\n%s", diff)
	}
	out = step(135*time.Second, hot)
	// 100k writes/s sizes to 7 shards, but a shrink must clear the 20%
	// hysteresis band: 100k / 0.8 = 125k sizes to 8.
	if diff := cmp.Diff([]routing.Generation{{FromEpoch: 1002, Shards: 13}, {FromEpoch: 1003, Shards: 8}}, gens(out)); diff != "" {
		t.Fatalf("lasting shrink (-want +got):\n%s", diff)
	}
	out = step(136*time.Second, hotter) // grows back: the announced shrink is withdrawn
	if diff := cmp.Diff([]routing.Generation{{FromEpoch: 1002, Shards: 13}}, gens(out)); diff != "" {
		t.Fatalf("grow back (-want +got):\n%s", diff)
	}
	// Cool down: after the cooldown the key announces an unsplit, keeps its
	// shards listed until folded, then leaves the table.
	step(140*time.Second, cold)
	out = step(140*time.Second+5*time.Minute, cold) // 440s: epoch 1007 (420..480)
	if out.Ended != 1 {
		t.Fatalf("ended = %d, want 1", out.Ended)
	}
	if diff := cmp.Diff([]routing.Generation{{FromEpoch: 1002, Shards: 13}, {FromEpoch: 1008, Shards: 0}}, gens(out)); diff != "" {
		t.Fatalf("unsplit (-want +got):\n%s", diff)
	}
	out = step(490*time.Second, nil)
	if diff := cmp.Diff([]GenRef{{Key: "k", FromEpoch: 1002}}, out.Folds); diff != "" {
		t.Fatalf("folds (-want +got):\n%s", diff)
	}
	if got := Prune(t0.Add(490*time.Second), 60000, out.Entries, map[GenRef]bool{{Key: "k", FromEpoch: 1002}: true}); len(got) != 0 {
		t.Fatalf("entries after final fold = %+v, want none", got)
	}
}

func TestDecideCap(t *testing.T) {
	spec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Capacity.MaxMitigatedKeys = 2 })
	obs := map[string]Observation{
		"a": {Families: strFams, ReadsPerSecond: 6000}, "b": {Families: strFams, ReadsPerSecond: 60000}, "c": {Families: strFams, ReadsPerSecond: 9000},
	}
	out := run(spec, []tick{{0, obs}, {2 * time.Second, obs}})
	var keys []string
	for _, e := range out.Entries {
		keys = append(keys, e.Key)
	}
	if diff := cmp.Diff([]string{"b", "c"}, keys); diff != "" {
		t.Errorf("hottest keys win (-want +got):\n%s", diff)
	}
	if out.Capped != 1 {
		t.Errorf("capped = %d, want 1", out.Capped)
	}
}

func TestDecideScheduled(t *testing.T) {
	spec := testSpec()
	sk := ScheduledKey{
		Key: "product:1", Schedule: "bf",
		PrewarmAt: t0.Add(time.Hour - 10*time.Minute), Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour),
		Mitigation: v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 8}},
	}
	at := func(d time.Duration) []routing.Entry {
		return Decide(Input{Now: t0.Add(d), Spec: spec, Scheduled: []ScheduledKey{sk}, Margin: 10 * time.Second}).Entries
	}
	if got := at(49 * time.Minute); len(got) != 0 {
		t.Errorf("before prewarm: %+v", got)
	}
	got := at(50 * time.Minute)
	start, end := sk.Start, sk.End
	want := []routing.Entry{{Key: "product:1", Source: routing.SourceScheduled, NotBefore: &start, NotAfter: &end,
		Replicate: &routing.Replicate{Replicas: 8, TTLMillis: 300000}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("at prewarm (-want +got):\n%s", diff)
	}
	if got := at(2 * time.Hour); len(got) != 0 {
		t.Errorf("after the event: %+v", got)
	}
}

func TestRescale(t *testing.T) {
	g := func(from int64, n int32) routing.Generation { return routing.Generation{FromEpoch: from, Shards: n} }
	tbl := &routing.Table{SchemaVersion: 1, EpochMillis: 60000, Entries: []routing.Entry{
		{Key: "a", Split: &routing.Split{Generations: []routing.Generation{g(1000, 4), g(1001, 8), g(1002, 0)}}},
		{Key: "b", Coalesce: true},
	}}
	tests := map[string]struct {
		epochMillis int64
		want        []routing.Generation
	}{
		"same length":                   {60000, []routing.Generation{g(1000, 4), g(1001, 8), g(1002, 0)}},
		"shorter epochs keep the start": {30000, []routing.Generation{g(2000, 4), g(2002, 8), g(2004, 0)}},
		"longer epochs stay ordered":    {600000, []routing.Generation{g(100, 4), g(101, 8), g(102, 0)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Rescale(tbl, tc.epochMillis)
			if diff := cmp.Diff(tc.want, got.Entries[0].Split.Generations); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Error(err)
			}
			if tbl.Entries[0].Split.Generations[0].FromEpoch != 1000 {
				t.Error("Rescale modified its input")
			}
		})
	}
}

// TestShrinkNeedsTheHysteresisBand checks that a split does not follow a
// rate wobbling across a rounding boundary: it keeps its size until the
// smaller size would still hold at rate / (1 - hysteresis).
func TestShrinkNeedsTheHysteresisBand(t *testing.T) {
	spec := testSpec() // 20k writes/s per shard, 25% headroom, 20% hysteresis
	tests := map[string]struct {
		rate    int64
		current int32
		want    int32
	}{
		// 150k sizes to 10 shards (187.5k / 20k = 9.4 -> 10).
		"at size":                      {150000, 10, 10},
		"dip sizing to 9 keeps 10":     {140000, 10, 10}, // plain size 9; 175k -> 11 -> min(10, 11)
		"grow is immediate":            {170000, 10, 11},
		"a lasting fall shrinks":       {100000, 10, 8}, // 125k -> 8
		"far below shrinks to minimum": {1000, 10, 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var st State
			cur := &routing.Table{SchemaVersion: 1, EpochMillis: 60000, Entries: []routing.Entry{{
				Key: "k", Source: routing.SourceDetected,
				Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 1000, Shards: tc.current}}},
			}}}
			obs := map[string]Observation{"k": {Families: strFams, WritesPerSecond: tc.rate}}
			// Two steps sustainFor apart, with the key already write-hot.
			st.Keys = []KeyState{{Key: "k", WriteHot: true}}
			var out Output
			for _, at := range []time.Duration{0, spec.Thresholds.SustainFor.Duration} {
				out = Decide(Input{Now: t0.Add(at), Spec: spec, Observations: obs, State: st, Current: cur, Margin: 10 * time.Second})
				st = out.State
			}
			var got int32
			for _, e := range out.Keys {
				if e.Key == "k" {
					got = e.Shards
				}
			}
			if got != tc.want {
				t.Errorf("shards = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestStateFirstOver(t *testing.T) {
	at := func(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }
	st := State{Keys: []KeyState{
		{Key: "pending", ReadOverSince: at(5)},
		{Key: "both", ReadOverSince: at(9), WriteOverSince: at(7)},
		{Key: "hot", ReadHot: true, Since: at(3), WriteOverSince: at(8)},
		{Key: "cooling", ReadHot: true, Since: at(1), ReadUnderSince: at(2)},
		{Key: "detected", WriteHot: true, Since: at(6), DetectedAt: at(4)},
		{Key: "idle"},
	}}
	got := st.FirstOver()
	want := map[string]time.Time{"pending": *at(5), "both": *at(7), "hot": *at(3), "cooling": *at(1), "detected": *at(4)}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("FirstOver (-want +got):\n%s", d)
	}
}

// TestStateDurable: what is written when it changes is which keys are hot
// and since when; the timers stay out (losing one only delays a change).
func TestStateDurable(t *testing.T) {
	at := func(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }
	st := State{Keys: []KeyState{
		{Key: "cooling", ReadHot: true, Since: at(1), DetectedAt: at(0), ReadUnderSince: at(2), WriteOverSince: at(3)},
		{Key: "pending", ReadOverSince: at(5)},
		{Key: "shrinking", WriteHot: true, Since: at(2), ShrinkSince: at(4)},
	}}
	want := State{Keys: []KeyState{
		{Key: "cooling", ReadHot: true, Since: at(1), DetectedAt: at(0)},
		{Key: "shrinking", WriteHot: true, Since: at(2)},
	}}
	if d := cmp.Diff(want, st.Durable()); d != "" {
		t.Fatalf("Durable (-want +got):\n%s", d)
	}
}

// TestDetectedAtIsWhenTheKeyWentOver: a key hot after sustainFor is dated
// from its first pass over the threshold; the date goes when it cools.
func TestDetectedAtIsWhenTheKeyWentOver(t *testing.T) {
	spec := &v1alpha1.HotKeyPolicySpec{}
	spec.Mitigations.Split.Enabled = ptr.To(true)
	v1alpha1.SetDefaults(spec)
	in := Input{Now: t0, Spec: spec, Observations: map[string]Observation{"k": {Families: strFams, WritesPerSecond: 50000}}}
	out := Decide(in)
	in.State, in.Now = out.State, t0.Add(spec.Thresholds.SustainFor.Duration)
	out = Decide(in)
	if len(out.State.Keys) != 1 || !out.State.Keys[0].WriteHot || out.State.Keys[0].DetectedAt == nil || !out.State.Keys[0].DetectedAt.Equal(t0) {
		t.Fatalf("state after sustainFor %+v, want k write-hot, detected at %v", out.State.Keys, t0)
	}
	if got := out.State.Keys[0].Since; got == nil || !got.Equal(in.Now) {
		t.Errorf("since = %v, want %v", got, in.Now)
	}
	in.State, in.Observations = out.State, nil
	in.Now = in.Now.Add(time.Second)
	out = Decide(in)
	in.State, in.Now = out.State, in.Now.Add(spec.Thresholds.Cooldown.Duration)
	out = Decide(in)
	for _, k := range out.State.Keys {
		if k.Key == "k" && (k.hot() || k.DetectedAt != nil) {
			t.Errorf("after cooldown %+v, want cold and undated", k)
		}
	}
}
