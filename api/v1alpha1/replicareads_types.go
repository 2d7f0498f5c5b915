package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReplicaReads configures reads from Redis replicas.
type ReplicaReads struct {
	// enabled allows replica reads. Default: false. Read it with IsEnabled.
	// +optional
	// +kubebuilder:default=false
	Enabled *bool `json:"enabled,omitempty"`

	// maxLag is the replication lag past which a replica is skipped (its
	// reads go to the other replicas, or to the master when none is
	// left). A reader measures each replica's lag every lagCheckInterval
	// from replication offsets. Default: 1s.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="mitigations.replicaReads.maxLag must be a positive duration with a unit of ms, s, m or h, such as 1s"
	// +kubebuilder:validation:MaxLength=32
	MaxLag metav1.Duration `json:"maxLag,omitzero"`

	// lagCheckInterval is how often each reader measures the lag of the
	// replicas of the shards it reads from. Default: 1s.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) >= duration('100ms')",message="mitigations.replicaReads.lagCheckInterval must be a duration of at least 100ms with a unit of ms, s, m or h, such as 1s"
	// +kubebuilder:validation:MaxLength=32
	LagCheckInterval metav1.Duration `json:"lagCheckInterval,omitzero"`

	// addresses are the host:port addresses of a standalone master's
	// replicas. Only for a standalone target: a Redis Cluster's replicas
	// come from CLUSTER SLOTS, a Sentinel set's from SENTINEL REPLICAS.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:MinLength=3
	Addresses []string `json:"addresses,omitempty"`
}
