package nodeagent

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the agent's Prometheus metrics. Labels are reasons, results
// and policy names (namespace, policy), never a Redis key.
type metrics struct {
	batches         *prometheus.CounterVec // result: accepted or a drop reason
	observations    *prometheus.CounterVec // result: counted, filtered
	sketchBytes     *prometheus.GaugeVec   // namespace, policy
	sketchKeys      *prometheus.GaugeVec   // namespace, policy
	summaries       *prometheus.CounterVec // result: sent, error, no_manager, superseded
	routingRequests *prometheus.CounterVec // result: served, unknown_source, unentitled
	routingWaiters  prometheus.Gauge
	connected       prometheus.Gauge
	connects        prometheus.Counter
	pinsRefused     prometheus.Counter
	policies        prometheus.Gauge
	pods            prometheus.Gauge

	// Pre-resolved children for the ingest path.
	accepted, counted, filtered prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "heatsink_node_agent_batches_total",
			Help: "Batches received from sidecars, by result: accepted, or why they were dropped (truncated, bad_magic, unknown_version, unknown_flags, oversized, malformed: undecodable; unknown_source: not from a pod the manager named; unentitled: naming another policy than the pod's; rate_limited: over the pod's rate; unknown_policy: a policy the agent has no directive for).",
		}, []string{"result"}),
		observations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "heatsink_node_agent_observations_total",
			Help: "Key entries of accepted batches, by result: counted, or filtered (outside the policy's key globs).",
		}, []string{"result"}),
		sketchBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "heatsink_node_agent_sketch_bytes",
			Help: "Memory held by a policy's sketch, keys included.",
		}, []string{"namespace", "policy"}),
		sketchKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "heatsink_node_agent_sketch_keys",
			Help: "Keys tracked in a policy's sketch store.",
		}, []string{"namespace", "policy"}),
		summaries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "heatsink_node_agent_summaries_total",
			Help: "Summaries for the manager, by result: sent, error, no_manager (not connected), superseded (replaced by a newer one before it was sent).",
		}, []string{"result"}),
		routingRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "heatsink_node_agent_routing_requests_total",
			Help: "Routing tables served to sidecars and requests refused, by result: served (a table's frame on a stream), unknown_source, unentitled.",
		}, []string{"result"}),
		routingWaiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "heatsink_node_agent_routing_waiters",
			Help: "Sidecar routing streams open.",
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "heatsink_node_agent_manager_connected",
			Help: "1 while the agent holds a stream from the elected manager.",
		}),
		connects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "heatsink_node_agent_manager_connects_total",
			Help: "Streams from the manager established (a failover adds one).",
		}),
		pinsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "heatsink_node_agent_pins_refused_total",
			Help: "Keys the manager asked to count exactly that did not fit the sketch's pin budget.",
		}),
		policies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "heatsink_node_agent_policies",
			Help: "HotKeyPolicies the agent tracks (those with pods on its node).",
		}),
		pods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "heatsink_node_agent_pods",
			Help: "Pods of this node the agent accepts counts from.",
		}),
	}
	for _, c := range []prometheus.Collector{m.batches, m.observations, m.sketchBytes, m.sketchKeys, m.summaries,
		m.routingRequests, m.routingWaiters, m.connected, m.connects, m.pinsRefused, m.policies, m.pods} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.accepted = m.batches.WithLabelValues("accepted")
	m.counted = m.observations.WithLabelValues("counted")
	m.filtered = m.observations.WithLabelValues("filtered")
	return m, nil
}

// forget drops a removed policy's series.
func (m *metrics) forget(id string) {
	for i := range len(id) {
		if id[i] == '/' {
			m.sketchBytes.DeleteLabelValues(id[:i], id[i+1:])
			m.sketchKeys.DeleteLabelValues(id[:i], id[i+1:])
			return
		}
	}
}
