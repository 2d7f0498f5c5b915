package sidecar

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatsink-dev/heatsink/dataplane/counts"
	"github.com/heatsink-dev/heatsink/dataplane/watch"
	"github.com/heatsink-dev/heatsink/routing"
)

// sidecarMetrics are what the sidecar itself (not the proxy or the engine)
// reports: which routing table it obeys, and what it failed to tell its node
// agent. No label: the scrape adds the pod's namespace and, from the pod
// label heatsink.dev/policy, its policy (the chart's PodMonitor), the one
// label scheme of heatsink's metrics.
type sidecarMetrics struct {
	routingVersion prometheus.Gauge
	rejected       *prometheus.CounterVec
}

func newSidecarMetrics(reg prometheus.Registerer) *sidecarMetrics {
	m := &sidecarMetrics{
		routingVersion: prometheus.NewGauge(prometheus.GaugeOpts{Name: "heatsink_proxy_routing_version",
			Help: "Version of the routing table the sidecar obeys; 0 until it has one. Compare with heatsink_manager's published version to see sidecars behind."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heatsink_proxy_routing_rejected_total",
			Help: "Routing tables refused (invalid, or older than the one obeyed), by source (agent, file); the last good table stays."}, []string{"source"}),
	}
	reg.MustRegister(m.routingVersion, m.rejected)
	return m
}

func (m *sidecarMetrics) table(t *routing.Table) { m.routingVersion.Set(float64(t.Version)) }

func (m *sidecarMetrics) reject(src watch.Source) { m.rejected.WithLabelValues(string(src)).Inc() }

// registerDetectorStats exports the node agent client's counters. Drops are
// counts the agent never gets: a sidecar that drops many makes its node
// under-report, and keys may not be found hot.
func registerDetectorStats(reg prometheus.Registerer, dc *counts.Client) {
	counter := func(name, help string, v func(counts.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(dc.Stats())) })
	}
	reg.MustRegister(
		counter("heatsink_proxy_node_agent_observations_dropped_total",
			"Key accesses not sent to the node agent: the per-interval buffer was full, the key too long or empty, or the client closed.",
			func(s counts.Stats) uint64 { return s.Dropped }),
		counter("heatsink_proxy_node_agent_send_errors_total",
			"Batches to the node agent that the kernel refused (no agent listening, for one); their entries are lost.",
			func(s counts.Stats) uint64 { return s.SendErrors }),
		counter("heatsink_proxy_node_agent_entries_lost_total",
			"Key entries in batches that could not be sent to the node agent.",
			func(s counts.Stats) uint64 { return s.LostEntries }),
		counter("heatsink_proxy_node_agent_batches_total",
			"Batches sent to the node agent.",
			func(s counts.Stats) uint64 { return s.Batches }),
	)
}
