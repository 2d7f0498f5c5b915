package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/endpoints"
)

// The capture's endpoints. With CapturePods, a policy's directive carries,
// after its target addresses, the ClusterIPs and ready pod endpoints of the
// Services those addresses name (package endpoints, docs/capture.md). The
// manager then watches Services and EndpointSlices of every namespace (a
// policy may name a Service of another namespace, as its pods may connect
// to one) through its cache, and a change of one that a policy names queues
// that policy's pass; the pass's observe step hands the hub the new set,
// and the hub sends a directive whose endpoints changed again. Without
// CapturePods nothing here runs, and the manager needs no right on
// EndpointSlices (it reads Services for spec.target.serviceRef, package
// targets).
//
// Those rights are a ClusterRole of their own (roleName), which the chart
// binds only with nodeAgent.capture.enabled:
//
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch,roleName=heatsink-manager-capture
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch,roleName=heatsink-manager-capture

// serviceIndex indexes policies by the Services ("namespace/name") their
// target addresses name.
const serviceIndex = "heatsink.dev/target-services"

func policyServices(o client.Object) []string {
	p, ok := o.(*v1alpha1.HotKeyPolicy)
	if !ok {
		return nil
	}
	var out []string
	for _, s := range endpoints.Services(p.Spec.Target.Addresses, p.Namespace) {
		out = append(out, s.String())
	}
	return out
}

// watchEndpoints indexes the policies by Service and has b queue the
// policies that name a Service when it or one of its EndpointSlices
// changes.
func (r *HotKeyPolicyReconciler) watchEndpoints(ctx context.Context, mgr manager.Manager, b *builder.TypedBuilder[reconcile.Request]) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.HotKeyPolicy{}, serviceIndex, policyServices); err != nil {
		return err
	}
	b.Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.policiesNaming(func(o client.Object) string {
		return o.GetName()
	}))).Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.policiesNaming(func(o client.Object) string {
		return o.GetLabels()[discoveryv1.LabelServiceName]
	})))
	return nil
}

// policiesNaming maps an object of a Service (service gives the Service's
// name, "" for none) to the policies whose addresses name that Service.
func (r *HotKeyPolicyReconciler) policiesNaming(service func(client.Object) string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		name := service(o)
		if name == "" {
			return nil
		}
		var list v1alpha1.HotKeyPolicyList
		key := types.NamespacedName{Namespace: o.GetNamespace(), Name: name}.String()
		if err := r.Client.List(ctx, &list, client.MatchingFields{serviceIndex: key}); err != nil {
			log.FromContext(ctx).Error(err, "listing the policies that name a Service", "service", key)
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return out
	}
}

// captureEndpoints is the directive's endpoints for addresses, the
// policy's target addresses: as they are without CapturePods; with it,
// followed by what the Services they name resolve to, read from the cache.
// A Service or its slices that cannot be read add nothing this pass (the
// addresses still go, and a change of them queues another pass). The cap's
// cut is logged when it changes and is in
// heatsink_manager_capture_endpoints_dropped while it lasts.
func (r *HotKeyPolicyReconciler) captureEndpoints(ctx context.Context, p *pass, addresses []string) []string {
	if !r.CapturePods {
		return addresses
	}
	logger := log.FromContext(ctx)
	var services []corev1.Service
	var slices []discoveryv1.EndpointSlice
	for _, ref := range endpoints.Services(addresses, p.key.Namespace) {
		svc := corev1.Service{}
		if err := r.Client.Get(ctx, ref, &svc); err != nil {
			if !apierrors.IsNotFound(err) {
				logger.Error(err, "reading a Service the policy names", "service", ref.String())
			}
			continue
		}
		var l discoveryv1.EndpointSliceList
		if err := r.Client.List(ctx, &l, client.InNamespace(ref.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: ref.Name}); err != nil {
			logger.Error(err, "listing the EndpointSlices of a Service the policy names", "service", ref.String())
		}
		services, slices = append(services, svc), append(slices, l.Items...)
	}
	out, dropped := endpoints.For(addresses, p.key.Namespace, services, slices, agentlink.MaxEndpoints)
	var was int
	r.mem.with(p.key, func(m *policyMemory) { was, m.endpointsDropped = m.endpointsDropped, dropped })
	if dropped != was {
		logger.Info("capture endpoints over the directive's bound: the Services' pod endpoints past it are left out, their traffic not captured",
			"endpoints", len(out), "dropped", dropped, "max", agentlink.MaxEndpoints)
	}
	r.Metrics.captureEndpoints.WithLabelValues(p.key.Namespace, p.key.Name).Set(float64(len(out)))
	r.Metrics.captureEndpointsDropped.WithLabelValues(p.key.Namespace, p.key.Name).Set(float64(dropped))
	return out
}

// EndpointCacheOptions strip the manager's Service and EndpointSlice caches
// (CapturePods: every one of the cluster) to what package endpoints reads.
func EndpointCacheOptions() map[client.Object]cache.ByObject {
	out := ServiceCacheOptions()
	out[&discoveryv1.EndpointSlice{}] = cache.ByObject{Transform: func(o any) (any, error) {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			return o, nil
		}
		eps := make([]discoveryv1.Endpoint, len(s.Endpoints))
		for i, e := range s.Endpoints {
			eps[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Hostname: e.Hostname,
				Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready}}
		}
		var labels map[string]string
		if name, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
			labels = map[string]string{discoveryv1.LabelServiceName: name}
		}
		return &discoveryv1.EndpointSlice{TypeMeta: s.TypeMeta, AddressType: s.AddressType, Ports: s.Ports, Endpoints: eps,
			ObjectMeta: cachedMeta(s, labels)}, nil
	}}
	return out
}

// cachedMeta is the metadata the stripped Services and EndpointSlices keep.
func cachedMeta(o metav1.Object, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(),
		ResourceVersion: o.GetResourceVersion(), DeletionTimestamp: o.GetDeletionTimestamp(), Labels: labels}
}

// ServiceCacheOptions strip the cached Services to their type, ClusterIPs and
// ports: what the capture's endpoints and a serviceRef target
// (package targets) read.
func ServiceCacheOptions() map[client.Object]cache.ByObject {
	meta := cachedMeta
	return map[client.Object]cache.ByObject{
		&corev1.Service{}: {Transform: func(o any) (any, error) {
			s, ok := o.(*corev1.Service)
			if !ok {
				return o, nil
			}
			ports := make([]corev1.ServicePort, len(s.Spec.Ports))
			for i, p := range s.Spec.Ports {
				ports[i] = corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port}
			}
			return &corev1.Service{TypeMeta: s.TypeMeta, ObjectMeta: meta(s, nil), Spec: corev1.ServiceSpec{
				Type: s.Spec.Type, ClusterIP: s.Spec.ClusterIP, ClusterIPs: s.Spec.ClusterIPs, Ports: ports}}, nil
		}},
	}
}
