package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/internal/keyfilter"
)

// The observe step is the one place the reconciler learns how hot keys
// are: observe produces the decide.Aggregate a pass decides on (summed
// rates per key, node health for status, and NextStale for the requeue),
// and reportToPolicy maps a changed report to its policy for the
// HotKeyReport watch of SetupWithManager. Nothing else reads HotKeyReports,
// so another source of the same aggregate replaces this file, that watch
// and its RBAC marker, and leaves the rest of the pass as it is.

// observe sums the fresh reports of the policy's nodes.
func (r *HotKeyPolicyReconciler) observe(ctx context.Context, policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec, now time.Time) (decide.Aggregate, error) {
	var list v1alpha1.HotKeyReportList
	if err := r.Client.List(ctx, &list, client.InNamespace(policy.Namespace), client.MatchingLabels{v1alpha1.LabelPolicy: policy.Name},
		// Read-only use: skip copying 500 reports out of the cache.
		client.UnsafeDisableDeepCopy); err != nil {
		return decide.Aggregate{}, fmt.Errorf("list reports: %w", err)
	}
	filter, err := keyfilter.Compile(spec.Keys.Include, spec.Keys.Exclude)
	if err != nil {
		return decide.Aggregate{}, fmt.Errorf("spec.keys: %w", err)
	}
	return decide.AggregateReports(now, spec.Detection.ReportInterval.Duration, list.Items, filter), nil
}

// reportToPolicy maps a report to its policy through the policy label.
func reportToPolicy(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[v1alpha1.LabelPolicy]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}
