package install

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

// right is one verb on one resource, cluster-wide (namespace "*") or in one
// namespace, optionally limited to some names.
type right struct {
	namespace, group, resource, verb string
	names                            string // comma-separated; "" for any name
}

func (r right) String() string {
	s := fmt.Sprintf("%s %s/%s %s", r.namespace, r.group, r.resource, r.verb)
	if r.names != "" {
		s += " [" + r.names + "]"
	}
	return s
}

// allowedRights is everything the manager may hold, and why. A rendered
// install that grants more (another verb, resource or namespace, a
// wildcard, a name-limited rule without its names) fails
// TestManagerRightsAreTheAllowedOnes. "*" is every namespace; "release" the
// install's namespace; "listed" a namespace of rbac.secretNamespaces.
var allowedRights = func() map[right]string {
	out := map[right]string{}
	add := func(why, ns, group string, resources, verbs []string, names string) {
		for _, res := range resources {
			for _, v := range verbs {
				out[right{ns, group, res, v, names}] = why
			}
		}
	}
	rw := []string{"get", "list", "watch"}
	add("routing ConfigMaps of policies in any namespace (written only as a ValidatingAdmissionPolicy allows)", "*", "", []string{"configmaps"}, []string{"get", "list", "watch", "create", "patch", "delete"}, "")
	add("injected pods in any namespace, watched by label", "*", "", []string{"pods"}, []string{"list", "watch"}, "")
	add("a ClusterRedisTarget's namespace selector", "*", "", []string{"namespaces"}, rw, "")
	add("spec.target.serviceRef and the capture's endpoints", "*", "", []string{"services"}, rw, "")
	add("the capture's endpoints (with the capture only)", "*", "discovery.k8s.io", []string{"endpointslices"}, rw, "")
	add("its own webhooks' caBundle", "*", "admissionregistration.k8s.io", []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}, []string{"get", "update"},
		"heatsink-mutating-webhook-configuration,heatsink-validating-webhook-configuration")
	add("metrics authentication", "*", "authentication.k8s.io", []string{"tokenreviews"}, []string{"create"}, "")
	add("metrics authorization", "*", "authorization.k8s.io", []string{"subjectaccessreviews"}, []string{"create"}, "")
	add("policies' Events", "*", "events.k8s.io", []string{"events"}, []string{"create", "patch"}, "")
	add("policies", "*", "heatsink.dev", []string{"hotkeypolicies"}, []string{"get", "list", "watch", "patch"}, "")
	add("policies' finalizer", "*", "heatsink.dev", []string{"hotkeypolicies/finalizers"}, []string{"update"}, "")
	add("policies' status", "*", "heatsink.dev", []string{"hotkeypolicies/status"}, []string{"patch"}, "")
	add("reports", "*", "heatsink.dev", []string{"hotkeyreports"}, []string{"create", "patch"}, "")
	add("targets", "*", "heatsink.dev", []string{"clusterredistargets"}, rw, "")
	add("webhook certificate, fleet token, key-names HMAC key, raw routing of policies with hidden key names", "release", "", []string{"secrets"}, []string{"get", "create", "update", "delete"}, "")
	add("its own Pod (the sidecar's image)", "release", "", []string{"pods"}, []string{"get"}, "")
	add("leader election", "release", "coordination.k8s.io", []string{"leases"}, []string{"get", "create", "update"}, "")
	add("leader election's Events", "release", "", []string{"events"}, []string{"create", "patch"}, "")
	add("leader election's Events", "release", "events.k8s.io", []string{"events"}, []string{"create", "patch"}, "")
	add("the Secrets policies name, where the installer allows", "listed", "", []string{"secrets"}, []string{"get"}, "")
	return out
}()

