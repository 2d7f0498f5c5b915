package controllers

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/internal/testing/agentwatch"
	"github.com/heatsink-dev/heatsink/routing"
)

// managerNamespace is the flows' manager namespace, where the raw routing
// of policies with hidden key names is kept.
const managerNamespace = "heatsink-system"

// keyNamesFlows: a policy with keyNames Hashed shows no raw key where a
// namespace reader looks, while the data path still gets and applies the
// raw table.
func keyNamesFlows(t *testing.T, env *flowEnv) {
	t.Run("hashed key names: no raw key in status, report, Events or the routing ConfigMap; the data path still splits", func(t *testing.T) {
		f := env.newFlow(t)
		const counter, big = "likes:alice@example.com", "blob:carol@example.com"
		raws := []string{"alice", "carol"} // what no reader may see
		if err := env.rc.Set(f.ctx, big, strings.Repeat("b", 4096), 0).Err(); err != nil {
			t.Fatal(err)
		}
		f.policy("private", env.withRedis, func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.KeyNames = v1alpha1.KeyNamesHashed
			p.Spec.Thresholds.ValueBytes = 1024
		})
		names := keynames.New(keynames.Hashed, keynames.PolicyKey(f.r.KeyNames.Key, f.ns, "private"))
		hCounter, hBig := names.Name(counter), names.Name(big)
		id := f.ns + "/private"
		send := func() {
			for _, node := range []string{"n1", "n2"} {
				f.hub.UpsertPod(id+"-"+node, node, agentlink.Pod{IP: podIP(node), Policy: id})
				ps := agentlink.PolicySummary{Policy: id, Keys: []agentlink.KeyRates{{Key: counter, Writes: 30000, RecentWrites: 30000,
					Families: routing.FamStringRead | routing.FamStringWrite | routing.FamCounter | routing.FamKey}}}
				if node == "n1" {
					ps.BigKeys = []agentlink.KeySize{{Key: big, Bytes: 4096}}
				}
				f.seq++
				f.hub.Ingest(&agentlink.Summary{Node: node, Session: 1, Seq: f.seq, Policies: []agentlink.PolicySummary{ps}})
			}
		}
		send()
		f.poke("private")
		pending(f, "private")
		f.clk.Step(2 * time.Second) // sustainFor
		send()
		f.poke("private")
		f.eventually("status names the split key by its hash", func() error {
			st := f.status("private")
			if len(st.HotKeys) != 1 || st.HotKeys[0].Key != hCounter || st.HotKeys[0].Shards != 4 {
				return fmt.Errorf("status hot keys %+v, want %s with 4 shards", st.HotKeys, hCounter)
			}
			return nil
		})
		f.eventually("the routing ConfigMap holds a view no reader applies", func() error {
			_, cm, err := f.table("private")
			if cm == nil {
				return fmt.Errorf("no ConfigMap: %v", err)
			}
			if err == nil {
				return fmt.Errorf("a reader accepts the ConfigMap's table")
			}
			var view routing.Table
			if err := json.Unmarshal([]byte(cm.Data[routing.ConfigMapKey]), &view); err != nil {
				return err
			}
			if view.SchemaVersion != routing.ViewSchemaVersion || len(view.Entries) != 1 || view.Entries[0].Key != hCounter || view.Entries[0].Split == nil ||
				cm.Annotations[AnnotationKeyNames] != string(keynames.Hashed) || cm.Data[StateKey] != "" {
				return fmt.Errorf("view %s, annotations %v, state %q", cm.Data[routing.ConfigMapKey], cm.Annotations, cm.Data[StateKey])
			}
			return nil
		})
		f.eventually("the report and a BigKeys Event name the keys by their hashes", func() error {
			var rep v1alpha1.HotKeyReport
			if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "private"}, &rep); err != nil {
				return err
			}
			if len(rep.Spec.Candidates) == 0 || rep.Spec.Candidates[0].Key != hCounter || len(rep.Spec.BigKeys) != 1 || rep.Spec.BigKeys[0].Key != hBig {
				return fmt.Errorf("report candidates %+v, big keys %+v", rep.Spec.Candidates, rep.Spec.BigKeys)
			}
			return eventMessage(f, ReasonBigKeys, hBig)
		})

		// Everything a namespace reader can read: no raw key anywhere.
		var p v1alpha1.HotKeyPolicy
		var reps v1alpha1.HotKeyReportList
		var cms corev1.ConfigMapList
		var evs eventsv1.EventList
		for _, l := range []func() error{
			func() error { return f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "private"}, &p) },
			func() error { return f.c.List(f.ctx, &reps, client.InNamespace(f.ns)) },
			func() error { return f.c.List(f.ctx, &cms, client.InNamespace(f.ns)) },
			func() error { return f.c.List(f.ctx, &evs, client.InNamespace(f.ns)) },
		} {
			if err := l(); err != nil {
				t.Fatal(err)
			}
		}
		p.Spec = v1alpha1.HotKeyPolicySpec{} // the author's own
		for what, obj := range map[string]any{"policy status": p, "reports": reps, "ConfigMaps": cms, "Events": evs} {
			b, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			for _, raw := range raws {
				if strings.Contains(string(b), raw) {
					t.Errorf("%s name a raw key (%q): %s", what, raw, b)
				}
			}
		}
		if len(evs.Items) == 0 || len(cms.Items) == 0 || len(reps.Items) == 0 {
			t.Errorf("nothing read: %d Events, %d ConfigMaps, %d reports", len(evs.Items), len(cms.Items), len(reps.Items))
		}

		// The raw table and state are in the manager's namespace.
		var raw corev1.Secret
		if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: managerNamespace, Name: rawRoutingName(&p)}, &raw); err != nil {
			t.Fatalf("raw routing Secret: %v", err)
		}
		tbl, err := routing.Parse(raw.Data[routing.ConfigMapKey])
		if err != nil || tbl.Lookup(counter) == nil || !strings.Contains(string(raw.Data[StateKey]), counter) {
			t.Fatalf("raw routing Secret: table %s (%v), state %s", raw.Data[routing.ConfigMapKey], err, raw.Data[StateKey])
		}

		// A manager that forgot everything (a new leader) reads the state
		// back from the Secret: the mitigation and the version stay.
		v := f.status("private").RoutingVersion
		f.r.mem.forget(client.ObjectKey{Namespace: f.ns, Name: "private"})
		f.clk.Step(time.Second)
		send()
		f.poke("private")
		f.stateUntil("state read back", "private", func(doc stateDoc) bool { return len(doc.Keys) == 1 && doc.Keys[0].WriteHot })
		if st := f.status("private"); st.RoutingVersion != v || len(st.HotKeys) != 1 || st.HotKeys[0].Key != hCounter {
			t.Errorf("after the manager forgot: routing version %d (was %d), hot keys %+v", st.RoutingVersion, v, st.HotKeys)
		}

		// The data path: the table node agents get names the raw key, and
		// the go-redis hook applying it splits the counter exactly.
		addr, err := f.hub.Addr(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		pushed := agentRouting(t, addr, "n1", id, func(t *routing.Table) bool { return t.Lookup(counter) != nil && t.Lookup(counter).Split != nil })
		// In the epoch the split's generation takes writes from.
		gen := pushed.Lookup(counter).Split.Generations[0]
		e := engine.New(env.rc, engine.Options{Clock: clocktesting.NewFakeClock(routing.EpochStart(gen.FromEpoch, pushed.EpochMillis).Add(time.Second))})
		defer e.Close()
		e.SetTable(pushed)
		app := redis.NewClient(&redis.Options{Addr: env.srv.Addr})
		defer app.Close()
		app.AddHook(redishook.New(e))
		const incrs = 50
		for range incrs {
			if err := app.Incr(f.ctx, counter).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := app.Get(f.ctx, counter).Int(); err != nil || got != incrs {
			t.Errorf("the split counter through the hook: %d (%v), want %d", got, err, incrs)
		}
		if base, _ := env.rc.Get(f.ctx, counter).Int(); base == incrs {
			t.Errorf("the base key holds all %d increments: the hook did not split", incrs)
		}

		// Plain again: the ConfigMap holds the raw table (the same split,
		// carried over from the Secret) and the Secret is gone.
		f.modify("private", func(p *v1alpha1.HotKeyPolicy) { p.Spec.KeyNames = v1alpha1.KeyNamesPlain })
		f.eventually("the raw table back in the ConfigMap", func() error {
			tbl, cm, err := f.table("private")
			if err != nil {
				return err
			}
			if e := tbl.Lookup(counter); e == nil || e.Split == nil || e.Split.Generations[0] != gen || cm.Annotations[AnnotationKeyNames] != "" {
				return fmt.Errorf("table %+v, annotations %v", tbl.Entries, cm.Annotations)
			}
			if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: managerNamespace, Name: rawRoutingName(&p)}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("raw routing Secret: %v", err)
			}
			return nil
		})
	})
}

// agentRouting reads node's stream from the hub at addr, as its node agent
// does, until a routing table of policy satisfies ok, and returns it.
func agentRouting(t *testing.T, addr, node, policy string, ok func(*routing.Table) bool) *routing.Table {
	t.Helper()
	var last string
	var tbl *routing.Table
	if agentwatch.Read(addr, node, "test", 20*time.Second, func(ev *agentlink.Event) bool {
		if ev.Type != agentlink.TypeRouting || ev.Routing.Policy != policy {
			return false
		}
		last = string(ev.Routing.Table)
		t, err := routing.Parse(ev.Routing.Table)
		if err != nil || !ok(t) {
			return false
		}
		tbl = t
		return true
	}) {
		return tbl
	}
	t.Fatalf("no routing table of %s as expected for node %s; the last: %s", policy, node, last)
	return nil
}
