package detector

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/detector/report"
	"github.com/heatsink-dev/heatsink/detector/sketch"
	"github.com/heatsink-dev/heatsink/detector/wire"
	"github.com/heatsink-dev/heatsink/internal/keyfilter"
)

// policyState is what the detector keeps for one policy. mu guards the
// sketch (ingest and the report loop both use it) and the report state.
type policyState struct {
	mu sync.Mutex

	id              string // "<namespace>/<name>"
	namespace, name string
	filter          *keyfilter.Filter
	th              report.Thresholds
	k               int
	interval        time.Duration
	window          time.Duration
	sk              *sketch.Sketch
	last            report.State
	removed         bool
}

// sketchConfig derives a policy's sketch configuration. Writes are weighed
// against reads by the ratio of their thresholds, so that a key at its write
// threshold ranks like one at its read threshold.
func sketchConfig(spec *v1alpha1.HotKeyPolicySpec, memory int) sketch.Config {
	r, w := spec.Thresholds.ReadsPerSecond, spec.Thresholds.WritesPerSecond
	rw, ww := uint32(1), uint32(1)
	if r > w {
		ww = uint32(min(max(r/max(w, 1), 1), 1000))
	} else if w > r {
		rw = uint32(min(max(w/max(r, 1), 1), 1000))
	}
	slots := int(spec.Detection.Window.Duration / spec.Detection.ReportInterval.Duration)
	slots = min(max(slots, 2), 60)
	return sketch.Config{
		K:           int(spec.Detection.TopK),
		MemoryBytes: max(memory, sketchMinBytes(int(spec.Detection.TopK), slots)),
		Window:      spec.Detection.Window.Duration,
		Slots:       slots,
		ReadWeight:  rw,
		WriteWeight: ww,
		// A key's first batch carries a flush period of traffic, and one
		// flush period is the shortest span a rate can honestly be measured
		// over: with both, a key's rate is right from its first batch, so the
		// first report that names it already says how hot it is (the rate
		// limit would otherwise hold the true rate back by one interval).
		Lead:    wire.DefaultFlushInterval,
		MinSpan: wire.DefaultFlushInterval,
	}
}

// sketchMinBytes is enough memory for a store of 1.5 K keys plus a filter.
// A policy asking for a large topK gets it even over the per-policy budget:
// topK is bounded by the schema (1000).
func sketchMinBytes(k, slots int) int {
	return k*3/2*(160+12*slots)*3/2 + 16<<10
}

// setupPolicyController registers the policy reconciler. It also watches
// this node's reports, so that a report left by a previous run, or written
// in a race with a policy's deletion, is found and deleted.
func (d *Detector) setupPolicyController(mgr ctrl.Manager) error {
	toPolicy := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[v1alpha1.LabelPolicy]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("detector-policies").
		For(&v1alpha1.HotKeyPolicy{}).
		Watches(&v1alpha1.HotKeyReport{}, toPolicy, builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return true },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Complete(reconcile.Func(d.reconcilePolicy))
}

// reconcilePolicy keeps the detector's view of one policy in step with the
// API server.
func (d *Detector) reconcilePolicy(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pol v1alpha1.HotKeyPolicy
	err := d.client.Get(ctx, req.NamespacedName, &pol)
	if apierrors.IsNotFound(err) || (err == nil && !pol.DeletionTimestamp.IsZero()) {
		d.removePolicy(req.Namespace + "/" + req.Name)
		return reconcile.Result{}, d.deleteReports(ctx, req.Namespace, req.Name)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	spec := pol.Spec.DeepCopy()
	v1alpha1.SetDefaults(spec)
	filter, err := keyfilter.Compile(spec.Keys.Include, spec.Keys.Exclude)
	if err != nil {
		// The webhook rejects such a policy; without it, count nothing.
		d.log.Error(err, "policy has invalid key patterns; not tracking it", "policy", req.String())
		d.removePolicy(req.Namespace + "/" + req.Name)
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, d.upsertPolicy(pol.Namespace, pol.Name, spec, filter)
}

func (d *Detector) upsertPolicy(ns, name string, spec *v1alpha1.HotKeyPolicySpec, filter *keyfilter.Filter) error {
	id := ns + "/" + name
	cfg := sketchConfig(spec, d.opts.MemoryPerPolicy)
	th := report.Thresholds{
		ReadsPerSecond:  spec.Thresholds.ReadsPerSecond,
		WritesPerSecond: spec.Thresholds.WritesPerSecond,
		Fraction:        d.opts.CandidateFraction,
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.policies[id]
	// A new window or size needs a new sketch; thresholds and filters change
	// in place and keep the counts. Build it before publishing the policy,
	// so ingest never sees a policy without a sketch.
	var sk *sketch.Sketch
	if p == nil || p.sk.Config() != withDefaults(cfg) {
		var err error
		if sk, err = sketch.New(cfg); err != nil {
			return fmt.Errorf("policy %s: %w", id, err)
		}
	}
	if p == nil {
		p = &policyState{id: id, namespace: ns, name: name}
		d.policies[id] = p
		d.metrics.policies.Set(float64(len(d.policies)))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sk != nil {
		p.sk = sk
	}
	p.filter, p.th, p.k = filter, th, int(spec.Detection.TopK)
	p.interval, p.window = spec.Detection.ReportInterval.Duration, spec.Detection.Window.Duration
	return nil
}

// withDefaults is cfg as the sketch fills it, for comparison with Config().
func withDefaults(cfg sketch.Config) sketch.Config {
	c, _ := cfg.Defaulted()
	return c
}

func (d *Detector) removePolicy(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.policies[id]; p != nil {
		p.mu.Lock()
		p.removed = true
		p.mu.Unlock()
		delete(d.policies, id)
		d.metrics.sketchBytes.DeleteLabelValues(id)
		d.metrics.sketchKeys.DeleteLabelValues(id)
		d.metrics.policies.Set(float64(len(d.policies)))
	}
}