// managerRights lists the rights the RBAC objects of manifest give the
// ServiceAccount sa of namespace ns: the rules of every role a binding
// gives it, expanded to one right per verb, resource and namespace.
func managerRights(t *testing.T, objs []*unstructured.Unstructured, ns, sa string) []right {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{} // "Kind/namespace/name"
	var bindings []*rbacv1.RoleBinding
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole // same rules field
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			ns := o.GetNamespace()
			if o.GetKind() == "ClusterRole" {
				ns = ""
			}
			roles[o.GetKind()+"/"+ns+"/"+o.GetName()] = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			if o.GetKind() == "ClusterRoleBinding" {
				b.Namespace = ""
			}
			bindings = append(bindings, &b)
		}
	}
	var out []right
	for _, b := range bindings {
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == ns
		}) {
			continue
		}
		roleNS := ""
		if b.RoleRef.Kind == "Role" {
			roleNS = b.Namespace
		}
		rules, ok := roles[b.RoleRef.Kind+"/"+roleNS+"/"+b.RoleRef.Name]
		if !ok {
			t.Errorf("binding %s/%s names %s %s, not in the install", b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		scope := b.Namespace // a RoleBinding's rights are its namespace's
		if scope == "" {
			scope = "*"
		}
		for _, r := range rules {
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("the manager holds non-resource URLs %v", r.NonResourceURLs)
			}
			names := append([]string(nil), r.ResourceNames...)
			sort.Strings(names)
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out = append(out, right{scope, g, res, v, strings.Join(names, ",")})
					}
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return slices.Compact(out)
}

