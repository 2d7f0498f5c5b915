// Package controllers holds the manager's reconcilers. The HotKeyPolicy
// reconciler turns node agent reports into a published routing table: observe
// (sum fresh reports) → decide (pure, package decide) → fold retired shards
// in Redis → publish (routing ConfigMap) → fill replicas in Redis → status.
// Redis work has one deadline per pass and workers are several, so one
// policy's slow Redis degrades that policy only.
package controllers

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/capacity"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/sizes"
	"github.com/heatsink-dev/heatsink/controllers/targets"
)

// Finalizer holds a deleted policy until its split keys are unsplit and
// folded (nothing is lost), then removes the routing ConfigMap. The ConfigMap
// is also owned by the policy, so the garbage collector would remove it too;
// the finalizer orders the removal after the drain and makes it immediate.
const Finalizer = "heatsink.dev/routing"

// DefaultMargin is how far ahead of an epoch boundary a split change is
// announced, and how long a replaced generation may still see late writes
// before it is folded: routing ConfigMap propagation plus clock skew.
const DefaultMargin = 10 * time.Second

// HotKeyPolicyReconciler reconciles HotKeyPolicy objects.
type HotKeyPolicyReconciler struct {
	Client client.Client
	// APIReader reads Secrets uncached, so the manager needs no cluster-wide
	// Secret watch; Client if nil.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	// Clock is the time source of every decision; the real clock if nil.
	Clock clock.Clock
	// Recorder emits Events on condition transitions; none if nil.
	Recorder events.EventRecorder
	// Redis opens clients to a policy's target; DialRedis if nil.
	Redis RedisDialer
	// Margin overrides DefaultMargin.
	Margin time.Duration
	// RedisTimeout overrides DefaultRedisTimeout, the bound on one pass's
	// Redis work.
	RedisTimeout time.Duration
	// Capacity tunes the learned-capacity estimator (zero: its defaults);
	// tests on a fake clock lower MinUtilization, since their intervals
	// are long in fake time and short in CPU.
	Capacity capacity.Options
	// CapacityInterval overrides capacity.DefaultInterval, the least time
	// between two samples of one node (the demo, whose windows are seconds,
	// samples every second).
	CapacityInterval time.Duration
	// MaxConcurrentReconciles is how many policies reconcile at once
	// (DefaultMaxConcurrentReconciles if 0), so that one policy's slow Redis
	// holds one worker, not every policy.
	MaxConcurrentReconciles int
	// Metrics receives the reconciler's metrics; registered on
	// controller-runtime's registry if nil.
	Metrics *Metrics
	// SkipNameValidation lets several managers of one process register this
	// controller (controller-runtime rejects a repeated name process-wide):
	// tests run with -count=2 set it; production leaves it false.
	SkipNameValidation bool

	// Fleet is the hub node agents stream their counts to; the reconciler
	// observes through it and hands it every published table. Required.
	Fleet *hub.Hub
	// CapturePods: node agents capture the traffic of pods without the
	// sidecar (docs/capture.md), so the hub is told about those pods too,
	// and directives carry the ClusterIPs and pod endpoints of the
	// Services the policies name (hotkeypolicy_endpoints.go). The
	// manager's pod cache must then hold every pod
	// (PodCacheOptionsFor(true)); it watches Services and EndpointSlices
	// too (EndpointCacheOptions strip them).
	CapturePods bool
	// Targets are the installer's target choices: raw addresses are
	// refused unless Targets.AllowRawAddresses (package targets).
	Targets targets.Options
	// KeyNames are the installer's key-name choices: how keys are shown
	// where people read them (hotkeypolicy_keynames.go).
	KeyNames KeyNamesOptions
	// ReportInterval bounds how often the aggregated HotKeyReport of a
	// policy is rewritten (DefaultReportInterval if 0).
	ReportInterval time.Duration
	// Sizes bounds and tunes the MEMORY USAGE confirmation of big keys
	// (zero fields: sizes' defaults; Interval: the report interval).
	Sizes sizes.Options

	triggers chan event.GenericEvent
	// mem is what the reconciler remembers of each policy between passes.
	mem memory
}

// DefaultMaxConcurrentReconciles is the default number of reconcile workers.
const DefaultMaxConcurrentReconciles = 4

// RBAC is exactly what the code calls: policies are read through the cache
// and their finalizers merge-Patched (never Updated: the manager never
// writes spec); status is only merge-Patched; routing ConfigMaps
// are server-side Applied (patch, plus create when the apply creates the
// object), read through the cache and Deleted by the finalizer.
//
// +kubebuilder:rbac:groups=heatsink.dev,resources=hotkeypolicies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=heatsink.dev,resources=hotkeypolicies/status,verbs=patch
// +kubebuilder:rbac:groups=heatsink.dev,resources=hotkeypolicies/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
//
// No Secret rule: the manager reads the Secrets policies name (credentials,
// TLS) only in the namespaces the installer lists (chart value
// rbac.secretNamespaces: a Role with get, never list or watch, in each). RBAC
// is fixed at install time and the manager must not grant itself rights
// (creating Roles would take the escalate or bind verbs, broader than what
// they would grant), so the platform team names the namespaces, as it names
// the namespaces a ClusterRedisTarget allows. Elsewhere a policy that names
// a Secret reports CredentialsMissing with that value in the message.

