package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyMode says whether a policy's decisions are published to the data path.
// +kubebuilder:validation:Enum=Enforce;Observe
type PolicyMode string

const (
	// ModeEnforce decides, publishes the routing table and acts in Redis.
	ModeEnforce PolicyMode = "Enforce"
	// ModeObserve decides and reports in status only: a dry run that publishes
	// no routing entries and writes nothing to Redis.
	ModeObserve PolicyMode = "Observe"
)

// KeyNames says how the manager names a policy's keys where people read
// them (package internal/keynames).
// +kubebuilder:validation:Enum=Plain;Truncated;Hashed
type KeyNames string

const (
	// KeyNamesPlain shows keys as they are.
	KeyNamesPlain KeyNames = "Plain"
	// KeyNamesTruncated keeps a key's first segment (to its first ':',
	// within 32 bytes) and hashes the rest: "user:h:<hex>".
	KeyNamesTruncated KeyNames = "Truncated"
	// KeyNamesHashed shows a keyed hash only: "h:<hex>".
	KeyNamesHashed KeyNames = "Hashed"
)

// HotKeyPolicySpec declares which Redis a policy protects, when a key counts as
// hot, and which mitigations heatsink may apply to it. Every duration is a
// positive duration string with a unit ("500ms", "2s", "5m"). Defaults live in
// the schema: a field left out gets its default, and a value written (an
// explicit 0 too) is validated, never replaced.
// +kubebuilder:validation:XValidation:rule="self.mode == 'Observe' || (!has(self.mitigations.coalesce) || !has(self.mitigations.coalesce.enabled) || self.mitigations.coalesce.enabled) || (!has(self.mitigations.localCache) || !has(self.mitigations.localCache.enabled) || self.mitigations.localCache.enabled) || (has(self.mitigations.replicate) && has(self.mitigations.replicate.enabled) && self.mitigations.replicate.enabled) || (has(self.mitigations.split) && has(self.mitigations.split.enabled) && self.mitigations.split.enabled) || (has(self.mitigations.preAggregate) && has(self.mitigations.preAggregate.enabled) && self.mitigations.preAggregate.enabled) || (has(self.mitigations.replicaReads) && has(self.mitigations.replicaReads.enabled) && self.mitigations.replicaReads.enabled) || (has(self.mitigations.shed) && has(self.mitigations.shed.enabled) && self.mitigations.shed.enabled)",message="mode Enforce needs at least one mitigation enabled in spec.mitigations (mode Observe needs none)"
// +kubebuilder:validation:XValidation:rule="!has(self.schedules) || self.schedules.all(s, !has(s.mitigation.coalesce) || !s.mitigation.coalesce || self.mitigations.coalesce.enabled)",message="a schedule asks for coalesce but mitigations.coalesce.enabled is false"
// +kubebuilder:validation:XValidation:rule="!has(self.schedules) || self.schedules.all(s, !has(s.mitigation.replicate) || self.mitigations.replicate.enabled)",message="a schedule asks for replicate but mitigations.replicate.enabled is false"
// +kubebuilder:validation:XValidation:rule="!has(self.schedules) || self.schedules.all(s, !has(s.mitigation.localCache) || self.mitigations.localCache.enabled)",message="a schedule asks for localCache but mitigations.localCache.enabled is false"
// +kubebuilder:validation:XValidation:rule="!has(self.schedules) || self.schedules.all(s, !has(s.mitigation.split) || self.mitigations.split.enabled)",message="a schedule asks for split but mitigations.split.enabled is false"
// +kubebuilder:validation:XValidation:rule="!has(self.schedules) || self.schedules.all(s, !has(s.mitigation.replicaReads) || !s.mitigation.replicaReads || (has(self.mitigations.replicaReads) && has(self.mitigations.replicaReads.enabled) && self.mitigations.replicaReads.enabled))",message="a schedule asks for replicaReads but mitigations.replicaReads.enabled is false"
// +kubebuilder:validation:XValidation:rule="!has(self.schedules) || self.schedules.all(s, !has(s.mitigation.replicate) || s.mitigation.replicate.replicas <= self.mitigations.replicate.maxReplicas)",message="a schedule's replicate.replicas exceeds mitigations.replicate.maxReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.schedules) || self.schedules.all(s, !has(s.mitigation.split) || s.mitigation.split.shards <= self.mitigations.split.maxShards)",message="a schedule's split.shards exceeds mitigations.split.maxShards"
// +kubebuilder:validation:XValidation:rule="!has(self.mitigations.replicaReads) || !has(self.mitigations.replicaReads.addresses) || (!has(self.target.sentinel) && !(has(self.target.cluster) && self.target.cluster))",message="mitigations.replicaReads.addresses are for a standalone target: a Redis Cluster's and a Sentinel set's replicas are discovered"
type HotKeyPolicySpec struct {
	// mode is Observe (decide and report only) or Enforce (publish and act).
	// Default: Observe, so that a policy acts only after someone chose to:
	// enforcing is an explicit mode: Enforce.
	// +optional
	// +kubebuilder:default=Observe
	Mode PolicyMode `json:"mode,omitempty"`

	// keyNames is how the manager names this policy's keys wherever the
	// namespace's readers can see them: status.hotKeys, the HotKeyReport,
	// Events and the routing ConfigMap. Plain shows them as they are;
	// Hashed shows "h:<hex>", a keyed HMAC-SHA256 (64 bits) under a key of
	// the policy's own that only the manager holds (a Secret in its
	// namespace), stable across restarts; Truncated keeps the key's first
	// segment, up to its first ':' within 32 bytes, and hashes the rest
	// ("user:h:<hex>"). The sidecars still get the raw keys, from their
	// node agent only (the routing ConfigMap then holds a hashed view that
	// no reader applies, and the manager's raw state is kept in a Secret of
	// its namespace). The installer may impose at least Truncated or Hashed
	// on every policy (chart value keyNames.least). Keys a policy's own
	// spec names (schedules) stay in its spec. Default: Plain.
	// +optional
	// +kubebuilder:default=Plain
	KeyNames KeyNames `json:"keyNames,omitempty"`

	// target is the Redis deployment whose keys this policy protects.
	// +required
	Target RedisTarget `json:"target"`

	// keys limits the policy to logical keys matching include and not exclude.
	// +optional
	// +kubebuilder:default={}
	Keys KeySelector `json:"keys,omitempty"`

	// detection tunes the heavy-hitter node agents.
	// +optional
	// +kubebuilder:default={}
	Detection Detection `json:"detection,omitempty"`

	// thresholds say when a key is hot and when it stops being hot.
	// +optional
	// +kubebuilder:default={}
	Thresholds Thresholds `json:"thresholds,omitempty"`

	// capacity describes what one Redis shard can serve; it sizes splits and
	// replica counts.
	// +optional
	// +kubebuilder:default={}
	Capacity Capacity `json:"capacity,omitempty"`

	// mitigations lists which mitigations heatsink may apply. heatsink never
	// applies one that is not enabled here.
	// +optional
	// +kubebuilder:default={}
	Mitigations Mitigations `json:"mitigations,omitempty"`

	// schedules are known spikes: their keys are mitigated from start-leadTime
	// until start+duration, whatever the node agents see.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Schedules []Schedule `json:"schedules,omitempty"`
}

