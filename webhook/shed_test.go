package webhook_test

import (
	"context"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// TestAdmissionShed: mitigations.shed against the real API server: it
// counts as the one mitigation Enforce needs, and its bounds and its one
// cross-field rule are enforced.
func TestAdmissionShed(t *testing.T) {
	cp := startAdmission(t)
	ctx := context.Background()
	onlyShed := func(p *v1alpha1.HotKeyPolicy) {
		p.Spec.Mitigations.Coalesce.Enabled = ptr.To(false)
		p.Spec.Mitigations.LocalCache.Enabled = ptr.To(false)
		p.Spec.Mitigations.Shed.Enabled = ptr.To(true)
	}
	invalid := map[string]row{
		"budgetPercent 0": {
			raw:       map[string]any{"spec.mitigations.shed.budgetPercent": 0},
			wantField: "spec.mitigations.shed.budgetPercent", wantMsg: "should be greater than or equal to 1",
		},
		"budgetPercent over 100": {
			raw:       map[string]any{"spec.mitigations.shed.budgetPercent": 101},
			wantField: "spec.mitigations.shed.budgetPercent", wantMsg: "should be less than or equal to 100",
		},
		"a read budget while reads are never shed": {
			raw:       map[string]any{"spec.mitigations.shed.readsPerSecond": 100, "spec.mitigations.shed.reads": false},
			wantField: "spec.mitigations.shed", wantMsg: "reads would never be shed",
		},
		"an empty exclude pattern": {
			raw:       map[string]any{"spec.mitigations.shed.exclude": []any{""}},
			wantField: "spec.mitigations.shed.exclude[0]", wantMsg: "at least 1 chars long",
		},
	}
	valid := map[string]row{
		"shed the only mitigation": {mutate: onlyShed},
		"writes only, with a budget": {mutate: onlyShed,
			raw: map[string]any{"spec.mitigations.shed.reads": false, "spec.mitigations.shed.writesPerSecond": 2000, "spec.mitigations.shed.exclude": []any{"orders:*"}}},
	}
	checkRows(t, ctx, cp.Client, "shed", invalid, valid)
}
