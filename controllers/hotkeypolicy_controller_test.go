package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/controllers/fold"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/fleet"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/routing"
)

// flow is one namespace's view of the shared control plane and fake clock.
type flow struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	clk *clocktesting.FakeClock
	ns  string
	hub *hub.Hub
	// r is the reconciler under test, for its memory of the state.
	r   *HotKeyPolicyReconciler
	seq uint64
}

func (f *flow) policy(name string, mut ...func(*v1alpha1.HotKeyPolicy)) *v1alpha1.HotKeyPolicy {
	f.t.Helper()
	p := &v1alpha1.HotKeyPolicy{}
	p.Namespace, p.Name = f.ns, name
	p.Spec.Target.Addresses = []string{"127.0.0.1:1"}
	p.Spec.Mitigations.Split.Enabled = ptr.To(true)
	p.Spec.Mitigations.Split.Epoch = metav1.Duration{Duration: time.Minute}
	p.Spec.Thresholds.Cooldown = metav1.Duration{Duration: time.Minute}
	for _, m := range mut {
		m(p)
	}
	if err := f.c.Create(f.ctx, p); err != nil {
		f.t.Fatalf("create policy: %v", err)
	}
	return p
}

// report is node's agent sending its summary for policy now: the node
// hosts a pod of the policy (as the pod informer would tell the hub) and
// lists the candidates with exact rates (no unseen traffic).
func (f *flow) report(policy, node string, c ...v1alpha1.Candidate) {
	f.t.Helper()
	id := f.ns + "/" + policy
	f.hub.UpsertPod(id+"-"+node, node, fleet.Pod{IP: podIP(node), Policy: id})
	ps := fleet.PolicySummary{Policy: id}
	for _, k := range c {
		r, w := float64(k.ReadsPerSecond), float64(k.WritesPerSecond)
		ps.Keys = append(ps.Keys, fleet.KeyRates{Key: k.Key, Reads: r, Writes: w, RecentReads: r, RecentWrites: w})
	}
	f.seq++
	f.hub.Ingest(&fleet.Summary{Node: node, Session: 1, Seq: f.seq, Policies: []fleet.PolicySummary{ps}})
}

// podIP is a made-up address for a node's pod (only its uniqueness matters).
func podIP(node string) string {
	h := 0
	for _, c := range node {
		h = h*31 + int(c)
	}
	return fmt.Sprintf("198.18.%d.%d", (h>>8)&0xff, h&0xff)
}

// poke makes the manager reconcile policy now: the fake clock does not
// drive the work queue, so a step of the clock needs a nudge.
func (f *flow) poke(policy string) {
	f.t.Helper()
	p := &v1alpha1.HotKeyPolicy{}
	if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: policy}, p); err != nil {
		f.t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations["test/poke"] = f.clk.Now().String()
	if err := f.c.Patch(f.ctx, p, patch); err != nil {
		f.t.Fatal(err)
	}
}

// modify patches policy with mut (a merge patch: no conflict with the
// manager's own writes).
func (f *flow) modify(policy string, mut func(*v1alpha1.HotKeyPolicy)) {
	f.t.Helper()
	p := &v1alpha1.HotKeyPolicy{}
	if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: policy}, p); err != nil {
		f.t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	mut(p)
	if err := f.c.Patch(f.ctx, p, patch); err != nil {
		f.t.Fatal(err)
	}
}

func (f *flow) step(d time.Duration, policy string) {
	f.t.Helper()
	f.clk.Step(d)
	f.poke(policy)
}

// stepAlive steps the clock as step does, with the agents of nodes alive:
// each sends an empty summary (what a live agent with no traffic sends
// every interval) before the pass.
func (f *flow) stepAlive(d time.Duration, policy string, nodes ...string) {
	f.t.Helper()
	f.clk.Step(d)
	for _, n := range nodes {
		f.report(policy, n)
	}
	f.poke(policy)
}

