package decide

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// benchReports builds nodes reports of perNode candidates each, spread over
// keys distinct keys, every key hot once summed (even keys for reads, odd
// keys for writes).
func benchReports(now time.Time, nodes, perNode, keys int) []v1alpha1.HotKeyReport {
	out := make([]v1alpha1.HotKeyReport, nodes)
	for n := range out {
		r := &out[n]
		node := fmt.Sprintf("node-%03d", n)
		r.Name = "bench-" + node
		r.Labels = map[string]string{v1alpha1.LabelPolicy: "bench", v1alpha1.LabelNode: node}
		r.Spec = v1alpha1.HotKeyReportSpec{NodeName: node, PolicyName: "bench", Window: metav1.Duration{Duration: 10 * time.Second},
			GeneratedAt: metav1.NewTime(now)}
		for i := range perNode {
			k := (n*perNode + i) % keys
			c := v1alpha1.Candidate{Key: fmt.Sprintf("product:%06d", k)}
			if k%2 == 0 {
				c.ReadsPerSecond = 1000
			} else {
				c.WritesPerSecond = 500
			}
			r.Spec.Candidates = append(r.Spec.Candidates, c)
		}
	}
	return out
}

// BenchmarkAggregateDecide is the manager's pure path for one reconcile of a
// policy with 1,000 hot keys from 500 node reports (200 candidates each):
// sum the reports, then decide against the previous state and table.
func BenchmarkAggregateDecide(b *testing.B) {
	spec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Capacity.MaxMitigatedKeys = 1000 })
	now := t0
	reports := benchReports(now, 500, 200, 1000)
	in := Input{Now: now, Spec: spec, Margin: 10 * time.Second}
	agg := AggregateReports(now, time.Second, reports, nil)
	in.Observations = agg.Keys
	out := Decide(in)
	in.Now, in.State = now.Add(2*time.Second), out.State
	out = Decide(in)
	in.State, in.Current = out.State, &routing.Table{SchemaVersion: 1, EpochMillis: 60000, Entries: out.Entries}
	if len(out.Entries) != 1000 {
		b.Fatalf("%d entries, want 1000", len(out.Entries))
	}
	b.ReportAllocs()
	for b.Loop() {
		agg := AggregateReports(in.Now, time.Second, reports, nil)
		in.Observations = agg.Keys
		_ = Decide(in)
	}
}
