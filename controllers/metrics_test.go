package controllers

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// TestHealthMetrics checks the per-policy health series the alerts read,
// labelled namespace and policy, and that a deleted policy's series go.
func TestHealthMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "catalogue"}}
	cond := func(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason}
	}
	m.health(p, &v1alpha1.HotKeyPolicyStatus{StaleNodes: 2, RoutingVersion: 41, Conditions: []metav1.Condition{
		cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPublishFailed),
		cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonStaleReports),
	}})
	m.health(p, &v1alpha1.HotKeyPolicyStatus{StaleNodes: 2, RoutingVersion: 41, Conditions: []metav1.Condition{
		cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPublishFailed),
		cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonRedisUnavailable),
	}})
	want := `
# HELP heatsink_manager_policy_degraded 1 when the policy's Degraded condition is True (Redis unreachable, credentials missing, stale nodes...), by its reason.
# TYPE heatsink_manager_policy_degraded gauge
heatsink_manager_policy_degraded{namespace="shop",policy="catalogue",reason="RedisUnavailable"} 1
# HELP heatsink_manager_policy_ready 1 when the policy's Ready condition is True (routing table published, or computed in Observe mode).
# TYPE heatsink_manager_policy_ready gauge
heatsink_manager_policy_ready{namespace="shop",policy="catalogue"} 0
# HELP heatsink_manager_routing_publish_failures_total Reconcile passes that could not write the policy's routing ConfigMap.
# TYPE heatsink_manager_routing_publish_failures_total counter
heatsink_manager_routing_publish_failures_total{namespace="shop",policy="catalogue"} 2
# HELP heatsink_manager_stale_nodes Nodes whose reports for the policy stopped while they listed candidates: their counts are ignored.
# TYPE heatsink_manager_stale_nodes gauge
heatsink_manager_stale_nodes{namespace="shop",policy="catalogue"} 2
`
	names := []string{"heatsink_manager_policy_degraded", "heatsink_manager_policy_ready", "heatsink_manager_routing_publish_failures_total", "heatsink_manager_stale_nodes"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	m.forget("shop", "catalogue")
	if n, err := testutil.GatherAndCount(reg, append(names, "heatsink_manager_routing_version")...); err != nil || n != 0 {
		t.Errorf("%d series left after forget (%v)", n, err)
	}
}
