package v1alpha1

// Shed configures shedding at the key: every sidecar admits its share of
// the key's budget (in proportion to what it asks of what the whole fleet
// asks) and answers the rest at once with a SHED error, never queued (a
// code no client library retries, so no pipeline is sent again: see
// docs/engine.md, Shed).
// The reads of a key with a local cache are never shed.
// +kubebuilder:validation:XValidation:rule="!has(self.readsPerSecond) || !has(self.reads) || self.reads",message="mitigations.shed.readsPerSecond is set but mitigations.shed.reads is false: reads would never be shed"
type Shed struct {
	// enabled allows shedding. Default: false. Read it with IsEnabled.
	// +optional
	// +kubebuilder:default=false
	Enabled *bool `json:"enabled,omitempty"`

	// budgetPercent is the part of one shard's declared capacity
	// (capacity.perShardWritesPerSecond, perShardReadsPerSecond, times the
	// physical keys a split or replicas give the key) a shed key may use,
	// summed over the fleet; the rest of the shard stays for its other
	// keys. Default: 80.
	// +optional
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	BudgetPercent int32 `json:"budgetPercent,omitempty"`

	// writesPerSecond, when set, is the writes budget of every shed key
	// instead of the one budgetPercent derives.
	// +optional
	// +kubebuilder:validation:Minimum=1
	WritesPerSecond int64 `json:"writesPerSecond,omitempty"`

	// readsPerSecond, when set, is the reads budget of every shed key
	// instead of the one budgetPercent derives.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ReadsPerSecond int64 `json:"readsPerSecond,omitempty"`

	// reads allows shedding the reads of a key that has no local cache.
	// false sheds writes only, whatever the read rate. Default: true.
	// Read it with ShedsReads.
	// +optional
	// +kubebuilder:default=true
	Reads *bool `json:"reads,omitempty"`

	// exclude lists key patterns (Redis globs) never shed, whatever their
	// rate: the keys whose refusal costs more than a slow shard.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	Exclude []string `json:"exclude,omitempty"`

	// minPerSecond is what a sidecar admits of a shed key, per direction,
	// before it has measured its own demand (its first second after it
	// starts or after the key is shed): a new sidecar starts from it, not
	// from the full budget. Default: 10.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	MinPerSecond *int64 `json:"minPerSecond,omitempty"`
}
