package hub

import "github.com/prometheus/client_golang/prometheus"

// metrics of the fleet server; no label carries a key.
type metrics struct {
	summaries       *prometheus.CounterVec // result
	policySummaries *prometheus.CounterVec // result: applied, ignored
	agents          prometheus.Gauge
	connects        prometheus.Counter
	events          prometheus.Counter
	streamDrops     prometheus.Counter
	directives      prometheus.Counter
	routingPushes   prometheus.Counter
	// routingPushSeconds: from a table's push (SetRouting) to its line
	// flushed onto one agent's stream, one sample per agent.
	routingPushSeconds prometheus.Histogram
	triggers           prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		summaries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "heatsink_manager_fleet_summaries_total",
			Help: "Node summaries received, by result: accepted, malformed, unauthorized.",
		}, []string{"result"}),
		policySummaries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "heatsink_manager_fleet_policy_summaries_total",
			Help: "Per-policy parts of node summaries, by result: applied, ignored (the node hosts no pod of the policy).",
		}, []string{"result"}),
		agents: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "heatsink_manager_fleet_agents",
			Help: "Node agents holding a stream from this manager.",
		}),
		connects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "heatsink_manager_fleet_connects_total",
			Help: "Node agent streams opened.",
		}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "heatsink_manager_fleet_events_total",
			Help: "Events queued for node agents.",
		}),
		streamDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "heatsink_manager_fleet_stream_drops_total",
			Help: "Node agent streams closed because the agent fell too far behind.",
		}),
		directives: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "heatsink_manager_fleet_directives_total",
			Help: "Policy directives (floors, pins) sent out.",
		}),
		routingPushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "heatsink_manager_fleet_routing_pushes_total",
			Help: "Routing tables pushed to node agents (once per new version).",
		}),
		routingPushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "heatsink_manager_fleet_routing_push_seconds",
			Help:    "Time from a new routing table's push to its line written and flushed to one node agent's stream (one sample per agent).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1 ms to 8 s
		}),
		triggers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "heatsink_manager_fleet_triggers_total",
			Help: "Reconciles asked for because a key's estimate crossed a band.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.summaries, m.policySummaries, m.agents, m.connects, m.events, m.streamDrops, m.directives, m.routingPushes, m.routingPushSeconds, m.triggers} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
