package controllers

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/fold"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// lifecycleFlows: a key's mitigation from the first report to its
// withdrawal, in Enforce and Observe mode, by schedule, across a lost
// ConfigMap, with credentials.
func lifecycleFlows(t *testing.T, env *flowEnv) {
	ctx, rc, newFlow, withRedis := env.ctx, env.rc, env.newFlow, env.withRedis
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
		f.eventually("kstatus: a healthy policy is Current", kstatusIs(f, "likes", status.CurrentStatus))
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
		// kstatus reads no Degraded: Stalled says it, so that Flux and
		// cli-utils do not report a degraded policy as Current.
		f.eventually("kstatus: a degraded policy is Failed", kstatusIs(f, "likes", status.FailedStatus))

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

	// Observe is also what a policy that names no mode gets (the schema's
	// default): "default" leaves spec.mode out and must publish nothing either.
	t.Run("observe mode publishes nothing", func(t *testing.T) {
		f := newFlow(t)
		for name, mode := range map[string]v1alpha1.PolicyMode{"dry": v1alpha1.ModeObserve, "default": ""} {
			f.policy(name, func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mode = mode })
			f.report(name, "n1", cand("likes:2", 0, 50000))
			f.stateUntil("pending", name, func(doc stateDoc) bool { return len(doc.Keys) == 1 })
		}
		f.clk.Step(2 * time.Second)
		f.poke("dry")
		f.poke("default")
		for _, name := range []string{"dry", "default"} {
			f.eventually(name+": status shows the decision", func() error {
				st := f.status(name)
				if st.HotKeyCount != 1 || len(st.HotKeys) != 1 || st.HotKeys[0].Shards != 4 ||
					meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady).Reason != v1alpha1.ReasonObserving {
					return fmt.Errorf("status %+v", st)
				}
				return nil
			})
			tbl, cm, err := f.table(name)
			if err != nil {
				t.Fatal(err)
			}
			if len(tbl.Entries) != 0 {
				t.Errorf("%s: Observe mode published %+v", name, tbl.Entries)
			}
			var doc stateDoc
			if err := json.Unmarshal([]byte(cm.Data[StateKey]), &doc); err != nil || len(doc.Observed) != 1 {
				t.Errorf("%s: state %q: %v", name, cm.Data[StateKey], err)
			}
		}
		p := &v1alpha1.HotKeyPolicy{}
		if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "default"}, p); err != nil || p.Spec.Mode != v1alpha1.ModeObserve {
			t.Errorf("a policy written without mode is stored with mode %q (%v), want Observe", p.Spec.Mode, err)
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
}
