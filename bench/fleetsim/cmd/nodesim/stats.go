package main

import (
	dto "github.com/prometheus/client_model/go"
)

// agentCounters turns one agent's gathered metrics into the done event's
// counters (added to into): what it refused and why, what became of its
// summaries, how often its stream from the manager was established. Names
// holding "refused", "dropped", "lost" or "error" are shown in the
// orchestrator's notes when not zero, so they are named for what they say:
//
//   - datagrams_refused_<reason>: batches the agent dropped (undecodable,
//     unknown_source, unentitled, rate_limited, unknown_policy);
//   - agent_summaries_sent, and agent_summaries_lost_<result> for those
//     not sent (no_manager: no stream; error: the POST failed);
//     agent_summaries_superseded for those replaced by a newer one before
//     they went out (by design, not a loss);
//   - agent_stream_connects: streams established (one per agent at start;
//     more is a reconnection);
//   - routing_requests_served, with unknown_source and unentitled as
//     routing_requests_refused_<reason>.
func agentCounters(families []*dto.MetricFamily, into map[string]float64) {
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			result := label(m, "result")
			switch mf.GetName() {
			case "heatsink_node_agent_batches_total":
				if result == "accepted" {
					into["agent_batches_accepted"] += v
				} else {
					into["datagrams_refused_"+result] += v
				}
			case "heatsink_node_agent_summaries_total":
				switch result {
				case "sent", "superseded":
					into["agent_summaries_"+result] += v
				default:
					into["agent_summaries_lost_"+result] += v
				}
			case "heatsink_node_agent_manager_connects_total":
				into["agent_stream_connects"] += v
			case "heatsink_node_agent_routing_requests_total":
				switch result {
				case "served":
					into["routing_requests_served"] += v
				default:
					into["routing_requests_refused_"+result] += v
				}
			case "heatsink_node_agent_pins_refused_total":
				into["agent_pins_refused"] += v
			}
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// counters are the done event's counters of the agents and the sidecars'
// clients.
func (s *sim) counters() map[string]float64 {
	out := map[string]float64{}
	for _, n := range s.snapshot() {
		if fams, err := n.reg.Gather(); err == nil {
			agentCounters(fams, out)
		} else {
			out["agent_metrics_errors"]++
		}
		st := n.agent.Stats()
		out["agent_observations"] += float64(st.Observations)
		for _, c := range n.counters {
			o, d := c.stats()
			out["sidecar_observed"] += float64(o)
			out["sidecar_observe_dropped"] += float64(d)
		}
		out["sidecar_batches"] += float64(n.batches.Load())
		out["sidecar_entries"] += float64(n.entries.Load())
		for _, c := range n.clients {
			st := c.Stats()
			out["sidecar_observed"] += float64(st.Observed)
			out["sidecar_observe_dropped"] += float64(st.Dropped)
			out["sidecar_batches"] += float64(st.Batches)
			out["sidecar_send_errors"] += float64(st.SendErrors)
			out["sidecar_lost_entries"] += float64(st.LostEntries)
		}
	}
	// A reconnection is a stream established beyond each agent's first.
	out["agent_streams_lost"] = max(0, out["agent_stream_connects"]-float64(s.r.Count))
	return out
}

// summariesSent is how many summaries the agents sent so far.
func (s *sim) summariesSent() float64 {
	out := map[string]float64{}
	for _, n := range s.snapshot() {
		if fams, err := n.reg.Gather(); err == nil {
			agentCounters(fams, out)
		}
	}
	return out["agent_summaries_sent"]
}
