package controllers_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

// TestCaptureEndpointsFollowTheService: with CapturePods, a real manager
// against a real API server sends in a policy's directive, after its target
// address (a Service's name), the Service's ClusterIP at the Service port
// and its ready pods at the port of the EndpointSlice port that the named
// targetPort resolves to; and sends it again as the Service and its slices
// change. The API server runs no endpoint controller: the test writes the
// EndpointSlices as the controller would. The policy exists before the
// Service, and its passes are not due again for an hour (capacity samples,
// report writes), so what the directive learns comes from the watches.
func TestCaptureEndpointsFollowTheService(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	addr := startCaptureManager(t, cp, time.Hour)

	const target = "redis.shop.svc.cluster.local:6379"
	pol := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "checkout"}}
	pol.Spec.Target.Addresses = []string{target}
	v1alpha1.SetDefaults(&pol.Spec)
	changed := time.Now()
	if err := cp.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	runningPod(t, cp, "shop", "plain", "10.7.0.1", nil) // the node hosts the policy
	want := func(eps ...string) func(*agentlink.Directive) bool {
		return func(d *agentlink.Directive) bool { return slices.Equal(d.Endpoints, eps) }
	}
	directiveUntil(t, addr, "shop/checkout", changed, 60*time.Second, want(target))

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "redis"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "redis", Port: 6379, TargetPort: intstr.FromString("redis-port")}}}}
	changed = time.Now()
	if err := cp.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	clusterIP := net.JoinHostPort(svc.Spec.ClusterIP, "6379")
	t.Logf("the Service's ClusterIP: %s", svc.Spec.ClusterIP)
	directiveUntil(t, addr, "shop/checkout", changed, 30*time.Second, want(target, clusterIP))

	endpoint := func(ip string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "redis-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: "redis", discoveryv1.LabelManagedBy: "test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		// The named targetPort, resolved on the pods: 7000. A metrics port
		// beside it is not the Service port's.
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("redis"), Port: ptr.To[int32](7000), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("metrics"), Port: ptr.To[int32](9121), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{endpoint("10.7.1.1", true), endpoint("10.7.1.2", false)},
	}
	changed = time.Now()
	if err := cp.Client.Create(ctx, sl); err != nil {
		t.Fatal(err)
	}
	directiveUntil(t, addr, "shop/checkout", changed, 30*time.Second, want(target, clusterIP, "10.7.1.1:7000"))

	// A rollout: the old pod goes, the not-ready one turns ready, a new one
	// comes, on another port number.
	sl.Endpoints = []discoveryv1.Endpoint{endpoint("10.7.1.2", true), endpoint("10.7.1.3", true)}
	sl.Ports[0].Port = ptr.To[int32](7001)
	changed = time.Now()
	if err := cp.Client.Update(ctx, sl); err != nil {
		t.Fatal(err)
	}
	directiveUntil(t, addr, "shop/checkout", changed, 30*time.Second, want(target, clusterIP, "10.7.1.2:7001", "10.7.1.3:7001"))

	// A second slice of 300 pods: the directive keeps agentlink.MaxEndpoints
	// (the name, the ClusterIP, and the 254 lowest pod addresses).
	big := sl.DeepCopy()
	big.ObjectMeta = metav1.ObjectMeta{Namespace: "shop", Name: "redis-fghij", Labels: sl.Labels}
	big.Endpoints = nil
	for i := range 300 { // 10.8.1.1-250, 10.8.2.1-50
		big.Endpoints = append(big.Endpoints, endpoint("10.8."+strconv.Itoa(1+i/250)+"."+strconv.Itoa(1+i%250), true))
	}
	changed = time.Now()
	if err := cp.Client.Create(ctx, big); err != nil {
		t.Fatal(err)
	}
	d := directiveUntil(t, addr, "shop/checkout", changed, 30*time.Second, func(d *agentlink.Directive) bool {
		return len(d.Endpoints) == agentlink.MaxEndpoints
	})
	if d.Endpoints[2] != "10.7.1.2:7001" || d.Endpoints[4] != "10.8.1.1:7001" || d.Endpoints[len(d.Endpoints)-1] != "10.8.2.2:7001" {
		t.Errorf("the capped endpoints are not the lowest addresses, in order: %v ... %v", d.Endpoints[:6], d.Endpoints[len(d.Endpoints)-2:])
	}
	changed = time.Now()
	if err := cp.Client.Delete(ctx, big); err != nil {
		t.Fatal(err)
	}
	directiveUntil(t, addr, "shop/checkout", changed, 30*time.Second, want(target, clusterIP, "10.7.1.2:7001", "10.7.1.3:7001"))

	// The Service goes (its slices would go with it): the name alone.
	changed = time.Now()
	if err := cp.Client.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Delete(ctx, sl); err != nil {
		t.Fatal(err)
	}
	directiveUntil(t, addr, "shop/checkout", changed, 30*time.Second, want(target))
}
