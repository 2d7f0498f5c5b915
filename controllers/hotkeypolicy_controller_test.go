package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/capacity"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/routing"
)

// flow is one namespace's view of the shared control plane and fake clock.
type flow struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	cfg *rest.Config // the API server's, for what the client does not read (kubectl's columns)
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
	p.Spec.Mode = v1alpha1.ModeEnforce // these flows test what is enforced; Observe is the default
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
// lists the candidates with exact rates (no unseen traffic) and their
// command families.
func (f *flow) report(policy, node string, c ...v1alpha1.Candidate) {
	f.t.Helper()
	id := f.ns + "/" + policy
	f.hub.UpsertPod(id+"-"+node, node, agentlink.Pod{IP: podIP(node), Policy: id})
	ps := agentlink.PolicySummary{Policy: id}
	for _, k := range c {
		r, w := float64(k.ReadsPerSecond), float64(k.WritesPerSecond)
		// Clients of a string key (GET, SET, INCR, DEL) unless the
		// candidate names its families.
		fam := routing.FamStringRead | routing.FamStringWrite | routing.FamCounter | routing.FamKey
		if len(k.Families) > 0 {
			fam = routing.ParseFamilies(strings.Join(k.Families, ","))
		}
		ps.Keys = append(ps.Keys, agentlink.KeyRates{Key: k.Key, Reads: r, Writes: w, RecentReads: r, RecentWrites: w, Families: fam})
	}
	f.seq++
	f.hub.Ingest(&agentlink.Summary{Node: node, Session: 1, Seq: f.seq, Policies: []agentlink.PolicySummary{ps}})
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

// flowEnv is what the flows of TestHotKeyPolicyFlows share: one control
// plane and manager, one Redis, a Redis that stalls, one fake clock.
type flowEnv struct {
	ctx   context.Context
	srv   *redisproc.Server
	rc    *redis.Client
	stall *stallServer
	// newFlow starts a flow in a namespace of its own.
	newFlow func(t *testing.T) *flow
}

// withRedis targets a policy at the shared Redis.
func (e *flowEnv) withRedis(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = []string{e.srv.Addr} }

// TestHotKeyPolicyFlows runs the reconciler in a real manager against a real
// API server (and a real Redis where it acts in Redis), with a fake clock.
// The flows share one manager (controller names are unique per process) and
// run in their own namespaces.
// The flows are grouped by concern: the lifecycle of a mitigation
// (hotkeypolicy_lifecycle_test.go), the drain of split keys
// (hotkeypolicy_drain_test.go), and Redis stalling or refilled
// (hotkeypolicy_redis_test.go); the metrics are checked last, over every
// key the flows used.
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
	r := &HotKeyPolicyReconciler{Clock: clk, Margin: 10 * time.Second, RedisTimeout: time.Minute, SkipNameValidation: true, Targets: targets.Options{AllowRawAddresses: true},
		// Full confidence after 0.05 CPU-seconds: the flows' loads are short
		// (only policies with thresholds.auto decide on it).
		Capacity: capacity.Options{MinUtilization: 1e-6, FullConfidenceCPU: 0.05},
		Redis:    stall.dialer(DialRedis), Fleet: h,
		KeyNames: KeyNamesOptions{Key: []byte("flows' key-names key"), Namespace: managerNamespace}}
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, managerNamespace); err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, cp, r.SetupWithManager)
	n := 0
	env := &flowEnv{ctx: ctx, srv: srv, rc: rc, stall: stall, newFlow: func(t *testing.T) *flow {
		n++
		ns := fmt.Sprintf("flow-%d", n)
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		return &flow{t: t, ctx: ctx, c: cp.Client, cfg: cp.Config, clk: clk, ns: ns, hub: h, r: r}
	}}

	lifecycleFlows(t, env)
	drainFlows(t, env)
	redisFlows(t, env)
	shedFlows(t, env)
	capacityFlows(t, env)
	sizesFlows(t, env)
	ownershipFlows(t, env)
	keyNamesFlows(t, env)

	t.Run("metrics carry no Redis key", func(t *testing.T) {
		mfs, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		// Every key the flows used.
		keys := []string{"likes:1", "likes:2", "likes:3", "cold", "page:stalled", "likes:other", "page:refill", "product:iphone", "product:tv", "likes:del", "likes:obs", "likes:down", "likes:skip", "likes:db2", "page:db2", "page:fallback", "page:learned", "sz:str", "sz:hash", "sz:gone", "likes:alice@example.com", "blob:carol@example.com"}
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

// gone says whether policy and its routing ConfigMap are gone.
func gone(f *flow, policy string) func() error {
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

// del deletes policy.
func del(f *flow, policy string) {
	f.t.Helper()
	p := &v1alpha1.HotKeyPolicy{}
	p.Namespace, p.Name = f.ns, policy
	if err := f.c.Delete(f.ctx, p); err != nil {
		f.t.Fatal(err)
	}
}

// warningEvent says whether a Warning Event with reason was emitted in the
// flow's namespace.
func warningEvent(f *flow, reason string) func() error {
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
