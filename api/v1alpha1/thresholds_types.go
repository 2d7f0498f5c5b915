package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Thresholds say when a key becomes hot and when it stops being hot.
// +kubebuilder:validation:XValidation:rule="!has(self.cooldown) || !has(self.sustainFor) || !self.cooldown.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || !self.sustainFor.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || duration(self.cooldown) >= duration(self.sustainFor)",message="thresholds.cooldown must be at least thresholds.sustainFor, or mitigations would flap"
type Thresholds struct {
	// readsPerSecond is the read rate, summed over all nodes, above which a key
	// is read-hot. Default: 5000.
	// +optional
	// +kubebuilder:default=5000
	// +kubebuilder:validation:Minimum=1
	ReadsPerSecond int64 `json:"readsPerSecond,omitempty"`

	// writesPerSecond is the write rate above which a key is write-hot.
	// Default: 1000.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	WritesPerSecond int64 `json:"writesPerSecond,omitempty"`

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
