package hub

import (
	"fmt"
	"testing"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// BenchmarkIngest is the manager's cost of one node's summary at fleet
// scale: decode (the binary format) and apply to a view that holds 1,000
// nodes, each listing 300 keys of a shared Zipf-like universe (what the
// guarantee test's nodes list at 100,000 reads/s over 1,000 nodes). At one
// summary per node per second, ns/op × 1,000 is the CPU share per second.
func BenchmarkIngest(b *testing.B) {
	const nodes, keys = 1000, 300
	h, err := New(Options{Token: "b"})
	if err != nil {
		b.Fatal(err)
	}
	h.SetPolicy("ns/p", Params{Thresholds: Thresholds{Reads: 5000, Writes: 1000, Hysteresis: 0.2}, ReportInterval: 1e9, Window: 1e10, TopK: 64})
	bodies := make([][]byte, nodes)
	for n := range nodes {
		node := fmt.Sprintf("node-%04d", n)
		h.UpsertPod("ns/pod-"+node, node, agentlink.Pod{IP: fmt.Sprintf("198.18.%d.%d", n/250, n%250+1), Policy: "ns/p"})
		ps := agentlink.PolicySummary{Policy: "ns/p", Directive: 1, Unseen: agentlink.Rates{Reads: 0.5, Writes: 0.1}}
		for k := range keys {
			// Keys overlap between nodes, as a shared background does.
			key := fmt.Sprintf("bg:%d", (k*7+n)%(keys*3))
			ps.Keys = append(ps.Keys, agentlink.KeyRates{Key: key, Reads: 1.5, RecentReads: 1.4})
		}
		if bodies[n], err = agentlink.MarshalSummary(nil, &agentlink.Summary{Node: node, Session: 1, Seq: 1, Policies: []agentlink.PolicySummary{ps}}); err != nil {
			b.Fatal(err)
		}
	}
	for n := range nodes { // warm: every node has a summary in the view
		s, _ := agentlink.UnmarshalSummary(bodies[n])
		h.Ingest(s)
	}
	b.ReportAllocs()
	seq := uint64(1)
	for i := 0; b.Loop(); i++ {
		n := i % nodes
		if n == 0 {
			seq++
		}
		s, err := agentlink.UnmarshalSummary(bodies[n])
		if err != nil {
			b.Fatal(err)
		}
		s.Seq = seq
		h.Ingest(s)
	}
	b.ReportMetric(float64(len(bodies[0])), "bytes/summary")
}

// BenchmarkSnapshot is one reconcile's read of that view.
func BenchmarkSnapshot(b *testing.B) {
	v := newView()
	for n := range 1000 {
		node := fmt.Sprintf("node-%04d", n)
		ps := agentlink.PolicySummary{Policy: "ns/p", Unseen: agentlink.Rates{Reads: 0.5}}
		for k := range 300 {
			ps.Keys = append(ps.Keys, agentlink.KeyRates{Key: fmt.Sprintf("bg:%d", (k*7+n)%900), Reads: 1.5})
		}
		v.apply(t0, node, 1, 1, &ps)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = v.snapshot(t0, 1e12, 1e12)
	}
}

// BenchmarkReconnect is one agent's reconnection (attach, then detach of
// its stream) with the fleet's other agents connected: the hub's lock is
// held throughout, so in a reconnection storm every agent waits for the
// others'. Its cost should not grow with the fleet.
func BenchmarkReconnect(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprint(nodes, " nodes"), func(b *testing.B) {
			h, err := New(Options{Token: "b"})
			if err != nil {
				b.Fatal(err)
			}
			stream := func() *agentStream { return &agentStream{out: make(chan queued, 64), done: make(chan struct{})} }
			for n := range nodes {
				h.attach(fmt.Sprintf("node-%04d", n), stream())
			}
			for b.Loop() {
				st := stream()
				h.attach("node-x", st)
				h.detach("node-x", st)
			}
		})
	}
}