// eventually polls cond until it returns nil, failing after 20s.
func (f *flow) eventually(what string, cond func() error) {
	f.t.Helper()
	eventually.Succeeds(f.t, 20*time.Second, func() error {
		if err := cond(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// table reads the published routing table of policy.
func (f *flow) table(policy string) (*routing.Table, *corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: routing.ConfigMapName(policy)}, cm); err != nil {
		return nil, nil, err
	}
	t, err := routing.Parse([]byte(cm.Data[routing.ConfigMapKey]))
	return t, cm, err
}

// gens waits until key's generations in the published table equal want.
func (f *flow) gens(policy, key string, want []routing.Generation) *routing.Table {
	f.t.Helper()
	var tbl *routing.Table
	f.eventually(fmt.Sprintf("generations of %s", key), func() error {
		t, _, err := f.table(policy)
		if err != nil {
			return err
		}
		var got []routing.Generation
		if e := t.Lookup(key); e != nil && e.Split != nil {
			got = e.Split.Generations
		}
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("(-want +got):\n%s", diff)
		}
		tbl = t
		return nil
	})
	return tbl
}

// tableUntil waits until the routing table published for policy satisfies
// ok.
func (f *flow) tableUntil(what, policy string, ok func(*routing.Table) bool) {
	f.t.Helper()
	f.eventually(what, func() error {
		tbl, _, err := f.table(policy)
		if err != nil {
			return err
		}
		if !ok(tbl) {
			return fmt.Errorf("entries %+v", tbl.Entries)
		}
		return nil
	})
}

// stateUntil waits until the manager's state of policy, as the leader
// remembers it (timers alone are not written), satisfies ok.
func (f *flow) stateUntil(what, policy string, ok func(stateDoc) bool) {
	f.t.Helper()
	key := client.ObjectKey{Namespace: f.ns, Name: policy}
	f.eventually(what, func() error {
		var e parsedEntry
		f.r.mem.with(key, func(m *policyMemory) { e = m.parsed })
		doc := stateDoc{Keys: e.doc.state.Keys, Observed: e.doc.observe}
		if e.rv == "" || !ok(doc) {
			return fmt.Errorf("state %+v", doc)
		}
		return nil
	})
}

func (f *flow) status(policy string) v1alpha1.HotKeyPolicyStatus {
	p := &v1alpha1.HotKeyPolicy{}
	if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: policy}, p); err != nil {
		f.t.Fatal(err)
	}
	return p.Status
}

// e0 is the epoch the flows start in: 2026-11-30 00:00 UTC.
var e0 = routing.EpochAt(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 60000)

func cand(key string, reads, writes int64) v1alpha1.Candidate {
	return v1alpha1.Candidate{Key: key, ReadsPerSecond: reads, WritesPerSecond: writes}
}

