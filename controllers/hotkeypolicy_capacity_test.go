package controllers

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/capacity"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// capacityFlows: status and metrics show the learned capacity of the
// policy's Redis, sampled at most every capacity.DefaultInterval.
func capacityFlows(t *testing.T, env *flowEnv) {
	t.Run("status shows the learned capacity of a loaded Redis", func(t *testing.T) {
		f := env.newFlow(t)
		f.policy("cap", env.withRedis)
		f.report("cap", "n1")
		var st v1alpha1.HotKeyPolicyStatus
		f.eventually("a shard with a learned capacity", func() error {
			loadRedis(t, env.rc)
			f.step(11*time.Second, "cap")
			st = f.status("cap")
			if len(st.Shards) != 1 || st.Shards[0].Address != env.srv.Addr {
				return fmt.Errorf("shards %+v", st.Shards)
			}
			if sh := st.Shards[0]; sh.CapacityOpsPerSecond <= 0 || sh.ConfidencePercent < 0 || sh.ConfidencePercent > 100 {
				return fmt.Errorf("shard %+v", sh)
			}
			return nil
		})
		t.Logf("shard %+v, busiest %d %%", st.Shards[0], st.BusiestShardUtilizationPercent)
		if st.BusiestShardUtilizationPercent != st.Shards[0].UtilizationPercent {
			t.Fatalf("busiest %d, shard %+v", st.BusiestShardUtilizationPercent, st.Shards[0])
		}
		if v := testutil.ToFloat64(f.r.Metrics.shardCapacity.WithLabelValues(f.ns, "cap", env.srv.Addr)); v <= 0 {
			t.Fatalf("heatsink_manager_shard_capacity_ops_per_second %v", v)
		}
	})

	t.Run("a Sentinel target's shard is its master by address, and its nodes are the capture's endpoints", func(t *testing.T) {
		h := redistest.Sentinel(t, redisproc.SentinelOptions{})
		f := env.newFlow(t)
		f.policy("snt", func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Target = v1alpha1.RedisTarget{Sentinel: &v1alpha1.RedisSentinel{Addresses: h.SentinelAddrs(), MasterName: h.Opts.MasterName}}
		})
		f.report("snt", "n1")
		master := h.Data[0].Addr
		var replicas []string
		for _, d := range h.Data[1:] {
			replicas = append(replicas, d.Addr)
		}
		slices.Sort(replicas)
		want := append([]string{master}, replicas...)
		f.eventually("the master sampled by address, the nodes as endpoints", func() error {
			f.step(11*time.Second, "snt")
			st := f.status("snt")
			if len(st.Shards) != 1 || st.Shards[0].Address != master {
				return fmt.Errorf("shards %+v, want the master %s", st.Shards, master)
			}
			if got := f.r.policyEndpoints(client.ObjectKey{Namespace: f.ns, Name: "snt"}); !slices.Equal(got, want) {
				return fmt.Errorf("endpoints %v, want %v", got, want)
			}
			return nil
		})
		// With replica reads on, reads go to the replicas: they are
		// sampled too, as replicas.
		f.policy("sntrr", func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Target = v1alpha1.RedisTarget{Sentinel: &v1alpha1.RedisSentinel{Addresses: h.SentinelAddrs(), MasterName: h.Opts.MasterName}}
			on := true
			p.Spec.Mitigations.ReplicaReads.Enabled = &on
		})
		f.report("sntrr", "n1")
		f.eventually("the master and both replicas sampled", func() error {
			f.step(11*time.Second, "sntrr")
			var got []string
			for _, sh := range f.status("sntrr").Shards {
				if sh.Replica != (sh.Address != master) {
					return fmt.Errorf("shard %s: replica %v", sh.Address, sh.Replica)
				}
				got = append(got, sh.Address)
			}
			slices.Sort(got)
			if w := slices.Sorted(slices.Values(want)); !slices.Equal(got, w) {
				return fmt.Errorf("shards %v, want %v", got, w)
			}
			return nil
		})
		// After a failover the Sentinels name another master: the next
		// sample reads it, by its address.
		newMaster, err := h.Failover(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		f.eventually("the new master sampled", func() error {
			f.step(11*time.Second, "snt")
			st := f.status("snt")
			if len(st.Shards) != 1 || st.Shards[0].Address != newMaster {
				return fmt.Errorf("shards %+v, want the new master %s", st.Shards, newMaster)
			}
			if got := f.r.policyEndpoints(client.ObjectKey{Namespace: f.ns, Name: "snt"}); len(got) == 0 || got[0] != newMaster {
				return fmt.Errorf("endpoints %v, want the new master %s first", got, newMaster)
			}
			return nil
		})
	})

	t.Run("thresholds.auto derives the thresholds of a loaded Redis and decides on them", func(t *testing.T) {
		f := env.newFlow(t)
		f.policy("auto", env.withRedis, func(p *v1alpha1.HotKeyPolicy) { p.Spec.Thresholds.Auto = &v1alpha1.AutoThresholds{} })
		f.report("auto", "n1")
		var th *v1alpha1.ShardThresholds
		f.eventually("learned thresholds in status", func() error {
			loadRedis(t, env.rc)
			f.step(11*time.Second, "auto")
			st := f.status("auto")
			if len(st.Shards) != 1 || st.Shards[0].Thresholds == nil || st.Shards[0].Thresholds.ReadsFrom != v1alpha1.ThresholdLearned {
				return fmt.Errorf("shards %+v", st.Shards)
			}
			th = st.Shards[0].Thresholds
			return nil
		})
		t.Logf("thresholds in force %+v", *th)
		if th.ReadsPerSecond <= v1alpha1.FallbackReadsPerSecond || th.WritesPerSecond != th.ReadsPerSecond || th.WritesFrom != v1alpha1.ThresholdLearned {
			t.Fatalf("thresholds %+v: want the learned share of a capacity far over 20,000 ops/s", *th)
		}
		// Metrics follow every pass, status at most once a report interval:
		// the estimate may have moved a step in between.
		if v := testutil.ToFloat64(f.r.Metrics.shardThreshold.WithLabelValues(f.ns, "auto", env.srv.Addr, "reads", "Learned")); v < 0.5*float64(th.ReadsPerSecond) || v > 2*float64(th.ReadsPerSecond) {
			t.Fatalf("heatsink_manager_shard_threshold_per_second %v, status %d", v, th.ReadsPerSecond)
		}
		// Over the fallback (5000), under the learned threshold: not hot; over
		// the learned one: hot after sustainFor.
		over := 2 * th.ReadsPerSecond
		f.report("auto", "n1", cand("page:fallback", 6000, 0), cand("page:learned", over, 0))
		f.step(time.Second, "auto")
		f.eventually("the key over the learned threshold mitigated", func() error {
			f.report("auto", "n1", cand("page:fallback", 6000, 0), cand("page:learned", over, 0))
			f.step(time.Second, "auto")
			st := f.status("auto")
			if len(st.HotKeys) != 1 || st.HotKeys[0].Key != "page:learned" {
				return fmt.Errorf("hot keys %+v", st.HotKeys)
			}
			return nil
		})
	})
}