// RedisTarget is how the manager and sidecars reach Redis.
// +kubebuilder:validation:XValidation:rule="!has(self.cluster) || !self.cluster || !has(self.database) || self.database == 0",message="target.database must be 0 when target.cluster is true: a Redis Cluster has only database 0"
// +kubebuilder:validation:XValidation:rule="[has(self.addresses), has(self.sentinel), has(self.clusterTargetRef), has(self.serviceRef)].exists_one(x, x)",message="target needs exactly one of clusterTargetRef (a ClusterRedisTarget your platform team allows this namespace), serviceRef (a Service of this namespace), addresses and sentinel (raw addresses, only where the installer enabled them)"
// +kubebuilder:validation:XValidation:rule="!has(self.clusterTargetRef) || (!has(self.tls) && (!has(self.cluster) || !self.cluster))",message="with target.clusterTargetRef, cluster and tls come from the ClusterRedisTarget: leave them out of the policy"
// +kubebuilder:validation:XValidation:rule="!has(self.sentinel) || !has(self.cluster) || !self.cluster",message="target.sentinel cannot be used with cluster: true (a Redis Cluster fails over by itself; list its nodes in addresses)"
type RedisTarget struct {
	// clusterTargetRef names a ClusterRedisTarget: a Redis the platform
	// team approved for this namespace (its spec.allowedNamespaces). Its
	// addresses or Sentinels, cluster, tls and credentialsSecretRef apply;
	// the policy's credentialsSecretRef, when set, overrides the latter.
	// Admission refuses a target that does not allow the namespace, and the
	// manager checks again at every reconcile (condition TargetAllowed).
	// +optional
	ClusterTargetRef *ClusterTargetReference `json:"clusterTargetRef,omitempty"`

	// serviceRef names a Service of the policy's own namespace: the manager
	// and the sidecars reach Redis at <name>.<namespace>.svc:<port>. A
	// Service of type ExternalName (a name outside the namespace) is
	// refused.
	// +optional
	ServiceRef *ServiceTargetReference `json:"serviceRef,omitempty"`

	// addresses are host:port addresses: the Redis server, or for a
	// cluster any subset of the nodes (the rest are discovered). Raw
	// addresses (and sentinel) are refused unless the installer enabled
	// them (manager flag --allow-raw-target-addresses, chart value
	// targets.allowRawAddresses): any address the manager can reach would
	// otherwise be open to anyone who may write a policy.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:MinLength=3
	Addresses []string `json:"addresses,omitempty"`

	// sentinel names Redis Sentinels and the master they monitor: the
	// manager and the sidecars find the master through them and follow its
	// failovers, while applications keep pointing at the sidecar.
	// credentialsSecretRef and tls apply to the master and replicas (and
	// tls to the Sentinels too).
	// +optional
	Sentinel *RedisSentinel `json:"sentinel,omitempty"`

	// cluster is true when the target is a Redis Cluster. Default: false.
	// +optional
	// +kubebuilder:default=false
	Cluster bool `json:"cluster,omitempty"`

	// database is the logical database (the index a client SELECTs, 0 to
	// 15: Redis' default of 16 databases) whose keys this policy governs.
	// The manager folds split counters and fills replicas in it, and a
	// sidecar applies the routing table only to client connections that
	// have selected it; the commands of connections in any other database
	// pass through untouched and are not counted for this policy. A Redis
	// Cluster has only database 0. It cannot be changed once set, because
	// split counters and replicas live in it: to govern another database,
	// delete the policy (which folds its splits back) and create a new one.
	// Default: 0.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=15
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="target.database cannot be changed: split counters and replicas live in the database; delete the policy (which folds its splits back) and create a new one"
	Database int32 `json:"database,omitempty"`

	// credentialsSecretRef names a Secret in the policy's namespace holding
	// keys "password" and, optionally, "username" (Redis ACL user). The
	// manager reads it at every pass; the injector mounts it into the
	// sidecar as files, read at each new connection to Redis, so a rotated
	// password applies to new connections without a restart while open
	// ones stay authenticated. docs/proxy.md (Hardened Redis) lists the ACL
	// rules the user needs.
	// +optional
	CredentialsSecretRef *corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`

	// tls enables TLS to Redis. Absent means plaintext.
	// +optional
	TLS *RedisTLS `json:"tls,omitempty"`
}

// RedisSentinel names the Sentinels that monitor a master.
type RedisSentinel struct {
	// addresses are the Sentinels' host:port addresses; list them all.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:MinLength=3
	Addresses []string `json:"addresses"`

	// masterName is the name the Sentinels monitor the master under
	// (sentinel monitor <masterName> ...), such as mymaster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[^\s@]+$`
	MasterName string `json:"masterName"`

	// credentialsSecretRef names a Secret in the policy's namespace holding
	// the Sentinels' own credentials (their requirepass, or an ACL user's):
	// key "password" and, optionally, "username". Absent: the Sentinels
	// need none. The manager reads it at every pass; the injector mounts it
	// into the sidecar as files, read at each new connection to a
	// Sentinel, so a rotated password applies without a restart, as
	// target.credentialsSecretRef does for the master and replicas.
	// +optional
	CredentialsSecretRef *corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`
}

// RedisTLS configures TLS to Redis.
type RedisTLS struct {
	// caSecretRef names a Secret in the policy's namespace whose key "ca.crt"
	// holds the CA bundle. Absent means the system roots.
	// +optional
	CASecretRef *corev1.LocalObjectReference `json:"caSecretRef,omitempty"`

	// serverName overrides the name checked in the server certificate.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`

	// clientCertSecretRef names a Secret in the policy's namespace of type
	// kubernetes.io/tls (keys "tls.crt" and "tls.key") holding the client
	// certificate heatsink presents to Redis, for a Redis that verifies
	// clients (tls-auth-clients yes). The manager reads it for its own
	// connections; the injector mounts it into the sidecar, which re-reads
	// it when the kubelet updates the files, so a renewed certificate is
	// used by new connections without a restart. Absent means no client
	// certificate.
	// +optional
	ClientCertSecretRef *corev1.LocalObjectReference `json:"clientCertSecretRef,omitempty"`
}