// SetupWithManager fills unset fields from mgr and registers the reconciler.
func (r *HotKeyPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.init(mgr); err != nil {
		return err
	}
	opts := controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}
	if r.SkipNameValidation {
		// Only when asked: nil lets the manager's own setting apply.
		opts.SkipNameValidation = ptr.To(true)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.HotKeyPolicy{}).
		Owns(&corev1.ConfigMap{}, builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})).
		// The hub asks for a pass when a key's estimate crosses a band, so
		// reaction does not wait for a periodic requeue.
		WatchesRawSource(source.Channel(r.triggers, &handler.EnqueueRequestForObject{})).
		Named("hotkeypolicy").
		WithOptions(opts)
	if err := r.watchTargets(context.Background(), mgr.GetFieldIndexer(), b); err != nil {
		return err
	}
	if r.CapturePods {
		// The Services the policies name, for the capture's endpoints.
		if err := r.watchEndpoints(context.Background(), mgr, b); err != nil {
			return err
		}
	}
	return b.Complete(r)
}

// init fills unset fields from mgr.
func (r *HotKeyPolicyReconciler) init(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("heatsink-manager")
	}
	if r.Redis == nil {
		r.Redis = DialRedis
	}
	if r.Margin <= 0 {
		r.Margin = DefaultMargin
	}
	if r.MaxConcurrentReconciles <= 0 {
		r.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if r.Metrics == nil {
		r.Metrics = NewMetrics(metrics.Registry)
	}
	if err := mgr.Add(&r.mem); err != nil { // closes Redis clients at shutdown
		return err
	}
	if r.Fleet == nil {
		return errors.New("HotKeyPolicyReconciler: Fleet (the hub node agents report to) is required")
	}
	// Room for a trigger per policy: the hub sends at most one per policy
	// until its next pass.
	r.triggers = make(chan event.GenericEvent, 4096)
	if err := r.setupFleet(context.Background(), mgr); err != nil {
		return err
	}
	return mgr.Add(r.Fleet)
}

// Reconcile runs one pass over a policy: observe the keys' rates, load
// the published routing ConfigMap, decide, enact (fold → publish → fill),
// then write the status if it changed and requeue for when the outcome
// changes by itself. A deleted policy is drained instead (finalize).
func (r *HotKeyPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	began := time.Now() // wall time: this measures the reconcile itself
	defer func() { r.Metrics.reconcileDuration.Observe(time.Since(began).Seconds()) }()

	policy, err := r.getPolicy(ctx, req.NamespacedName)
	if policy == nil {
		return ctrl.Result{}, err
	}
	r.caughtUp(policy)
	if !policy.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, policy)
	}
	if !controllerutil.ContainsFinalizer(policy, Finalizer) {
		if err := r.patchFinalizers(ctx, policy, func() { controllerutil.AddFinalizer(policy, Finalizer) }); err != nil {
			return ctrl.Result{}, err
		}
	}

	if refusal, err := r.resolveTarget(ctx, policy); err != nil || refusal != nil {
		if err != nil {
			return ctrl.Result{}, err
		}
		return r.targetRefused(ctx, policy, refusal)
	}

	p := r.newPass(policy)
	if p.prev, err = r.loadPublished(ctx, policy); err != nil {
		return ctrl.Result{}, err
	}
	if p.prev.terminating {
		return r.routingDeleted(ctx, policy)
	}
	r.learn(ctx, p)
	if warm, at, err := r.observe(ctx, p); err != nil || !warm {
		// Not heard from every node yet (a new leader): decide nothing, so
		// the published table stands untouched until the view is complete.
		return requeueAt(p.now, at), err
	}
	p.decide(r.Margin)
	r.enact(ctx, p)
	r.writeReport(ctx, p)
	r.noteWithheld(p)

	p.ratesDue = r.ratesDue(p.key, p.now)
	p.sidecars, p.sidecarsListed = r.listSidecars(ctx, policy)
	status := buildStatus(p)
	r.recordTransitions(policy, &policy.Status, status)
	r.Metrics.observe(policy, p.spec, p.now, &p.out)
	r.Metrics.health(policy, status)
	r.Metrics.shards(policy, p.shards, p.shardThresholds())
	if err := r.writeStatus(ctx, policy, status, p.now); err != nil {
		return ctrl.Result{}, err
	}
	if p.pub.err != nil {
		return ctrl.Result{}, p.pub.err
	}
	next := p.next()
	log.FromContext(ctx).V(1).Info("reconciled", "hotKeys", len(p.out.Keys), "routingVersion", p.pub.version, "next", next)
	return requeueAt(p.now, next), nil
}

// getPolicy reads the policy. Once it is gone it returns nil and no error,
// and what the reconciler kept for it is forgotten.
func (r *HotKeyPolicyReconciler) getPolicy(ctx context.Context, key types.NamespacedName) (*v1alpha1.HotKeyPolicy, error) {
	policy := &v1alpha1.HotKeyPolicy{}
	if err := r.Client.Get(ctx, key, policy); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
		}
		return nil, client.IgnoreNotFound(err)
	}
	return policy, nil
}

// forget drops what the reconciler keeps in memory for a policy (its
// policyMemory, Redis client closed), its metric series and its place in the
// hub.
func (r *HotKeyPolicyReconciler) forget(key types.NamespacedName) {
	r.mem.forget(key)
	r.Metrics.forget(key.Namespace, key.Name)
	r.Fleet.RemovePolicy(policyID(key))
}

// requeueAt converts the next check time into a RequeueAfter.
func requeueAt(now, next time.Time) ctrl.Result {
	if next.IsZero() {
		return ctrl.Result{}
	}
	d := next.Sub(now)
	if d < 100*time.Millisecond {
		d = 100 * time.Millisecond
	}
	return ctrl.Result{RequeueAfter: d}
}

func earliest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if !t.IsZero() && (out.IsZero() || t.Before(out)) {
			out = t
		}
	}
	return out
}