// loadRedis runs a bounded load (at most 20 pipelines of 500 INCRs, at
// most 5 s).
func loadRedis(t *testing.T, rc *redis.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 20 && ctx.Err() == nil; i++ {
		if _, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := 0; j < 500; j++ {
				p.Incr(ctx, fmt.Sprintf("capacity:%d", j%50))
			}
			return nil
		}); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
	}
}

func TestShardStatus(t *testing.T) {
	nodes := []capacity.Node{
		{Addr: "a:1", Estimate: capacity.Estimate{Utilization: 0.126, Capacity: 309_929, Confidence: 0.004}},
		{Addr: "b:1", Replica: true, Estimate: capacity.Estimate{Utilization: 0.5, Capacity: 2_062, Confidence: 1}},
		{Addr: "c:1"},
	}
	th := map[string]v1alpha1.InForce{
		"a:1": {ReadsPerSecond: 77_000, WritesPerSecond: 1000, Reads: v1alpha1.ThresholdLearned, Writes: v1alpha1.ThresholdTyped, ShardRuleFloor: 15_000},
		"b:1": {ReadsPerSecond: 5000, WritesPerSecond: 1000, Reads: v1alpha1.ThresholdFallback, Writes: v1alpha1.ThresholdFallback},
	}
	got, busiest := shardStatus(nodes, th)
	want := []v1alpha1.ShardStatus{
		{Address: "a:1", UtilizationPercent: 13, CapacityOpsPerSecond: 310_000, ConfidencePercent: 0,
			Thresholds: &v1alpha1.ShardThresholds{ReadsPerSecond: 77_000, WritesPerSecond: 1000, ReadsFrom: v1alpha1.ThresholdLearned, WritesFrom: v1alpha1.ThresholdTyped, ShardRuleFloorPerSecond: 15_000}},
		{Address: "b:1", Replica: true, UtilizationPercent: 50, CapacityOpsPerSecond: 2_100, ConfidencePercent: 100},
		{Address: "c:1"},
	}
	if !reflect.DeepEqual(got, want) || busiest != 50 {
		t.Fatalf("got %+v busiest %d, want %+v busiest 50", got, busiest, want)
	}
	for v, w := range map[float64]int64{0: 0, -1: 0, math.Inf(1): 0, math.NaN(): 0, 7: 7, 99.5: 100, 12_345: 12_000, 0.4: 0} {
		if g := twoDigits(v); g != w {
			t.Errorf("twoDigits(%v) = %d, want %d", v, g, w)
		}
	}
}
