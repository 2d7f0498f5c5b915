package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestReplicaSettings: the table carries the policy's replica-read
// settings only while replica reads are allowed, with the documented
// defaults.
func TestReplicaSettings(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*v1alpha1.ReplicaReads)
		want *routing.ReplicaSettings
	}{
		"not allowed (the default)": {edit: func(*v1alpha1.ReplicaReads) {}},
		"allowed, defaults": {edit: func(r *v1alpha1.ReplicaReads) { r.Enabled = ptr.To(true) },
			want: &routing.ReplicaSettings{CheckMillis: v1alpha1.DefaultLagCheckInterval.Milliseconds()}},
		"standalone replicas and a check interval": {edit: func(r *v1alpha1.ReplicaReads) {
			r.Enabled, r.Addresses, r.LagCheckInterval.Duration = ptr.To(true), []string{"10.0.0.2:6379"}, 250*time.Millisecond
		}, want: &routing.ReplicaSettings{Addresses: []string{"10.0.0.2:6379"}, CheckMillis: 250}},
	} {
		t.Run(name, func(t *testing.T) {
			spec := &v1alpha1.HotKeyPolicySpec{}
			tc.edit(&spec.Mitigations.ReplicaReads)
			v1alpha1.SetDefaults(spec)
			if d := cmp.Diff(tc.want, replicaSettings(&spec.Mitigations.ReplicaReads)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
