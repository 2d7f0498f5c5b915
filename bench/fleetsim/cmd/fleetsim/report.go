package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// procOrder is the processes' column order.
var procOrder = []string{"manager", "nodesim", "kube-apiserver", "etcd"}

// detection renders a Detection cell.
func detection(d Detection, hotRan bool) string {
	switch {
	case !hotRan:
		return "—"
	case !d.Detected && d.Of > 1:
		return fmt.Sprintf("**%d/%d keys**", d.Count, d.Of)
	case !d.Detected:
		return "**never**"
	case d.Of > 1:
		return fmt.Sprintf("%d/%d keys, the last %.2f s", d.Count, d.Of, d.Seconds)
	default:
		return fmt.Sprintf("%.2f s (v%d)", d.Seconds, d.Version)
	}
}

// designCell names the design, with its policies when there are several.
func designCell(r *Result) string {
	if r.Policies > 1 {
		return fmt.Sprintf("%s, %d policies", r.Design, r.Policies)
	}
	return r.Design
}

func mutating(r APIRates, ok bool) string {
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%s (%s)", fmtRate(r.Mutating), fmtRate(r.MutatingLeases))
}

// procCell is CPU seconds over the phases and peak RSS; for a run that
// never reached the phases, CPU seconds since the process started.
func procCell(p *ProcStats, phases bool) string {
	switch {
	case p == nil:
		return "—"
	case !phases:
		return fmt.Sprintf("%.1f s in all / %.0f MiB", p.CPUTotal, p.PeakRSSMB)
	default:
		return fmt.Sprintf("%.1f s / %.0f MiB", p.CPUPhases, p.PeakRSSMB)
	}
}

// row is r's line of the main table.
func row(r *Result) string {
	hot, hotOK := r.API["hot"]
	rest, restOK := r.API["rest"]
	steady, steadyOK := r.API[phaseSteady]
	hotRan := hotOK || r.Reached == "done" || r.Reached == "rest"
	cells := []string{designCell(r), fmt.Sprint(r.Nodes), fmt.Sprint(r.Sidecars), reached(r),
		detection(r.Viral, hotRan), detection(r.Counter, hotRan)}
	if hotOK {
		cells = append(cells, fmtRate(hot.Total))
	} else {
		cells = append(cells, "—")
	}
	cells = append(cells, mutating(steady, steadyOK), mutating(hot, hotOK), mutating(rest, restOK))
	if hotOK {
		cells = append(cells, fmtRate(hot.WatchEventTotal)+" / "+fmtBytes(hot.WatchByteTotal)+"/s")
	} else {
		cells = append(cells, "—")
	}
	cells = append(cells, agentFanOutCell(r), fanOutCell(r))
	if r.Viral.Detected {
		cells = append(cells, fmt.Sprintf("%.2f / %.2f s (%d/%d)", r.Viral.SidecarsP50, r.Viral.SidecarsP99, r.Viral.SidecarsReached, r.Sidecars))
	} else {
		cells = append(cells, "—")
	}
	for _, p := range procOrder {
		cells = append(cells, procCell(r.Processes[p], len(r.API) > 0))
	}
	cells = append(cells, lagCell(r))
	return "| " + strings.Join(cells, " | ") + " |"
}

// fanOutCell shows the fan-out of the versions the hot event published and
// of the probe's.
func fanOutCell(r *Result) string {
	var parts []string
	if f := r.FanOut; f.Samples > 0 {
		parts = append(parts, fmt.Sprintf("hot: %.0f / %.0f / %.0f ms (last version at %d/%d)", f.P50Ms, f.P99Ms, f.MaxMs, f.LastReached, r.Sidecars))
	}
	if f := r.Probe; f != nil {
		if f.Samples > 0 {
			parts = append(parts, fmt.Sprintf("probe: %.0f / %.0f / %.0f ms (%d/%d)", f.P50Ms, f.P99Ms, f.MaxMs, f.LastReached, r.ProbeSidecars))
		} else {
			parts = append(parts, "probe: not published or not received in 30 s")
		}
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, "; ")
}

