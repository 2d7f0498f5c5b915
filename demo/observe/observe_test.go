package observe

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

func TestParseInfo(t *testing.T) {
	info := "# Stats\r\ntotal_connections_received:3\r\ntotal_commands_processed:1234\r\n" +
		"# Commandstats\r\ncmdstat_get:calls=100,usec=5,usec_per_call=0.05,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_mget:calls=7,usec=1\r\ncmdstat_incr:calls=50,usec=2\r\n"
	got, err := parseInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(counters{commands: 1234, reads: 107}, got, cmp.AllowUnexported(counters{})); diff != "" {
		t.Errorf("parseInfo (-want +got):\n%s", diff)
	}
	for name, bad := range map[string]string{
		"missing total": "# Stats\r\ncmdstat_get:calls=1\r\n",
		"garbled total": "total_commands_processed:x\r\n",
		"garbled calls": "total_commands_processed:1\r\ncmdstat_get:calls=x\r\n",
		"empty":         "",
	} {
		if _, err := parseInfo(bad); err == nil {
			t.Errorf("%s: parseInfo accepted %q", name, bad)
		}
	}
}

func TestRates(t *testing.T) {
	for name, tc := range map[string]struct {
		prev, cur  []counters
		seconds    float64
		ops, reads []float64
	}{
		"the sampler's own INFO is not counted": {
			prev:    []counters{{commands: 100, reads: 10}, {commands: 5}},
			cur:     []counters{{commands: 301, reads: 60}, {commands: 6}},
			seconds: 1,
			ops:     []float64{200, 0},
			reads:   []float64{50, 0},
		},
		"per second over a longer gap": {
			prev:    []counters{{commands: 0, reads: 0}},
			cur:     []counters{{commands: 401, reads: 100}},
			seconds: 2,
			ops:     []float64{200},
			reads:   []float64{50},
		},
		"a restarted master's counters never give a negative rate of ops": {
			prev:    []counters{{commands: 1000}},
			cur:     []counters{{commands: 3}},
			seconds: 1,
			ops:     []float64{0},
			reads:   []float64{0},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ops, reads := rates(tc.prev, tc.cur, tc.seconds)
			if d := cmp.Diff(tc.ops, ops); d != "" {
				t.Errorf("ops/s (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.reads, reads); d != "" {
				t.Errorf("reads/s (-want +got):\n%s", d)
			}
		})
	}
}

func TestSampleRatio(t *testing.T) {
	for name, tc := range map[string]struct {
		ops  []float64
		want float64
	}{
		"even":           {ops: []float64{100, 100, 100}, want: 1},
		"one hot master": {ops: []float64{100, 700, 100}, want: 7.0 / 3},
		"no traffic":     {ops: []float64{0, 0, 0}, want: 0},
		"no masters":     {want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			if got := (Sample{OpsPerSec: tc.ops}).Ratio(); got != tc.want {
				t.Errorf("Ratio() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestObserverTimes(t *testing.T) {
	const ns, policy = "demo", "demo"
	o := newObserver(policy)
	over := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	state := func(ks ...decide.KeyState) string {
		b, err := json.Marshal(decide.State{Keys: ks})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The manager's state says when it first saw the key over a threshold.
	o.detectedLocked(state(decide.KeyState{Key: "k", ReadOverSince: &over}))
	if got := o.Snapshot().Keys["k"].Detected; !got.Equal(over) {
		t.Fatalf("detected %v, want the manager's %v", got, over)
	}
	later := over.Add(time.Second)
	o.detectedLocked(state(decide.KeyState{Key: "k", ReadHot: true, Since: &later}))
	if got := o.Snapshot().Keys["k"].Detected; !got.Equal(over) {
		t.Fatalf("detected moved to %v once hot, want it kept at %v", got, over)
	}

	table := func(v int64, e ...routing.Entry) *corev1.ConfigMap {
		tb := routing.Table{SchemaVersion: routing.SchemaVersion, Policy: ns + "/" + policy, Version: v, EpochMillis: 5000, Entries: e}
		data, err := tb.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{Data: map[string]string{routing.ConfigMapKey: string(data)}}
		cm.Name = routing.ConfigMapName(policy)
		return cm
	}
	o.onConfigMap(table(1, routing.Entry{Key: "k", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 10, Shards: 4}}}}))
	first := o.Snapshot().Keys["k"]
	if first.Routed.IsZero() || first.Entry == nil || first.Source != routing.SourceDetected {
		t.Fatalf("routed key not recorded with its source: %+v", first)
	}
	if !first.Dropped.IsZero() {
		t.Errorf("a listed key is dropped at %v", first.Dropped)
	}
	if want := time.UnixMilli(50_000); !first.SplitEffective.Equal(want) {
		t.Errorf("split effective %v, want %v (epoch 10 of 5s)", first.SplitEffective, want)
	}
	// A later resize keeps the key listed; a removal drops it; both keep the
	// first moments.
	o.onConfigMap(table(2, routing.Entry{Key: "k", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 12, Shards: 8}}}}))
	if d := o.Snapshot().Keys["k"].Dropped; !d.IsZero() {
		t.Errorf("a resized key is dropped at %v", d)
	}
	o.onConfigMap(table(3))
	last := o.Snapshot()
	if k := last.Keys["k"]; !k.Routed.Equal(first.Routed) || !k.SplitEffective.Equal(first.SplitEffective) || k.Entry != nil {
		t.Errorf("after resize and removal: %+v, want the first moments and no entry", k)
	}
	dropped := last.Keys["k"].Dropped
	if dropped.IsZero() {
		t.Error("a key the table left out is not dropped")
	}
	if last.Table.Version != 3 {
		t.Errorf("table version %d, want 3", last.Table.Version)
	}
	// A key only detected, never listed, is not dropped by a table without it.
	o.detectedLocked(state(decide.KeyState{Key: "d", ReadOverSince: &over}))
	o.onConfigMap(table(4))
	if d := o.Snapshot().Keys["d"].Dropped; !d.IsZero() {
		t.Errorf("a key never listed is dropped at %v", d)
	}
	bad := table(5)
	bad.Data[routing.ConfigMapKey] = "{not json"
	o.onConfigMap(bad)
	if o.Snapshot().Table.Version != 4 {
		t.Error("an unparsable table replaced the last good one")
	}
	// Another policy's table is not this observer's.
	other := table(9)
	other.Name = routing.ConfigMapName("other")
	o.onConfigMap(other)
	if v := o.Snapshot().Table.Version; v != 4 {
		t.Errorf("another policy's table (v9) was taken: version %d", v)
	}
	if k := o.Snapshot().Keys["k"]; !k.Dropped.Equal(dropped) {
		t.Errorf("dropped moved from %v to %v", dropped, k.Dropped)
	}
}
