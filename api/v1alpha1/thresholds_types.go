package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Thresholds say when a key becomes hot and when it stops being hot.
// +kubebuilder:validation:XValidation:rule="!has(self.cooldown) || !has(self.sustainFor) || !self.cooldown.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || !self.sustainFor.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || duration(self.cooldown) >= duration(self.sustainFor)",message="thresholds.cooldown must be at least thresholds.sustainFor, or mitigations would flap"
type Thresholds struct {
	// readsPerSecond is the read rate, summed over all nodes, above which a key
	// is read-hot. Where it is typed it wins over auto. Unset: derived from
	// the key's shard when auto is set and that shard's learned capacity is
	// confident, else 5000 (docs/manager.md, Automatic thresholds).
	// +optional
	// +kubebuilder:validation:Minimum=1
	ReadsPerSecond int64 `json:"readsPerSecond,omitempty"`

	// writesPerSecond is the write rate above which a key is write-hot. Where
	// it is typed it wins over auto. Unset: derived like readsPerSecond,
	// else 1000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	WritesPerSecond int64 `json:"writesPerSecond,omitempty"`

	// auto derives the thresholds not typed from each shard's learned
	// capacity (status.shards): a key is hot when it alone takes more than
	// keySharePercent of its shard's capacity, or when its shard is over
	// targetUtilizationPercent and the key is among the fewest, hottest first,
	// whose mitigation brings the shard back under. Splits and replicas are
	// sized from the learned capacity too, unless capacity.* is typed. Unset:
	// thresholds are the typed numbers or 5000/1000.
	// +optional
	Auto *AutoThresholds `json:"auto,omitempty"`

	// sustainFor is how long a key must stay over a threshold before it is
	// mitigated. Default: 2s.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="thresholds.sustainFor must be a positive duration with a unit of ms, s, m or h, such as 2s"
	// +kubebuilder:validation:MaxLength=32
	SustainFor metav1.Duration `json:"sustainFor,omitzero"`

	// cooldown is how long a key must stay under threshold*(1-hysteresis)
	// before its mitigation ends. Default: 5m.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="thresholds.cooldown must be a positive duration with a unit of ms, s, m or h, such as 5m"
	// +kubebuilder:validation:MaxLength=32
	Cooldown metav1.Duration `json:"cooldown,omitzero"`

	// hysteresisPercent lowers the threshold a mitigated key must fall under
	// to cool down, in percent. Default: 20.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=90
	HysteresisPercent int32 `json:"hysteresisPercent,omitempty"`

	// valueBytes is the value size, in bytes, from which a key is big: the
	// largest value one access read or wrote (a read's reply, a write's
	// request). Big keys are listed in the HotKeyReport's bigKeys whatever
	// their size; those at or over valueBytes also raise a Warning Event
	// (BigKeys) and count in heatsink_manager_big_keys. Nothing is mitigated
	// for size. 1024 to 4294967295. Default: 1048576 (1 MiB).
	// +optional
	// +kubebuilder:default=1048576
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=4294967295
	ValueBytes int64 `json:"valueBytes,omitempty"`
}

// AutoThresholds are the shares of a shard's learned capacity that make a
// key hot (see docs/manager.md, Automatic thresholds).
type AutoThresholds struct {
	// targetUtilizationPercent is the main-thread utilisation a shard should
	// stay under: over it, the shard's hottest keys (each at least a fifth of
	// keySharePercent of its capacity) that bring it back under are hot.
	// 10 to 95. Default: 70.
	// +optional
	// +kubebuilder:default=70
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=95
	TargetUtilizationPercent int32 `json:"targetUtilizationPercent,omitempty"`

	// keySharePercent is the share of its shard's learned capacity that one
	// key may take before it is hot, whatever the shard's utilisation.
	// 1 to 100. Default: 25.
	// +optional
	// +kubebuilder:default=25
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	KeySharePercent int32 `json:"keySharePercent,omitempty"`

	// shardCPU is the CPU each Redis node may use when it is held under one
	// core, as its pod's resources.limits.cpu is (e.g. 500m). Redis
	// executes commands on one thread, so a node may use one core at most;
	// a CPU limit under that is invisible in Redis's own numbers (a
	// throttled node looks idle between its slices). The capacity learned
	// per CPU-second is scaled to it, and utilisation is measured against
	// it. Over 0, at most 1. Unset: one core.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0')) && !quantity(string(self)).isGreaterThan(quantity('1'))",message="thresholds.auto.shardCPU must be over 0 and at most 1 (one core), such as 500m"
	ShardCPU *resource.Quantity `json:"shardCPU,omitempty"`
}
