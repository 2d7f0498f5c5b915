package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"maps"

	"github.com/heatsink-dev/heatsink/internal/metricsauth"
	"github.com/heatsink-dev/heatsink/internal/version"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/internal/scheme"
)

// managerFlags are the manager's flags that are not about webhooks.
type managerFlags struct {
	metricsAddr    string
	metricsSecure  bool
	metricsCertDir string
	probeAddr      string
	leaderElect    bool
	enableHTTP2    bool
	pprofAddr      string
}

func bindManagerFlags(fs *flag.FlagSet) *managerFlags {
	f := &managerFlags{}
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8443", "address of the Prometheus metrics endpoint; 0 disables it")
	fs.BoolVar(&f.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS, to callers the API server authenticates (TokenReview) and authorizes (SubjectAccessReview: get on the non-resource URL /metrics); false serves plain HTTP to anyone who can connect")
	fs.StringVar(&f.metricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for the metrics server; empty: a self-signed certificate generated at start")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader so that only one manager acts")
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "", "address of net/http/pprof (CPU and heap profiles, for diagnosis); empty: off. It has no authentication: bind it to 127.0.0.1 and reach it by kubectl port-forward")
	fs.BoolVar(&f.enableHTTP2, "enable-http2", false, "serve HTTP/2 on the webhook and metrics servers; off by default because of HTTP/2 rapid reset and stream cancellation attacks (CVE-2023-44487, CVE-2023-39325)")
	return f
}

// tlsOptions are the TLS settings of the webhook and metrics servers.
func (f *managerFlags) tlsOptions() []func(*tls.Config) {
	opts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !f.enableHTTP2 {
		opts = append(opts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	return opts
}

// The metrics filter asks the API server who a scraper is and whether it may
// get /metrics.
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsOptions serve metrics as kubebuilder v4 does: HTTPS, and only to a
// caller whose bearer token the API server authenticates and who may get
// /metrics. The manager is one or two pods, so the TokenReview and
// SubjectAccessReview per scrape (cached for a minute) cost the API server
// nothing; the node agents, one per node, do not do this (docs/install.md).
func (f *managerFlags) metricsOptions() metricsserver.Options {
	o := metricsserver.Options{BindAddress: f.metricsAddr, SecureServing: f.metricsSecure, CertDir: f.metricsCertDir, TLSOpts: f.tlsOptions()}
	if f.metricsSecure {
		o.FilterProvider = metricsauth.FilterProvider
	}
	return o
}

const managerSummary = "Runs the control plane: the HotKeyPolicy reconciler and the admission webhooks, leader-elected."

// runManager runs the control plane: the HotKeyPolicy reconciler and the
// admission webhooks, leader-elected.
func runManager(args []string) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	mf := bindManagerFlags(fs)
	margin := fs.Duration("epoch-margin", controllers.DefaultMargin, "how far ahead of an epoch boundary a split change is announced, and how long a replaced split generation waits for late writes before it is folded")
	workers := fs.Int("max-concurrent-reconciles", controllers.DefaultMaxConcurrentReconciles, "how many policies reconcile at once, so that one policy's slow Redis does not hold back the others")
	capturePods := fs.Bool("capture-pods", false, "tell the node agents about pods without the sidecar too, for their packet capture (node-agent --capture; docs/capture.md), and the ClusterIPs and pod endpoints of the Services the policies name: the manager then watches every pod of the cluster, not only injected ones, and every Service and EndpointSlice")
	redisTimeout := fs.Duration("redis-timeout", controllers.DefaultRedisTimeout, "bound on all the Redis work (folds, replica fills) of one reconcile pass")
	wh := bindWebhookFlags(fs)
	fc := bindFleetFlags(fs)
	config.RegisterFlags(fs)
	opts := zap.Options{}
	opts.BindFlags(fs)
	if err := parseFlags(fs, args, managerSummary); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()

	whServer, err := prepareWebhookServer(ctx, cfg, wh, fc, mf.tlsOptions())
	if err != nil {
		return err
	}
	fleetHub, err := prepareHub(ctx, cfg, fc, wh)
	if err != nil {
		return err
	}
	keyNames, err := prepareKeyNames(ctx, cfg, wh)
	if err != nil {
		return err
	}
	// Watch only the ConfigMaps the manager writes (routing tables), not
	// every ConfigMap of the cluster; only injected pods (every pod with
	// --capture-pods), stripped to what the hub needs; with --capture-pods,
	// Services and EndpointSlices stripped to their addresses and ports.
	byObject := map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{controllers.LabelManagedBy: "heatsink"})},
		&corev1.Pod{}:       controllers.PodCacheOptionsFor(*capturePods),
	}
	if *capturePods {
		maps.Copy(byObject, controllers.EndpointCacheOptions())
	} else {
		// The Services policies name in spec.target.serviceRef, stripped
		// the same way.
		maps.Copy(byObject, controllers.ServiceCacheOptions())
	}
	ctrlmetrics.Registry.MustRegister(version.Collectors("manager")...)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                mf.metricsOptions(),
		HealthProbeBindAddress: mf.probeAddr,
		PprofBindAddress:       mf.pprofAddr,
		LeaderElection:         mf.leaderElect,
		LeaderElectionID:       "heatsink-manager.heatsink.dev",
		// A manager that stops (a rollout, a drain) hands the lease over at
		// once instead of leaving its successor to wait for it to expire
		// (15-20 s without a leader on every upgrade, seen on a real
		// cluster). Safe: the process exits as soon as Start returns.
		LeaderElectionReleaseOnCancel: true,
		WebhookServer:                 whServer,
		Cache:                         cache.Options{ByObject: byObject},
	})
	if err != nil {
		return err
	}
	if err := setupWebhooks(ctx, mgr, wh); err != nil {
		return err
	}
	if err := setupControllers(mgr, &controllers.HotKeyPolicyReconciler{Margin: *margin, MaxConcurrentReconciles: *workers, RedisTimeout: *redisTimeout, Fleet: fleetHub, CapturePods: *capturePods, Targets: wh.targets, KeyNames: keyNames}); err != nil {
		return err
	}
	if err := addHealthChecks(mgr, wh.enabled); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// addHealthChecks: alive once the process serves; ready once the webhook
// server serves (when webhooks are on), so that a Service never sends an
// admission request to a replica that cannot answer it: with failurePolicy
// Fail that request would refuse an annotated pod.
func addHealthChecks(mgr ctrl.Manager, webhooks bool) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if webhooks {
		return mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker())
	}
	return mgr.AddReadyzCheck("readyz", healthz.Ping)
}

// setupControllers registers the HotKeyPolicy reconciler r (tuned by the
// flags) with the real clock, Redis dialer and controller-runtime's metrics
// registry.
func setupControllers(mgr ctrl.Manager, r *controllers.HotKeyPolicyReconciler) error {
	return r.SetupWithManager(mgr)
}
