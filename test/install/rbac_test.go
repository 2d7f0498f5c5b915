package install

import (
	"context"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

// applyRBAC creates the RBAC objects (and ServiceAccounts) of a rendered
// chart, so the API server's authorizer decides with exactly those rules.
func applyRBAC(t *testing.T, cp *controlplane.ControlPlane, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	var out []*unstructured.Unstructured
	for _, o := range objects(t, manifest) {
		switch o.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount":
		default:
			continue
		}
		if ns := o.GetNamespace(); ns != "" {
			if err := cp.CreateNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
		}
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		out = append(out, o)
	}
	rbacSettled(t, cp)
	return out
}

// rbacSettled waits until the API server's authorizer sees what was just
// created. It authorises from informers, so a review made at once can miss
// a binding created a moment before (a loaded machine's fresh-clone run
// read a granted Secret as denied). Each kind has its informer, which
// delivers in order: a marker Role, RoleBinding, ClusterRole and
// ClusterRoleBinding created last, once in force, mean everything before
// them of their kinds is.
func rbacSettled(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	const user, name = "heatsink-test-rbac-settled", "heatsink-test-rbac-settled"
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}
	subjects := []rbacv1.Subject{{Kind: "User", Name: user}}
	for _, o := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Rules: rules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}},
	} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatalf("the RBAC marker: %v", err)
		}
	}
	err := eventually.Poll(ctx, 10*time.Second, func() error {
		if !can(t, cp, user, nil, authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "configmaps"}) ||
			!can(t, cp, user, nil, authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes"}) {
			return fmt.Errorf("the marker's rights are not in force yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func can(t *testing.T, cp *controlplane.ControlPlane, user string, groups []string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs}}
	if err := cp.Client.Create(context.Background(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// TestAggregatedRolesLetTeamsWritePolicies checks the chart's ClusterRoles
// for the built-in roles: labelled for aggregation into edit/admin and view,
// and, bound in a namespace as the aggregation binds them, letting an
// editor write policies and a viewer only read them. (The aggregation itself
// is kube-controller-manager's, which a bare API server does not run.)
func TestAggregatedRolesLetTeamsWritePolicies(t *testing.T) {
	tl := findTools(t)
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	objs := applyRBAC(t, cp, helmTemplate(t, tl, nil))
	labels := map[string]map[string]string{}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" {
			labels[o.GetName()] = o.GetLabels()
		}
	}
	if labels["heatsink-edit"]["rbac.authorization.k8s.io/aggregate-to-edit"] != "true" || labels["heatsink-edit"]["rbac.authorization.k8s.io/aggregate-to-admin"] != "true" {
		t.Errorf("heatsink-edit is not aggregated into edit and admin: %v", labels["heatsink-edit"])
	}
	if labels["heatsink-view"]["rbac.authorization.k8s.io/aggregate-to-view"] != "true" {
		t.Errorf("heatsink-view is not aggregated into view: %v", labels["heatsink-view"])
	}
	if err := cp.CreateNamespace(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	for user, role := range map[string]string{"alice": "heatsink-edit", "bob": "heatsink-view"} {
		rb := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
			"metadata": map[string]any{"name": user, "namespace": "shop"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
			"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}},
		}}
		if err := cp.Client.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user string) client.Client {
		cfg := rest.CopyConfig(cp.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	newPolicy := func(name string) *v1alpha1.HotKeyPolicy {
		p := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
		p.Spec.Target.Addresses = []string{"redis.shop.svc:6379"}
		return p
	}
	alice, bob := as("alice"), as("bob")
	if err := alice.Create(ctx, newPolicy("catalogue")); err != nil {
		t.Fatalf("an editor cannot create a policy: %v", err)
	}
	if err := bob.Create(ctx, newPolicy("other")); !apierrors.IsForbidden(err) {
		t.Errorf("a viewer created a policy (err %v)", err)
	}
	got := &v1alpha1.HotKeyPolicy{}
	if err := bob.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "catalogue"}, got); err != nil {
		t.Errorf("a viewer cannot read a policy: %v", err)
	}
	if err := bob.List(ctx, &v1alpha1.HotKeyReportList{}, client.InNamespace("shop")); err != nil {
		t.Errorf("a viewer cannot list reports: %v", err)
	}
	if err := alice.Delete(ctx, got); err != nil {
		t.Errorf("an editor cannot delete a policy: %v", err)
	}
}

// TestManagerSecretAccess checks what the manager may do with Secrets:
// get, never list or watch, only in the namespaces rbac.secretNamespaces
// lists (none by default), besides its own.
func TestManagerSecretAccess(t *testing.T) {
	tl := findTools(t)
	for name, tc := range map[string]struct {
		args               []string
		shopGet, socialGet bool
	}{
		"default: no Secret outside its namespace": {nil, false, false},
		"narrowed to shop":                         {[]string{"--set", "rbac.secretNamespaces={shop}"}, true, false},
	} {
		t.Run(name, func(t *testing.T) {
			cp := testenv.Start(t, controlplane.Options{})
			applyRBAC(t, cp, helmTemplate(t, tl, tc.args))
			const sa = "system:serviceaccount:" + namespace + ":heatsink-manager"
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
			secret := func(ns, verb string) bool {
				return can(t, cp, sa, groups, authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "secrets"})
			}
			if got := secret("shop", "get"); got != tc.shopGet {
				t.Errorf("get secrets in shop: %v, want %v", got, tc.shopGet)
			}
			if got := secret("social", "get"); got != tc.socialGet {
				t.Errorf("get secrets in social: %v, want %v", got, tc.socialGet)
			}
			for _, verb := range []string{"list", "watch"} {
				if secret("shop", verb) {
					t.Errorf("the manager may %s secrets in shop: it reads them by name only", verb)
				}
			}
			// Its own namespace: the webhook certificate and fleet token.
			if !secret(namespace, "create") {
				t.Error("the manager cannot create its certificate Secret in its own namespace")
			}
		})
	}
}

// TestManagerCaptureAccess checks the manager's rights on Services and
// EndpointSlices: EndpointSlices only the capture's endpoints need (a
// manager with --capture-pods watches them in every namespace,
// docs/capture.md): get, list and watch with nodeAgent.capture.enabled, in
// every namespace, and nothing else; none without the capture, nor with the
// capture asked for but no node agent (the chart then does not pass
// --capture-pods). Services are read (never written) in every case: a
// policy's spec.target.serviceRef names one.
func TestManagerCaptureAccess(t *testing.T) {
	tl := findTools(t)
	for name, tc := range map[string]struct {
		args []string
		read bool
	}{
		"default":                  {nil, false},
		"capture":                  {[]string{"--set", "nodeAgent.capture.enabled=true"}, true},
		"capture without an agent": {[]string{"--set", "nodeAgent.capture.enabled=true,nodeAgent.enabled=false"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			cp := testenv.Start(t, controlplane.Options{})
			applyRBAC(t, cp, helmTemplate(t, tl, tc.args))
			const sa = "system:serviceaccount:" + namespace + ":heatsink-manager"
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
			for _, res := range []struct{ group, resource string }{{"", "services"}, {"discovery.k8s.io", "endpointslices"}} {
				for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
					for _, where := range []string{"shop", ""} {
						got := can(t, cp, sa, groups, authorizationv1.ResourceAttributes{Namespace: where, Verb: verb, Group: res.group, Resource: res.resource})
						// Services are read without the capture too
						// (spec.target.serviceRef).
						want := (tc.read || res.resource == "services") && (verb == "get" || verb == "list" || verb == "watch")
						if got != want {
							t.Errorf("%s %s in namespace %q: allowed %v, want %v", verb, res.resource, where, got, want)
						}
					}
				}
			}
		})
	}
}
