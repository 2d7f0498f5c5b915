package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
)

// AnnotationSkipFold, set to "true" on a deleted policy, lets its deletion
// proceed without folding its split keys (for a Redis that is gone for good).
// The values in their shards stay in Redis, read by nobody: a Warning Event
// (ReasonFoldSkipped) says so.
const AnnotationSkipFold = "heatsink.dev/skip-fold"

// ReasonFoldSkipped is the Event reason of a deletion that skipped the fold.
const ReasonFoldSkipped = "FoldSkipped"

// ReasonDraining is the Ready reason of a deleted policy whose split keys
// are being unsplit and folded before its routing table goes.
const ReasonDraining = "Draining"

// finalize runs for a deleted policy: drain its split keys, then remove the
// routing ConfigMap and the finalizer.
func (r *HotKeyPolicyReconciler) finalize(ctx context.Context, policy *v1alpha1.HotKeyPolicy) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(policy, Finalizer) {
		return ctrl.Result{}, nil
	}
	refusal, err := r.resolveTarget(ctx, policy)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refusal != nil {
		r.skipDrainRefused(ctx, policy, refusal)
	} else if policy.Annotations[AnnotationSkipFold] == "true" {
		r.skipDrain(ctx, policy)
	} else if res, done, err := r.drainForDeletion(ctx, policy); !done || err != nil {
		return res, err
	}
	if err := r.releaseRouting(ctx, policy, true); err != nil {
		return ctrl.Result{}, err
	}
	// Whatever the ConfigMap says (it may be gone): a raw routing Secret
	// outliving its policy would keep its keys.
	if err := r.deleteRawRouting(ctx, policy); err != nil {
		return ctrl.Result{}, err
	}
	r.forget(client.ObjectKeyFromObject(policy))
	return ctrl.Result{}, r.patchFinalizers(ctx, policy, func() { controllerutil.RemoveFinalizer(policy, Finalizer) })
}

// patchFinalizers applies change (adding or removing Finalizer) to policy
// with a merge patch of metadata.finalizers only. Never an Update: an Update
// sends the whole object, so spec would come back re-serialised by Go
// (5m becomes 5m0s), the generation would move with no user change, and the
// manager would own spec fields, making the next server-side apply from Git
// conflict. The optimistic lock keeps a concurrent change to the list
// (another controller's finalizer) from being lost.
func (r *HotKeyPolicyReconciler) patchFinalizers(ctx context.Context, policy *v1alpha1.HotKeyPolicy, change func()) error {
	orig := policy.DeepCopy()
	change()
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	return r.Client.Patch(ctx, policy, patch, client.FieldOwner(FieldOwner))
}

// releaseRouting removes Finalizer from the routing ConfigMap and, with
// remove, deletes it. Without remove it only lets a deletion in progress
// complete (the next pass publishes a new one).
func (r *HotKeyPolicyReconciler) releaseRouting(ctx context.Context, policy *v1alpha1.HotKeyPolicy, remove bool) error {
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: policy.Namespace, Name: routingName(policy)}, cm)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ownedBy(cm, policy) {
		// Not this policy's (checkRoutingOwner): never deleted.
		return nil
	}
	if controllerutil.ContainsFinalizer(cm, Finalizer) {
		orig := cm.DeepCopy()
		controllerutil.RemoveFinalizer(cm, Finalizer)
		patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
		if err := r.Client.Patch(ctx, cm, patch, client.FieldOwner(FieldOwner)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("release routing ConfigMap: %w", err)
		}
	}
	if remove && cm.DeletionTimestamp.IsZero() {
		if err := r.Client.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete routing ConfigMap: %w", err)
		}
	}
	return nil
}

