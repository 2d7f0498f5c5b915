package targets

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

func newClusterTarget(allowed v1alpha1.AllowedNamespaces) *v1alpha1.ClusterRedisTarget {
	ct := &v1alpha1.ClusterRedisTarget{Spec: v1alpha1.ClusterRedisTargetSpec{
		Addresses: []string{"redis.platform.svc:6379"}, Cluster: true,
		CredentialsSecretRef: &corev1.LocalObjectReference{Name: "platform-auth"},
		TLS:                  &v1alpha1.RedisTLS{ServerName: "redis.platform"},
		AllowedNamespaces:    allowed,
	}}
	ct.Name = "shared"
	return ct
}

func byRef(name string) *v1alpha1.HotKeyPolicySpec {
	return &v1alpha1.HotKeyPolicySpec{Target: v1alpha1.RedisTarget{ClusterTargetRef: &v1alpha1.ClusterTargetReference{Name: name}}}
}

// TestResolveRefusals: every rule refuses with its name and the field, and
// raw addresses pass only with the installer's opt-in.
func TestResolveRefusals(t *testing.T) {
	raw := &v1alpha1.HotKeyPolicySpec{Target: v1alpha1.RedisTarget{Addresses: []string{"10.0.0.9:6379"}}}
	sentinel := &v1alpha1.HotKeyPolicySpec{Target: v1alpha1.RedisTarget{Sentinel: &v1alpha1.RedisSentinel{Addresses: []string{"s:26379"}, MasterName: "m"}}}
	replicas := byRef("shared")
	replicas.Mitigations.ReplicaReads.Addresses = []string{"10.0.0.10:6379"}
	svcRef := func(port int32) *v1alpha1.HotKeyPolicySpec {
		return &v1alpha1.HotKeyPolicySpec{Target: v1alpha1.RedisTarget{ServiceRef: &v1alpha1.ServiceTargetReference{Name: "redis", Port: port}}}
	}
	svc := func(ns string, typ corev1.ServiceType) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Port: 6379}}}}
		s.Name, s.Namespace = "redis", ns
		return s
	}
	onlyB := newClusterTarget(v1alpha1.AllowedNamespaces{Names: []string{"team-b"}})
	for name, tc := range map[string]struct {
		spec      *v1alpha1.HotKeyPolicySpec
		in        Inputs
		opts      Options
		rule      string
		field     string
		wantInMsg string
	}{
		"raw addresses":                 {spec: raw, rule: RuleRawAddresses, field: "spec.target.addresses", wantInMsg: RawAddressesFlag},
		"raw sentinel":                  {spec: sentinel, rule: RuleRawAddresses, field: "spec.target.sentinel", wantInMsg: RawAddressesValue},
		"raw replica addresses":         {spec: replicas, in: Inputs{Namespace: "team-b", ClusterTarget: onlyB}, rule: RuleRawAddresses, field: "spec.mitigations.replicaReads.addresses"},
		"raw addresses, opted in":       {spec: raw, opts: Options{AllowRawAddresses: true}},
		"target missing":                {spec: byRef("shared"), in: Inputs{Namespace: "team-a"}, rule: RuleAllowedNamespaces, field: "spec.target.clusterTargetRef", wantInMsg: "does not exist"},
		"target for another namespace":  {spec: byRef("shared"), in: Inputs{Namespace: "team-a", ClusterTarget: onlyB}, rule: RuleAllowedNamespaces, field: "spec.target.clusterTargetRef", wantInMsg: `does not allow namespace "team-a"`},
		"target by name":                {spec: byRef("shared"), in: Inputs{Namespace: "team-b", ClusterTarget: onlyB}},
		"target, raw opt-in irrelevant": {spec: byRef("shared"), in: Inputs{Namespace: "team-a", ClusterTarget: onlyB}, opts: Options{AllowRawAddresses: true}, rule: RuleAllowedNamespaces, field: "spec.target.clusterTargetRef"},
		"target by selector": {spec: byRef("shared"), in: Inputs{Namespace: "team-a", NamespaceLabels: map[string]string{"tier": "shop"},
			ClusterTarget: newClusterTarget(v1alpha1.AllowedNamespaces{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "shop"}}})}},
		"selector not matching": {spec: byRef("shared"), in: Inputs{Namespace: "team-a", NamespaceLabels: map[string]string{"tier": "ads"},
			ClusterTarget: newClusterTarget(v1alpha1.AllowedNamespaces{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "shop"}}})}, rule: RuleAllowedNamespaces},
		"empty allows none":        {spec: byRef("shared"), in: Inputs{Namespace: "team-a", ClusterTarget: newClusterTarget(v1alpha1.AllowedNamespaces{})}, rule: RuleAllowedNamespaces},
		"service":                  {spec: svcRef(6379), in: Inputs{Namespace: "team-a", Service: svc("team-a", corev1.ServiceTypeClusterIP)}},
		"service missing":          {spec: svcRef(6379), in: Inputs{Namespace: "team-a"}, rule: RuleServiceNamespace, field: "spec.target.serviceRef"},
		"service of another ns":    {spec: svcRef(6379), in: Inputs{Namespace: "team-a", Service: svc("team-b", corev1.ServiceTypeClusterIP)}, rule: RuleServiceNamespace},
		"service ExternalName":     {spec: svcRef(6379), in: Inputs{Namespace: "team-a", Service: svc("team-a", corev1.ServiceTypeExternalName)}, rule: RuleServiceNamespace, wantInMsg: "ExternalName"},
		"service without the port": {spec: svcRef(7000), in: Inputs{Namespace: "team-a", Service: svc("team-a", corev1.ServiceTypeClusterIP)}, rule: RuleServiceNamespace, field: "spec.target.serviceRef.port"},
	} {
		t.Run(name, func(t *testing.T) {
			_, r := Resolve(tc.spec, tc.in, tc.opts)
			switch {
			case tc.rule == "" && r != nil:
				t.Fatalf("refused: %v", r)
			case tc.rule == "":
				return
			case r == nil:
				t.Fatalf("allowed, want refused by rule %s", tc.rule)
			}
			if r.Rule != tc.rule || (tc.field != "" && r.Field != tc.field) || !strings.Contains(r.Error(), tc.wantInMsg) || !strings.Contains(r.Error(), "rule "+tc.rule) {
				t.Errorf("refusal %q (rule %s, field %s); want rule %s, field %s, message with %q", r.Error(), r.Rule, r.Field, tc.rule, tc.field, tc.wantInMsg)
			}
		})
	}
}

