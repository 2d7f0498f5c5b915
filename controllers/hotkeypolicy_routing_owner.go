package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// ReasonRoutingNotOwned is the Ready reason of a policy whose routing
// ConfigMap's name is taken by a ConfigMap heatsink did not create for it.
const ReasonRoutingNotOwned = "RoutingConfigMapNotOwned"

// errRoutingNotOwned: the routing ConfigMap exists and is not this policy's.
var errRoutingNotOwned = errors.New("routing ConfigMap not owned by the policy")

// ownedBy reports whether cm is controlled by policy (its controller owner
// reference has the policy's UID), as every routing ConfigMap heatsink
// writes is.
func ownedBy(cm *corev1.ConfigMap, policy *v1alpha1.HotKeyPolicy) bool {
	ref := metav1.GetControllerOf(cm)
	return ref != nil && ref.UID == policy.UID && ref.Kind == "HotKeyPolicy"
}

// checkRoutingOwner refuses to write a routing ConfigMap the policy does not
// control. Server-side apply with force ownership would otherwise take over
// any ConfigMap named <policy>-routing: someone else's configuration, or
// another tool's. The manager's cache holds only ConfigMaps labelled as
// heatsink's, so one absent from it is looked up uncached before the first
// write (get, which the manager's ConfigMap rule allows).
func (r *HotKeyPolicyReconciler) checkRoutingOwner(ctx context.Context, policy *v1alpha1.HotKeyPolicy, prev *published) error {
	if prev.exists {
		if prev.foreign {
			return notOwned(policy)
		}
		return nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: policy.Namespace, Name: routingName(policy)}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get routing ConfigMap: %w", err)
	case !ownedBy(cm, policy):
		return notOwned(policy)
	}
	return nil
}

func notOwned(policy *v1alpha1.HotKeyPolicy) error {
	return fmt.Errorf("%w: ConfigMap %q exists and was not created by heatsink for this policy; heatsink does not take it over: delete or rename it, or rename the policy",
		errRoutingNotOwned, routingName(policy))
}
