package webhook

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The manager reads its own Pod, once at start, to give the sidecar its own
// image (OwnImage); its ClusterRole already gets pods (controllers/hub_feed.go).

// The manager reads its own Pod, in its namespace only.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=get,namespace=heatsink-system

// OwnImage returns the image of container in the Pod namespace/name: the
// manager's own image, which the injected sidecar runs by default, so that an
// image override of the install (kustomize images:, a chart value) moves the
// manager and every new sidecar together and their versions cannot skew.
func OwnImage(ctx context.Context, r client.Reader, namespace, name, container string) (string, error) {
	if namespace == "" || name == "" {
		return "", errors.New("the Pod's namespace and name are unknown: set POD_NAMESPACE and POD_NAME from the downward API, or --proxy-image")
	}
	pod := &corev1.Pod{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, pod); err != nil {
		return "", fmt.Errorf("read own Pod %s/%s: %w", namespace, name, err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == container && c.Image != "" {
			return c.Image, nil
		}
	}
	return "", fmt.Errorf("own Pod %s/%s has no container %q", namespace, name, container)
}
