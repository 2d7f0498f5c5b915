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
	// thresholds are the thresholds in force for the keys this master
	// serves (masters only; see spec.thresholds.auto).
	// +optional
	Thresholds *ShardThresholds `json:"thresholds,omitempty"`
}

// ShardThresholds are the thresholds in force on one master.
type ShardThresholds struct {
	// readsPerSecond and writesPerSecond are the key thresholds.
	ReadsPerSecond  int64 `json:"readsPerSecond"`
	WritesPerSecond int64 `json:"writesPerSecond"`
	// readsFrom and writesFrom say where each comes from: Typed (the
	// policy's number), Learned (keySharePercent of the learned capacity)
	// or Fallback (5000 and 1000: auto unset, or the capacity's confidence
	// under 50 %).
	ReadsFrom  ThresholdSource `json:"readsFrom"`
	WritesFrom ThresholdSource `json:"writesFrom"`
	// overTarget: the master is over targetUtilizationPercent, so its
	// hottest keys over shardRuleFloorPerSecond that bring it back under
	// are hot too.
	// +optional
	OverTarget bool `json:"overTarget,omitempty"`
	// shardRuleFloorPerSecond is the least rate the shard rule makes hot
	// (keySharePercent ÷ 5 of the capacity; 0 when auto does not apply).
	// +optional
	ShardRuleFloorPerSecond int64 `json:"shardRuleFloorPerSecond,omitempty"`
}