// KeySelector selects logical keys by Redis glob patterns (*, ?, [abc], \x).
type KeySelector struct {
	// include lists the patterns a key must match one of. Default: ["*"].
	// +optional
	// +kubebuilder:default={"*"}
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	Include []string `json:"include,omitempty"`

	// exclude lists patterns that remove keys include matched.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	Exclude []string `json:"exclude,omitempty"`
}

// Detection tunes the node agents' sketches and reports.
// +kubebuilder:validation:XValidation:rule="!has(self.reportInterval) || !has(self.window) || !self.reportInterval.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || !self.window.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || duration(self.reportInterval) <= duration(self.window)",message="detection.reportInterval must not be longer than detection.window"
type Detection struct {
	// window is the sliding window over which rates are measured. Default: 10s.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="detection.window must be a positive duration with a unit of ms, s, m or h, such as 10s"
	// +kubebuilder:validation:MaxLength=32
	Window metav1.Duration `json:"window,omitzero"`

	// topK is how many keys each node agent tracks per policy. Default: 64.
	// +optional
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	TopK int32 `json:"topK,omitempty"`

	// reportInterval is the least time between two reports of one node agent for
	// this policy. Default: 1s.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="detection.reportInterval must be a positive duration with a unit of ms, s, m or h, such as 1s"
	// +kubebuilder:validation:MaxLength=32
	ReportInterval metav1.Duration `json:"reportInterval,omitzero"`
}

