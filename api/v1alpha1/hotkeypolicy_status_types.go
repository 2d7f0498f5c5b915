package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a HotKeyPolicy.
const (
	// ConditionReady is True when the policy is valid, Redis is reachable and
	// the routing table is published (or, in Observe mode, computed).
	ConditionReady = "Ready"
	// ConditionMitigating is True while at least one key is mitigated.
	ConditionMitigating = "Mitigating"
	// ConditionDegraded is True when part of the work failed (Redis
	// unreachable, a fold failed, nodes stale) and the rest goes on.
	ConditionDegraded = "Degraded"
)

// Condition reasons of a HotKeyPolicy.
const (
	// ReasonPublished: the routing table is published and current.
	ReasonPublished = "Published"
	// ReasonObserving: Observe mode; decisions are computed, nothing published.
	ReasonObserving = "Observing"
	// ReasonHotKeys: keys are mitigated.
	ReasonHotKeys = "HotKeysMitigated"
	// ReasonShedding: keys are mitigated and some are shed over their
	// budget (mitigations.shed); a Warning Event marks the change to it.
	ReasonShedding = "KeysShed"
	// ReasonWouldShed: Observe mode, and Enforce would shed some keys
	// over their budget; nothing is refused (a Normal Event).
	ReasonWouldShed = "KeysWouldShed"
	// ReasonNoHotKeys: no key is mitigated.
	ReasonNoHotKeys = "NoHotKeys"
	// ReasonRedisUnavailable: the manager cannot reach the target Redis.
	ReasonRedisUnavailable = "RedisUnavailable"
	// ReasonCredentialsMissing: the credentials Secret is absent or incomplete.
	ReasonCredentialsMissing = "CredentialsMissing"
	// ReasonPublishFailed: the routing ConfigMap could not be written.
	ReasonPublishFailed = "PublishFailed"
	// ReasonStaleReports: some nodes' reports are older than 5 intervals.
	ReasonStaleReports = "StaleReports"
	// ReasonHealthy: nothing is degraded.
	ReasonHealthy = "Healthy"
)

// MitigationType names a mitigation in status and in the routing table.
// +kubebuilder:validation:Enum=Coalesce;LocalCache;ReplicaReads;Replicate;Split;PreAggregate;RefreshAhead;Shed
type MitigationType string

// The mitigations, cheapest first.
const (
	MitigationCoalesce     MitigationType = "Coalesce"
	MitigationLocalCache   MitigationType = "LocalCache"
	MitigationReplicaReads MitigationType = "ReplicaReads"
	MitigationReplicate    MitigationType = "Replicate"
	MitigationSplit        MitigationType = "Split"
	MitigationPreAggregate MitigationType = "PreAggregate"
	// MitigationRefreshAhead: the key's cached value is refreshed ahead of
	// its expiry while it is read (localCache.refreshAheadPercent).
	MitigationRefreshAhead MitigationType = "RefreshAhead"
	// MitigationShed: the key's excess over its budget is refused
	// (mitigations.shed), the last resort.
	MitigationShed MitigationType = "Shed"
)

// MitigationOrder is the mitigations in the order above (status.moves lists
// them so).
var MitigationOrder = []MitigationType{MitigationCoalesce, MitigationLocalCache, MitigationReplicaReads, MitigationReplicate,
	MitigationSplit, MitigationPreAggregate, MitigationRefreshAhead, MitigationShed}

// HotKeySource says why a key is mitigated.
// +kubebuilder:validation:Enum=Detected;Scheduled
type HotKeySource string

const (
	// SourceDetected: node agents measured the key over a threshold.
	SourceDetected HotKeySource = "Detected"
	// SourceScheduled: a schedule named the key.
	SourceScheduled HotKeySource = "Scheduled"
)