// agentFanOutCell shows when the node agents held the versions the hot
// event published, and the probe's: the manager → agents step alone.
func agentFanOutCell(r *Result) string {
	var parts []string
	if f := r.AgentFanOut; f.Samples > 0 {
		parts = append(parts, fmt.Sprintf("hot: %.0f / %.0f / %.0f ms (last version at %d/%d)", f.P50Ms, f.P99Ms, f.MaxMs, f.LastReached, r.Nodes))
	}
	if f := r.AgentProbe; f != nil && f.Samples > 0 {
		parts = append(parts, fmt.Sprintf("probe: %.0f / %.0f / %.0f ms (%d/%d)", f.P50Ms, f.P99Ms, f.MaxMs, f.LastReached, r.Nodes))
	}
	if h := r.HubPush; h != nil {
		parts = append(parts, fmt.Sprintf("of which the manager's push to the streams: mean %.0f ms, p50 ≤ %s, p99 ≤ %s (%d pushes)", h.MeanMs, fmtLe(h.P50Ms), fmtLe(h.P99Ms), h.Samples))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, "; ")
}

// fmtLe renders a bucket's upper bound in milliseconds.
func fmtLe(ms float64) string {
	if math.IsInf(ms, 1) {
		return "+Inf"
	}
	return fmt.Sprintf("%g ms", ms)
}

// reached says how far the run got, with the start-up time.
func reached(r *Result) string {
	s := r.Reached
	if r.Reached == "done" {
		s = "all phases"
	}
	if r.StartupSeconds > 0 {
		s += fmt.Sprintf(" (start-up %.0f s)", r.StartupSeconds)
	} else if p := r.Progress; p != nil {
		s += fmt.Sprintf(" (%.0f/%.0f nodes, %.0f/%.0f sidecars synced)", p["nodes_tracking"], p["nodes"], p["sidecars_synced"], p["sidecars"])
	}
	return s
}

func fmtBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

// params is what the report says about the runs' set-up.
type params struct {
	reads, writes          int64
	sustainFor             time.Duration
	viralRate, counterRate float64
	backgroundRate         float64
	warmup, hot, rest      time.Duration
	sidecarsPerNode        int
	cores                  int
	load                   string
	leaderElection         string
	policies               int
	hotNodes               int
}

// hotNodesText says where the hot keys' traffic goes when concentrated.
func hotNodesText(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("The viral key and the counter go to %d nodes only (every nodes/%d-th, evenly over their sidecars): the rates below are theirs alone. ", n, n)
}

func policiesText(n int) string {
	if n <= 1 {
		return "One HotKeyPolicy"
	}
	return fmt.Sprintf("%d HotKeyPolicies (sidecar j of each node injected for policy j mod %d; each policy has its own viral key and counter, at the rates below over its own sidecars; the routing probe uses the first policy)", n, n)
}

