package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// setKstatusConditions sets Reconciling and Stalled (v1alpha1/kstatus.go)
// from the conditions already in st, so that tools reading kstatus see a
// degraded policy as Failed and a draining one as InProgress instead of
// Current (kstatus reads no Degraded). Stalled mirrors Degraded True, else
// Ready False; Reconciling is True while splits from before a switch to
// Observe drain (draining > 0) and nothing stalls them (a stalled drain is
// Stalled, not in progress).
func setKstatusConditions(st *v1alpha1.HotKeyPolicyStatus, gen int64, draining int) {
	var stalled *metav1.Condition
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		stalled = c
	} else if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionFalse {
		stalled = c
	}
	switch {
	case stalled != nil:
		setCondition(st, gen, v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonReconciled, "progress is stalled: see Stalled")
		setCondition(st, gen, v1alpha1.ConditionStalled, metav1.ConditionTrue, stalled.Reason, stalled.Message)
		return
	case draining > 0:
		setCondition(st, gen, v1alpha1.ConditionReconciling, metav1.ConditionTrue, v1alpha1.ReasonDrainingSplits,
			fmt.Sprintf("%d keys split before the switch to Observe are being unsplit and folded", draining))
	default:
		setCondition(st, gen, v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonReconciled, "the policy's last change is carried out")
	}
	setCondition(st, gen, v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonProgressing, "nothing blocks the policy")
}
