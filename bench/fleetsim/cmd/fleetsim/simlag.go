package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
)

// The node simulator's own lag behind real time (its done counters
// node_tick_lag_* and follower_timer_lag_*, package simproto's Lag): a row
// whose simulator fell behind says so, since its times then include the
// simulator's delay, not only heatsink's.

// Counter names of the node simulator's lag (simproto.Lag.Stats).
const (
	followerTimerLag = "follower_timer_lag"
	lagP99, lagMax   = "_p99_seconds", "_max_seconds"
)

// lagBehind is the p99 beyond which a row notes that its simulator fell
// behind real time: a node tick (the traffic's and the sidecars' flushes'
// own period) late at the 99th percentile.
const lagBehind = simproto.NodeTick

// lagCell shows the simulator's lag: its nodes' ticks (how far the traffic
// and the sidecars' flushes trailed the wall clock) and its followers'
// timers (how long a routing line waited for a core), p99 / max, over the
// traffic; and the load average (1 min) at the end of the hot event.
func lagCell(r *Result) string {
	var parts []string
	for _, l := range []struct{ name, prefix string }{{"ticks", simproto.NodeTickLag}, {"followers", followerTimerLag}} {
		p99, ok1 := r.Stats[l.prefix+lagP99]
		mx, ok2 := r.Stats[l.prefix+lagMax]
		if ok1 && ok2 {
			parts = append(parts, fmt.Sprintf("%s %.0f / %.0f ms", l.name, p99*1000, mx*1000))
		}
	}
	if len(parts) == 0 {
		if r.Reached == "done" {
			// The phases ran but the simulator's done counters never came:
			// whether it kept real time is not known, and the row must not
			// pass for one that did.
			return "**unknown**: no lag counters from the simulator"
		}
		return "—"
	}
	s := strings.Join(parts, "; ")
	if la, ok := r.Load[simproto.PhaseHot]; ok {
		s += fmt.Sprintf(" (load %.1f)", la)
	}
	if behind(r.Stats) {
		s = "**behind**: " + s
	}
	return s
}

// behind reports whether the simulator's lag p99 is over lagBehind.
func behind(stats map[string]float64) bool {
	for _, prefix := range []string{simproto.NodeTickLag, followerTimerLag} {
		if stats[prefix+lagP99] > lagBehind.Seconds() {
			return true
		}
	}
	return false
}

// lagKnown reports whether stats hold the simulator's tick lag (its done
// counters).
func lagKnown(stats map[string]float64) bool {
	_, ok := stats[simproto.NodeTickLag+lagP99]
	return ok
}

// behindNote says, for a row whose simulator fell behind, that its times
// are the simulator's as much as heatsink's.
func behindNote(stats map[string]float64) []string {
	if !behind(stats) {
		return nil
	}
	return []string{fmt.Sprintf("node simulator behind real time (lag p99 over %s: its nodes' ticks %.0f ms, its followers' timers %.0f ms): "+
		"this machine's cores could not run this size in real time; its detection and fan-out times include up to that much of the simulator's own delay",
		lagBehind, stats[simproto.NodeTickLag+lagP99]*1000, stats[followerTimerLag+lagP99]*1000)}
}

// loadAverage is the 1-minute load average; ok false if unreadable.
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

// ManagerCost is the manager's measured cost in a row, per node and per
// summary, and its linear projection to other sizes (from this row alone:
// CPU and memory proportional to nodes, which the fixed part of both
// overstates).
type ManagerCost struct {
	Nodes int `json:"nodes"`
	// Cores is the manager's CPU seconds over the phases per second.
	Cores float64 `json:"cores"`
	// CPUPerNodeMs is milliseconds of CPU per node per second.
	CPUPerNodeMs float64 `json:"cpuPerNodeMs"`
	// CPUPerSummaryMs is CPU milliseconds per summary the agents sent
	// over the phases (0: none counted).
	CPUPerSummaryMs float64 `json:"cpuPerSummaryMs"`
	Summaries       float64 `json:"summaries"`
	RSSPerNodeKiB   float64 `json:"rssPerNodeKiB"`
}

// managerCost is r's manager cost; nil without the phases' CPU.
func managerCost(r *Result) *ManagerCost {
	m := r.Processes["manager"]
	ready, ok1 := r.MarkAt["ready"]
	end, ok2 := r.MarkAt["end"]
	if m == nil || !ok1 || !ok2 || r.Nodes == 0 || !end.After(ready) {
		return nil
	}
	secs := end.Sub(ready).Seconds()
	c := &ManagerCost{Nodes: r.Nodes, Cores: m.CPUPhases / secs, RSSPerNodeKiB: m.PeakRSSMB * 1024 / float64(r.Nodes)}
	c.CPUPerNodeMs = c.Cores * 1000 / float64(r.Nodes)
	if s := r.Stats[summariesInTraffic]; s > 0 {
		c.Summaries = s
		c.CPUPerSummaryMs = m.CPUPhases * 1000 / s
	}
	return c
}

// summariesInTraffic is the node simulator's count of the summaries its
// agents sent from ready to the end of the traffic.
const summariesInTraffic = "agent_summaries_sent_in_traffic"

// projected is the cores and MiB c scales to at nodes.
func (c *ManagerCost) projected(nodes int) (cores, mib float64) {
	return c.CPUPerNodeMs * float64(nodes) / 1000, c.RSSPerNodeKiB * float64(nodes) / 1024
}

// writeCosts prints the manager's cost per node and per summary of each
// row with one, and its projection to 5,000 and 20,000 nodes.
func writeCosts(w io.Writer, results []*Result) {
	var rows []string
	for _, r := range results {
		c := managerCost(r)
		if c == nil {
			continue
		}
		perSummary := "—"
		if c.Summaries > 0 {
			perSummary = fmt.Sprintf("%.2f ms (%.0f summaries)", c.CPUPerSummaryMs, c.Summaries)
		}
		c5, m5 := c.projected(5000)
		c20, m20 := c.projected(20000)
		rt := "yes"
		switch {
		case !lagKnown(r.Stats):
			rt = "unknown (no lag counters)"
		case behind(r.Stats):
			rt = "**no**"
		}
		rows = append(rows, fmt.Sprintf("| %s | %d | %s | %.2f | %.3f ms | %s | %.0f KiB | %.2f cores, %.0f MiB | %.2f cores, %.0f MiB |",
			designCell(r), r.Nodes, rt, c.Cores, c.CPUPerNodeMs, perSummary, c.RSSPerNodeKiB, c5, m5, c20, m20))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "The manager's cost per node and per summary (CPU from ready to the end of rest; summaries the agents sent in that time; peak RSS over nodes), and its projection, linear from each row alone (the fixed part of CPU and memory makes it an overestimate); \"simulator in real time\" is no where the simulator's lag p99 was over a node tick, unknown where it sent no lag counters:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| design | nodes | simulator in real time | manager cores | CPU per node | CPU per summary | RSS per node | projected at 5,000 nodes | projected at 20,000 nodes |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---|---|")
	fmt.Fprintln(w, strings.Join(rows, "\n"))
	fmt.Fprintln(w)
}
