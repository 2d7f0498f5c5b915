package decide

import (
	"fmt"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// benchObservations are keys distinct keys, all hot (even keys for reads,
// odd keys for writes), as the hub would estimate them.
func benchObservations(keys int) map[string]Observation {
	out := make(map[string]Observation, keys)
	for k := range keys {
		o := Observation{Families: strFams}
		if k%2 == 0 {
			o.ReadsPerSecond = 100_000
		} else {
			o.WritesPerSecond = 50_000
		}
		out[fmt.Sprintf("product:%06d", k)] = o
	}
	return out
}

// BenchmarkDecide is the manager's pure decision for one reconcile of a
// policy with 1,000 hot keys, against the previous state and table. (The
// cluster-wide estimates it takes are the hub's: BenchmarkSnapshot.)
func BenchmarkDecide(b *testing.B) {
	spec := testSpec(func(s *v1alpha1.HotKeyPolicySpec) { s.Capacity.MaxMitigatedKeys = 1000 })
	now := t0
	in := Input{Now: now, Spec: spec, Margin: 10 * time.Second, Observations: benchObservations(1000)}
	out := Decide(in)
	in.Now, in.State = now.Add(2*time.Second), out.State
	out = Decide(in)
	in.State, in.Current = out.State, &routing.Table{SchemaVersion: 1, EpochMillis: 60000, Entries: out.Entries}
	if len(out.Entries) != 1000 {
		b.Fatalf("%d entries, want 1000", len(out.Entries))
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = Decide(in)
	}
}