// broaderThanAllowed returns the rights not in allowedRights: ns is the
// install's namespace, listed the namespaces allowed Secrets.
func broaderThanAllowed(rights []right, ns string, listed []string) []right {
	var out []right
	for _, r := range rights {
		key := r
		switch {
		case r.namespace == ns:
			key.namespace = "release"
		case slices.Contains(listed, r.namespace):
			key.namespace = "listed"
		}
		if _, ok := allowedRights[key]; !ok {
			// A right limited to names is allowed where the same right is
			// for any name.
			key.names = ""
			if _, ok := allowedRights[key]; !ok || r.names == "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// TestManagerRightsAreTheAllowedOnes lists the manager's effective rights
// in the chart (default values, with the capture, with Secret namespaces)
// and in kustomize's config/default, and fails on any right broader than
// allowedRights: no cluster-wide Secret read, no pod get outside its
// namespace, no wildcard.
func TestManagerRightsAreTheAllowedOnes(t *testing.T) {
	tl := findTools(t)
	for name, tc := range map[string]struct {
		manifest func() []byte
		listed   []string
	}{
		"chart":              {manifest: func() []byte { return helmTemplate(t, tl, nil) }},
		"chart, capture":     {manifest: func() []byte { return helmTemplate(t, tl, valueSets["node-agent-capture"]) }},
		"chart, secret nses": {manifest: func() []byte { return helmTemplate(t, tl, valueSets["secret-namespaces"]) }, listed: []string{"shop", "social"}},
		"kustomize": {manifest: func() []byte {
			return run(t, ".", tl.kubectl, "kustomize", filepath.Join(tl.root, "config", "default"))
		}},
	} {
		t.Run(name, func(t *testing.T) {
			rights := managerRights(t, objects(t, tc.manifest()), namespace, "heatsink-manager")
			if len(rights) == 0 {
				t.Fatal("no right found for the manager's ServiceAccount: the bindings were not read")
			}
			var lines []string
			for _, r := range rights {
				lines = append(lines, r.String())
			}
			t.Logf("the manager's rights:\n%s", strings.Join(lines, "\n"))
			for _, r := range broaderThanAllowed(rights, namespace, tc.listed) {
				t.Errorf("the manager may %s, which is not an allowed right", r)
			}
		})
	}
}

// TestBroaderThanAllowed: the check itself, on rights the installs must
// never grant.
func TestBroaderThanAllowed(t *testing.T) {
	for _, r := range []right{
		{"*", "", "secrets", "get", ""},
		{"*", "", "pods", "get", ""},
		{"*", "", "configmaps", "update", ""},
		{"*", "*", "*", "*", ""},
		{"kube-system", "", "secrets", "get", ""},
		{"*", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "update", ""},
	} {
		if got := broaderThanAllowed([]right{r}, namespace, nil); len(got) != 1 {
			t.Errorf("%s passed the check", r)
		}
	}
	if got := broaderThanAllowed([]right{{namespace, "", "secrets", "get", ""}, {"shop", "", "secrets", "get", ""}}, namespace, []string{"shop"}); len(got) != 0 {
		t.Errorf("allowed rights refused: %v", got)
	}
}

// TestManagerWritesOnlyItsRoutingConfigMaps: with the chart's RBAC and
// ValidatingAdmissionPolicy in a real API server, the manager's
// ServiceAccount cannot create a ConfigMap other than a routing one it
// owns (kube-system's configuration, say), nor take over or delete a
// <policy>-routing ConfigMap someone else created; it can write its own.
func TestManagerWritesOnlyItsRoutingConfigMaps(t *testing.T) {
	tl := findTools(t)
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	manifest := helmTemplate(t, tl, nil)
	applyRBAC(t, cp, manifest)
	for _, o := range objects(t, manifest) {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			if err := cp.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cp.CreateNamespace(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	mgr, err := client.New(asUser(cp, managerSA, "system:serviceaccounts", "system:serviceaccounts:"+namespace, "system:authenticated"), client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	owner := metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "HotKeyPolicy", Name: "catalogue", UID: "0b5e3c2e-0000-4000-8000-000000000001", Controller: ptr.To(true)}
	routingCM := func(ns, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{controllers.LabelManagedBy: "heatsink"}, OwnerReferences: []metav1.OwnerReference{owner}}}
	}
	// The admission policy takes a moment to be in force (the API server
	// loads it from an informer): until a forbidden write is refused.
	var err1 error
	if err := eventually.Poll(ctx, 30*time.Second, func() error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cluster-config"}}
		if err1 = mgr.Create(ctx, cm); err1 == nil {
			_ = cp.Client.Delete(ctx, cm)
			return fmt.Errorf("the manager created kube-system/cluster-config")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(err1.Error(), "writes only routing ConfigMaps") {
		t.Errorf("refusal %v does not name the rule", err1)
	}
	unlabelled := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "catalogue-routing"}}
	if err := mgr.Create(ctx, unlabelled); err == nil {
		t.Error("the manager created a routing ConfigMap without heatsink's label and owner")
	}
	// Someone else's <policy>-routing: never taken over or deleted.
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sale-routing"}, Data: map[string]string{"k": "v"}}
	if err := cp.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	taken := foreign.DeepCopy()
	taken.Labels, taken.OwnerReferences = routingCM("", "").Labels, []metav1.OwnerReference{owner}
	if err := mgr.Patch(ctx, taken, client.MergeFrom(foreign)); err == nil || !strings.Contains(err.Error(), "does not take over") {
		t.Errorf("taking over someone else's ConfigMap: %v", err)
	}
	if err := mgr.Delete(ctx, foreign); err == nil {
		t.Error("the manager deleted someone else's ConfigMap")
	}
	// Its own: created, updated, deleted.
	own := routingCM("shop", "catalogue-routing")
	if err := mgr.Create(ctx, own); err != nil {
		t.Fatalf("the manager cannot create its routing ConfigMap: %v", err)
	}
	before := own.DeepCopy()
	own.Data = map[string]string{"routing.json": "{}"}
	if err := mgr.Patch(ctx, own, client.MergeFrom(before)); err != nil {
		t.Errorf("the manager cannot update its routing ConfigMap: %v", err)
	}
	if err := mgr.Delete(ctx, own); err != nil {
		t.Errorf("the manager cannot delete its routing ConfigMap: %v", err)
	}
}
