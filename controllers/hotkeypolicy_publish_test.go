package controllers

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/routing"
)

// publishFixture is policy ns/p in Enforce mode with one-minute epochs.
func publishFixture() (*v1alpha1.HotKeyPolicy, *v1alpha1.HotKeyPolicySpec) {
	policy := &v1alpha1.HotKeyPolicy{}
	policy.Namespace, policy.Name = "ns", "p"
	spec := policy.Spec.DeepCopy()
	spec.Mode = v1alpha1.ModeEnforce
	spec.Mitigations.Split.Epoch = metav1.Duration{Duration: time.Minute}
	v1alpha1.SetDefaults(spec)
	return policy, spec
}

// routingCM is a routing ConfigMap of ns/p holding table (and the
// finalizer when held).
func routingCM(t *testing.T, table string, held bool) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{Data: map[string]string{routing.ConfigMapKey: table, StateKey: "{}"}}
	if held {
		cm.Finalizers = []string{Finalizer}
	}
	return cm
}

// tableJSON is the serialised table of ns/p at version with entries.
func tableJSON(t *testing.T, version, epochMillis int64, entries []routing.Entry) string {
	t.Helper()
	if entries == nil {
		entries = []routing.Entry{}
	}
	_, spec := publishFixture()
	// A policy of database 0 writes what it wrote before databases existed.
	b, err := (&routing.Table{SchemaVersion: routing.SchemaVersionFor(0), Policy: "ns/p", Version: version, EpochMillis: epochMillis, Entries: entries,
		LocalCache: cacheSettings(&spec.Mitigations.LocalCache)}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	entriesA  = []routing.Entry{{Key: "a", Coalesce: true}}
	entriesAB = []routing.Entry{{Key: "a", Coalesce: true}, {Key: "b", Coalesce: true}}
)

// TestPublishVersion: the version starts from the greater of the published
// table's version and status.routingVersion, stays while the serialised
// table is the same and grows by one when it changes.
func TestPublishVersion(t *testing.T) {
	for name, tc := range map[string]struct {
		// cm is the routing ConfigMap's table (nil: no ConfigMap).
		cm            func(t *testing.T) *corev1.ConfigMap
		statusVersion int64
		entries       []routing.Entry
		wantVersion   int64
		wantTableErr  bool
		// wantUnchanged: nothing needs writing.
		wantUnchanged bool
	}{
		"first publication": {entries: entriesA, wantVersion: 1},
		"a ConfigMap deleted by hand: on from status.routingVersion": {statusVersion: 7, entries: entriesA, wantVersion: 8},
		"the same table keeps its version": {statusVersion: 5, entries: entriesA, wantVersion: 5, wantUnchanged: true,
			cm: func(t *testing.T) *corev1.ConfigMap { return routingCM(t, tableJSON(t, 5, 60000, entriesA), true) }},
		"the same table without the finalizer: written, same version": {statusVersion: 5, entries: entriesA, wantVersion: 5,
			cm: func(t *testing.T) *corev1.ConfigMap { return routingCM(t, tableJSON(t, 5, 60000, entriesA), false) }},
		"changed entries: one more": {statusVersion: 5, entries: entriesAB, wantVersion: 6,
			cm: func(t *testing.T) *corev1.ConfigMap { return routingCM(t, tableJSON(t, 5, 60000, entriesA), true) }},
		"changed epoch length: one more": {statusVersion: 5, entries: entriesA, wantVersion: 6,
			cm: func(t *testing.T) *corev1.ConfigMap { return routingCM(t, tableJSON(t, 5, 30000, entriesA), true) }},
		"status ahead of the table: on from the status": {statusVersion: 5, entries: entriesA, wantVersion: 6,
			cm: func(t *testing.T) *corev1.ConfigMap { return routingCM(t, tableJSON(t, 3, 60000, entriesA), true) }},
		"table ahead of the status: on from the table": {statusVersion: 5, entries: entriesA, wantVersion: 9, wantUnchanged: true,
			cm: func(t *testing.T) *corev1.ConfigMap { return routingCM(t, tableJSON(t, 9, 60000, entriesA), true) }},
		"an invalid table's version still counts": {statusVersion: 5, entries: entriesA, wantVersion: 13, wantTableErr: true,
			cm: func(t *testing.T) *corev1.ConfigMap {
				return routingCM(t, `{"schemaVersion":99,"version":12,"epochMillis":60000,"entries":[]}`, true)
			}},
		"a table that is not JSON: on from the status": {statusVersion: 5, entries: entriesA, wantVersion: 6, wantTableErr: true,
			cm: func(t *testing.T) *corev1.ConfigMap { return routingCM(t, "{not json", true) }},
		"a table published at version 0 is republished at 1": {entries: entriesA, wantVersion: 1,
			cm: func(t *testing.T) *corev1.ConfigMap { return routingCM(t, tableJSON(t, 0, 60000, entriesA), true) }},
	} {
		t.Run(name, func(t *testing.T) {
			policy, spec := publishFixture()
			var cm *corev1.ConfigMap
			var doc routingDoc
			var tableErr error
			if tc.cm != nil {
				cm = tc.cm(t)
				doc, tableErr, _ = parseRouting(cm.Data)
			}
			if (tableErr != nil) != tc.wantTableErr {
				t.Errorf("table error %v, want one: %v", tableErr, tc.wantTableErr)
			}
			prev := newPublished(tc.statusVersion, cm, doc)
			c, err := newRoutingContent(policy, spec, prev, &decide.Output{}, &decide.Output{Entries: tc.entries})
			if err != nil {
				t.Fatal(err)
			}
			if c.version != tc.wantVersion {
				t.Errorf("version %d, want %d", c.version, tc.wantVersion)
			}
			if want := tableJSON(t, tc.wantVersion, 60000, tc.entries); c.tableJSON != want {
				t.Errorf("table\n%s\nwant\n%s", c.tableJSON, want)
			}
			if got := c.unchanged(prev, keynames.Plain); got != tc.wantUnchanged {
				t.Errorf("unchanged = %v, want %v", got, tc.wantUnchanged)
			}
		})
	}
}

// TestPublishVersionSequence publishes a run of tables, each pass starting
// from what the last one wrote: the version grows by one exactly when the
// serialised table changes and never goes back, also when the ConfigMap is
// deleted or a status write is lost.
func TestPublishVersionSequence(t *testing.T) {
	type step struct {
		entries []routing.Entry
		// deleteCM: the ConfigMap is deleted by hand before this pass.
		deleteCM bool
		// statusLost: this pass's status write fails.
		statusLost  bool
		wantVersion int64
	}
	for name, steps := range map[string][]step{
		"changes and repeats": {
			{entries: entriesA, wantVersion: 1}, {entries: entriesA, wantVersion: 1},
			{entries: entriesAB, wantVersion: 2}, {entries: entriesAB, wantVersion: 2},
			{entries: entriesA, wantVersion: 3}, {wantVersion: 4}, {wantVersion: 4}, {entries: entriesA, wantVersion: 5}},
		"the ConfigMap deleted by hand": {
			{entries: entriesA, wantVersion: 1}, {entries: entriesAB, wantVersion: 2},
			{entries: entriesAB, deleteCM: true, wantVersion: 3}, {entries: entriesAB, wantVersion: 3}},
		"status writes lost": {
			{entries: entriesA, statusLost: true, wantVersion: 1}, {entries: entriesAB, statusLost: true, wantVersion: 2},
			{entries: entriesAB, wantVersion: 2}, {entries: entriesA, wantVersion: 3}},
		// The one gap: with the greatest version in neither the status nor a
		// ConfigMap, the next table takes that version again. Harmless when
		// it is the same table, as here.
		"status write lost, then the ConfigMap deleted: the version is reused": {
			{entries: entriesA, wantVersion: 1}, {entries: entriesAB, statusLost: true, wantVersion: 2},
			{entries: entriesAB, deleteCM: true, wantVersion: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			policy, spec := publishFixture()
			var cm *corev1.ConfigMap
			var status int64
			for i, s := range steps {
				if s.deleteCM {
					cm = nil
				}
				var doc routingDoc
				if cm != nil {
					doc, _, _ = parseRouting(cm.Data)
				}
				prev := newPublished(status, cm, doc)
				c, err := newRoutingContent(policy, spec, prev, &decide.Output{}, &decide.Output{Entries: s.entries})
				if err != nil {
					t.Fatal(err)
				}
				if c.version != s.wantVersion {
					t.Errorf("pass %d: version %d, want %d", i, c.version, s.wantVersion)
				}
				if c.version < status {
					t.Errorf("pass %d: version %d went back from %d", i, c.version, status)
				}
				cm = routingCM(t, c.tableJSON, true)
				if !s.statusLost {
					status = max(status, c.version) // as buildStatus does
				}
			}
		})
	}
}

// TestTableCarriesCacheSettings: spec.mitigations.localCache's maxEntries,
// maxBytes and tracking travel in the routing table, where every reader
// applies them (dataplane/engine TestTableCacheSettings and
// TestTableCacheBounds show a reader doing so), and changing one is a new
// table version. A policy that forbids local caching sends none.
func TestTableCarriesCacheSettings(t *testing.T) {
	publishAt := func(t *testing.T, edit func(*v1alpha1.LocalCache), prev *published) (*routing.Table, routingContent) {
		t.Helper()
		policy, spec := publishFixture()
		edit(&spec.Mitigations.LocalCache)
		c, err := newRoutingContent(policy, spec, prev, &decide.Output{}, &decide.Output{Entries: entriesA})
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := routing.Parse([]byte(c.tableJSON))
		if err != nil {
			t.Fatal(err)
		}
		return tbl, c
	}
	for name, tc := range map[string]struct {
		edit func(*v1alpha1.LocalCache)
		want *routing.CacheSettings
	}{
		"defaults": {edit: func(*v1alpha1.LocalCache) {},
			want: &routing.CacheSettings{MaxEntries: v1alpha1.DefaultMaxEntries, MaxBytes: v1alpha1.DefaultMaxBytes}},
		"mitigations.localCache.maxEntries": {edit: func(c *v1alpha1.LocalCache) { c.MaxEntries = 7 },
			want: &routing.CacheSettings{MaxEntries: 7, MaxBytes: v1alpha1.DefaultMaxBytes}},
		"mitigations.localCache.maxBytes": {edit: func(c *v1alpha1.LocalCache) { c.MaxBytes = 4096 },
			want: &routing.CacheSettings{MaxEntries: v1alpha1.DefaultMaxEntries, MaxBytes: 4096}},
		"mitigations.localCache.tracking": {edit: func(c *v1alpha1.LocalCache) { c.Tracking = true },
			want: &routing.CacheSettings{Tracking: true, MaxEntries: v1alpha1.DefaultMaxEntries, MaxBytes: v1alpha1.DefaultMaxBytes}},
		"local caching forbidden": {edit: func(c *v1alpha1.LocalCache) { c.Enabled = new(false) }},
	} {
		t.Run(name, func(t *testing.T) {
			base, baseContent := publishAt(t, func(*v1alpha1.LocalCache) {}, newPublished(0, nil, routingDoc{}))
			cm := routingCM(t, baseContent.tableJSON, true)
			doc, _, _ := parseRouting(cm.Data)
			tbl, c := publishAt(t, tc.edit, newPublished(base.Version, cm, doc))
			if d := cmp.Diff(tc.want, tbl.LocalCache); d != "" {
				t.Errorf("table's localCache (-want +got):\n%s", d)
			}
			changed := cmp.Diff(base.LocalCache, tbl.LocalCache) != ""
			if wantVersion := base.Version + map[bool]int64{false: 0, true: 1}[changed]; c.version != wantVersion {
				t.Errorf("version %d after a change %v, want %d", c.version, changed, wantVersion)
			}
		})
	}
}

// TestStateWrittenIsDurable: the routing ConfigMap holds which keys are hot,
// not the timers; a state read from a ConfigMap (a new leader, or one an
// earlier version wrote with timers) starts its timers over, so an old
// pending timer can never make a key hot without its sustainFor.
func TestStateWrittenIsDurable(t *testing.T) {
	policy, spec := publishFixture()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	out := &decide.Output{State: decide.State{Keys: []decide.KeyState{
		{Key: "hot", WriteHot: true, Since: &at, DetectedAt: &at, WriteUnderSince: &at},
		{Key: "pending", ReadOverSince: &at},
	}}}
	prev := newPublished(0, nil, routingDoc{})
	c, err := newRoutingContent(policy, spec, prev, out, out)
	if err != nil {
		t.Fatal(err)
	}
	var written stateDoc
	if err := json.Unmarshal([]byte(c.doc.durable), &written); err != nil {
		t.Fatal(err)
	}
	want := []decide.KeyState{{Key: "hot", WriteHot: true, Since: &at, DetectedAt: &at}}
	if diff := cmp.Diff(want, written.Keys); diff != "" {
		t.Errorf("state written (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(out.State, c.doc.state); diff != "" {
		t.Errorf("state remembered (-want +got):\n%s", diff)
	}
	// A ConfigMap with timers in it (an earlier version's) is read without.
	withTimers, _ := json.Marshal(stateDoc{Keys: out.State.Keys})
	doc, _, err := parseRouting(map[string]string{StateKey: string(withTimers)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, doc.state.Keys); diff != "" {
		t.Errorf("state read (-want +got):\n%s", diff)
	}
}
