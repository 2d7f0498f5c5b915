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

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/internal/scheme"
	"github.com/heatsink-dev/heatsink/internal/testing/agentwatch"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
)

// startCaptureManager runs a manager with CapturePods against cp until the
// test ends (capacity sampled and reports written every interval; 0: the
// defaults) and returns its fleet server's address (token "feed").
func startCaptureManager(t *testing.T, cp *controlplane.ControlPlane, interval time.Duration) string {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", freePort(t))
	h, err := hub.New(hub.Options{Addr: addr, Token: "feed"})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme: scheme.New(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      cache.Options{ByObject: captureCacheOptions()},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.HotKeyPolicyReconciler{Fleet: h, CapturePods: true, SkipNameValidation: true, Targets: targets.Options{AllowRawAddresses: true},
		CapacityInterval: interval, ReportInterval: interval, Metrics: controllers.NewMetrics(prometheus.NewRegistry())}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = mgr.Start(mctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return addr
}

// captureCacheOptions are the manager's cache options with --capture-pods.
func captureCacheOptions() map[client.Object]cache.ByObject {
	byObject := controllers.EndpointCacheOptions()
	byObject[&corev1.Pod{}] = controllers.PodCacheOptionsFor(true)
	return byObject
}

// directiveUntil reads node-a's stream from the manager's hub at addr
// until the directive of policy satisfies ok, and returns it, logging how
// long after since (when the change waited for was made) it came; it fails
// t after timeout, with the last directive seen.
func directiveUntil(t *testing.T, addr, policy string, since time.Time, timeout time.Duration, ok func(*agentlink.Directive) bool) *agentlink.Directive {
	t.Helper()
	var last *agentlink.Directive
	if agentwatch.Read(addr, "node-a", "feed", timeout, func(ev *agentlink.Event) bool {
		if ev.Type != agentlink.TypePolicy || ev.Directive.Policy != policy {
			return false
		}
		last = ev.Directive
		return ok(last)
	}) {
		t.Logf("directive of %s as expected after %v: %d endpoints", policy, time.Since(since).Round(time.Millisecond), len(last.Endpoints))
		return last
	}
	t.Fatalf("no directive of %s as expected within %v; the last: %+v", policy, timeout, last)
	return nil
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
