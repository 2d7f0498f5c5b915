package detector

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the detector's Prometheus metrics. Labels are reasons,
// results and policy names, never a Redis key.
type metrics struct {
	batches      *prometheus.CounterVec // result: accepted or a drop reason
	observations *prometheus.CounterVec // result: counted, filtered
	sketchBytes  *prometheus.GaugeVec   // policy
	sketchKeys   *prometheus.GaugeVec   // policy
	reportWrites *prometheus.CounterVec // result: written, deleted, error
	policies     prometheus.Gauge

	// Pre-resolved children for the ingest path.
	accepted, counted, filtered prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "heatsink_detector_batches_total",
			Help: "Batches received from sidecars, by result: accepted, or the reason they were dropped (truncated, bad_magic, unknown_version, unknown_flags, oversized, malformed, unknown_policy).",
		}, []string{"result"}),
		observations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "heatsink_detector_observations_total",
			Help: "Key entries of accepted batches, by result: counted, or filtered (outside the policy's key globs).",
		}, []string{"result"}),
		sketchBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "heatsink_detector_sketch_bytes",
			Help: "Memory held by a policy's sketch, keys included.",
		}, []string{"policy"}),
		sketchKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "heatsink_detector_sketch_keys",
			Help: "Keys tracked in a policy's sketch store.",
		}, []string{"policy"}),
		reportWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "heatsink_detector_report_writes_total",
			Help: "HotKeyReport writes, by result: written, deleted, error.",
		}, []string{"result"}),
		policies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "heatsink_detector_policies",
			Help: "HotKeyPolicies the detector tracks.",
		}),
	}
	for _, c := range []prometheus.Collector{m.batches, m.observations, m.sketchBytes, m.sketchKeys, m.reportWrites, m.policies} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.accepted = m.batches.WithLabelValues("accepted")
	m.counted = m.observations.WithLabelValues("counted")
	m.filtered = m.observations.WithLabelValues("filtered")
	return m, nil
}