// Capacity describes one Redis shard; it sizes splits and replicas.
type Capacity struct {
	// perShardWritesPerSecond is the write rate one physical key may take.
	// Where it is typed it wins. Unset: with thresholds.auto, the least
	// write threshold derived on a confident shard; else 20000
	// (docs/manager.md, Automatic thresholds).
	// +optional
	// +kubebuilder:validation:Minimum=1
	PerShardWritesPerSecond int64 `json:"perShardWritesPerSecond,omitempty"`

	// perShardReadsPerSecond is the read rate one physical key may take.
	// Where it is typed it wins. Unset: with thresholds.auto, the least
	// read threshold derived on a confident shard; else 50000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	PerShardReadsPerSecond int64 `json:"perShardReadsPerSecond,omitempty"`

	// headroomPercent is added to the observed rate before sizing. Default: 25.
	// +optional
	// +kubebuilder:default=25
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=400
	HeadroomPercent int32 `json:"headroomPercent,omitempty"`

	// maxMitigatedKeys caps the keys the routing table holds, keeping the
	// routing ConfigMap far below its 1 MiB limit. Default: 200.
	// +optional
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2000
	MaxMitigatedKeys int32 `json:"maxMitigatedKeys,omitempty"`
}

// Mitigations lists what heatsink may do to a hot key.
// +kubebuilder:validation:XValidation:rule="!(has(self.preAggregate) && has(self.preAggregate.enabled) && self.preAggregate.enabled) || (has(self.split) && has(self.split.enabled) && self.split.enabled)",message="mitigations.preAggregate needs mitigations.split.enabled: pre-aggregated increments are flushed to split shards"
type Mitigations struct {
	// coalesce merges concurrent identical reads into one upstream read.
	// +optional
	// +kubebuilder:default={}
	Coalesce Coalesce `json:"coalesce,omitempty"`

	// localCache serves reads of a hot key from the sidecar's memory.
	// +optional
	// +kubebuilder:default={}
	LocalCache LocalCache `json:"localCache,omitempty"`

	// replicate stores a read-hot value in several physical keys.
	// +optional
	// +kubebuilder:default={}
	Replicate Replicate `json:"replicate,omitempty"`

	// split stores a write-hot counter in several physical shards.
	// +optional
	// +kubebuilder:default={}
	Split Split `json:"split,omitempty"`

	// preAggregate sums increments in the sidecar and flushes them
	// periodically: approximate reads, opt-in only.
	// +optional
	// +kubebuilder:default={}
	PreAggregate PreAggregate `json:"preAggregate,omitempty"`

	// replicaReads sends the reads of a read-hot key to the Redis replicas
	// of its shard: no extra memory and no extra writes, at the price of
	// reads as stale as the replication lag (bounded by maxLag).
	// +optional
	// +kubebuilder:default={}
	ReplicaReads ReplicaReads `json:"replicaReads,omitempty"`

	// shed refuses the excess of a hot key over a cluster-wide budget, the
	// last resort once the other moves the policy allows cannot bring it
	// within its shard's capacity. Opt-in only.
	// +optional
	// +kubebuilder:default={}
	Shed Shed `json:"shed,omitempty"`
}

