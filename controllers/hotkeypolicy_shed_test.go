package controllers

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// shedFlows: through the real hub and a real kube-apiserver, a write-hot
// key that may not be split is shed at its budget, with the demand the
// nodes reported; status says so, a Warning Event marks it, and the same
// overload reported again publishes no new table.
func shedFlows(t *testing.T, env *flowEnv) {
	t.Run("a write-hot key that may not be split is shed", func(t *testing.T) {
		f := env.newFlow(t)
		f.policy("shed", env.withRedis, func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Mitigations.Split.Enabled = ptr.To(false)
			p.Spec.Mitigations.Shed.Enabled = ptr.To(true)
		})
		// 30k + 20k = 50k writes/s, 2.5 × the default capacity of 20k;
		// budget 80 % of it: 16k.
		f.report("shed", "n1", cand("likes:shed", 0, 30000))
		f.report("shed", "n2", cand("likes:shed", 0, 20000))
		f.stateUntil("key pending", "shed", func(doc stateDoc) bool { return len(doc.Keys) == 1 })
		f.step(2*time.Second, "shed") // sustainFor
		want := routing.Shed{WritesPerSecond: 16000, DemandWrites: 50000, MinPerSecond: 10}
		var version int64
		f.eventually("the key shed in the table", func() error {
			tbl, _, err := f.table("shed")
			if err != nil {
				return err
			}
			e := tbl.Lookup("likes:shed")
			if e == nil || e.Shed == nil || *e.Shed != want || e.Split != nil {
				return fmt.Errorf("entry %+v, want only shed %+v", e, want)
			}
			version = tbl.Version
			return nil
		})
		f.eventually("status", func() error {
			st := f.status("shed")
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionMitigating)
			if c == nil || c.Reason != v1alpha1.ReasonShedding || len(st.HotKeys) != 1 ||
				!slices.Contains(st.HotKeys[0].Mitigations, v1alpha1.MitigationShed) || st.HotKeys[0].ShedWritesPerSecond != 16000 ||
				st.ShedKeyCount != 1 || st.Moves != "Shed=1" {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
		// kubectl get hkp (-o wide) shows them: the API server's own table.
		cols := f.columns("shed")
		if cols["Shed"] != float64(1) || cols["Moves"] != "Shed=1" || cols["Mitigating"] != "True" {
			t.Errorf("kubectl columns %v, want Shed 1, Moves Shed=1, Mitigating True", cols)
		}
		f.eventually("a Warning Event", func() error {
			var evs eventsv1.EventList
			if err := f.c.List(f.ctx, &evs, client.InNamespace(f.ns)); err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Reason == v1alpha1.ReasonShedding && e.Type == corev1.EventTypeWarning && e.Regarding.Name == "shed" {
					return nil
				}
			}
			return fmt.Errorf("no Warning %s event among %d", v1alpha1.ReasonShedding, len(evs.Items))
		})
		// The overload goes on a little lower (48k, within 5 % of the
		// published 50k): the table stays as it is. A second key, newly
		// over the threshold, shows the pass that decided on these rates
		// (pending in the manager's state, not in the table).
		f.clk.Step(time.Second)
		f.report("shed", "n1", cand("likes:shed", 0, 28000), cand("likes:other", 0, 2000))
		f.report("shed", "n2", cand("likes:shed", 0, 20000))
		f.poke("shed")
		f.stateUntil("the next pass", "shed", func(doc stateDoc) bool { return len(doc.Keys) == 2 })
		if tbl, _, err := f.table("shed"); err != nil || tbl.Version != version {
			t.Errorf("table version %d after the same overload (%v), want %d kept", tbl.Version, err, version)
		}
	})
	t.Run("in Observe mode the key would be shed: nothing refused, no Warning", func(t *testing.T) {
		f := env.newFlow(t)
		f.policy("shedobs", env.withRedis, func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Mode = v1alpha1.ModeObserve
			p.Spec.Mitigations.Split.Enabled = ptr.To(false)
			p.Spec.Mitigations.Shed.Enabled = ptr.To(true)
		})
		f.report("shedobs", "n1", cand("likes:shed", 0, 30000))
		f.report("shedobs", "n2", cand("likes:shed", 0, 20000))
		f.stateUntil("key pending", "shedobs", func(doc stateDoc) bool { return len(doc.Keys) == 1 })
		f.step(2*time.Second, "shedobs") // sustainFor
		f.eventually("status says it would shed", func() error {
			st := f.status("shedobs")
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionMitigating)
			if c == nil || c.Reason != v1alpha1.ReasonWouldShed || len(st.HotKeys) != 1 ||
				!slices.Contains(st.HotKeys[0].Mitigations, v1alpha1.MitigationShed) || st.HotKeys[0].ShedWritesPerSecond != 16000 {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
		bad := ""
		f.eventually("a Normal Event saying so, and no KeysShed", func() error {
			var evs eventsv1.EventList
			if err := f.c.List(f.ctx, &evs, client.InNamespace(f.ns)); err != nil {
				return err
			}
			found := false
			for _, e := range evs.Items {
				if e.Regarding.Name != "shedobs" {
					continue
				}
				if e.Reason == v1alpha1.ReasonShedding || e.Reason == v1alpha1.ReasonWouldShed && e.Type != corev1.EventTypeNormal {
					bad = e.Type + " " + e.Reason + ": " + e.Note
					return nil
				}
				found = found || e.Reason == v1alpha1.ReasonWouldShed
			}
			if !found {
				return fmt.Errorf("no Normal %s event among %d", v1alpha1.ReasonWouldShed, len(evs.Items))
			}
			return nil
		})
		if bad != "" {
			t.Errorf("Observe mode emitted %s", bad)
		}
		if tbl, _, err := f.table("shedobs"); err == nil && tbl.Lookup("likes:shed") != nil {
			t.Errorf("Observe mode published %+v", tbl.Lookup("likes:shed"))
		}
	})
}

// columns is the row of policy name as kubectl get shows it: the API
// server's Table (the CRD's additionalPrinterColumns, -o wide's too), by
// column name.
func (f *flow) columns(name string) map[string]any {
	f.t.Helper()
	cs, err := kubernetes.NewForConfig(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/heatsink.dev/v1alpha1/namespaces", f.ns, "hotkeypolicies", name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	var tbl metav1.Table
	if err := json.Unmarshal(raw, &tbl); err != nil || len(tbl.Rows) != 1 {
		f.t.Fatalf("table %s: %v", raw, err)
	}
	out := map[string]any{}
	for i, c := range tbl.ColumnDefinitions {
		out[c.Name] = tbl.Rows[0].Cells[i]
	}
	return out
}
