package main

import (
	"flag"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/internal/scheme"
)

// runManager runs the control plane: the HotKeyPolicy reconciler and the
// admission webhooks, leader-elected.
func runManager(args []string) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	metricsAddr := fs.String("metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 disables it")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	leaderElect := fs.Bool("leader-elect", true, "elect a leader so that only one manager acts")
	margin := fs.Duration("epoch-margin", controllers.DefaultMargin, "how far ahead of an epoch boundary a split change is announced, and how long a replaced split generation waits for late writes before it is folded")
	workers := fs.Int("max-concurrent-reconciles", controllers.DefaultMaxConcurrentReconciles, "how many policies reconcile at once, so that one policy's slow Redis does not hold back the others")
	redisTimeout := fs.Duration("redis-timeout", controllers.DefaultRedisTimeout, "bound on all the Redis work (folds, replica fills) of one reconcile pass")
	wh := bindWebhookFlags(fs)
	fc := bindFleetFlags(fs)
	opts := zap.Options{}
	opts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	ctx := ctrl.SetupSignalHandler()
	cfg := ctrl.GetConfigOrDie()

	whServer, err := prepareWebhookServer(ctx, cfg, wh, fc)
	if err != nil {
		return err
	}
	fleetHub, err := prepareHub(ctx, cfg, fc, wh)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: *probeAddr,
		LeaderElection:         *leaderElect,
		LeaderElectionID:       "heatsink-manager.heatsink.dev",
		WebhookServer:          whServer,
		// Watch only the ConfigMaps the manager writes (routing tables), not
		// every ConfigMap of the cluster.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{controllers.LabelManagedBy: "heatsink"})},
			// Only injected pods, stripped to what the fleet hub needs.
			&corev1.Pod{}: controllers.PodCacheOptions(),
		}},
	})
	if err != nil {
		return err
	}
	if err := setupWebhooks(mgr, wh); err != nil {
		return err
	}
	if err := setupControllers(mgr, &controllers.HotKeyPolicyReconciler{Margin: *margin, MaxConcurrentReconciles: *workers, RedisTimeout: *redisTimeout, Fleet: fleetHub}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// setupControllers registers the HotKeyPolicy reconciler r (tuned by the
// flags) with the real clock, Redis dialer and controller-runtime's metrics
// registry.
func setupControllers(mgr ctrl.Manager, r *controllers.HotKeyPolicyReconciler) error {
	return r.SetupWithManager(mgr)
}
