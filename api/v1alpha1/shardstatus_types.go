package v1alpha1

// ShardStatus is what the manager learned of one Redis node from its own
// INFO (see docs/manager.md, Learned capacity).
type ShardStatus struct {
	// address is the node's host:port.
	// +kubebuilder:validation:MaxLength=261
	Address string `json:"address"`
	// replica is set for a replica node.
	// +optional
	Replica bool `json:"replica,omitempty"`
	// utilizationPercent is the main thread's busy share of one CPU core
	// over the last sample interval.
	// +optional
	UtilizationPercent int32 `json:"utilizationPercent,omitempty"`
	// capacityOpsPerSecond is the learned rate at one full core for the
	// command mix observed (two significant digits; 0 while unknown).
	// +optional
	CapacityOpsPerSecond int64 `json:"capacityOpsPerSecond,omitempty"`
	// confidencePercent grows with the load observed: 100 after 30
	// CPU-seconds of counted load.
	// +optional
	ConfidencePercent int32 `json:"confidencePercent,omitempty"`
}
