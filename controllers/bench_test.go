package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/routing"
)

// BenchmarkReconcile measures one steady-state Reconcile of a policy with
// 1,000 hot keys (half read-hot, half write-hot and split) from 500 nodes'
// summaries of 200 keys each in the hub, against a real API server:
//   - cached: the routing ConfigMap read from the manager's informer cache
//     (how the manager runs);
//   - uncached: the same reconcile reading straight from the API server,
//     the peer a reconciler without informers would be.
//
// Steady state: the keys are already mitigated and the table published, so a
// pass reads, decides and finds nothing to write.
func BenchmarkReconcile(b *testing.B) {
	cp := testenv.Start(b, controlplane.Options{})
	ctx := context.Background()
	const ns = "bench"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(routing.EpochStart(e0, 60000).Add(10 * time.Second))
	p := &v1alpha1.HotKeyPolicy{}
	p.Namespace, p.Name = ns, "bench"
	p.Spec.Mode = v1alpha1.ModeEnforce
	p.Spec.Target.Addresses = []string{"127.0.0.1:1"}
	p.Spec.Mitigations.Split.Enabled = ptr.To(true)
	v1alpha1.SetDefaults(&p.Spec) // typed zero durations would be sent as "0s"
	p.Spec.Thresholds.ReadsPerSecond, p.Spec.Thresholds.WritesPerSecond = 5000, 1000
	p.Spec.Capacity.MaxMitigatedKeys = 1000
	if err := cp.Client.Create(ctx, p); err != nil {
		b.Fatal(err)
	}
	// 500 node agents' summaries of 200 keys each, as the hub receives them.
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "bench", Clock: clk, WarmUp: -1})
	if err != nil {
		b.Fatal(err)
	}
	for n := range 500 {
		node := fmt.Sprintf("node-%03d", n)
		h.UpsertPod(ns+"/pod-"+node, node, agentlink.Pod{IP: fmt.Sprintf("198.18.%d.%d", n/250, n%250+1), Policy: ns + "/bench"})
		ps := agentlink.PolicySummary{Policy: ns + "/bench"}
		for i := range 200 {
			k := (n*200 + i) % 1000
			kr := agentlink.KeyRates{Key: fmt.Sprintf("product:%06d", k)}
			if k%2 == 0 {
				kr.Reads = 1000 // × 100 nodes = 100k reads/s
			} else {
				kr.Writes = 500 // × 100 nodes = 50k writes/s
			}
			ps.Keys = append(ps.Keys, kr)
		}
		h.Ingest(&agentlink.Summary{Node: node, Session: 1, Seq: 1, Policies: []agentlink.PolicySummary{ps}})
	}
	r := &HotKeyPolicyReconciler{Clock: clk, Fleet: h}
	mgr := testenv.RunManager(b, cp, func(m manager.Manager) error { return r.init(m) })
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		b.Fatal("cache not synced")
	}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}
	reconcile := func(c client.Client) {
		r.Client = c
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	// Reach the steady state: over threshold, sustained, published; the
	// cache catches up with each write.
	reconcile(cp.Client)
	clk.Step(2 * time.Second)
	reconcile(cp.Client)
	reconcile(cp.Client)
	st := &v1alpha1.HotKeyPolicy{}
	if err := cp.Client.Get(ctx, req.NamespacedName, st); err != nil || st.Status.HotKeyCount != 1000 {
		b.Fatalf("setup: %d hot keys, %v", st.Status.HotKeyCount, err)
	}
	waitCache := func() {
		eventually.True(b, 30*time.Second, "the cache catches up", func() bool {
			cached := &v1alpha1.HotKeyPolicy{}
			err := mgr.GetClient().Get(ctx, req.NamespacedName, cached)
			return err == nil && cached.ResourceVersion == st.ResourceVersion
		})
	}
	waitCache()
	for range 3 { // warm up: first passes pay for lazily built caches
		reconcile(mgr.GetClient())
	}

	check := func(b *testing.B) {
		got := &v1alpha1.HotKeyPolicy{}
		if err := cp.Client.Get(ctx, req.NamespacedName, got); err != nil {
			b.Fatal(err)
		}
		if got.Status.HotKeyCount != 1000 || got.Status.ReportingNodes != 500 {
			b.Fatalf("after the loop: %d hot keys from %d nodes, want 1000 from 500", got.Status.HotKeyCount, got.Status.ReportingNodes)
		}
	}
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			reconcile(mgr.GetClient())
		}
		check(b)
	})
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			reconcile(cp.Client)
		}
		check(b)
	})
}
