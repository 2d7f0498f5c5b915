package demo

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/capacity"
	"github.com/heatsink-dev/heatsink/controllers/hub"
)

// errStageUnavailable marks a part of heatsink that this build does not
// have; the demo runs without it and says so instead of faking it.
var errStageUnavailable = errors.New("not available in this build")

// missingStages lists the parts of heatsink this build lacks: none.
func missingStages() []string { return nil }

// managerCache is the manager's cache: like `heatsink manager`, it caches
// only the ConfigMaps heatsink manages and the injected pods.
func managerCache() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{controllers.LabelManagedBy: "heatsink"})},
		&corev1.Pod{}:       controllers.PodCacheOptions(),
	}}
}

// setupReconciler registers the HotKeyPolicy reconciler with mgr. cfg.Margin
// is how far ahead of an epoch boundary a split change is announced: all the
// demo's sidecars run on this machine and receive a table within
// milliseconds, so a short margin is safe here where a cluster needs the
// default's room for propagation and clock skew.
//
// With cfg.Auto the manager samples each master every cfg.Auto.SampleEvery
// and trusts its learned capacity sooner than by default (and from lighter
// load), as the demo shortens every window.
func setupReconciler(mgr manager.Manager, cfg Config, reg *prometheus.Registry) (*hub.Hub, error) {
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: fleetToken, Log: mgr.GetLogger().WithName("fleet")})
	if err != nil {
		return nil, err
	}
	r := &controllers.HotKeyPolicyReconciler{
		Margin: cfg.Margin,
		Fleet:  h,
		// A private registry: the e2e test may run the demo more than once
		// in one process.
		Metrics: controllers.NewMetrics(reg),
	}
	if a := cfg.Auto; a != nil {
		// Intervals from 0.5 % of a core count (the manager's default is
		// 2 %): the demo's masters work 1–3 % of a core before the spikes,
		// and at 2 % most of their intervals would not count, leaving a
		// master at the fallback thresholds when its key spikes.
		r.Capacity = capacity.Options{FullConfidenceCPU: a.ConfidenceCPU, MinUtilization: 0.005}
		r.CapacityInterval = a.SampleEvery
	}
	return h, r.SetupWithManager(mgr)
}
