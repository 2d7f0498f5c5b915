package controllers

import (
	"context"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/capacity"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// policyCapacity is the learned capacity of a policy's Redis nodes, kept in
// policyMemory (a new leader learns afresh).
type policyCapacity struct {
	sampler *capacity.Sampler
	// due is when the policy's nodes are sampled next: at most one INFO per
	// node per capacity.DefaultInterval, failed or not.
	due time.Time
	// inFlight: a sample is being read; no second one starts.
	inFlight bool
	nodes    []capacity.Node
	// owners: per hash slot, the cluster master serving it (nil: not a
	// cluster, or not read yet).
	owners []string
	// slots: the cluster's slot map for capturing agents (nil: not a
	// cluster, or not read yet).
	slots []agentlink.SlotRange
	// endpoints: a Sentinel target's master and replicas as the Sentinels
	// last named them, for capturing agents (nil: not Sentinel, or not
	// asked yet; hotkeypolicy_sentinel.go).
	endpoints []string
}

// sampleTimeout bounds one sample of a policy's nodes.
const sampleTimeout = 2 * time.Second

// sampleCapacity starts a sample of the policy's nodes when due, in the
// background so that a slow or stalled Redis never holds the pass (the
// table, the status, the other policies); it returns the estimates read so
// far and when to sample next. A failure is logged and retried after the
// interval; it never degrades the policy: without an estimate, thresholds
// not typed fall back to the built-in numbers (see v1alpha1.InForce).
func (r *HotKeyPolicyReconciler) sampleCapacity(ctx context.Context, policy *v1alpha1.HotKeyPolicy, spec *v1alpha1.HotKeyPolicySpec, now time.Time) ([]capacity.Node, []string, time.Time) {
	key := client.ObjectKeyFromObject(policy)
	var (
		nodes  []capacity.Node
		owners []string
		due    time.Time
		start  bool
		pm     *policyMemory
	)
	r.mem.with(key, func(m *policyMemory) {
		pc := &m.capacity
		if pc.sampler == nil {
			every := r.CapacityInterval
			if every <= 0 {
				every = capacity.DefaultInterval
			}
			pc.sampler = capacity.NewSampler(every, r.Capacity)
		}
		if !now.Before(pc.due) && !pc.inFlight {
			pc.due, pc.inFlight, start, pm = now.Add(pc.sampler.Interval), true, true, m
		}
		nodes, owners, due = pc.nodes, pc.owners, pc.due
	})
	if !start {
		return nodes, owners, due
	}
	logger := log.FromContext(ctx)
	cl, creds, err := r.capacityClient(ctx, policy)
	if err != nil {
		logger.V(1).Info("capacity sample skipped", "error", err.Error())
		r.mem.mu.Lock()
		pm.capacity.inFlight = false
		r.mem.mu.Unlock()
		return nodes, owners, due
	}
	replicas := spec.Mitigations.ReplicaReads.IsEnabled()
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), sampleTimeout)
		defer cancel()
		sampled, endpoints, closeSampled, err := r.sampledClient(sctx, policy.Spec.Target, cl, creds)
		var got []capacity.Node
		if err == nil {
			t := capacity.Target{Client: sampled, ClusterReplicas: replicas}
			var closeReplicas func()
			t.Replicas, closeReplicas = r.replicaClients(spec, endpoints, creds)
			got, err = pm.capacity.sampler.Sample(sctx, t, now)
			closeReplicas()
			closeSampled()
		}
		if err != nil {
			logger.V(1).Info("capacity sample failed", "error", err.Error())
		}
		// pm, not mem.with: a policy forgotten meanwhile is not recreated.
		r.mem.mu.Lock()
		defer r.mem.mu.Unlock()
		pm.capacity.inFlight = false
		if len(got) > 0 || err == nil {
			pm.capacity.nodes = got
			pm.capacity.owners = pm.capacity.sampler.Owners()
			pm.capacity.slots = slotRanges(pm.capacity.sampler.Slots())
		}
		if endpoints != nil {
			pm.capacity.endpoints = endpoints
		}
	}()
	return nodes, owners, due
}

// slotRanges is the slot map in the directive's form.
func slotRanges(s []redis.ClusterSlot) []agentlink.SlotRange {
	var out []agentlink.SlotRange
	for _, r := range s {
		if len(r.Nodes) == 0 || r.Start < 0 || r.End >= routing.SlotCount || r.Start > r.End {
			continue
		}
		sr := agentlink.SlotRange{Start: uint16(r.Start), End: uint16(r.End)}
		for _, n := range r.Nodes {
			sr.Nodes = append(sr.Nodes, n.Addr)
		}
		out = append(out, sr)
	}
	return out
}

// policySlots is the policy's last slot map read.
func (r *HotKeyPolicyReconciler) policySlots(key client.ObjectKey) []agentlink.SlotRange {
	var out []agentlink.SlotRange
	r.mem.with(key, func(m *policyMemory) { out = m.capacity.slots })
	return out
}

