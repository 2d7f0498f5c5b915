package targets

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// The manager (and its webhooks) read the ClusterRedisTargets, the labels of
// namespaces (a target's selector) and the Services policies name.
//
// +kubebuilder:rbac:groups=heatsink.dev,resources=clusterredistargets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch

// Read reads what spec's target names, in namespace: the ClusterRedisTarget
// and the namespace (for its labels), or the Service. An object that does
// not exist is left nil (Resolve refuses it); any other error is returned.
func Read(ctx context.Context, r client.Reader, namespace string, spec *v1alpha1.HotKeyPolicySpec) (Inputs, error) {
	in := Inputs{Namespace: namespace}
	if ref := spec.Target.ClusterTargetRef; ref != nil {
		ct := &v1alpha1.ClusterRedisTarget{}
		if err := get(ctx, r, client.ObjectKey{Name: ref.Name}, ct); err != nil {
			return in, err
		} else if ct.Name != "" {
			in.ClusterTarget = ct
		}
		ns := &corev1.Namespace{}
		if err := get(ctx, r, client.ObjectKey{Name: namespace}, ns); err != nil {
			return in, err
		}
		in.NamespaceLabels = ns.Labels
	}
	if ref := spec.Target.ServiceRef; ref != nil {
		svc := &corev1.Service{}
		if err := get(ctx, r, client.ObjectKey{Namespace: namespace, Name: ref.Name}, svc); err != nil {
			return in, err
		} else if svc.Name != "" {
			in.Service = svc
		}
	}
	return in, nil
}

// get reads key into obj, leaving obj empty when it does not exist.
func get(ctx context.Context, r client.Reader, key client.ObjectKey, obj client.Object) error {
	if err := r.Get(ctx, key, obj); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