// HotKeyStatus is one mitigated (or, in Observe mode, would-be mitigated) key.
type HotKeyStatus struct {
	// key is the logical key.
	// +kubebuilder:validation:MaxLength=512
	Key string `json:"key"`
	// readsPerSecond is the read rate summed over fresh reports.
	ReadsPerSecond int64 `json:"readsPerSecond"`
	// writesPerSecond is the write rate summed over fresh reports.
	WritesPerSecond int64 `json:"writesPerSecond"`
	// mitigations applied to the key, cheapest first.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Mitigations []MitigationType `json:"mitigations,omitempty"`
	// shards is the split cardinality of the current epoch, 0 when not split.
	// +optional
	Shards int32 `json:"shards,omitempty"`
	// replicas is the replica count, 0 when not replicated.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// shedWritesPerSecond and shedReadsPerSecond are the key's budgets
	// while it is shed, 0 for a direction not shed.
	// +optional
	ShedWritesPerSecond int64 `json:"shedWritesPerSecond,omitempty"`
	// +optional
	ShedReadsPerSecond int64 `json:"shedReadsPerSecond,omitempty"`
	// since is when the mitigation started.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// source says whether a node agent or a schedule made the key hot.
	Source HotKeySource `json:"source"`
	// families are the families of the commands the key's clients sent in
	// the window (see HotKeyReport's candidates): the moves chosen serve
	// every one.
	// +optional
	// +kubebuilder:validation:MaxItems=18
	// +kubebuilder:validation:items:MaxLength=16
	Families []string `json:"families,omitempty"`
	// reason says why a move the key's heat asked for was not chosen
	// (e.g. "list or stream (order-bearing, e.g. a queue): order forbids
	// split"); a hot key no allowed move serves is listed with no
	// mitigations and its reason.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// ScheduledEventStatus is an upcoming or running scheduled event.
type ScheduledEventStatus struct {
	// name is the schedule's name.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// start is the next (or current) start of the event.
	Start metav1.Time `json:"start"`
	// end is start plus duration.
	End metav1.Time `json:"end"`
	// prewarmAt is start minus leadTime, when its keys are published.
	PrewarmAt metav1.Time `json:"prewarmAt"`
}

// HotKeyPolicyStatus is what the manager observed and did.
type HotKeyPolicyStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Ready, Mitigating and Degraded, and kstatus'
	// Reconciling and Stalled (abnormal-true, derived from Ready and
	// Degraded).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// epoch is the current split epoch number (wall-clock time / split.epoch).
	// +optional
	Epoch int64 `json:"epoch,omitempty"`

	// routingConfigMap is the name of the published routing ConfigMap.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RoutingConfigMap string `json:"routingConfigMap,omitempty"`

	// routingVersion is the version of the last published routing table; it
	// only grows.
	// +optional
	RoutingVersion int64 `json:"routingVersion,omitempty"`

	// hotKeyCount is the number of keys mitigated (or, in Observe mode, that
	// would be).
	// +optional
	HotKeyCount int32 `json:"hotKeyCount,omitempty"`

	// shedKeyCount is the number of keys shed over their budget (or, in
	// Observe mode, that would be): their excess is refused with SHED.
	// +optional
	ShedKeyCount int32 `json:"shedKeyCount,omitempty"`

	// moves counts the keys each mitigation is applied to, over every
	// mitigated key (not only those hotKeys lists), cheapest move first,
	// e.g. "Coalesce=3,LocalCache=3,RefreshAhead=3,ReplicaReads=1,Shed=1".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Moves string `json:"moves,omitempty"`

	// hotKeys lists the hottest mitigated keys, at most 50, in the order of
	// their names (a stable order: the list changes only when they do).
	// +optional
	// +kubebuilder:validation:MaxItems=50
	HotKeys []HotKeyStatus `json:"hotKeys,omitempty"`

	// reportingNodes is the number of nodes with a fresh report. Like
	// staleNodes, it is shown, not decided on, and written when it moves by
	// a tenth of the nodes (or to or from zero), not for every node.
	// +optional
	ReportingNodes int32 `json:"reportingNodes,omitempty"`

	// staleNodes is the number of nodes whose last report still listed
	// candidates but is older than five report intervals: the node stopped
	// reporting while keys were hot, and its report is ignored. A node whose
	// last report was empty is quiet, not stale.
	// +optional
	StaleNodes int32 `json:"staleNodes,omitempty"`

	// nextEvents are the next scheduled events, soonest first.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	NextEvents []ScheduledEventStatus `json:"nextEvents,omitempty"`

	// sidecarVersions counts the policy's running injected pods by the
	// version of their sidecar (the heatsink.dev/sidecar-version label the
	// injector sets, else the tag of the heatsink-proxy container's image,
	// else "unknown"), in the order of the versions: after an upgrade, the
	// pods still to roll (docs/install.md, Version skew policy).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	SidecarVersions []SidecarVersionCount `json:"sidecarVersions,omitempty"`

	// shards is the learned capacity of each Redis node the manager samples
	// (masters; cluster replicas too when replicaReads is enabled), by
	// address. Refreshed at most once a report interval.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	Shards []ShardStatus `json:"shards,omitempty"`

	// busiestShardUtilizationPercent is the highest utilizationPercent of
	// shards.
	// +optional
	BusiestShardUtilizationPercent int32 `json:"busiestShardUtilizationPercent,omitempty"`
}

// SidecarVersionCount is how many of a policy's pods run one sidecar
// version.
type SidecarVersionCount struct {
	// version is the sidecar's version (its image's tag), or "unknown".
	Version string `json:"version"`
	// pods is the number of running pods with that sidecar.
	Pods int32 `json:"pods"`
}