// Coalesce configures single-flight reads.
type Coalesce struct {
	// enabled allows coalescing. Default: true. Read it with IsEnabled.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`
}

// LocalCache configures the sidecar's cache of hot values.
// +kubebuilder:validation:XValidation:rule="!has(self.refreshAheadPercent) || self.refreshAheadPercent == 0 || !has(self.ttl) || !self.ttl.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || duration(self.ttl).getMilliseconds() * self.refreshAheadPercent >= 100",message="mitigations.localCache.refreshAheadPercent leaves a refresh window under 1ms of the ttl, shorter than a round trip: raise it or the ttl, or set 0 to turn refresh off"
type LocalCache struct {
	// enabled allows local caching. Default: true. Read it with IsEnabled.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// ttl is how long a cached value is served. Bounds staleness. Default: 2s.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="mitigations.localCache.ttl must be a positive duration with a unit of ms, s, m or h, such as 2s"
	// +kubebuilder:validation:MaxLength=32
	TTL metav1.Duration `json:"ttl,omitzero"`

	// jitterPercent shortens a cached value's TTL by a random up to this
	// percent so sidecars and keys filled together do not expire in
	// lockstep. A fill timed by the expiry of the key's previous value (a
	// refresh ahead of it, or a miss within the jitter span after it)
	// lives the whole TTL: it keeps that value's jittered phase.
	// Default: 10.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	JitterPercent int32 `json:"jitterPercent,omitempty"`

	// refreshAheadPercent refreshes a cached key ahead of its expiry while it
	// is read: the first read in a cached value's refresh window (the end of
	// its lifetime) starts one background read of the key, and readers keep
	// the cached value meanwhile, so a hot key never expires under its
	// readers. Each sidecar measures the window per key (what the key's
	// refreshes need, from the window's opening to the value stored, at
	// about their 90th percentile, at least 1 ms); this percent of the
	// lifetime is its ceiling, and the window until a refresh has been
	// measured. A key not read in its window is not refreshed. Costs
	// ttl/(ttl - (window - need)) times the upstream reads of the cache
	// alone (about 1.01 for a key read often from a fast shard); staleness
	// stays bounded by ttl. 0 turns it off. Default: 10. Read it with
	// RefreshAhead.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	RefreshAheadPercent *int32 `json:"refreshAheadPercent,omitempty"`

	// maxEntries bounds the cache's entries per sidecar. Default: 10000.
	// +optional
	// +kubebuilder:default=10000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	MaxEntries int32 `json:"maxEntries,omitempty"`

	// maxBytes bounds the cache's value bytes per sidecar. Default: 64Mi.
	// +optional
	// +kubebuilder:default=67108864
	// +kubebuilder:validation:Minimum=1024
	MaxBytes int64 `json:"maxBytes,omitempty"`

	// tracking enables server-assisted invalidation (RESP3 CLIENT TRACKING) so
	// a write from outside heatsink invalidates cached values within a network
	// delay instead of at the end of their TTL. It costs one connection per
	// Redis node per sidecar. Default: false.
	// +optional
	Tracking bool `json:"tracking,omitempty"`
}

