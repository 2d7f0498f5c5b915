package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/targets"
)

// refusedRecheck is how often a policy whose target is refused is checked
// again without a change to it or to its ClusterRedisTarget (which queue it
// at once): a namespace's labels or a Service can change too.
const refusedRecheck = time.Minute

// resolveTarget checks the policy's target as admission did (package
// targets) and, when allowed, replaces policy.Spec.Target in memory by the
// resolved one (addresses or sentinel), which every later step of the pass
// reads. Never written back: the finalizer and status patches are computed
// against a copy taken after this, so the spec is not in them.
func (r *HotKeyPolicyReconciler) resolveTarget(ctx context.Context, policy *v1alpha1.HotKeyPolicy) (*targets.Refusal, error) {
	in, err := targets.Read(ctx, r.Client, policy.Namespace, &policy.Spec)
	if err != nil {
		return nil, fmt.Errorf("reading the policy's target: %w", err)
	}
	t, refusal := targets.Resolve(&policy.Spec, in, r.Targets)
	if refusal != nil {
		return refusal, nil
	}
	policy.Spec.Target = t
	return nil, nil
}

// targetRefused is a pass that stops at the target check: the policy's Redis
// client is closed, nothing connects, and status says why (TargetAllowed and
// Ready False, reason TargetNotAllowed, the refusal's message). The routing
// table already published, if any, stays as it is: the sidecars' Redis is in
// their pods' spec, and withdrawing the table would only change how their
// traffic is spread.
func (r *HotKeyPolicyReconciler) targetRefused(ctx context.Context, policy *v1alpha1.HotKeyPolicy, refusal *targets.Refusal) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(policy)
	r.mem.with(key, func(pm *policyMemory) { pm.closeRedis() })
	log.FromContext(ctx).Info("target not allowed: not connecting", "rule", refusal.Rule, "field", refusal.Field)
	st := policy.Status.DeepCopy()
	st.ObservedGeneration = policy.Generation
	setCondition(st, policy.Generation, v1alpha1.ConditionTargetAllowed, metav1.ConditionFalse, v1alpha1.ReasonTargetNotAllowed, truncate(refusal.Error()))
	setCondition(st, policy.Generation, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTargetNotAllowed, truncate(refusal.Error()))
	r.recordTransitions(policy, &policy.Status, st)
	if err := r.writeStatus(ctx, policy, st, r.Clock.Now()); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: refusedRecheck}, nil
}

// clearTargetAllowedCondition: a pass that reaches buildStatus passed the
// target check, so a TargetAllowed False left by an earlier refusal goes.
// The condition is shown only while the target is refused (absent means
// allowed), so that a policy that never was refused carries no extra
// condition.
func clearTargetAllowedCondition(st *v1alpha1.HotKeyPolicyStatus) {
	meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionTargetAllowed)
}

// targetIndex indexes policies by the ClusterRedisTarget they name.
const targetIndex = "heatsink.dev/cluster-target"

// watchTargets queues the policies naming a ClusterRedisTarget when it
// changes: its allowed namespaces may no longer include theirs, or its
// addresses moved.
func (r *HotKeyPolicyReconciler) watchTargets(ctx context.Context, idx client.FieldIndexer, b *builder.TypedBuilder[reconcile.Request]) error {
	if err := idx.IndexField(ctx, &v1alpha1.HotKeyPolicy{}, targetIndex, func(o client.Object) []string {
		if p, ok := o.(*v1alpha1.HotKeyPolicy); ok && p.Spec.Target.ClusterTargetRef != nil {
			return []string{p.Spec.Target.ClusterTargetRef.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	b.Watches(&v1alpha1.ClusterRedisTarget{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.HotKeyPolicyList
		if err := r.Client.List(ctx, &list, client.MatchingFields{targetIndex: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "listing the policies that name a ClusterRedisTarget", "target", o.GetName())
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return out
	}))
	return nil
}

// skipDrainRefused: a deleted policy whose target is refused is deleted
// without folding its split keys, as with AnnotationSkipFold, since folding
// means connecting.
func (r *HotKeyPolicyReconciler) skipDrainRefused(ctx context.Context, policy *v1alpha1.HotKeyPolicy, refusal *targets.Refusal) {
	log.FromContext(ctx).Info("deleting without folding split keys: target not allowed", "rule", refusal.Rule)
	if r.Recorder != nil {
		r.Recorder.Eventf(policy, nil, corev1.EventTypeWarning, ReasonFoldSkipped, "Delete",
			"target not allowed (%s): deleted without folding split keys; their shard values stay in Redis, read by nobody", refusal.Rule)
	}
}
