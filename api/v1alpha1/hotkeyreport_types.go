package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels of heatsink's objects.
const (
	// LabelPolicy holds the name of the policy an object is for: on the
	// manager's report and routing ConfigMap, and on every pod the injector
	// gave a sidecar (the manager tells each node agent which pods may send
	// counts for which policy by it).
	LabelPolicy = "heatsink.dev/policy"
	// LabelSidecarVersion is the version of the sidecar injected into a
	// pod (its image's tag), set by the injector: the pods still running an
	// older sidecar after an upgrade are
	// `kubectl get pods -l 'heatsink.dev/sidecar-version!=NEW'`, and the
	// policy's status.sidecarVersions counts them.
	LabelSidecarVersion = "heatsink.dev/sidecar-version"
)

// HotKeyReportSpec is the manager's cluster-wide view of one policy's
// hottest keys, summed over every node.
type HotKeyReportSpec struct {
	// policyName is the HotKeyPolicy, in the report's namespace, it is for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PolicyName string `json:"policyName"`

	// window is the sliding window the rates were measured over.
	// +required
	Window metav1.Duration `json:"window"`

	// generatedAt is when the manager computed the view.
	// +required
	GeneratedAt metav1.Time `json:"generatedAt"`

	// nodes is how many nodes' agents contributed (sent a summary recently).
	// +optional
	Nodes int32 `json:"nodes,omitempty"`

	// unseenReadsPerSecond and unseenWritesPerSecond bound the estimation
	// error: a key's estimate (when not exact) exceeds its true cluster-wide
	// rate by at most this much. See docs/node-agent.md.
	// +optional
	UnseenReadsPerSecond int64 `json:"unseenReadsPerSecond,omitempty"`
	// +optional
	UnseenWritesPerSecond int64 `json:"unseenWritesPerSecond,omitempty"`

	// candidates are the keys near or over a threshold, hottest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2000
	Candidates []Candidate `json:"candidates,omitempty"`

	// bigKeys are the largest keys by size, largest first, whether or not
	// they are hot: the largest value one access read or wrote, the largest
	// any node saw recently (docs/node-agent.md, "Big keys"), or the size
	// MEMORY USAGE confirmed (memoryBytes).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	BigKeys []BigKey `json:"bigKeys,omitempty"`
}

// BigKey is one key's value size.
type BigKey struct {
	// key is the logical key.
	// +kubebuilder:validation:MaxLength=512
	Key string `json:"key"`
	// valueBytes is the largest value, in bytes, one access of the key read
	// or wrote.
	ValueBytes int64 `json:"valueBytes"`
	// memoryBytes is the key's size in Redis as the manager confirmed it
	// with MEMORY USAGE on the key's master (sampled for hashes, sets,
	// sorted sets and lists), at most a few keys a report interval and
	// cached for some minutes (docs/manager.md, "Big keys"); absent until
	// confirmed. When present, it is the key's size: what big and the
	// order of bigKeys go by.
	// +optional
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// missing is true when the key did not exist when the manager confirmed
	// it (deleted or expired since it was seen): it is not big, and is
	// listed last.
	// +optional
	Missing bool `json:"missing,omitempty"`
	// big is true when the key's size (memoryBytes once confirmed, else
	// valueBytes) is at or over the policy's thresholds.valueBytes.
	// +optional
	Big bool `json:"big,omitempty"`
}

// Candidate is one key's estimated cluster-wide rates.
type Candidate struct {
	// key is the logical key.
	// +kubebuilder:validation:MaxLength=512
	Key string `json:"key"`
	// readsPerSecond is the key's read rate.
	// +optional
	ReadsPerSecond int64 `json:"readsPerSecond,omitempty"`
	// writesPerSecond is the key's write rate.
	// +optional
	WritesPerSecond int64 `json:"writesPerSecond,omitempty"`
	// bytesPerSecond is the value bytes read and written per second.
	// +optional
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
	// exact is true when every node counted the key exactly (the manager
	// pinned it); otherwise the rates are an upper bound.
	// +optional
	Exact bool `json:"exact,omitempty"`
	// families are the families of the commands the key's clients sent in
	// the window (string-read, string-write, counter, key, hash-read,
	// hash-write, hash-counter, hash-other, set-read, set-write, zset-read,
	// zset-write, list/stream, script, ttl, other, multi; unknown when a sidecar or
	// node agent of an older version counted the key): what the manager
	// chooses the key's moves by (docs/manager.md, "Command families").
	// +optional
	// +kubebuilder:validation:MaxItems=18
	// +kubebuilder:validation:items:MaxLength=16
	Families []string `json:"families,omitempty"`
	// mitigations are the moves applied to the key, cheapest first.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Mitigations []MitigationType `json:"mitigations,omitempty"`
	// reason says why a move the key's heat asked for was not chosen (e.g.
	// a queue is not split).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// HotKeyReport is the manager's view of one policy's hottest keys across
// every node, for people (kubectl get hotkeyreports). The manager writes one
// per policy, named like the policy, at a bounded rate; it does not read
// them back (node agents stream their counts to it directly).
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=heatsink
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policyName`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.spec.nodes`
// +kubebuilder:printcolumn:name="Generated",type=date,JSONPath=`.spec.generatedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HotKeyReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

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
