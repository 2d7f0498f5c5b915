package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/capacity"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/schedule"
	"github.com/heatsink-dev/heatsink/internal/keynames"
)

// pass is what one reconcile pass of a live policy computes, carried from
// step to step: each step reads the fields of the steps before it and fills
// in its own. It is plain data, so the pure steps (decide, buildStatus,
// next) are tested on a literal, without an API server or Redis.
type pass struct {
	policy *v1alpha1.HotKeyPolicy
	key    types.NamespacedName
	// spec is a defaulted copy of policy.Spec.
	spec *v1alpha1.HotKeyPolicySpec
	// names shows keys where people read them: status, report, Events.
	names *keynames.Namer
	// now is the one instant every decision of the pass is taken at.
	now time.Time

	// agg is what observe saw: the cluster-wide rates of the policy's keys
	// and the health of the nodes that count them; fleet is the hub's whole
	// view (bounds, exactness) for the report.
	agg     decide.Aggregate
	hubSnap hub.Snapshot
	// prev is the routing ConfigMap as loaded (table, state, version).
	prev *published

	// Filled in by decide.
	evs       []schedule.Event
	schedErrs []error
	scheduled []decide.ScheduledKey
	// out is the decision; enforced is what this pass enforces of it (see
	// enforced).
	out      decide.Output
	enforced *decide.Output

	// Filled in by enact: what happened in Redis and in the ConfigMap, and
	// when the policy's next booked refill is due (zero if none).
	act    actResult
	pub    publishResult
	refill time.Time
	// sidecars are the sidecar versions of the policy's pods (status
	// only); sidecarsListed is false when the pod list failed.
	sidecars       []v1alpha1.SidecarVersionCount
	sidecarsListed bool

	// shards are the capacity estimates of the policy's Redis nodes and
	// sampleAt when they are read next (see sampleCapacity); masters and
	// shardOf are the masters as the decision takes them (learnedShards),
	// and detect the least thresholds in force, which the hub counts with.
	shards   []capacity.Node
	sampleAt time.Time
	masters  []decide.Shard
	shardOf  func(string) int
	detect   [2]int64

	// sizesAt is when a MEMORY USAGE token is there for keys waiting to
	// be measured, and reportAt when the report may be written with big
	// keys that changed within the report interval (zero if neither).
	sizesAt, reportAt time.Time

	// ratesDue: status may refresh the rates of keys it already shows (the
	// last refresh was a report interval ago or more).
	ratesDue bool
}

func (r *HotKeyPolicyReconciler) newPass(policy *v1alpha1.HotKeyPolicy) *pass {
	spec := policy.Spec.DeepCopy()
	v1alpha1.SetDefaults(spec)
	return &pass{policy: policy, key: client.ObjectKeyFromObject(policy), spec: spec, names: r.namer(policy, spec), now: r.Clock.Now()}
}

// learn takes the learned capacity of the policy's Redis (sampling it
// when due, in the background) and the thresholds it sets: before observe,
// so that the hub counts with them, and before decide.
func (r *HotKeyPolicyReconciler) learn(ctx context.Context, p *pass) {
	var owners []string
	p.shards, owners, p.sampleAt = r.sampleCapacity(ctx, p.policy, p.spec, p.now)
	p.shards = capacity.OnCores(p.shards, p.spec.Thresholds.Auto.Cores())
	p.masters, p.shardOf = learnedShards(p.shards, owners)
	p.detect[0], p.detect[1] = decide.DetectionThresholds(decide.Input{Spec: p.spec, State: p.prev.State, Shards: p.masters, ShardOf: p.shardOf})
}

// decide takes the pass's decision from what observe and load found: the
// schedule events due, the next routing decision (pure, decide.Decide) and
// what of it is enforced.
func (p *pass) decide(margin time.Duration) {
	p.evs, p.schedErrs = schedule.Events(p.now, p.spec.Schedules)
	p.scheduled = decide.ScheduledKeys(p.spec.Schedules, p.evs)
	p.out = decide.Decide(decide.Input{
		Now: p.now, Spec: p.spec, Observations: p.agg.Keys, State: p.prev.State,
		Current:   decide.Rescale(p.prev.decided(p.spec.Mode), p.spec.Mitigations.Split.Epoch.Milliseconds()),
		Scheduled: p.scheduled, Margin: margin, Nodes: p.agg.FreshNodes,
		Shards: p.masters, ShardOf: p.shardOf,
	})
	p.enforced = enforced(p.spec, p.prev, &p.out, p.now, margin)
}

// enforced is what this pass enforces: the decision itself in Enforce mode.
// In Observe mode the decision is only shown, and the splits still published
// (from before a switch to Observe) are drained like after a cooldown, so
// Observe never strands shard values; generations that were only decided
// never took writes and are dropped when retired.
func enforced(spec *v1alpha1.HotKeyPolicySpec, prev *published, out *decide.Output, now time.Time, margin time.Duration) *decide.Output {
	if spec.Mode == v1alpha1.ModeEnforce {
		return out
	}
	em := spec.Mitigations.Split.Epoch.Milliseconds()
	out.Entries = decide.Prune(now, em, out.Entries, decide.Folded(out.Folds))
	out.Folds = nil
	d := decide.Drain(now, em, margin, decide.Rescale(prev.Table, em))
	return &d
}

// enact carries the decision out: fold in Redis, publish the routing
// ConfigMap, fill replicas in Redis. Folds must precede publication (a
// generation leaves the table only once folded); replica fills follow it so
// the table never waits on them. The Redis work has one deadline and stops
// at the first failure (see redisPass).
func (r *HotKeyPolicyReconciler) enact(ctx context.Context, p *pass) {
	rctx, cancel := r.redisContext(ctx)
	defer cancel()
	rp := r.newRedisPass(p.policy, p.now)
	rp.fold(rctx, p.spec, p.enforced)
	p.pub = r.publish(ctx, p.policy, p.spec, p.prev, &p.out, p.enforced)
	if p.pub.err == nil {
		// The node agents get the table as soon as it is published: a fill
		// waits on Redis (up to RedisTimeout when Redis stalls), and the
		// sidecars follow the agents, not the ConfigMap.
		r.Fleet.SetRouting(policyID(p.key), p.pub.version, []byte(p.pub.table), p.pub.keys)
		rp.fill(rctx, r.fills(p.key, p.prev, p.enforced, p.scheduled, p.now))
	}
	p.act = rp.res
	r.mem.with(p.key, func(m *policyMemory) { p.refill = m.refills.next() })
}

// next is when the pass's outcome changes by itself: the decision's next
// check, a node turning stale, a schedule phase change, a fold or fill
// retry, the next booked refill, the next capacity sample, the next
// MEMORY USAGE token or report write for big keys; zero if never.
func (p *pass) next() time.Time {
	return earliest(p.out.NextCheck, p.enforced.NextCheck, p.agg.NextStale, schedule.NextChange(p.now, p.evs), p.act.retryAt, p.refill, p.sampleAt,
		p.sizesAt, p.reportAt)
}

// shardThresholds are the thresholds in force on each master, by address,
// for status.
func (p *pass) shardThresholds() map[string]v1alpha1.InForce {
	th := decide.ShardThresholds(decide.Input{Spec: p.spec, Shards: p.masters, ShardOf: p.shardOf})
	out := make(map[string]v1alpha1.InForce, len(th))
	for i, f := range th {
		out[p.masters[i].Addr] = f
	}
	return out
}
