// Package targets decides which Redis a policy may reach and turns its
// spec.target into the addresses the manager and the sidecars use. It is
// the one implementation of that decision: the validating webhook calls it
// at admission, the manager at every reconcile (a ClusterRedisTarget's
// allowed namespaces can change after a policy was admitted) and the
// injector when it writes a sidecar. It is pure: callers read the
// ClusterRedisTarget, the Service and the namespace's labels and pass them.
//
// The rules, each named in a refusal's message:
//
//   - raw-addresses: target.addresses, target.sentinel and
//     mitigations.replicaReads.addresses only where the installer enabled
//     them (Options.AllowRawAddresses): otherwise anyone who may write a
//     policy could make the manager connect to, and write into, any host
//     the manager can reach, and read connection errors back in status.
//   - cluster-target-allowed-namespaces: a ClusterRedisTarget only for the
//     namespaces its spec.allowedNamespaces names or selects.
//   - service-in-namespace: a serviceRef is a Service of the policy's own
//     namespace, never of type ExternalName (a DNS name that can point
//     anywhere).
package targets

import (
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// Rule names, as refusals quote them.
const (
	RuleRawAddresses      = "raw-addresses"
	RuleAllowedNamespaces = "cluster-target-allowed-namespaces"
	RuleServiceNamespace  = "service-in-namespace"
	RuleClusterDatabase   = "cluster-database"
)

// RawAddressesFlag and RawAddressesValue are how an installer enables raw
// addresses: the manager's flag and the chart's value (refusals name both).
const (
	RawAddressesFlag  = "--allow-raw-target-addresses"
	RawAddressesValue = "targets.allowRawAddresses"
)

// Options are the installer's choices.
type Options struct {
	// AllowRawAddresses admits target.addresses, target.sentinel and
	// mitigations.replicaReads.addresses. Off by default.
	AllowRawAddresses bool
}

// Inputs are the objects a policy's target names, as the caller read them:
// nil when absent (not found) or not named.
type Inputs struct {
	// Namespace is the policy's namespace; NamespaceLabels its labels (for
	// a ClusterRedisTarget's selector).
	Namespace       string
	NamespaceLabels map[string]string
	// ClusterTarget is the ClusterRedisTarget spec.target.clusterTargetRef
	// names.
	ClusterTarget *v1alpha1.ClusterRedisTarget
	// Service is the Service spec.target.serviceRef names.
	Service *corev1.Service
}

// Refusal is why a policy may not use its target: the rule and a message for
// the policy's author that names it and what to do.
type Refusal struct {
	Rule    string
	Field   string
	Message string
}

func (r *Refusal) Error() string { return r.Field + ": " + r.Message + " (rule " + r.Rule + ")" }

// Resolve decides whether spec may use its target and returns the target the
// manager and the sidecars connect to: addresses or sentinel always set,
// clusterTargetRef and serviceRef resolved away. A Refusal says why not.
func Resolve(spec *v1alpha1.HotKeyPolicySpec, in Inputs, opts Options) (v1alpha1.RedisTarget, *Refusal) {
	t := spec.Target
	if !opts.AllowRawAddresses {
		if r := rawRefusal(spec); r != nil {
			return v1alpha1.RedisTarget{}, r
		}
	}
	switch {
	case t.ClusterTargetRef != nil:
		return clusterTarget(t, in)
	case t.ServiceRef != nil:
		return service(t, in)
	}
	return t, nil
}

// rawRefusal refuses the raw address fields a spec sets.
func rawRefusal(spec *v1alpha1.HotKeyPolicySpec) *Refusal {
	field := ""
	switch {
	case len(spec.Target.Addresses) > 0:
		field = "spec.target.addresses"
	case spec.Target.Sentinel != nil:
		field = "spec.target.sentinel"
	case len(spec.Mitigations.ReplicaReads.Addresses) > 0:
		field = "spec.mitigations.replicaReads.addresses"
	default:
		return nil
	}
	return &Refusal{Rule: RuleRawAddresses, Field: field, Message: fmt.Sprintf(
		"raw Redis addresses are disabled by the installer (manager flag %s, chart value %s); name a ClusterRedisTarget your platform team allows this namespace in spec.target.clusterTargetRef, or a Service of this namespace in spec.target.serviceRef",
		RawAddressesFlag, RawAddressesValue)}
}

// clusterTarget resolves a clusterTargetRef.
func clusterTarget(t v1alpha1.RedisTarget, in Inputs) (v1alpha1.RedisTarget, *Refusal) {
	name := t.ClusterTargetRef.Name
	const field = "spec.target.clusterTargetRef"
	ct := in.ClusterTarget
	if ct == nil {
		return v1alpha1.RedisTarget{}, &Refusal{Rule: RuleAllowedNamespaces, Field: field, Message: fmt.Sprintf(
			"ClusterRedisTarget %q does not exist; ask your platform team for the targets this namespace may use (kubectl get clusterredistargets)", name)}
	}
	if !Allowed(&ct.Spec.AllowedNamespaces, in.Namespace, in.NamespaceLabels) {
		return v1alpha1.RedisTarget{}, &Refusal{Rule: RuleAllowedNamespaces, Field: field, Message: fmt.Sprintf(
			"ClusterRedisTarget %q does not allow namespace %q (its spec.allowedNamespaces); ask your platform team to allow it, or use a target that does", name, in.Namespace)}
	}
	s := ct.Spec
	if s.Cluster && t.Database != 0 {
		return v1alpha1.RedisTarget{}, &Refusal{Rule: RuleClusterDatabase, Field: "spec.target.database", Message: fmt.Sprintf(
			"ClusterRedisTarget %q is a Redis Cluster, which has only database 0", name)}
	}
	out := v1alpha1.RedisTarget{
		Addresses:            s.Addresses,
		Sentinel:             s.Sentinel,
		Cluster:              s.Cluster,
		Database:             t.Database,
		CredentialsSecretRef: s.CredentialsSecretRef,
		TLS:                  s.TLS,
	}
	if t.CredentialsSecretRef != nil {
		out.CredentialsSecretRef = t.CredentialsSecretRef
	}
	return out, nil
}

// service resolves a serviceRef to the Service's cluster DNS name: it
// resolves, in every pod and in the manager, to the Service's ClusterIP (or,
// headless, its pods' addresses), all in the policy's namespace.
func service(t v1alpha1.RedisTarget, in Inputs) (v1alpha1.RedisTarget, *Refusal) {
	ref := t.ServiceRef
	const field = "spec.target.serviceRef"
	svc := in.Service
	if svc == nil {
		return v1alpha1.RedisTarget{}, &Refusal{Rule: RuleServiceNamespace, Field: field, Message: fmt.Sprintf(
			"Service %q does not exist in namespace %q", ref.Name, in.Namespace)}
	}
	if svc.Namespace != in.Namespace {
		return v1alpha1.RedisTarget{}, &Refusal{Rule: RuleServiceNamespace, Field: field, Message: fmt.Sprintf(
			"Service %s/%s is not in the policy's namespace %q", svc.Namespace, svc.Name, in.Namespace)}
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return v1alpha1.RedisTarget{}, &Refusal{Rule: RuleServiceNamespace, Field: field, Message: fmt.Sprintf(
			"Service %q is of type ExternalName: its name points outside the namespace; name a Service that selects this namespace's Redis pods", ref.Name)}
	}
	port := ref.Port
	if port == 0 {
		port = 6379
	}
	if !hasPort(svc, port) {
		return v1alpha1.RedisTarget{}, &Refusal{Rule: RuleServiceNamespace, Field: "spec.target.serviceRef.port", Message: fmt.Sprintf(
			"Service %q has no port %d", ref.Name, port)}
	}
	out := t
	out.ServiceRef = nil
	out.Addresses = []string{net.JoinHostPort(ref.Name+"."+in.Namespace+".svc", strconv.Itoa(int(port)))}
	return out, nil
}

func hasPort(svc *corev1.Service, port int32) bool {
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return true
		}
	}
	return false
}

// Allowed says whether a namespace (name and labels) is allowed by a.
// A selector that does not parse allows nothing.
func Allowed(a *v1alpha1.AllowedNamespaces, namespace string, nsLabels map[string]string) bool {
	for _, n := range a.Names {
		if n == namespace {
			return true
		}
	}
	if a.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(a.Selector)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(nsLabels))
}