// Replicate configures value replication.
type Replicate struct {
	// enabled allows replication. Default: false. Read it with IsEnabled.
	// +optional
	// +kubebuilder:default=false
	Enabled *bool `json:"enabled,omitempty"`

	// maxReplicas caps the replicas of one key. Default: 8.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=64
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// replicaTTL is the TTL replicas carry, refreshed by writes and fills, so
	// they vanish once the mitigation ends. Default: 5m.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="mitigations.replicate.replicaTTL must be a positive duration with a unit of ms, s, m or h, such as 5m"
	// +kubebuilder:validation:MaxLength=32
	ReplicaTTL metav1.Duration `json:"replicaTTL,omitzero"`
}

// Split configures counter splitting.
type Split struct {
	// enabled allows splitting. Default: false. Read it with IsEnabled.
	// +optional
	// +kubebuilder:default=false
	Enabled *bool `json:"enabled,omitempty"`

	// maxShards caps the shards of one key. Default: 64.
	// +optional
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=1024
	MaxShards int32 `json:"maxShards,omitempty"`

	// epoch is the length of an epoch: split cardinality changes only at a
	// wall-clock-aligned epoch boundary. Default: 60s.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) >= duration('1s')",message="mitigations.split.epoch must be a duration of at least 1s with a unit of ms, s, m or h, such as 60s"
	// +kubebuilder:validation:MaxLength=32
	Epoch metav1.Duration `json:"epoch,omitzero"`
}

// PreAggregate configures sidecar-side summing of increments.
type PreAggregate struct {
	// enabled allows pre-aggregation. Default: false. Read it with IsEnabled.
	// +optional
	// +kubebuilder:default=false
	Enabled *bool `json:"enabled,omitempty"`

	// flushInterval is how often summed increments are written. Default: 100ms.
	// +optional
	// +kubebuilder:default="100ms"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="mitigations.preAggregate.flushInterval must be a positive duration with a unit of ms, s, m or h, such as 100ms"
	// +kubebuilder:validation:MaxLength=32
	FlushInterval metav1.Duration `json:"flushInterval,omitzero"`
}

// Schedule is a known spike: its keys are prepared before it starts.
// +kubebuilder:validation:XValidation:rule="has(self.start) != has(self.cron)",message="a schedule needs exactly one of start and cron"
// +kubebuilder:validation:XValidation:rule="!self.leadTime.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || !self.duration.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || duration(self.leadTime) < duration(self.duration)",message="a schedule's leadTime must be shorter than its duration"
// +kubebuilder:validation:XValidation:rule="has(self.mitigation.replicate) || has(self.mitigation.localCache) || has(self.mitigation.split) || (has(self.mitigation.coalesce) && self.mitigation.coalesce) || (has(self.mitigation.replicaReads) && self.mitigation.replicaReads)",message="a schedule's mitigation must name at least one of replicate, localCache, split, coalesce or replicaReads"
type Schedule struct {
	// name identifies the event, e.g. black-friday.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="schedules[].name must be lowercase letters, digits and '-', starting and ending with a letter or digit, such as black-friday"
	Name string `json:"name"`

	// start is the RFC 3339 time of a one-off event, such as
	// 2026-11-27T00:00:00Z or 2026-11-27T00:00:00+01:00.
	// +optional
	Start *metav1.Time `json:"start,omitempty"`

	// cron is a five-field cron expression (minute hour dom month dow) for a
	// recurring event, evaluated in timeZone.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Cron string `json:"cron,omitempty"`

	// timeZone is the IANA time zone of cron. Default: UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`

	// duration is how long the event lasts.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="schedules[].duration must be a positive duration with a unit of ms, s, m or h, such as 6h"
	// +kubebuilder:validation:MaxLength=32
	Duration metav1.Duration `json:"duration"`

	// leadTime is how long before start the keys are prepared. Default: 5m.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="schedules[].leadTime must be a positive duration with a unit of ms, s, m or h, such as 10m"
	// +kubebuilder:validation:MaxLength=32
	LeadTime metav1.Duration `json:"leadTime,omitzero"`

	// keys are the exact logical keys to prepare.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	Keys []string `json:"keys"`

	// mitigation is what to apply to the keys during the event.
	// +required
	Mitigation ScheduledMitigation `json:"mitigation"`
}

