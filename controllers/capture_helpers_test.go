package controllers_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/internal/scheme"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
)

// startCaptureManager runs a manager with CapturePods against cp until the
// test ends (capacity sampled every capacityInterval; 0: the default) and
// returns its fleet server's address (token "feed").
func startCaptureManager(t *testing.T, cp *controlplane.ControlPlane, capacityInterval time.Duration) string {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", freePort(t))
	h, err := hub.New(hub.Options{Addr: addr, Token: "feed"})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme: scheme.New(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: controllers.PodCacheOptionsFor(true)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.HotKeyPolicyReconciler{Fleet: h, CapturePods: true, SkipNameValidation: true,
		CapacityInterval: capacityInterval, Metrics: controllers.NewMetrics(prometheus.NewRegistry())}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = mgr.Start(mctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return addr
}

// runningPod creates a pod on node-a and sets it Running at ip.
func runningPod(t *testing.T, cp *controlplane.ControlPlane, ns, name, ip string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := cp.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}
	if err := cp.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
}