// routingDeleted handles a routing ConfigMap being deleted while its policy
// lives (someone deleted it by hand): it is released, and the next pass
// publishes it again. Released only once the API server (not the cache,
// which may not have seen the policy's deletion yet) says the policy
// lives: a foreground deletion of the policy deletes the ConfigMap first,
// and it must stay until the drain is done.
func (r *HotKeyPolicyReconciler) routingDeleted(ctx context.Context, policy *v1alpha1.HotKeyPolicy) (ctrl.Result, error) {
	live := &v1alpha1.HotKeyPolicy{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(policy), live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !live.DeletionTimestamp.IsZero() {
		return ctrl.Result{RequeueAfter: time.Second}, nil // the cache catches up
	}
	return ctrl.Result{}, r.releaseRouting(ctx, policy, false)
}

// drainForDeletion unsplits every split key of the published table at the
// next safe boundary, folds the retired generations once the unsplit has
// been in effect for the margin, and publishes the shrinking table; done
// once the table holds no split (the empty table is then published). While
// Redis cannot be reached the deletion is blocked: Degraded, a Warning
// Event, and a retry after the margin, as a live policy's failed fold. Not
// controller-runtime's error backoff: from 5 ms, doubling, it retried a
// Redis that was gone almost at once, each try holding a worker for the
// whole Redis work of a pass, so that a few such deletions delayed every
// other policy's passes; and at its 16-min cap a Redis back would wait.
func (r *HotKeyPolicyReconciler) drainForDeletion(ctx context.Context, policy *v1alpha1.HotKeyPolicy) (ctrl.Result, bool, error) {
	spec := policy.Spec.DeepCopy()
	v1alpha1.SetDefaults(spec)
	now := r.Clock.Now()
	prev, err := r.loadPublished(ctx, policy)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if !prev.exists {
		return ctrl.Result{}, true, nil
	}
	em := spec.Mitigations.Split.Epoch.Milliseconds()
	drain := decide.Drain(now, em, r.Margin, decide.Rescale(prev.Table, em))
	act := r.actInRedis(ctx, policy, spec, &drain, now)
	pub := r.publish(ctx, policy, spec, prev, &decide.Output{State: prev.State}, &drain)
	if pub.err != nil {
		return ctrl.Result{}, false, pub.err
	}
	if len(drain.Entries) == 0 {
		return ctrl.Result{}, true, nil
	}
	st := drainStatus(policy, pub, act, len(drain.Entries))
	r.recordTransitions(policy, &policy.Status, st)
	if err := r.writeStatus(ctx, policy, st, now); err != nil {
		return ctrl.Result{}, false, err
	}
	if act.reason != "" {
		log.FromContext(ctx).Info("deletion blocked: split keys cannot be folded", "splitKeys", len(drain.Entries), "reason", act.reason, "retryAt", act.retryAt)
	} else {
		log.FromContext(ctx).V(1).Info("draining before deletion", "splitKeys", len(drain.Entries), "routingVersion", pub.version)
	}
	return requeueAt(now, earliest(drain.NextCheck, act.retryAt)), false, nil
}

// drainStatus is the status of a deleted policy still draining.
func drainStatus(policy *v1alpha1.HotKeyPolicy, pub publishResult, act actResult, splitKeys int) *v1alpha1.HotKeyPolicyStatus {
	st := policy.Status.DeepCopy()
	st.RoutingVersion = max(st.RoutingVersion, pub.version)
	gen := policy.Generation
	setCondition(st, gen, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonDraining,
		fmt.Sprintf("policy deleted: %d split keys are unsplit and folded before the routing table is removed", splitKeys))
	if act.reason != "" {
		setCondition(st, gen, v1alpha1.ConditionDegraded, metav1.ConditionTrue, act.reason, truncate(fmt.Sprintf(
			"deletion blocked: %d split keys cannot be folded (%s); it retries after the margin. Annotate %s=true to delete without folding (shard values stay in Redis, unread)",
			splitKeys, act.message, AnnotationSkipFold)))
	} else {
		setCondition(st, gen, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy, "nothing is degraded")
	}
	return st
}

// skipDrain warns that a deletion proceeds without folding the split keys
// still published.
func (r *HotKeyPolicyReconciler) skipDrain(ctx context.Context, policy *v1alpha1.HotKeyPolicy) {
	prev, err := r.loadPublished(ctx, policy)
	split := 0
	if err == nil && prev.Table != nil {
		for _, e := range prev.Table.Entries {
			if e.Split != nil {
				split++
			}
		}
	}
	log.FromContext(ctx).Info("deleting without folding split keys", "annotation", AnnotationSkipFold, "splitKeys", split)
	if r.Recorder != nil {
		r.Recorder.Eventf(policy, nil, corev1.EventTypeWarning, ReasonFoldSkipped, "Delete",
			"%s=true: deleted without folding %d split keys; their shard values stay in Redis, read by nobody", AnnotationSkipFold, split)
	}
}