// ScheduledMitigation is the mitigation a schedule applies to its keys.
type ScheduledMitigation struct {
	// coalesce turns on single-flight reads.
	// +optional
	Coalesce bool `json:"coalesce,omitempty"`

	// replicate pre-fills replicas before the event.
	// +optional
	Replicate *ScheduledReplicate `json:"replicate,omitempty"`

	// localCache caches the keys in sidecars; ttl overrides the policy's.
	// +optional
	LocalCache *ScheduledLocalCache `json:"localCache,omitempty"`

	// split splits the keys as counters.
	// +optional
	Split *ScheduledSplit `json:"split,omitempty"`

	// replicaReads reads the keys from the Redis replicas of their shards
	// during the event (mitigations.replicaReads' maxLag).
	// +optional
	ReplicaReads bool `json:"replicaReads,omitempty"`
}

// ScheduledReplicate sets the replica count of scheduled keys.
type ScheduledReplicate struct {
	// replicas is the number of physical copies.
	// +required
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=64
	Replicas int32 `json:"replicas"`
}

// ScheduledLocalCache sets the cache TTL of scheduled keys.
type ScheduledLocalCache struct {
	// ttl overrides mitigations.localCache.ttl. Default: the policy's ttl.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')",message="schedules[].mitigation.localCache.ttl must be a positive duration with a unit of ms, s, m or h, such as 2s"
	// +kubebuilder:validation:MaxLength=32
	TTL *metav1.Duration `json:"ttl,omitempty"`
}

// ScheduledSplit sets the shard count of scheduled counters.
type ScheduledSplit struct {
	// shards is the number of physical shards.
	// +required
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=1024
	Shards int32 `json:"shards"`
}

// HotKeyPolicy declares how heatsink finds and mitigates hot keys of one Redis.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hkp,categories=heatsink
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Hot Keys",type=integer,JSONPath=`.status.hotKeyCount`
// +kubebuilder:printcolumn:name="Shed",type=integer,JSONPath=`.status.shedKeyCount`
// +kubebuilder:printcolumn:name="Mitigating",type=string,JSONPath=`.status.conditions[?(@.type=="Mitigating")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`,priority=1
// +kubebuilder:printcolumn:name="Routing",type=integer,JSONPath=`.status.routingVersion`,priority=1
// +kubebuilder:printcolumn:name="Busiest Shard %",type=integer,JSONPath=`.status.busiestShardUtilizationPercent`,priority=1
// +kubebuilder:printcolumn:name="Moves",type=string,JSONPath=`.status.moves`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HotKeyPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired behaviour.
	// +required
	Spec HotKeyPolicySpec `json:"spec"`

	// status is what the manager observed and did.
	// +optional
	Status HotKeyPolicyStatus `json:"status,omitempty"`
}

// HotKeyPolicyList is a list of HotKeyPolicy.
// +kubebuilder:object:root=true
type HotKeyPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HotKeyPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HotKeyPolicy{}, &HotKeyPolicyList{})
}