// TestHotKeyPolicyFlows runs the reconciler in a real manager against a real
// API server (and a real Redis where it acts in Redis), with a fake clock.
// The flows share one manager (controller names are unique per process) and
// run in their own namespaces.
func TestHotKeyPolicyFlows(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	srv := redistest.Standalone(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	// 10s into epoch e0 of 60s epochs.
	clk := clocktesting.NewFakeClock(routing.EpochStart(e0, 60000).Add(10 * time.Second))
	stall := newStallServer(t)
	// A pass's Redis work may take a minute here, so that only the order of
	// the work and the concurrency of the workers, not the pass deadline,
	// let other policies through while one Redis stalls.
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "test", Clock: clk, WarmUp: -1})
	if err != nil {
		t.Fatal(err)
	}
	r := &HotKeyPolicyReconciler{Clock: clk, Margin: 10 * time.Second, RedisTimeout: time.Minute, SkipNameValidation: true,
		Redis: stall.dialer(DialRedis), Fleet: h}
	testenv.RunManager(t, cp, r.SetupWithManager)
	ctx := context.Background()
	n := 0
	newFlow := func(t *testing.T) *flow {
		n++
		ns := fmt.Sprintf("flow-%d", n)
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		return &flow{t: t, ctx: ctx, c: cp.Client, clk: clk, ns: ns, hub: h, r: r}
	}
	withRedis := func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = []string{srv.Addr} }

	t.Run("reports in, routing out, resize at an epoch, cooldown, deletion", func(t *testing.T) {
		f := newFlow(t)
		f.policy("likes", withRedis)
		var emptyRV string
		f.eventually("empty table", func() error {
			tbl, cm, err := f.table("likes")
			if err != nil {
				return err
			}
			if len(tbl.Entries) != 0 {
				return fmt.Errorf("entries before sustainFor: %+v", tbl.Entries)
			}
			if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "HotKeyPolicy" || !ptr.Deref(cm.OwnerReferences[0].Controller, false) {
				return fmt.Errorf("owner references %+v", cm.OwnerReferences)
			}
			emptyRV = cm.ResourceVersion
			return nil
		})
		// 2 nodes × 30k writes/s = 60k: N = ceil(60k × 1.25 / 20k) = 4.
		f.report("likes", "n1", cand("likes:1", 0, 30000), cand("cold", 10, 10))
		f.report("likes", "n2", cand("likes:1", 0, 30000))
		var pendingSince time.Time
		f.stateUntil("key pending in the manager state", "likes", func(doc stateDoc) bool {
			if len(doc.Keys) == 1 && doc.Keys[0].WriteOverSince != nil {
				pendingSince = *doc.Keys[0].WriteOverSince
				return true
			}
			return false
		})
		// A timer alone is the leader's memory, not a write.
		if _, cm, err := f.table("likes"); err != nil || cm.ResourceVersion != emptyRV || cm.Data[StateKey] != "{}" {
			t.Errorf("routing ConfigMap rewritten for a pending timer (resourceVersion %s, was %s; state %s; %v)", cm.ResourceVersion, emptyRV, cm.Data[StateKey], err)
		}
		f.step(2*time.Second, "likes") // sustainFor; now 12s into epoch 1000
		tbl := f.gens("likes", "likes:1", []routing.Generation{{FromEpoch: e0 + 1, Shards: 4}})
		v1 := tbl.Version
		// The key turning hot is written, dated from when it went over.
		_, cm, err := f.table("likes")
		if err != nil {
			t.Fatal(err)
		}
		var doc stateDoc
		if json.Unmarshal([]byte(cm.Data[StateKey]), &doc) != nil || len(doc.Keys) != 1 ||
			!doc.Keys[0].WriteHot || doc.Keys[0].DetectedAt == nil || !doc.Keys[0].DetectedAt.Equal(pendingSince) {
			t.Errorf("state written with the table: %s, want likes:1 write-hot, detected at %v", cm.Data[StateKey], pendingSince)
		}
		f.eventually("status", func() error {
			st := f.status("likes")
			if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionMitigating) || st.HotKeyCount != 1 ||
				st.ReportingNodes != 2 || st.RoutingVersion != v1 || len(st.HotKeys) != 1 || st.HotKeys[0].Shards != 4 {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})

		f.eventually("an Event for the transition", func() error {
			var evs eventsv1.EventList
			if err := f.c.List(f.ctx, &evs, client.InNamespace(f.ns)); err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Reason == v1alpha1.ReasonHotKeys && e.Regarding.Name == "likes" {
					return nil
				}
			}
			return fmt.Errorf("no %s event among %d", v1alpha1.ReasonHotKeys, len(evs.Items))
		})

		// Writes double: N = 8, announced for the next boundary.
		f.clk.Step(time.Minute) // 12s into epoch 1001
		f.report("likes", "n1", cand("likes:1", 0, 60000))
		f.report("likes", "n2", cand("likes:1", 0, 60000))
		tbl = f.gens("likes", "likes:1", []routing.Generation{{FromEpoch: e0 + 1, Shards: 4}, {FromEpoch: e0 + 2, Shards: 8}})
		if tbl.Version <= v1 {
			t.Errorf("version %d did not grow past %d", tbl.Version, v1)
		}
		// Some increments landed in generation 1001's shards; after the
		// boundary and the grace period they are folded into the base key
		// and the generation leaves the table.
		shards := routing.ShardKeys("likes:1", routing.Generation{FromEpoch: e0 + 1, Shards: 4})
		rc.Set(ctx, "likes:1", 100, 0)
		rc.IncrBy(ctx, shards[0], 5)
		rc.IncrBy(ctx, shards[3], 7)
		f.clk.Step(time.Minute) // 12s into epoch 1002: past boundary + margin
		f.report("likes", "n1", cand("likes:1", 0, 60000))
		f.report("likes", "n2", cand("likes:1", 0, 60000))
		f.gens("likes", "likes:1", []routing.Generation{{FromEpoch: e0 + 2, Shards: 8}})
		if v, _ := rc.Get(ctx, "likes:1").Int64(); v != 112 {
			t.Errorf("base after fold = %d, want 112", v)
		}
		// The retired generation's keys expire instead of piling up.
		for _, k := range []string{shards[0], routing.SameSlotKey(shards[0], "foldack")} {
			if ttl := rc.TTL(ctx, k).Val(); ttl <= 0 || ttl > fold.RetiredTTL {
				t.Errorf("TTL of a retired key = %v, want in (0, %v]", ttl, fold.RetiredTTL)
			}
		}

		// Traffic stops: after the cooldown an unsplit is announced, then
		// the key leaves the table once its shards are folded. The agents
		// stay alive and send (empty) summaries every interval.
		f.report("likes", "n1")
		f.report("likes", "n2")
		f.stateUntil("cooldown started", "likes", func(doc stateDoc) bool { return len(doc.Keys) == 1 && doc.Keys[0].WriteUnderSince != nil })
		f.stepAlive(time.Minute, "likes", "n1", "n2") // cooldown over; 12s into e0+3
		f.gens("likes", "likes:1", []routing.Generation{{FromEpoch: e0 + 2, Shards: 8}, {FromEpoch: e0 + 4, Shards: 0}})
		f.stepAlive(time.Minute, "likes", "n1", "n2") // 12s into e0+4
		f.gens("likes", "likes:1", nil)
		f.eventually("not mitigating", func() error {
			st := f.status("likes")
			if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionMitigating) || st.HotKeyCount != 0 {
				return fmt.Errorf("status %+v", st)
			}
			// Nothing is hot, but the agents are alive: healthy.
			if st.StaleNodes != 0 || st.ReportingNodes != 2 || meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionDegraded) {
				return fmt.Errorf("live agents reported as stale: %+v", st)
			}
			return nil
		})
		// A node whose agent goes silent while it hosts the policy's pods
		// is stale: its traffic is not counted, worth a Degraded condition.
		f.stepAlive(time.Minute, "likes", "n2")
		f.eventually("stale node reported", func() error {
			st := f.status("likes")
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded)
			if st.StaleNodes != 1 || st.ReportingNodes != 1 || c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonStaleReports {
				return fmt.Errorf("stale node not reported: %+v", st)
			}
			return nil
		})

		p := &v1alpha1.HotKeyPolicy{}
		p.Namespace, p.Name = f.ns, "likes"
		if err := f.c.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
		f.eventually("ConfigMap deleted with the policy", func() error {
			if _, _, err := f.table("likes"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("get ConfigMap: %v", err)
			}
			return nil
		})
	})

	t.Run("observe mode publishes nothing", func(t *testing.T) {
		f := newFlow(t)
		f.policy("dry", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mode = v1alpha1.ModeObserve })
		f.report("dry", "n1", cand("likes:2", 0, 50000))
		f.stateUntil("pending", "dry", func(doc stateDoc) bool { return len(doc.Keys) == 1 })
		f.step(2*time.Second, "dry")
		f.eventually("status shows the decision", func() error {
			st := f.status("dry")
			if st.HotKeyCount != 1 || len(st.HotKeys) != 1 || st.HotKeys[0].Shards != 4 ||
				meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady).Reason != v1alpha1.ReasonObserving {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
		tbl, cm, err := f.table("dry")
		if err != nil {
			t.Fatal(err)
		}
		if len(tbl.Entries) != 0 {
			t.Errorf("Observe mode published %+v", tbl.Entries)
		}
		var doc stateDoc
		if err := json.Unmarshal([]byte(cm.Data[StateKey]), &doc); err != nil || len(doc.Observed) != 1 {
			t.Errorf("state %q: %v", cm.Data[StateKey], err)
		}
	})

	t.Run("schedule published at start minus leadTime with replicas filled, withdrawn after", func(t *testing.T) {
		f := newFlow(t)
		start := f.clk.Now().Add(time.Hour).Truncate(time.Second)
		rc.Set(ctx, "product:iphone", "hello", 0)
		f.policy("bf", withRedis, func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Mitigations.Replicate.Enabled = ptr.To(true)
			p.Spec.Schedules = []v1alpha1.Schedule{{Name: "black-friday", Start: &metav1.Time{Time: start},
				Duration: metav1.Duration{Duration: 30 * time.Minute}, LeadTime: metav1.Duration{Duration: 10 * time.Minute},
				Keys: []string{"product:iphone"}, Mitigation: v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 4}}}}
		})
		f.eventually("next event listed, nothing published yet", func() error {
			st := f.status("bf")
			if len(st.NextEvents) != 1 || !st.NextEvents[0].PrewarmAt.Time.Equal(start.Add(-10*time.Minute)) {
				return fmt.Errorf("next events %+v", st.NextEvents)
			}
			tbl, _, err := f.table("bf")
			if err != nil {
				return err
			}
			if len(tbl.Entries) != 0 {
				return fmt.Errorf("published before prewarm: %+v", tbl.Entries)
			}
			return nil
		})
		f.step(50*time.Minute, "bf") // start − leadTime
		f.eventually("published with bounds", func() error {
			tbl, _, err := f.table("bf")
			if err != nil {
				return err
			}
			e := tbl.Lookup("product:iphone")
			if e == nil || e.Replicate == nil || e.Replicate.Replicas != 4 || e.NotBefore == nil || !e.NotBefore.Equal(start) ||
				e.NotAfter == nil || !e.NotAfter.Equal(start.Add(30*time.Minute)) || e.Source != routing.SourceScheduled {
				return fmt.Errorf("entry %+v", e)
			}
			return nil
		})
		// The fill follows the publication in the same pass.
		f.eventually("replicas pre-warmed", func() error {
			for _, k := range routing.ReplicaKeys("product:iphone", 4) {
				if v, err := rc.Get(ctx, k).Result(); v != "hello" {
					return fmt.Errorf("replica not pre-warmed: %q, %v", v, err)
				}
			}
			return nil
		})
		f.step(41*time.Minute, "bf") // past the end
		f.tableUntil("withdrawn", "bf", func(tbl *routing.Table) bool { return len(tbl.Entries) == 0 })
	})

	t.Run("version never goes backwards when the ConfigMap is lost", func(t *testing.T) {
		f := newFlow(t)
		f.policy("v", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mode = v1alpha1.ModeEnforce })
		f.report("v", "n1", cand("likes:3", 0, 50000))
		f.stateUntil("pending", "v", func(doc stateDoc) bool { return len(doc.Keys) == 1 && doc.Keys[0].WriteOverSince != nil })
		f.step(2*time.Second, "v")
		tbl := f.gens("v", "likes:3", []routing.Generation{{FromEpoch: routing.EpochAt(f.clk.Now(), 60000) + 1, Shards: 4}})
		f.eventually("status caught up", func() error {
			if st := f.status("v"); st.RoutingVersion != tbl.Version {
				return fmt.Errorf("status version %d, table %d", st.RoutingVersion, tbl.Version)
			}
			return nil
		})
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name = f.ns, routing.ConfigMapName("v")
		if err := f.c.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
		f.eventually("recreated with a greater version", func() error {
			got, _, err := f.table("v")
			if err != nil {
				return err
			}
			if got.Version <= tbl.Version {
				return fmt.Errorf("version %d after %d", got.Version, tbl.Version)
			}
			return nil
		})
	})

	t.Run("credentials from the Secret; missing ones degrade", func(t *testing.T) {
		f := newFlow(t)
		auth := redistest.Standalone(t, "--requirepass", "s3cret")
		ac := redis.NewClient(&redis.Options{Addr: auth.Addr, Password: "s3cret"})
		t.Cleanup(func() { _ = ac.Close() })
		ac.Set(ctx, "product:tv", "v1", 0)
		start := f.clk.Now().Add(5 * time.Minute).Truncate(time.Second)
		f.policy("auth", func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Target.Addresses = []string{auth.Addr}
			p.Spec.Target.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "redis-auth"}
			p.Spec.Mitigations.Replicate.Enabled = ptr.To(true)
			p.Spec.Schedules = []v1alpha1.Schedule{{Name: "launch", Start: &metav1.Time{Time: start},
				Duration: metav1.Duration{Duration: time.Hour}, LeadTime: metav1.Duration{Duration: 10 * time.Minute},
				Keys: []string{"product:tv"}, Mitigation: v1alpha1.ScheduledMitigation{Replicate: &v1alpha1.ScheduledReplicate{Replicas: 2}}}}
		})
		degraded := func(reason string) func() error {
			return func() error {
				c := meta.FindStatusCondition(f.status("auth").Conditions, v1alpha1.ConditionDegraded)
				if c == nil || c.Reason != reason {
					return fmt.Errorf("degraded %+v, want reason %s", c, reason)
				}
				return nil
			}
		}
		f.eventually("credentials missing", degraded(v1alpha1.ReasonCredentialsMissing))
		sec := &corev1.Secret{}
		sec.Namespace, sec.Name = f.ns, "redis-auth"
		sec.Data = map[string][]byte{"password": []byte("s3cret")}
		if err := f.c.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
		f.poke("auth")
		f.eventually("healthy", degraded(v1alpha1.ReasonHealthy))
		for _, k := range routing.ReplicaKeys("product:tv", 2) {
			if v, err := ac.Get(ctx, k).Result(); v != "v1" {
				t.Errorf("replica not pre-warmed with the Secret's password: %q, %v", v, err)
			}
		}
	})

	// The drain flows: a split key in effect, with increments in its shards,
	// must end up whole in its base key when the manager stops publishing.
	const margin = 10 * time.Second
	// splitInEffect makes key write-hot under policy until a 4-shard split
	// is published, moves the clock into its first epoch and puts 5 + 7
	// increments in its shards on top of a base value of 100.
	splitInEffect := func(f *flow, policy, key string, rc *redis.Client) routing.Generation {
		f.t.Helper()
		f.report(policy, "n1", cand(key, 0, 50000))
		f.stateUntil("pending", policy, func(doc stateDoc) bool { return len(doc.Keys) == 1 && doc.Keys[0].WriteOverSince != nil })
		f.clk.Step(2 * time.Second) // sustainFor
		g := routing.Generation{FromEpoch: decide.AnnounceEpoch(f.clk.Now(), 60000, margin), Shards: 4}
		f.report(policy, "n1", cand(key, 0, 50000))
		f.gens(policy, key, []routing.Generation{g})
		f.clk.SetTime(routing.EpochStart(g.FromEpoch, 60000).Add(time.Second)) // the split takes writes
		rc.Set(ctx, key, 100, 0)
		shards := routing.ShardKeys(key, g)
		rc.IncrBy(ctx, shards[0], 5)
		rc.IncrBy(ctx, shards[3], 7)
		return g
	}
	// unsplitThenFolded waits for the unsplit announced at the next safe
	// boundary, then moves the clock past that boundary plus the margin.
	unsplitThenFolded := func(f *flow, policy, key string, g routing.Generation) {
		f.t.Helper()
		u := routing.Generation{FromEpoch: decide.AnnounceEpoch(f.clk.Now(), 60000, margin), Shards: 0}
		f.gens(policy, key, []routing.Generation{g, u})
		f.clk.SetTime(routing.EpochStart(u.FromEpoch, 60000).Add(margin))
		f.poke(policy)
	}
	gone := func(f *flow, policy string) func() error {
		return func() error {
			if _, _, err := f.table(policy); !apierrors.IsNotFound(err) {
				return fmt.Errorf("routing ConfigMap: %v", err)
			}
			p := &v1alpha1.HotKeyPolicy{}
			if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: policy}, p); !apierrors.IsNotFound(err) {
				return fmt.Errorf("policy still there (finalizers %v): %v", p.Finalizers, err)
			}
			return nil
		}
	}
	folded := func(t *testing.T, rc *redis.Client, key string, g routing.Generation) {
		t.Helper()
		if v, err := rc.Get(ctx, key).Int64(); v != 112 {
			t.Errorf("base key %d (%v), want 112", v, err)
		}
		for _, s := range routing.ShardKeys(key, g) {
			if v, _ := rc.Get(ctx, s).Int64(); v != 0 {
				t.Errorf("shard %d left", v)
			}
		}
	}
	del := func(f *flow, policy string) {
		f.t.Helper()
		p := &v1alpha1.HotKeyPolicy{}
		p.Namespace, p.Name = f.ns, policy
		if err := f.c.Delete(ctx, p); err != nil {
			f.t.Fatal(err)
		}
	}
	event := func(f *flow, reason string) func() error {
		return func() error {
			var evs eventsv1.EventList
			if err := f.c.List(f.ctx, &evs, client.InNamespace(f.ns)); err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Reason == reason && e.Type == corev1.EventTypeWarning {
					return nil
				}
			}
			return fmt.Errorf("no Warning %s Event among %d", reason, len(evs.Items))
		}
	}

	t.Run("deleting a policy unsplits and folds its split keys first", func(t *testing.T) {
		f := newFlow(t)
		f.policy("del", withRedis)
		g := splitInEffect(f, "del", "likes:del", rc)
		del(f, "del")
		unsplitThenFolded(f, "del", "likes:del", g)
		f.eventually("ConfigMap and policy gone", gone(f, "del"))
		folded(t, rc, "likes:del", g)
	})

	t.Run("foreground cascading deletion keeps the routing table until the drain is done", func(t *testing.T) {
		f := newFlow(t)
		f.policy("fg", withRedis)
		g := splitInEffect(f, "fg", "likes:fg", rc)
		key := client.ObjectKey{Namespace: f.ns, Name: "fg"}
		p := &v1alpha1.HotKeyPolicy{}
		p.Namespace, p.Name = key.Namespace, key.Name
		if err := f.c.Delete(ctx, p, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
			t.Fatal(err)
		}
		f.eventually("draining", func() error {
			c := meta.FindStatusCondition(f.status("fg").Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Reason != ReasonDraining {
				return fmt.Errorf("ready %+v", c)
			}
			return nil
		})
		// What the garbage collector does meanwhile (envtest runs none): it
		// deletes the dependents, the routing ConfigMap among them.
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name = f.ns, routing.ConfigMapName("fg")
		if err := f.c.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
		// The table stays readable (held by the manager's finalizer) while
		// the split is unsplit and folded.
		unsplitThenFolded(f, "fg", "likes:fg", g)
		f.eventually("ConfigMap gone, policy released", func() error {
			if _, _, err := f.table("fg"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("routing ConfigMap: %v", err)
			}
			p := &v1alpha1.HotKeyPolicy{}
			if err := f.c.Get(ctx, key, p); err != nil {
				return err
			}
			if controllerutil.ContainsFinalizer(p, Finalizer) {
				return fmt.Errorf("policy finalizers %v", p.Finalizers)
			}
			return nil
		})
		folded(t, rc, "likes:fg", g)
		// The garbage collector's last step: with the dependents gone it
		// removes its own finalizer and the policy goes.
		if err := f.c.Get(ctx, key, p); err != nil {
			t.Fatal(err)
		}
		orig := p.DeepCopy()
		p.Finalizers = nil
		if err := f.c.Patch(ctx, p, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
		f.eventually("policy gone", gone(f, "fg"))
	})

	t.Run("switching to Observe unsplits and folds published splits", func(t *testing.T) {
		f := newFlow(t)
		f.policy("obs", withRedis)
		g := splitInEffect(f, "obs", "likes:obs", rc)
		f.modify("obs", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mode = v1alpha1.ModeObserve })
		f.eventually("Ready says the split drains", func() error {
			c := meta.FindStatusCondition(f.status("obs").Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Reason != v1alpha1.ReasonObserving || !strings.Contains(c.Message, "1 keys split before the switch") {
				return fmt.Errorf("ready %+v", c)
			}
			return nil
		})
		unsplitThenFolded(f, "obs", "likes:obs", g)
		f.tableUntil("table empty", "obs", func(tbl *routing.Table) bool { return len(tbl.Entries) == 0 })
		folded(t, rc, "likes:obs", g)
	})

	t.Run("Redis unreachable blocks deletion until it returns, or until skip-fold", func(t *testing.T) {
		f := newFlow(t)
		down := []string{"127.0.0.1:1"} // nothing listens on port 1
		f.policy("down", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = down })
		g := splitInEffect(f, "down", "likes:down", rc)
		del(f, "down")
		unsplitThenFolded(f, "down", "likes:down", g)
		f.eventually("Degraded, deletion blocked", func() error {
			c := meta.FindStatusCondition(f.status("down").Conditions, v1alpha1.ConditionDegraded)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonRedisUnavailable || !strings.Contains(c.Message, AnnotationSkipFold) {
				return fmt.Errorf("degraded %+v", c)
			}
			return nil
		})
		f.eventually("a Warning Event", event(f, v1alpha1.ReasonRedisUnavailable))
		if _, _, err := f.table("down"); err != nil {
			t.Fatalf("routing table removed while blocked: %v", err)
		}
		// Redis is back (here: the target fixed): the deletion proceeds.
		f.modify("down", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = []string{srv.Addr} })
		f.eventually("ConfigMap and policy gone", gone(f, "down"))
		folded(t, rc, "likes:down", g)

		// skip-fold: deletion proceeds at once, with a Warning Event.
		f.policy("skip", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = down })
		splitInEffect(f, "skip", "likes:skip", rc)
		f.modify("skip", func(p *v1alpha1.HotKeyPolicy) { p.Annotations[AnnotationSkipFold] = "true" })
		del(f, "skip")
		f.eventually("ConfigMap and policy gone", gone(f, "skip"))
		f.eventually("a Warning Event", event(f, ReasonFoldSkipped))
	})

	t.Run("a stalled Redis holds one worker, not the table nor the other policies", func(t *testing.T) {
		f := newFlow(t)
		f.policy("stalled", func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Target.Addresses = []string{stall.addr}
			p.Spec.Mitigations.Replicate.Enabled = ptr.To(true)
		})
		f.report("stalled", "n1", cand("page:stalled", 100000, 0))
		// A node agent hosting one of the policy's pods, following the
		// hub's stream as a real one does.
		f.hub.UpsertPod(f.ns+"/stalled-agent", "agent-stalled", fleet.Pod{IP: podIP("agent-stalled"), Policy: f.ns + "/stalled"})
		agent := followHub(t, f.hub, "agent-stalled")
		pending(f, "stalled")
		f.step(2*time.Second, "stalled")
		f.tableUntil("replicated key published before its fill", "stalled", func(tbl *routing.Table) bool {
			e := tbl.Lookup("page:stalled")
			return e != nil && e.Replicate != nil
		})
		f.eventually("the fill stuck in Redis", func() error {
			if stall.accepted() == 0 {
				return fmt.Errorf("no connection to the stalled Redis yet")
			}
			return nil
		})
		// The node agents, which the sidecars follow, hold the table while
		// the fill still waits on Redis.
		f.eventually("the table pushed to the node agent before the fill ends", func() error {
			tbl := agent.table(f.ns + "/stalled")
			if tbl == nil || tbl.Lookup("page:stalled") == nil {
				return fmt.Errorf("the agent holds %+v", tbl)
			}
			return nil
		})
		// While that fill waits, another policy is decided and published.
		f.policy("other")
		f.report("other", "n1", cand("likes:other", 0, 50000))
		pending(f, "other")
		f.step(2*time.Second, "other")
		f.tableUntil("other policy published", "other", func(tbl *routing.Table) bool { e := tbl.Lookup("likes:other"); return e != nil && e.Split != nil })
		// The stalled pass had not finished: it would have written
		// Degraded/RedisUnavailable.
		if c := meta.FindStatusCondition(f.status("stalled").Conditions, v1alpha1.ConditionDegraded); c != nil && c.Reason == v1alpha1.ReasonRedisUnavailable {
			t.Fatalf("stalled pass finished before the other policy was published: %+v", c)
		}
		stall.release()
		f.eventually("the stalled policy degrades, with a Warning Event", event(f, v1alpha1.ReasonRedisUnavailable))
		del(f, "stalled")
		f.eventually("stalled policy gone", gone(f, "stalled"))
	})

	t.Run("replicas are filled again once the table has reached the sidecars", func(t *testing.T) {
		f := newFlow(t)
		rc.Set(ctx, "page:refill", "v1", 0)
		f.policy("refill", withRedis, func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.Replicate.Enabled = ptr.To(true) })
		f.report("refill", "n1", cand("page:refill", 100000, 0))
		pending(f, "refill")
		f.step(2*time.Second, "refill")
		replicas := func(want string) func() error {
			return func() error {
				tbl, _, err := f.table("refill")
				if err != nil {
					return err
				}
				e := tbl.Lookup("page:refill")
				if e == nil || e.Replicate == nil {
					return fmt.Errorf("entries %+v", tbl.Entries)
				}
				for _, k := range routing.ReplicaKeys("page:refill", int(e.Replicate.Replicas)) {
					if v, err := rc.Get(ctx, k).Result(); v != want {
						return fmt.Errorf("replica %q = %q (%v), want %q", k, v, err, want)
					}
				}
				return nil
			}
		}
		f.eventually("replicas filled", replicas("v1"))
		// A write through the previous table, which sidecars may still use
		// until the margin has passed, reaches the base key only.
		rc.Set(ctx, "page:refill", "v2", 0)
		f.clk.Step(10 * time.Second) // the margin
		f.report("refill", "n1", cand("page:refill", 100000, 0))
		f.eventually("replicas refilled", replicas("v2"))
	})

	t.Run("metrics carry no Redis key", func(t *testing.T) {
		mfs, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		// Every key the flows used.
		keys := []string{"likes:1", "likes:2", "likes:3", "cold", "page:stalled", "likes:other", "page:refill", "product:iphone", "product:tv", "likes:del", "likes:obs", "likes:down", "likes:skip"}
		for _, mf := range mfs {
			seen[mf.GetName()] = true
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if slices.Contains(keys, l.GetValue()) {
						t.Errorf("%s has label %s=%q, which looks like a Redis key", mf.GetName(), l.GetName(), l.GetValue())
					}
				}
			}
		}
		for _, name := range []string{"heatsink_manager_mitigated_keys", "heatsink_manager_decisions_total", "heatsink_manager_epoch",
			"heatsink_manager_fold_operations_total", "heatsink_manager_routing_publications_total", "heatsink_manager_reconcile_duration_seconds"} {
			if !seen[name] {
				t.Errorf("metric %s not exported", name)
			}
		}
	})
}

