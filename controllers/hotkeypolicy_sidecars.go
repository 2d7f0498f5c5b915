package controllers

import (
	"cmp"
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/webhook"
)

// Which sidecar versions a policy's pods run (status.sidecarVersions): a
// running pod keeps the sidecar it was injected with until it is
// recreated, so after an upgrade this is the list of what is left to roll
// (docs/install.md, Version skew policy). Read from the pods the manager
// already caches (the injected ones), not from the sidecars: the pod spec
// is what runs, and no wire format of the previous release has to carry
// it.

// unknownSidecarVersion is the version of a pod whose sidecar names none.
const unknownSidecarVersion = "unknown"

// maxSidecarVersions bounds status.sidecarVersions (its CRD MaxItems).
const maxSidecarVersions = 16

// sidecarVersion is the version of pod's sidecar: the injector's label,
// else (a pod injected before the label existed) the tag of its proxy
// container's image, else unknownSidecarVersion.
func sidecarVersion(pod *corev1.Pod) string {
	if v := pod.Labels[v1alpha1.LabelSidecarVersion]; v != "" {
		return v
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == webhook.ProxyContainerName {
			if v := webhook.ImageVersion(c.Image); v != "" {
				return v
			}
		}
	}
	for _, c := range pod.Spec.InitContainers { // a native sidecar
		if c.Name == webhook.ProxyContainerName {
			if v := webhook.ImageVersion(c.Image); v != "" {
				return v
			}
		}
	}
	return unknownSidecarVersion
}

// sidecarVersions counts the pods that run (not finished, not being
// deleted) by sidecarVersion, in the order of the versions; past
// maxSidecarVersions versions, the rest are not listed.
func sidecarVersions(pods []corev1.Pod) []v1alpha1.SidecarVersionCount {
	n := map[string]int32{}
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || !p.DeletionTimestamp.IsZero() {
			continue
		}
		n[sidecarVersion(p)]++
	}
	out := make([]v1alpha1.SidecarVersionCount, 0, len(n))
	for v, c := range n {
		out = append(out, v1alpha1.SidecarVersionCount{Version: v, Pods: c})
	}
	slices.SortFunc(out, func(a, b v1alpha1.SidecarVersionCount) int { return cmp.Compare(a.Version, b.Version) })
	if len(out) > maxSidecarVersions {
		out = out[:maxSidecarVersions]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// listSidecars is the sidecar versions of policy's pods, from the
// manager's pod cache; nil when the list fails (status keeps the count it
// showed).
func (r *HotKeyPolicyReconciler) listSidecars(ctx context.Context, policy *v1alpha1.HotKeyPolicy) ([]v1alpha1.SidecarVersionCount, bool) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(policy.Namespace), client.MatchingLabels{v1alpha1.LabelPolicy: policy.Name}); err != nil {
		return nil, false
	}
	return sidecarVersions(pods.Items), true
}