// learnedShards are the masters of nodes for the decision, and the map
// from a key to its master's index: by hash slot on a cluster (owners), the
// one master otherwise.
func learnedShards(nodes []capacity.Node, owners []string) ([]decide.Shard, func(string) int) {
	var masters []decide.Shard
	index := map[string]int{}
	for _, n := range nodes {
		if n.Replica {
			continue
		}
		index[n.Addr] = len(masters)
		masters = append(masters, decide.Shard{Addr: n.Addr, LearnedShard: v1alpha1.LearnedShard{
			Capacity: n.Capacity, Confidence: n.Confidence, Utilization: n.Utilization}})
	}
	switch {
	case owners != nil:
		return masters, func(key string) int {
			if i, ok := index[owners[routing.Slot(key)]]; ok {
				return i
			}
			return -1
		}
	case len(masters) == 1:
		return masters, func(string) int { return 0 }
	default:
		return masters, nil
	}
}

// capacityClient is the policy's Redis client (see policyMemory.client).
func (r *HotKeyPolicyReconciler) capacityClient(ctx context.Context, policy *v1alpha1.HotKeyPolicy) (redis.UniversalClient, Credentials, error) {
	creds, err := r.credentials(ctx, policy)
	if err != nil {
		return nil, creds, err
	}
	var cl redis.UniversalClient
	r.mem.with(client.ObjectKeyFromObject(policy), func(m *policyMemory) {
		cl, err = m.client(r.Redis, policy.Spec.Target, creds)
	})
	return cl, creds, err
}

// sampledClient is the client whose nodes a capacity sample reads: cl,
// or for a Sentinel target a client of the master the Sentinels name now,
// by its address (closed by done), with the master's and replicas'
// addresses as the capture's endpoints.
func (r *HotKeyPolicyReconciler) sampledClient(ctx context.Context, target v1alpha1.RedisTarget, cl redis.UniversalClient, creds Credentials) (sampled redis.UniversalClient, endpoints []string, done func(), err error) {
	sn := target.Sentinel
	if sn == nil {
		return cl, nil, func() {}, nil
	}
	tc, err := redisTLS(target, creds)
	if err != nil {
		return nil, nil, nil, err
	}
	master, replicas, err := sentinelNodes(ctx, *sn, tc, creds)
	if err != nil {
		return nil, nil, nil, err
	}
	mc, err := r.Redis(v1alpha1.RedisTarget{Addresses: []string{master}, Database: target.Database, TLS: target.TLS}, creds)
	if err != nil {
		return nil, nil, nil, err
	}
	return mc, append([]string{master}, replicas...), func() { mc.Close() }, nil
}

// replicaClients are clients of the replicas outside a cluster that reads
// go to with replicaReads on (a cluster's are the cluster client's): the
// policy's replicaReads.addresses, else a Sentinel set's replicas as its
// Sentinels named them (the endpoints after the master). done closes them.
func (r *HotKeyPolicyReconciler) replicaClients(spec *v1alpha1.HotKeyPolicySpec, sentinelNodes []string, creds Credentials) (out []*redis.Client, done func()) {
	rr := spec.Mitigations.ReplicaReads
	if !rr.IsEnabled() || spec.Target.Cluster {
		return nil, func() {}
	}
	addrs := rr.Addresses
	if len(addrs) == 0 && len(sentinelNodes) > 1 {
		addrs = sentinelNodes[1:]
	}
	for _, a := range addrs {
		c, err := r.Redis(v1alpha1.RedisTarget{Addresses: []string{a}, Database: spec.Target.Database, TLS: spec.Target.TLS}, creds)
		if err != nil {
			continue
		}
		if rc, ok := c.(*redis.Client); ok {
			out = append(out, rc)
		} else {
			c.Close()
		}
	}
	return out, func() {
		for _, c := range out {
			c.Close()
		}
	}
}

// policyEndpoints is a Sentinel target's last named nodes (nil otherwise).
func (r *HotKeyPolicyReconciler) policyEndpoints(key client.ObjectKey) []string {
	var out []string
	r.mem.with(key, func(m *policyMemory) { out = m.capacity.endpoints })
	return out
}

// shardStatus turns the estimates into status entries: integers, the
// capacity at two significant digits, so that status moves when the
// estimate does, not at every sample.
func shardStatus(nodes []capacity.Node, th map[string]v1alpha1.InForce) ([]v1alpha1.ShardStatus, int32) {
	var out []v1alpha1.ShardStatus
	var busiest int32
	for _, n := range nodes[:min(len(nodes), maxStatusShards)] {
		st := v1alpha1.ShardStatus{Address: n.Addr, Replica: n.Replica,
			UtilizationPercent:   int32(math.Round(100 * n.Utilization)),
			CapacityOpsPerSecond: twoDigits(n.Capacity),
			ConfidencePercent:    int32(math.Round(100 * n.Confidence))}
		if f, ok := th[n.Addr]; ok && !n.Replica {
			st.Thresholds = &v1alpha1.ShardThresholds{ReadsPerSecond: f.ReadsPerSecond, WritesPerSecond: f.WritesPerSecond,
				ReadsFrom: f.Reads, WritesFrom: f.Writes, OverTarget: f.OverTarget, ShardRuleFloorPerSecond: f.ShardRuleFloor}
		}
		busiest = max(busiest, st.UtilizationPercent)
		out = append(out, st)
	}
	return out, busiest
}

// maxStatusShards is status.shards' MaxItems.
const maxStatusShards = 128

func twoDigits(v float64) int64 {
	if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v))-1)
	return int64(math.Round(v/p) * p)
}