// writeReport prints the Markdown section.
func writeReport(w io.Writer, p params, results []*Result) {
	fmt.Fprintf(w, "## Fleet simulator: today's design (legacy) against the fleet design\n\n")
	fmt.Fprintf(w, "Each row is one run on a fresh kube-apiserver + etcd, with the design's real `heatsink manager` (a process; %s) and its node simulator (a process: N simulated nodes running the design's real node-agent code, %d simulated sidecars per node sending real wire batches and following routing as that design's sidecar does). "+
		"%s: %d reads/s and %d writes/s thresholds, sustainFor %s, split enabled. "+
		hotNodesText(p.hotNodes)+"Traffic, spread evenly over every sidecar: a Zipf background of %.0f ops/s for the warm-up (%s) and the hot event (%s); during the hot event a viral key read at %.0f/s (%.3g × the read threshold) and a counter written at %.0f/s (%.3g × the write threshold); then rest (%s, no traffic).\n\n",
		p.leaderElection, p.sidecarsPerNode, policiesText(p.policies), p.reads, p.writes, p.sustainFor, p.backgroundRate, p.warmup, p.hot,
		p.viralRate, p.viralRate/float64(p.reads), p.counterRate, p.counterRate/float64(p.writes), p.rest)
	fmt.Fprintf(w, "Detected: from the hot event's start to the first routing ConfigMap version holding the key, as a watch of the ConfigMap saw it. "+
		"API rates: kube-apiserver's `apiserver_request_total` (resource requests; the orchestrator's own set-up is before the phases and its one ConfigMap watch is one long request), mutating = POST/PUT/PATCH/APPLY/DELETE, in brackets the part on leases (the manager's leader election and kube-apiserver's own lease), \"at rest\" over the warm-up's second half (background traffic, nothing hot), \"after\" over the rest that follows the hot event (its keys cooling down); watch events: `apiserver_watch_events_total` and `_sizes_sum`. "+
		"Fan-out: each sidecar's acceptance of a routing version minus when the orchestrator's watch saw that version: \"hot\" over the versions the hot event published, \"probe\" for one routing change made after the phases (a schedule for key `fleetsim:probe` added to the policy), so that every size and design has one. Agents hold the version: the same, to each node agent storing the version (the fleet design's node simulator reports it through the agent's `OnRoutingTable` hook; legacy has no agent between the API server and its sidecars): the one centralised step, manager → every node agent; the rest of the sidecars' fan-out is each node's agent → its own sidecars, which a real fleet runs on each node's own CPU; \"of which the manager's push\" is the manager's own histogram of those pushes (from a new table's push to its line flushed onto each agent's stream, over the run; bucket bounds). CPU: seconds from ready to the end of rest; RSS: peak (VmHWM). "+
		"Simulator lag: how late, p99 / max over the traffic, its simulated nodes' 100-ms ticks ran (the traffic and the sidecars' flushes trail the wall clock by that) and its routing followers' 10-ms timers fired (a routing line waits that long for a core); with the load average at the end of the hot event; **behind** where either p99 is over a tick: that row's times include the simulator's own delay. "+
		"Measured on %d shared cores (load average %s at the end): indicative numbers.\n\n", p.cores, p.load)
	fmt.Fprintln(w, "| design | nodes | sidecars | reached | viral key detected | counter detected | API requests/s (hot) | mutating/s at rest (leases) | mutating/s hot (leases) | mutating/s after (leases) | watch events/s (hot) | agents hold the version p50 / p99 / max | routing fan-out to sidecars p50 / p99 / max | viral key at sidecars p50 / p99 | manager CPU / RSS | node sim CPU / RSS | kube-apiserver CPU / RSS | etcd CPU / RSS | simulator lag p99 / max |")
	fmt.Fprintln(w, "|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Fprintln(w, row(r))
	}
	fmt.Fprintln(w)
	writeCosts(w, results)
	writeHops(w, p.sustainFor, results)
	fmt.Fprintln(w, "Requests per second by verb and resource (the busiest eight of each phase):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| design | nodes | at rest | hot event | after |")
	fmt.Fprintln(w, "|---|---:|---|---|---|")
	for _, r := range results {
		cell := func(phase string) string {
			a, ok := r.API[phase]
			if !ok {
				return "—"
			}
			if t := topRequests(a.Requests, 8); len(t) > 0 {
				return strings.Join(t, "; ")
			}
			return "none"
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", designCell(r), r.Nodes, cell(phaseSteady), cell("hot"), cell("rest"))
	}
	fmt.Fprintln(w)
	var notes []string
	for _, r := range results {
		for _, n := range r.Notes {
			notes = append(notes, fmt.Sprintf("- %s, %d nodes: %s", designCell(r), r.Nodes, n))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "Notes:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, strings.Join(notes, "\n"))
		fmt.Fprintln(w)
	}
}
