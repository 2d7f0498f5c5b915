package demo

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heatsink-dev/heatsink/demo/observe"
)

// ReplicaReadsResult is what the replica-reads scenario measures
// (Config.ReplicaReads): the GETs each node of the viral key's shard served
// per second, as Redis counted them (INFO commandstats), while the key was
// read from its master alone and once its routing entry sent its reads to
// the replicas.
type ReplicaReadsResult struct {
	// Nodes are the shard's master, then its replicas.
	Nodes []string
	// Before and After are each node's mean GET/s (GET and MGET calls)
	// over the whole seconds from one second after the spike until the
	// key was routed, and from 2 s after it was routed to the end;
	// BeforeSeconds and AfterSeconds are how many seconds each mean is.
	Before, After               []float64
	BeforeSeconds, AfterSeconds int
}

// fill takes the means from the shard's samples and the viral key's
// moments. The second after the spike is left out (the key's reads ramp up
// in it), as are the 2 s after routing (sidecars apply the table as they
// receive it, and each finds its replicas' lag first).
func (r *ReplicaReadsResult) fill(samples []observe.Sample, viral Moments) {
	n := len(r.Nodes)
	r.Before, r.After = make([]float64, n), make([]float64, n)
	r.BeforeSeconds, r.AfterSeconds = 0, 0
	for _, s := range samples {
		if len(s.ReadsPerSec) != n {
			continue
		}
		from := s.At.Add(-time.Second)
		switch {
		case !from.Before(viral.Spike.Add(time.Second)) && (viral.Routed.IsZero() || !s.At.After(viral.Routed)):
			addEach(r.Before, s.ReadsPerSec)
			r.BeforeSeconds++
		case !viral.Routed.IsZero() && from.After(viral.Routed.Add(2*time.Second)):
			addEach(r.After, s.ReadsPerSec)
			r.AfterSeconds++
		}
	}
	divideEach(r.Before, r.BeforeSeconds)
	divideEach(r.After, r.AfterSeconds)
}

func addEach(dst, v []float64) {
	for i := range dst {
		dst[i] += v[i]
	}
}

func divideEach(v []float64, n int) {
	if n == 0 {
		return
	}
	for i := range v {
		v[i] /= float64(n)
	}
}

// MasterShare is the master's share of the shard's GETs in gets (a Before
// or After), 0 when the shard served none.
func MasterShare(gets []float64) float64 {
	var sum float64
	for _, g := range gets {
		sum += g
	}
	if len(gets) == 0 || sum == 0 {
		return 0
	}
	return gets[0] / sum
}

// BusiestOverMean is the busiest node's GETs over the mean of the shard's
// nodes, 0 when the shard served none.
func BusiestOverMean(gets []float64) float64 {
	var sum, top float64
	for _, g := range gets {
		sum += g
		top = max(top, g)
	}
	if sum == 0 {
		return 0
	}
	return top / (sum / float64(len(gets)))
}

// printReplicaReads prints the replica-reads scenario's rows.
func printReplicaReads(tw *tabwriter.Writer, cfg Config, r *Result) {
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	rr := r.ReplicaReads
	row("scenario", fmt.Sprintf("replica reads: 3 masters with %d replicas each; %s read at %d GET/s from %s, twice what its master is declared to take (perShardReadsPerSecond %d); local cache and replicate off",
		ReplicasPerMaster, r.ViralRead.Key, cfg.ViralReadRate, dur(cfg.ViralReadAt), cfg.ViralReadRate/2))
	row(fmt.Sprintf("viral read %s: spike → routed", r.ViralRead.Key), dur(r.ViralRead.SpikeToRouted())+fmt.Sprintf(" (sustainFor %s)", dur(cfg.SustainFor)))
	for _, p := range []struct {
		what    string
		gets    []float64
		seconds int
	}{{"its shard's GET/s, before (master alone)", rr.Before, rr.BeforeSeconds}, {"its shard's GET/s, after (replica reads)", rr.After, rr.AfterSeconds}} {
		if p.seconds == 0 || len(p.gets) == 0 {
			row(p.what, "not measured (no whole second)")
			continue
		}
		reps := make([]string, len(p.gets)-1)
		for i, g := range p.gets[1:] {
			reps[i] = fmt.Sprintf("%.0f", g)
		}
		row(p.what, fmt.Sprintf("master %.0f, replicas %s; master's share %.0f %%, busiest node ÷ mean %.2f (over %d s; the background's GETs on this master included)",
			p.gets[0], strings.Join(reps, ", "), 100*MasterShare(p.gets), BusiestOverMean(p.gets), p.seconds))
	}
	if r.ClientReads > 0 {
		row("GETs: clients → Redis masters", fmt.Sprintf("%d sent through the sidecars, %d GET/MGET served by the masters", r.ClientReads, r.UpstreamReads))
	}
}
