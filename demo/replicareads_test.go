package demo

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/demo/observe"
)

// TestReplicaReadsFill is the before/after arithmetic of the replica-reads
// scenario on samples made up for it: the second after the spike and the
// 2 s after routing count in neither mean.
func TestReplicaReadsFill(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	viral := Moments{Spike: t0, Routed: t0.Add(4 * time.Second)}
	r := ReplicaReadsResult{Nodes: []string{"m", "r1", "r2"}}
	var samples []observe.Sample
	for sec := 1; sec <= 10; sec++ {
		gets := []float64{1000, 0, 0} // ends at sec: the key on its master
		if sec > 4 {
			gets = []float64{200, 400, 400}
		}
		if sec == 1 || sec == 5 || sec == 6 {
			gets = []float64{99999, 99999, 99999} // ramp-up, routing: left out
		}
		samples = append(samples, observe.Sample{At: t0.Add(time.Duration(sec) * time.Second), ReadsPerSec: gets})
	}
	r.fill(samples, viral)
	if r.BeforeSeconds != 3 || r.AfterSeconds != 3 {
		t.Fatalf("%d seconds before, %d after; want 3 and 3 (seconds 2–4, 8–10)", r.BeforeSeconds, r.AfterSeconds)
	}
	if r.Before[0] != 1000 || r.After[0] != 200 || r.After[1] != 400 {
		t.Fatalf("before %v, after %v", r.Before, r.After)
	}
	if MasterShare(r.Before) != 1 || MasterShare(r.After) != 0.2 {
		t.Fatalf("master's share %v before, %v after; want 1 and 0.2", MasterShare(r.Before), MasterShare(r.After))
	}
	if b := BusiestOverMean(r.Before); b != 3 {
		t.Fatalf("busiest ÷ mean before = %v; want 3", b)
	}
}

// TestReplicaReadsScenario runs the demo's replica-reads scenario, short,
// on real parts: a kube-apiserver, a 3-master Redis Cluster with 2 replicas
// per master, the manager, two node agents and four sidecars. The viral key
// (1,500 GET/s, each master declared to take half of it, local cache off)
// is read from its master alone until the manager routes it with replica
// reads; then Redis' own counts must show its reads on the replicas: the
// master serving under half its GETs of before and under a third of its
// shard's, each replica at least a quarter of the key's rate.
func TestReplicaReadsScenario(t *testing.T) {
	cfg := Short()
	cfg.SetReplicaReads()
	cfg.Duration = 20 * time.Second
	res := runScenario(t, cfg)
	rr := res.ReplicaReads
	if d := res.ViralRead.SpikeToRouted(); d < 0 {
		t.Fatalf("%s never routed", res.ViralRead.Key)
	}
	if rr.BeforeSeconds < 2 || rr.AfterSeconds < 3 {
		t.Fatalf("measured %d s before and %d s after routing; want at least 2 and 3", rr.BeforeSeconds, rr.AfterSeconds)
	}
	if len(rr.Nodes) != 1+ReplicasPerMaster {
		t.Fatalf("shard nodes %v; want a master and %d replicas", rr.Nodes, ReplicasPerMaster)
	}
	rate := float64(cfg.ViralReadRate)
	if share := MasterShare(rr.Before); share < 0.95 || rr.Before[0] < rate/2 {
		t.Errorf("before routing the master served %.0f GET/s, %.0f %% of its shard's; want the key's reads (%d GET/s) on it alone", rr.Before[0], 100*share, cfg.ViralReadRate)
	}
	if rr.After[0] > rr.Before[0]/2 || MasterShare(rr.After) > 1.0/3 {
		t.Errorf("after routing the master served %.0f GET/s (%.0f %% of its shard's), before %.0f; want under half of before and under a third of the shard's", rr.After[0], 100*MasterShare(rr.After), rr.Before[0])
	}
	for i, g := range rr.After[1:] {
		if g < rate/4 {
			t.Errorf("after routing replica %s served %.0f GET/s; want at least a quarter of the key's %d", rr.Nodes[i+1], g, cfg.ViralReadRate)
		}
	}
	var errs int64
	for _, n := range res.Counts.Errors {
		errs += n
	}
	if errs > 0 {
		t.Errorf("%d client errors (last: %s)", errs, res.Counts.LastError)
	}
}
