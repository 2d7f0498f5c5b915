package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A ClusterRedisTarget is a Redis deployment a platform team approves for the
// namespaces it names, as cert-manager's ClusterIssuer is an issuer and
// Gateway API's allowedRoutes say which namespaces may attach: a policy names
// it in spec.target.clusterTargetRef instead of writing addresses, so that an
// application team reaches only the Redis its platform team allowed it.
//
// Its Secrets (credentialsSecretRef, tls.caSecretRef, tls.clientCertSecretRef)
// are looked up in the namespace of each policy that uses it, never in a
// namespace of the platform team's: the injector mounts them into the
// application's sidecar, and a pod can mount only Secrets of its own
// namespace. Each application team therefore holds its own credentials (its
// own Redis ACL user, typically) under the name the target gives; a policy's
// own target.credentialsSecretRef overrides that name.

// ClusterRedisTargetSpec is where a Redis deployment is and who may use it.
// +kubebuilder:validation:XValidation:rule="has(self.addresses) != has(self.sentinel)",message="a ClusterRedisTarget needs exactly one of addresses (the Redis nodes) and sentinel (the Sentinels that name the master)"
// +kubebuilder:validation:XValidation:rule="!has(self.sentinel) || !has(self.cluster) || !self.cluster",message="sentinel cannot be used with cluster: true (a Redis Cluster fails over by itself; list its nodes in addresses)"
type ClusterRedisTargetSpec struct {
	// addresses are host:port addresses: the Redis server, or for a
	// cluster any subset of the nodes (the rest are discovered).
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:MinLength=3
	Addresses []string `json:"addresses,omitempty"`

	// sentinel names Redis Sentinels and the master they monitor.
	// +optional
	Sentinel *RedisSentinel `json:"sentinel,omitempty"`

	// cluster is true when the target is a Redis Cluster. Default: false.
	// +optional
	// +kubebuilder:default=false
	Cluster bool `json:"cluster,omitempty"`

	// credentialsSecretRef names the Secret (keys "password" and,
	// optionally, "username") that each using policy's namespace holds;
	// a policy's own target.credentialsSecretRef overrides it.
	// +optional
	CredentialsSecretRef *corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`

	// tls enables TLS to Redis; its Secrets are looked up in the using
	// policy's namespace. Absent means plaintext.
	// +optional
	TLS *RedisTLS `json:"tls,omitempty"`

	// allowedNamespaces says which namespaces' policies may use this
	// target: a namespace named in names or whose labels match selector.
	// Empty allows none; selector {} allows every namespace.
	// +required
	AllowedNamespaces AllowedNamespaces `json:"allowedNamespaces"`
}

// AllowedNamespaces selects namespaces by name or by label, as Gateway API's
// allowedRoutes.namespaces does. A namespace is allowed when either matches.
type AllowedNamespaces struct {
	// names are namespaces allowed by name.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	Names []string `json:"names,omitempty"`

	// selector allows the namespaces whose labels match it ({} matches
	// every namespace). The label kubernetes.io/metadata.name, which the API
	// server sets on every namespace, selects by name too.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// ClusterRedisTargetStatus is empty: whether a namespace may use the target
// is decided at each admission and at each reconcile of the policies naming
// it, and shown in their status (condition TargetAllowed).
type ClusterRedisTargetStatus struct{}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=crt,categories=heatsink
// +kubebuilder:printcolumn:name="Cluster",type=boolean,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterRedisTarget is a Redis deployment the platform team approves for
// some namespaces' HotKeyPolicies (spec.target.clusterTargetRef).
type ClusterRedisTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is where the Redis is and who may use it.
	// +required
	Spec ClusterRedisTargetSpec `json:"spec"`

	// status is empty (see ClusterRedisTargetStatus).
	// +optional
	Status ClusterRedisTargetStatus `json:"status,omitempty"`
}

// ClusterRedisTargetList is a list of ClusterRedisTarget.
// +kubebuilder:object:root=true
type ClusterRedisTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRedisTarget `json:"items"`
}

// ClusterTargetReference names a ClusterRedisTarget.
type ClusterTargetReference struct {
	// name is the ClusterRedisTarget's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ServiceTargetReference names a Service of the policy's own namespace and
// one of its ports.
type ServiceTargetReference struct {
	// name is the Service's name, in the policy's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// port is the Service's port Redis listens behind. Default: 6379.
	// +optional
	// +kubebuilder:default=6379
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// Condition type and reasons of a policy's target check.
const (
	// ConditionTargetAllowed is False while the policy's target fails the
	// manager's check (and the manager does not connect); it is removed
	// once the target passes: absent means allowed.
	ConditionTargetAllowed = "TargetAllowed"
	// ReasonTargetNotAllowed: the target is not allowed for the policy's
	// namespace (the message names the rule).
	ReasonTargetNotAllowed = "TargetNotAllowed"
)

func init() {
	SchemeBuilder.Register(&ClusterRedisTarget{}, &ClusterRedisTargetList{})
}
