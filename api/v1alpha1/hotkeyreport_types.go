package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels that detectors put on their reports, so the manager can list one
// policy's reports and a detector can find its own.
const (
	// LabelPolicy holds the name of the policy a report is for.
	LabelPolicy = "heatsink.dev/policy"
	// LabelNode holds the name of the node whose detector wrote the report.
	LabelNode = "heatsink.dev/node"
)

// HotKeyReportSpec is one detector's view of one policy's hottest keys.
type HotKeyReportSpec struct {
	// nodeName is the node whose sidecars' traffic this report counts.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// policyName is the HotKeyPolicy, in the report's namespace, it is for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PolicyName string `json:"policyName"`

	// window is the sliding window the rates were measured over.
	// +required
	Window metav1.Duration `json:"window"`

	// generatedAt is when the detector computed the candidates. The manager
	// ignores a report older than three report intervals.
	// +required
	GeneratedAt metav1.Time `json:"generatedAt"`

	// candidates are the keys near or over a threshold, hottest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2000
	Candidates []Candidate `json:"candidates,omitempty"`
}

// Candidate is one key's rates on one node.
type Candidate struct {
	// key is the logical key.
	// +kubebuilder:validation:MaxLength=512
	Key string `json:"key"`
	// readsPerSecond is the key's read rate on this node.
	// +optional
	ReadsPerSecond int64 `json:"readsPerSecond,omitempty"`
	// writesPerSecond is the key's write rate on this node.
	// +optional
	WritesPerSecond int64 `json:"writesPerSecond,omitempty"`
	// bytesPerSecond is the value bytes read and written per second.
	// +optional
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
}

// HotKeyReport is written by the detector of one node for one policy. Users
// do not write reports; the manager reads them.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=heatsink
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policyName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Generated",type=date,JSONPath=`.spec.generatedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HotKeyReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the report.
	// +required
	Spec HotKeyReportSpec `json:"spec"`
}

// HotKeyReportList is a list of HotKeyReport.
// +kubebuilder:object:root=true
type HotKeyReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HotKeyReport `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HotKeyReport{}, &HotKeyReportList{})
}
