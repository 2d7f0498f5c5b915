package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestRefills is a unit test of the refill bookkeeping in the reconciler's
// memory (no API server, no Redis): which refills are due when, and which
// are forgotten.
func TestRefills(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	margin := 10 * time.Second
	type booking struct {
		f  decide.Fill
		at time.Time
	}
	first := func(k string, n int, at time.Time) booking { return booking{decide.Fill{Key: k, Replicas: n}, at} }
	second := func(k string, n int) booking { return booking{decide.Fill{Key: k, Replicas: n, Refill: true}, t0} }
	rep := func(k string, n int32) routing.Entry {
		return routing.Entry{Key: k, Replicate: &routing.Replicate{Replicas: n, TTLMillis: 60000}}
	}
	for name, tc := range map[string]struct {
		fills []booking
		// published, if not nil, are the entries published since (drop).
		published []routing.Entry
		now       time.Time
		wantDue   map[string]int
		wantNext  time.Time
	}{
		"nothing booked": {now: t0, wantDue: map[string]int{}},
		"a first fill books its refill a margin later": {fills: []booking{first("a", 2, t0.Add(margin))},
			now: t0.Add(margin - time.Millisecond), wantDue: map[string]int{}, wantNext: t0.Add(margin)},
		"due at its time": {fills: []booking{first("a", 2, t0.Add(margin))},
			now: t0.Add(margin), wantDue: map[string]int{"a": 2}, wantNext: t0.Add(margin)},
		"the refill is done once": {fills: []booking{first("a", 2, t0.Add(margin)), second("a", 2)},
			now: t0.Add(margin), wantDue: map[string]int{}},
		"a later fill of the key books it again": {fills: []booking{first("a", 2, t0.Add(margin)), first("a", 4, t0.Add(2*margin))},
			now: t0.Add(margin), wantDue: map[string]int{}, wantNext: t0.Add(2 * margin)},
		"the earliest booking is next": {fills: []booking{first("a", 2, t0.Add(2*margin)), first("b", 3, t0.Add(margin))},
			now: t0.Add(2 * margin), wantDue: map[string]int{"a": 2, "b": 3}, wantNext: t0.Add(margin)},
		"kept while replicated alike": {fills: []booking{first("a", 2, t0.Add(margin))},
			published: []routing.Entry{rep("a", 2)},
			now:       t0.Add(margin), wantDue: map[string]int{"a": 2}, wantNext: t0.Add(margin)},
		"dropped when resized": {fills: []booking{first("a", 2, t0.Add(margin))},
			published: []routing.Entry{rep("a", 4)}, now: t0.Add(margin), wantDue: map[string]int{}},
		"dropped when no longer replicated": {fills: []booking{first("a", 2, t0.Add(margin))},
			published: []routing.Entry{{Key: "a", Coalesce: true}}, now: t0.Add(margin), wantDue: map[string]int{}},
		"dropped when the key left the table": {fills: []booking{first("a", 2, t0.Add(margin)), first("b", 2, t0.Add(2*margin))},
			published: []routing.Entry{rep("b", 2)},
			now:       t0.Add(2 * margin), wantDue: map[string]int{"b": 2}, wantNext: t0.Add(2 * margin)},
	} {
		t.Run(name, func(t *testing.T) {
			var m memory
			for _, bk := range tc.fills {
				m.with(key, func(pm *policyMemory) { pm.refills.filled(bk.f, bk.at) })
			}
			if tc.published != nil {
				m.with(key, func(pm *policyMemory) { pm.refills.drop(tc.published) })
			}
			due := func(key types.NamespacedName) (out map[string]int) {
				m.with(key, func(pm *policyMemory) { out = pm.refills.due(tc.now) })
				return out
			}
			next := func() (out time.Time) {
				m.with(key, func(pm *policyMemory) { out = pm.refills.next() })
				return out
			}
			if diff := cmp.Diff(tc.wantDue, due(key)); diff != "" {
				t.Errorf("due (-want +got):\n%s", diff)
			}
			if got := next(); !got.Equal(tc.wantNext) {
				t.Errorf("next = %v, want %v", got, tc.wantNext)
			}
			other := types.NamespacedName{Namespace: "ns", Name: "other"}
			if got := due(other); len(got) != 0 {
				t.Errorf("another policy's refills: %v", got)
			}
			m.forget(key)
			if got := next(); !got.IsZero() {
				t.Errorf("after forget, next = %v", got)
			}
		})
	}
}
