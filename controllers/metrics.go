package controllers

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// Metrics are the reconciler's Prometheus metrics. Labels carry policy
// names and mitigation types, never Redis keys.
type Metrics struct {
	mitigated         *prometheus.GaugeVec
	decisions         *prometheus.CounterVec
	epoch             *prometheus.GaugeVec
	folds             *prometheus.CounterVec
	foldMoves         prometheus.Counter
	publications      prometheus.Counter
	reconcileDuration prometheus.Histogram
}

// NewMetrics creates the metrics on reg. Registering twice on one registry
// (several managers in one test process) reuses the first collectors.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		mitigated: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_mitigated_keys",
			Help: "Keys mitigated per policy and mitigation type (Observe mode: would be)."}, []string{"namespace", "policy", "type"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heatsink_manager_decisions_total",
			Help: "Mitigation decisions: keys that started or ended being mitigated."}, []string{"decision"}),
		epoch: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "heatsink_manager_epoch",
			Help: "Current split epoch number per policy."}, []string{"namespace", "policy"}),
		folds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heatsink_manager_fold_operations_total",
			Help: "Fold passes over retired split generations, by result (done, pending, error)."}, []string{"result"}),
		foldMoves: prometheus.NewCounter(prometheus.CounterOpts{Name: "heatsink_manager_fold_moves_total",
			Help: "Shard values moved into base keys by folds."}),
		publications: prometheus.NewCounter(prometheus.CounterOpts{Name: "heatsink_manager_routing_publications_total",
			Help: "Routing tables published with a new version."}),
		reconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "heatsink_manager_reconcile_duration_seconds",
			Help: "Duration of one HotKeyPolicy reconcile.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	m.mitigated = register(reg, m.mitigated)
	m.decisions = register(reg, m.decisions)
	m.epoch = register(reg, m.epoch)
	m.folds = register(reg, m.folds)
	m.foldMoves = register(reg, m.foldMoves)
	m.publications = register(reg, m.publications)
	m.reconcileDuration = register(reg, m.reconcileDuration)
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err) // a programming error: two metrics with one name
	}
	return c
}

var mitigationTypes = []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache,
	v1alpha1.MitigationReplicate, v1alpha1.MitigationSplit, v1alpha1.MitigationPreAggregate}

func (m *Metrics) observe(policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec, now time.Time, out *decide.Output) {
	counts := map[v1alpha1.MitigationType]int{}
	for _, k := range out.Keys {
		for _, t := range k.Mitigations {
			counts[t]++
		}
	}
	for _, t := range mitigationTypes {
		m.mitigated.WithLabelValues(policy.Namespace, policy.Name, string(t)).Set(float64(counts[t]))
	}
	m.decisions.WithLabelValues("started").Add(float64(out.Started))
	m.decisions.WithLabelValues("ended").Add(float64(out.Ended))
	m.epoch.WithLabelValues(policy.Namespace, policy.Name).Set(float64(routing.EpochAt(now, spec.Mitigations.Split.Epoch.Milliseconds())))
}

// forget drops a deleted policy's series.
func (m *Metrics) forget(namespace, name string) {
	for _, t := range mitigationTypes {
		m.mitigated.DeleteLabelValues(namespace, name, string(t))
	}
	m.epoch.DeleteLabelValues(namespace, name)
}
