// Package testenv gives tests a real kube-apiserver and etcd with heatsink's
// CRDs, and optionally its webhooks served by a running manager.
package testenv

import (
	"context"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// Start starts a control plane for the test and stops it at cleanup.
func Start(tb testing.TB, opts controlplane.Options) *controlplane.ControlPlane {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs a kube-apiserver; skipped with -short")
	}
	setLogger()
	cp, err := controlplane.Start(opts)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			tb.Logf("stop control plane: %v", err)
		}
	})
	return cp
}

// RunManager starts mgr until the test ends, after setup has registered its
// controllers and webhooks. It waits for the webhook server (if any) to serve.
func RunManager(tb testing.TB, cp *controlplane.ControlPlane, setup func(manager.Manager) error) manager.Manager {
	tb.Helper()
	mgr, err := ctrl.NewManager(cp.Config, cp.ManagerOptions())
	if err != nil {
		tb.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Logf("manager stopped: %v", err)
		}
	})
	if len(cp.Env.WebhookInstallOptions.ValidatingWebhooks)+len(cp.Env.WebhookInstallOptions.MutatingWebhooks) > 0 {
		checker := mgr.GetWebhookServer().StartedChecker()
		if err := eventually.Poll(ctx, 30*time.Second, func() error { return checker(nil) }); err != nil {
			tb.Fatalf("webhook server not serving: %v", err)
		}
	}
	return mgr
}

// setLogger sets controller-runtime's process-wide logger once. It never
// writes to a testing.TB: managers and informers log from goroutines that
// outlive the test that started them, and t.Log after a test ends panics.
// Logs are discarded unless HEATSINK_TEST_LOG=1.
var setLogger = sync.OnceFunc(func() {
	w := io.Discard
	if os.Getenv("HEATSINK_TEST_LOG") == "1" {
		w = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(w), zap.UseDevMode(true)))
})
