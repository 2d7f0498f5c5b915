package capacity

// OnCores is nodes as a policy sees them whose Redis nodes may each use
// cores of CPU (thresholds.auto.shardCPU, in (0, 1]). What Redis reports
// is per CPU-second: a node held to half a core by a CPU limit serves
// half the ops/s that its cost per command allows at a full core, and
// its main thread's CPU per second, the utilisation, tops out at 0.5,
// where it is already saturated. So the capacity is scaled to the
// allotment and the utilisation measured against it. The confidence
// counts CPU-seconds of load (Options.FullConfidenceCPU): at an allotment
// they count in its seconds (÷ cores), so a small shard is trusted after a
// watch as long, for its size, as a full core's (5 % busy for 10 minutes,
// by default); counted in CPU-seconds, a 50m shard would take 20 times as
// long. cores outside (0, 1) leaves nodes as they are (one core: Redis
// executes commands on one thread).
func OnCores(nodes []Node, cores float64) []Node {
	if !(cores > 0 && cores < 1) || len(nodes) == 0 {
		return nodes
	}
	out := make([]Node, len(nodes))
	for i, n := range nodes {
		n.Capacity *= cores
		n.Utilization /= cores
		n.Confidence = min(1, n.Confidence/cores)
		out[i] = n
	}
	return out
}