// TestResolveResult: a clusterTargetRef becomes the target's connection with
// the policy's database (and its credentials when it names its own); a
// serviceRef becomes the Service's name in the policy's namespace.
func TestResolveResult(t *testing.T) {
	ct := newClusterTarget(v1alpha1.AllowedNamespaces{Names: []string{"team-a"}})
	spec := byRef("shared")
	got, r := Resolve(spec, Inputs{Namespace: "team-a", ClusterTarget: ct}, Options{})
	if r != nil {
		t.Fatal(r)
	}
	if got.ClusterTargetRef != nil || !got.Cluster || got.Addresses[0] != "redis.platform.svc:6379" || got.CredentialsSecretRef.Name != "platform-auth" || got.TLS.ServerName != "redis.platform" {
		t.Errorf("resolved %+v", got)
	}
	spec.Target.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "team-a-user"}
	if got, _ = Resolve(spec, Inputs{Namespace: "team-a", ClusterTarget: ct}, Options{}); got.CredentialsSecretRef.Name != "team-a-user" {
		t.Errorf("the policy's credentials did not override the target's: %+v", got.CredentialsSecretRef)
	}
	spec.Target.Database = 3
	if _, r = Resolve(spec, Inputs{Namespace: "team-a", ClusterTarget: ct}, Options{}); r == nil || r.Rule != RuleClusterDatabase {
		t.Errorf("database 3 on a Redis Cluster target: %v, want rule %s", r, RuleClusterDatabase)
	}

	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 6379}}}}
	svc.Name, svc.Namespace = "redis", "team-a"
	sspec := &v1alpha1.HotKeyPolicySpec{Target: v1alpha1.RedisTarget{ServiceRef: &v1alpha1.ServiceTargetReference{Name: "redis", Port: 6379}, Database: 2}}
	got, r = Resolve(sspec, Inputs{Namespace: "team-a", Service: svc}, Options{})
	if r != nil {
		t.Fatal(r)
	}
	if len(got.Addresses) != 1 || got.Addresses[0] != "redis.team-a.svc:6379" || got.ServiceRef != nil || got.Database != 2 {
		t.Errorf("resolved %+v", got)
	}
}
