package webhook_test

import (
	"context"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// TestAdmissionReplicaReads: mitigations.replicaReads against the real API
// server: it counts as the one mitigation Enforce needs, its durations are
// validated, and replica addresses are refused for a cluster or Sentinel
// target (their replicas are discovered).
func TestAdmissionReplicaReads(t *testing.T) {
	cp := startAdmission(t)
	ctx := context.Background()
	onlyReplicaReads := func(p *v1alpha1.HotKeyPolicy) {
		p.Spec.Mitigations.Coalesce.Enabled = ptr.To(false)
		p.Spec.Mitigations.LocalCache.Enabled = ptr.To(false)
		p.Spec.Mitigations.ReplicaReads.Enabled = ptr.To(true)
	}
	invalid := map[string]row{
		"zero maxLag": {
			raw:       map[string]any{"spec.mitigations.replicaReads.maxLag": "0s"},
			wantField: "spec.mitigations.replicaReads.maxLag", wantMsg: "such as 1s",
		},
		"lagCheckInterval under 100ms": {
			raw:       map[string]any{"spec.mitigations.replicaReads.lagCheckInterval": "10ms"},
			wantField: "spec.mitigations.replicaReads.lagCheckInterval", wantMsg: "at least 100ms",
		},
		"addresses with a cluster target": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Target.Cluster = true
				p.Spec.Mitigations.ReplicaReads.Addresses = []string{"redis-1.default.svc:6379"}
			},
			wantField: "spec", wantMsg: "replicaReads.addresses are for a standalone target",
		},
		"addresses with a Sentinel target": {
			mutate: func(p *v1alpha1.HotKeyPolicy) {
				p.Spec.Target = v1alpha1.RedisTarget{Sentinel: testSentinel()}
				p.Spec.Mitigations.ReplicaReads.Addresses = []string{"redis-1.default.svc:6379"}
			},
			wantField: "spec", wantMsg: "replicaReads.addresses are for a standalone target",
		},
		"a schedule asks for replica reads while they are disabled": {
			mutate: schedule(func(s *v1alpha1.Schedule) {
				s.Mitigation = v1alpha1.ScheduledMitigation{ReplicaReads: true}
			}),
			wantField: "spec", wantMsg: "mitigations.replicaReads.enabled is false",
		},
		"a bad address": {
			raw:       map[string]any{"spec.mitigations.replicaReads.addresses": []any{"x"}},
			wantField: "spec.mitigations.replicaReads.addresses[0]", wantMsg: "should be at least 3 chars long",
		},
	}
	valid := map[string]row{
		"replica reads the only mitigation": {mutate: onlyReplicaReads},
		"standalone replicas listed": {mutate: func(p *v1alpha1.HotKeyPolicy) {
			onlyReplicaReads(p)
			p.Spec.Mitigations.ReplicaReads.Addresses = []string{"redis-1.default.svc:6379", "redis-2.default.svc:6379"}
		}, raw: map[string]any{"spec.mitigations.replicaReads.maxLag": "250ms", "spec.mitigations.replicaReads.lagCheckInterval": "100ms"}},
		"a schedule with replica reads alone": {mutate: func(p *v1alpha1.HotKeyPolicy) {
			onlyReplicaReads(p)
			schedule(func(s *v1alpha1.Schedule) { s.Mitigation = v1alpha1.ScheduledMitigation{ReplicaReads: true} })(p)
		}},
		"a cluster's replicas discovered": {mutate: func(p *v1alpha1.HotKeyPolicy) {
			onlyReplicaReads(p)
			p.Spec.Target.Cluster = true
		}},
	}
	checkRows(t, ctx, cp.Client, "rr", invalid, valid)
}
