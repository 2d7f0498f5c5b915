package decide

import (
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/keyfilter"
	"github.com/heatsink-dev/heatsink/routing"
)

// withShed adds shedding to a hot key's entry (e, d; nil when no other move
// applies) as the last resort: a direction is shed only when the key is hot
// in it and its rate is over what the moves already chosen let its
// physical keys take (ShedBudgets), the reads only when the key has no
// local cache (a cached key's reads cost its shard one read per TTL per
// sidecar) and the policy sheds reads, and never a key mitigations.shed
// excludes. prev is the key's shed in the table in force, whose published
// demand is kept while it still covers the measured rate
// (routing.PublishDemand), so a steady overload does not change the table.
//
// Every sidecar admits MinPerSecond until it has measured its own demand,
// and when a key starts being shed none has: the minimum is capped at
// budget ÷ (SidecarsPerNode × nodes), so that a fleet of that many sidecars
// per node starting at once admits at most the budget.
func withShed(spec *v1alpha1.HotKeyPolicySpec, pk perKey, key string, ks *KeyState, o Observation, e *routing.Entry, d *KeyDecision, prev *routing.Shed, nodes int) (*routing.Entry, *KeyDecision) {
	sh := &spec.Mitigations.Shed
	if !sh.IsEnabled() {
		return e, d
	}
	for _, p := range sh.Exclude {
		if keyfilter.Match(p, key) {
			return e, d
		}
	}
	var replicas, shards int32
	cached := false
	if e != nil {
		cached = e.LocalCache != nil
		if e.Replicate != nil {
			replicas = e.Replicate.Replicas
		}
		if e.Split != nil {
			shards = e.Split.Generations[len(e.Split.Generations)-1].Shards
		}
	}
	reads, writes := ShedBudgets(spec, pk.reads, pk.writes, replicas, shards)
	out := &routing.Shed{MinPerSecond: sh.Min()}
	if nodes > 0 {
		out.MinPerSecond = min(out.MinPerSecond, max(min(reads, writes)/(SidecarsPerNode*int64(nodes)), 1))
	}
	if ks.WriteHot && o.WritesPerSecond > writes {
		out.WritesPerSecond = writes
		out.DemandWrites = routing.PublishDemand(prevDemand(prev, routing.ShedWrites), o.WritesPerSecond)
	}
	if ks.ReadHot && !cached && sh.ShedsReads() && o.ReadsPerSecond > reads {
		out.ReadsPerSecond = reads
		out.DemandReads = routing.PublishDemand(prevDemand(prev, routing.ShedReads), o.ReadsPerSecond)
	}
	if out.WritesPerSecond == 0 && out.ReadsPerSecond == 0 {
		return e, d
	}
	if e == nil {
		e = &routing.Entry{Key: key, Source: routing.SourceDetected}
	}
	if d == nil {
		d = &KeyDecision{Key: key, ReadsPerSecond: o.ReadsPerSecond, WritesPerSecond: o.WritesPerSecond, Source: v1alpha1.SourceDetected, Families: o.Families}
	}
	e.Shed = out
	d.ShedReads, d.ShedWrites = out.ReadsPerSecond, out.WritesPerSecond
	d.Mitigations = append(d.Mitigations, v1alpha1.MitigationShed)
	return e, d
}

// SidecarsPerNode is the sidecars per node the cap of a shed key's
// MinPerSecond assumes: the design point (docs/design.md, fleet).
const SidecarsPerNode = 10

// ShedBudgets are a shed key's cluster-wide budgets: the policy's
// explicit ones, or budgetPercent of what its physical keys can take
// (the base key plus replicas for reads, the split's shards or the base key
// for writes, at the per-key capacity perReads, perWrites: see
// v1alpha1.PerKeyCapacity).
func ShedBudgets(spec *v1alpha1.HotKeyPolicySpec, perReads, perWrites int64, replicas, shards int32) (reads, writes int64) {
	sh := &spec.Mitigations.Shed
	pct := int64(sh.BudgetPercent)
	if pct <= 0 {
		pct = v1alpha1.DefaultShedBudgetPercent
	}
	reads = max(perReads*int64(1+replicas)*pct/100, 1)
	writes = max(perWrites*int64(max(shards, 1))*pct/100, 1)
	if sh.ReadsPerSecond > 0 {
		reads = sh.ReadsPerSecond
	}
	if sh.WritesPerSecond > 0 {
		writes = sh.WritesPerSecond
	}
	return reads, writes
}

func prevDemand(s *routing.Shed, dir int) int64 {
	if s == nil || s.Budget(dir) == 0 {
		return 0
	}
	return s.Demand(dir)
}

// currentShed is key's shed in t, nil if none.
func currentShed(t *routing.Table, key string) *routing.Shed {
	if t == nil {
		return nil
	}
	if e := t.Lookup(key); e != nil {
		return e.Shed
	}
	return nil
}
