package decide

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestDecideReplicaReads: replica reads come after the local cache and
// before replicated copies in the cheapest-first order, only when one key
// cannot serve the read rate (or nothing cheaper is allowed), and a key
// that gets them gets no copies.
func TestDecideReplicaReads(t *testing.T) {
	on := func(cache, rr, replicate bool) func(*v1alpha1.HotKeyPolicySpec) {
		return func(s *v1alpha1.HotKeyPolicySpec) {
			m := &s.Mitigations
			m.Coalesce.Enabled, m.LocalCache.Enabled = ptr.To(cache), ptr.To(cache)
			m.ReplicaReads.Enabled, m.Replicate.Enabled = ptr.To(rr), ptr.To(replicate)
			m.ReplicaReads.MaxLag.Duration = 250 * time.Millisecond
		}
	}
	cache := &routing.LocalCache{TTLMillis: 2000, JitterPercent: 10, RefreshAheadPercent: 10}
	rr := &routing.ReplicaReads{MaxLagMillis: 250}
	tests := map[string]struct {
		spec     *v1alpha1.HotKeyPolicySpec
		obs      Observation
		want     *routing.Entry
		wantMits []v1alpha1.MitigationType
	}{
		"one key serves it: the cache alone": {
			spec: testSpec(on(true, true, true)), obs: Observation{Families: strFams, ReadsPerSecond: 6000},
			want:     &routing.Entry{Coalesce: true, LocalCache: cache},
			wantMits: []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache, v1alpha1.MitigationRefreshAhead},
		},
		"beyond one key: replica reads after the cache, no copies": {
			spec: testSpec(on(true, true, true)), obs: Observation{Families: strFams, ReadsPerSecond: 100000},
			want:     &routing.Entry{Coalesce: true, LocalCache: cache, ReplicaReads: rr},
			wantMits: []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache, v1alpha1.MitigationRefreshAhead, v1alpha1.MitigationReplicaReads},
		},
		"beyond one key, replica reads not allowed: copies": {
			spec: testSpec(on(true, false, true)), obs: Observation{Families: strFams, ReadsPerSecond: 100000},
			want:     &routing.Entry{Coalesce: true, LocalCache: cache, Replicate: &routing.Replicate{Replicas: 3, TTLMillis: 300000}},
			wantMits: []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache, v1alpha1.MitigationRefreshAhead, v1alpha1.MitigationReplicate},
		},
		"nothing cheaper allowed: replica reads even under one key's capacity": {
			spec: testSpec(on(false, true, true)), obs: Observation{Families: strFams, ReadsPerSecond: 6000},
			want:     &routing.Entry{ReplicaReads: rr},
			wantMits: []v1alpha1.MitigationType{v1alpha1.MitigationReplicaReads},
		},
		"write-hot only: no replica reads": {
			spec: testSpec(on(false, true, false)), obs: Observation{Families: strFams, WritesPerSecond: 2000},
			want:     &routing.Entry{Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 1001, Shards: 2}}}},
			wantMits: []v1alpha1.MitigationType{v1alpha1.MitigationSplit},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obs := map[string]Observation{"k": tc.obs}
			out := run(tc.spec, []tick{{0, obs}, {2 * time.Second, obs}})
			w := *tc.want
			w.Key, w.Source = "k", routing.SourceDetected
			if diff := cmp.Diff([]routing.Entry{w}, out.Entries, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			if len(out.Keys) != 1 {
				t.Fatalf("keys = %d, want 1", len(out.Keys))
			}
			if diff := cmp.Diff(tc.wantMits, out.Keys[0].Mitigations); diff != "" {
				t.Errorf("status mitigations (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMitigationRankOrder: the status lists mitigations cheapest first,
// replica reads between the local cache and replicated copies.
func TestMitigationRankOrder(t *testing.T) {
	order := []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache, v1alpha1.MitigationReplicaReads,
		v1alpha1.MitigationReplicate, v1alpha1.MitigationSplit, v1alpha1.MitigationPreAggregate}
	for i := 1; i < len(order); i++ {
		if mitigationRank(order[i-1]) >= mitigationRank(order[i]) {
			t.Errorf("rank(%s) = %d, not below rank(%s) = %d", order[i-1], mitigationRank(order[i-1]), order[i], mitigationRank(order[i]))
		}
	}
}
