package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// drainFlows: a split key in effect, with increments in its shards, must
// end up whole in its base key when the manager stops publishing it: the
// policy deleted (also in the foreground, or with Redis down), or switched
// to Observe.
func drainFlows(t *testing.T, env *flowEnv) {
	ctx, rc, srv, newFlow, withRedis := env.ctx, env.rc, env.srv, env.newFlow, env.withRedis
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

	t.Run("deleting a policy unsplits and folds its split keys first", func(t *testing.T) {
		f := newFlow(t)
		f.policy("del", withRedis)
		g := splitInEffect(f, "del", "likes:del", rc)
		del(f, "del")
		unsplitThenFolded(f, "del", "likes:del", g)
		f.eventually("ConfigMap and policy gone", gone(f, "del"))
		folded(t, rc, "likes:del", g)
	})

	t.Run("a policy of database 2 publishes its database and folds there", func(t *testing.T) {
		f := newFlow(t)
		rc2 := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 2})
		defer rc2.Close()
		f.policy("db2", withRedis, func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Database = 2 })
		// Database 0's key of the same name, shard included, is not the
		// policy's: the fold leaves it.
		g := splitInEffect(f, "db2", "likes:db2", rc2)
		rc.Set(ctx, "likes:db2", 1, 0)
		rc.Set(ctx, routing.ShardKeys("likes:db2", g)[0], 1, 0)
		tbl, _, err := f.table("db2")
		if err != nil {
			t.Fatal(err)
		}
		if tbl.Database != 2 || tbl.SchemaVersion != 2 {
			t.Fatalf("published table: database %d, schemaVersion %d; want 2, 2", tbl.Database, tbl.SchemaVersion)
		}
		del(f, "db2")
		unsplitThenFolded(f, "db2", "likes:db2", g)
		f.eventually("ConfigMap and policy gone", gone(f, "db2"))
		folded(t, rc2, "likes:db2", g)
		if v, _ := rc.Get(ctx, routing.ShardKeys("likes:db2", g)[0]).Int64(); v != 1 {
			t.Errorf("database 0's shard = %d, want 1: the fold reached another database", v)
		}
		if v, _ := rc.Get(ctx, "likes:db2").Int64(); v != 1 {
			t.Errorf("database 0's base key = %d, want 1", v)
		}
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
		f.report("obs", "n1") // the agent is alive (the clock moved past its last summary)
		f.poke("obs")
		f.eventually("kstatus: draining is InProgress", kstatusIs(f, "obs", status.InProgressStatus))
		unsplitThenFolded(f, "obs", "likes:obs", g)
		f.tableUntil("table empty", "obs", func(tbl *routing.Table) bool { return len(tbl.Entries) == 0 })
		f.report("obs", "n1")
		f.poke("obs")
		f.eventually("kstatus: drained is Current", kstatusIs(f, "obs", status.CurrentStatus))
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
		f.eventually("a Warning Event", warningEvent(f, v1alpha1.ReasonRedisUnavailable))
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
		f.eventually("a Warning Event", warningEvent(f, ReasonFoldSkipped))
	})
}