// pending waits until policy's manager state holds a key not yet mitigated.
func pending(f *flow, policy string) {
	f.t.Helper()
	f.stateUntil("pending", policy, func(doc stateDoc) bool { return len(doc.Keys) > 0 })
}

// stallServer accepts Redis connections and never answers until released:
// a Redis that hangs rather than refuses.
type stallServer struct {
	addr string
	ln   net.Listener
	mu   sync.Mutex
	// conns are the accepted connections, closed on release.
	conns    []net.Conn
	n        int
	released bool
}

// hubFollower is a node agent's end of the hub's stream, reduced to the
// newest routing table of each policy.
type hubFollower struct {
	mu     sync.Mutex
	tables map[string]*routing.Table
}

func (a *hubFollower) table(policy string) *routing.Table {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tables[policy]
}

// followHub opens the hub's stream as node's agent and keeps the routing
// tables it pushes, until the test ends.
func followHub(t *testing.T, h *hub.Hub, node string) *hubFollower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := h.Addr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+fleet.PathWatch+"?node="+node, nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet.SetToken(req, "test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("hub stream: %s", resp.Status)
	}
	a := &hubFollower{tables: map[string]*routing.Table{}}
	go func() {
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var ev fleet.Event
			if dec.Decode(&ev) != nil {
				return
			}
			if ev.Type != fleet.TypeRouting || ev.Routing == nil {
				continue
			}
			if tbl, err := routing.Parse(ev.Routing.Table); err == nil {
				a.mu.Lock()
				a.tables[ev.Routing.Policy] = tbl
				a.mu.Unlock()
			}
		}
	}()
	return a
}

func newStallServer(t *testing.T) *stallServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stallServer{addr: ln.Addr().String(), ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.n++
			if s.released {
				_ = c.Close()
			} else {
				s.conns = append(s.conns, c)
				go func() { _, _ = io.Copy(io.Discard, c) }() // read, never answer
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.release(); _ = ln.Close() })
	return s
}

func (s *stallServer) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// release closes every connection: the stalled ops fail, later ones too.
func (s *stallServer) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = true
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

// dialer dials the stall server with no per-op timeout and no retry, so an
// op there waits for the pass deadline (or the release), and every other
// address with next.
func (s *stallServer) dialer(next RedisDialer) RedisDialer {
	return func(target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error) {
		if len(target.Addresses) == 1 && target.Addresses[0] == s.addr {
			return redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1,
				ContextTimeoutEnabled: true}), nil
		}
		return next(target, creds)
	}
}
