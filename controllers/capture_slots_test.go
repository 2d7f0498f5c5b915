package controllers_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestClusterSlotsInDirective: a real manager against a real API server and
// a real 3-master Redis Cluster with a replica each sends a capturing
// agent the cluster's slot map in the policy's directive — every slot, its
// master and its replica — and a new map once a slot has moved (within a
// capacity sample, here 1 s).
func TestClusterSlotsInDirective(t *testing.T) {
	rc := redistest.ClusterReplicas(t, 1)
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	addr := startCaptureManager(t, cp, time.Second)

	pol := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "checkout"}}
	pol.Spec.Target.Addresses = rc.Addrs()[:1]
	pol.Spec.Target.Cluster = true
	v1alpha1.SetDefaults(&pol.Spec)
	if err := cp.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	// A pod without the sidecar on node-a: the node hosts the policy.
	runningPod(t, cp, "shop", "plain", "10.7.0.1", nil)

	nodes := rc.Addrs()
	// owner is the master of slot in a directive's map ("" if none).
	owner := func(slots []agentlink.SlotRange, slot int) string {
		for _, r := range slots {
			if int(r.Start) <= slot && slot <= int(r.End) && len(r.Nodes) > 0 {
				return r.Nodes[0]
			}
		}
		return ""
	}
	// complete: every slot in the map, each range a master and one
	// replica, all of them the cluster's nodes.
	complete := func(slots []agentlink.SlotRange) bool {
		n := 0
		for _, r := range slots {
			if len(r.Nodes) != 2 || r.Nodes[0] == r.Nodes[1] {
				return false
			}
			for _, a := range r.Nodes {
				if !slices.Contains(nodes, a) {
					return false
				}
			}
			n += int(r.End) - int(r.Start) + 1
		}
		return n == routing.SlotCount
	}
	first := directiveUntil(t, addr, "shop/checkout", time.Now(), 60*time.Second, func(d *agentlink.Directive) bool { return complete(d.Slots) })
	const slot = 42
	was := owner(first.Slots, slot)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes})
	defer cc.Close()
	if err := cc.Set(ctx, routing.SlotKey(slot), "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.MigrateSlot(t, nodes[:3], slot)
	moved := directiveUntil(t, addr, "shop/checkout", time.Now(), 60*time.Second, func(d *agentlink.Directive) bool {
		o := owner(d.Slots, slot)
		return complete(d.Slots) && o != "" && o != was
	})
	t.Logf("slot %d: %s, then %s; %d ranges, then %d", slot, was, owner(moved.Slots, slot), len(first.Slots), len(moved.Slots))
}
