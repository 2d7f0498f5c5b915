package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/internal/keyfilter"
)

// The observe step is the one place the reconciler learns how hot keys
// are: the hub (package hub) holds every node's latest summary for
// the policy and turns them into one estimate per key (the exact sum for
// pinned keys, the upper bound otherwise), the node health for status, and
// when a node turns stale. observe hands the hub the policy's current
// detection parameters first, so node agents count with them.

// observe fills p.agg and p.hubSnap from the hub and reports whether the view
// can be decided on: a manager that has just been elected has not heard
// from every node yet, and must not take "not heard" for "cold"; it then
// returns false and the time to look again.
func (r *HotKeyPolicyReconciler) observe(ctx context.Context, p *pass) (warm bool, warmAt time.Time, err error) {
	id := policyID(p.key)
	params := hub.ParamsFromSpec(p.spec)
	params.Thresholds.Reads, params.Thresholds.Writes = p.detect[0], p.detect[1]
	params.Slots = r.policySlots(p.key)
	if p.spec.Target.Sentinel != nil {
		// No address in the spec: the nodes the Sentinels named at the
		// last capacity sample (hotkeypolicy_sentinel.go).
		params.Endpoints = r.policyEndpoints(p.key)
	} else {
		// With the capture, the Services they name resolved too
		// (hotkeypolicy_endpoints.go).
		params.Endpoints = r.captureEndpoints(ctx, p, params.Endpoints)
	}
	r.Fleet.SetPolicy(id, params)
	snap, st := r.Fleet.Snapshot(id)
	switch {
	case !st.Serving:
		// The fleet server starts with this manager's leadership, maybe
		// just after this pass: look again shortly.
		return false, p.now.Add(time.Second), nil
	case !st.Warm:
		return false, st.WarmAt, nil
	}
	filter, err := keyfilter.Compile(p.spec.Keys.Include, p.spec.Keys.Exclude)
	if err != nil {
		return false, time.Time{}, err
	}
	// Keys counted under the policy's previous globs may linger in the view
	// for one window; they are not the policy's any more.
	for k := range snap.Keys {
		if !filter.Match(k) {
			delete(snap.Keys, k)
			delete(snap.Estimates, k)
		}
	}
	p.agg, p.hubSnap = snap.Aggregate, snap
	return true, time.Time{}, nil
}

// policyID is the policy's name on the fleet stream: "<namespace>/<name>".
func policyID(key types.NamespacedName) string { return key.Namespace + "/" + key.Name }
