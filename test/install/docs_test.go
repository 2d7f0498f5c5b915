package install

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/docblock"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/webhook"
)

// lifecycle is a control plane on which docs/install.md's commands run.
type lifecycle struct {
	cp   *controlplane.ControlPlane
	docs map[string]docblock.Block
	sh   docblock.Shell
	ctx  context.Context
	// installed keeps the install's own webhook client configurations
	// (its Service) while they point at the in-process manager.
	installed map[string]admissionregistrationv1.WebhookClientConfig
}

func newLifecycle(t *testing.T) *lifecycle {
	t.Helper()
	// envtest installs config/webhook's configurations pointing at a local
	// server, which the in-process manager serves.
	return newLifecycleWith(t, controlplane.Options{Webhooks: true})
}

func newLifecycleWith(t *testing.T, opts controlplane.Options) *lifecycle {
	t.Helper()
	tl := findTools(t)
	cp := testenv.Start(t, opts)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	return &lifecycle{
		cp:   cp,
		docs: docblock.Load(t, tl.root, "docs/install.md"),
		sh: docblock.Shell{Dir: tl.root, Tools: map[string]string{"kubectl": tl.kubectl, "helm": tl.helm},
			Env: []string{"KUBECONFIG=" + kubeconfig, "HOME=" + home, "HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
				"HELM_CONFIG_HOME=" + filepath.Join(home, "config"), "HELM_DATA_HOME=" + filepath.Join(home, "data")}},
		ctx:       context.Background(),
		installed: map[string]admissionregistrationv1.WebhookClientConfig{},
	}
}

func (l *lifecycle) run(t *testing.T, block string) string {
	t.Helper()
	return l.sh.Run(t, docblock.Get(t, l.docs, block))
}

// startManager stands in for the manager's Pods, which a control plane
// without nodes cannot run: the reconciler and the policy webhook, in this
// process. The returned function stops it, as uninstalling would.
func (l *lifecycle) startManager(t *testing.T) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(l.cp.Config, l.cp.ManagerOptions())
	if err != nil {
		t.Fatal(err)
	}
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "test", WarmUp: -1})
	if err != nil {
		t.Fatal(err)
	}
	// The docs' policies write raw addresses: the installer's opt-in.
	if err := webhook.SetupHotKeyPolicyWebhook(mgr, targets.Options{AllowRawAddresses: true}); err != nil {
		t.Fatal(err)
	}
	r := &controllers.HotKeyPolicyReconciler{SkipNameValidation: true, RedisTimeout: 2 * time.Second, Fleet: h, Targets: targets.Options{AllowRawAddresses: true}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	checker := mgr.GetWebhookServer().StartedChecker()
	if err := eventually.Poll(ctx, 30*time.Second, func() error { return checker(nil) }); err != nil {
		t.Fatalf("webhook server not serving: %v", err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// pointWebhooksAtManager makes the webhook configurations an install
// created (heatsink-*) call the in-process manager, as their Service would
// call the manager's Pods.
func (l *lifecycle) pointWebhooksAtManager(t *testing.T) {
	t.Helper()
	local := map[string]admissionregistrationv1.WebhookClientConfig{}
	for _, o := range l.cp.Env.WebhookInstallOptions.MutatingWebhooks {
		for _, w := range o.Webhooks {
			local[w.Name] = w.ClientConfig
		}
	}
	for _, o := range l.cp.Env.WebhookInstallOptions.ValidatingWebhooks {
		for _, w := range o.Webhooks {
			local[w.Name] = w.ClientConfig
		}
	}
	// envtest's copies hold the local URL but not the CA: read them back.
	vl := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	ml := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := l.cp.Client.List(l.ctx, vl); err != nil {
		t.Fatal(err)
	}
	if err := l.cp.Client.List(l.ctx, ml); err != nil {
		t.Fatal(err)
	}
	for _, c := range vl.Items {
		if !strings.HasPrefix(c.Name, "heatsink-") {
			for _, w := range c.Webhooks {
				local[w.Name] = w.ClientConfig
			}
		}
	}
	for _, c := range ml.Items {
		if !strings.HasPrefix(c.Name, "heatsink-") {
			for _, w := range c.Webhooks {
				local[w.Name] = w.ClientConfig
			}
		}
	}
	for i := range vl.Items {
		c := &vl.Items[i]
		if !strings.HasPrefix(c.Name, "heatsink-") {
			continue
		}
		for j := range c.Webhooks {
			l.installed[c.Name+"/"+c.Webhooks[j].Name] = c.Webhooks[j].ClientConfig
			c.Webhooks[j].ClientConfig = local[c.Webhooks[j].Name]
		}
		if err := l.cp.Client.Update(l.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for i := range ml.Items {
		c := &ml.Items[i]
		if !strings.HasPrefix(c.Name, "heatsink-") {
			continue
		}
		for j := range c.Webhooks {
			if cc, ok := local[c.Webhooks[j].Name]; ok {
				l.installed[c.Name+"/"+c.Webhooks[j].Name] = c.Webhooks[j].ClientConfig
				c.Webhooks[j].ClientConfig = cc
			}
		}
		if err := l.cp.Client.Update(l.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
}

// restoreWebhooks gives the install's webhook configurations their own
// client configuration back (the Service), as they are in a real cluster,
// before an upgrade applies them again.
func (l *lifecycle) restoreWebhooks(t *testing.T) {
	t.Helper()
	vl := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	ml := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := l.cp.Client.List(l.ctx, vl); err != nil {
		t.Fatal(err)
	}
	if err := l.cp.Client.List(l.ctx, ml); err != nil {
		t.Fatal(err)
	}
	for i := range vl.Items {
		c := &vl.Items[i]
		for j := range c.Webhooks {
			if cc, ok := l.installed[c.Name+"/"+c.Webhooks[j].Name]; ok {
				c.Webhooks[j].ClientConfig = cc
			}
		}
		if err := l.cp.Client.Update(l.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for i := range ml.Items {
		c := &ml.Items[i]
		for j := range c.Webhooks {
			if cc, ok := l.installed[c.Name+"/"+c.Webhooks[j].Name]; ok {
				c.Webhooks[j].ClientConfig = cc
			}
		}
		if err := l.cp.Client.Update(l.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
}

// applyPolicy runs the documented policy apply and waits for the manager
// to take the policy in hand (finalizer, status).
func (l *lifecycle) applyPolicy(t *testing.T) {
	t.Helper()
	if err := l.cp.CreateNamespace(l.ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if out := l.run(t, "apply-policy"); !strings.Contains(out, "catalogue") {
		t.Errorf("kubectl get hotkeypolicies does not list the policy:\n%s", out)
	}
	key := types.NamespacedName{Namespace: "shop", Name: "catalogue"}
	err := eventually.Poll(l.ctx, time.Minute, func() error {
		p := &v1alpha1.HotKeyPolicy{}
		if err := l.cp.Client.Get(l.ctx, key, p); err != nil {
			return err
		}
		if len(p.Finalizers) == 0 || p.Status.ObservedGeneration != p.Generation {
			return fmt.Errorf("policy not reconciled yet: finalizers %v, status %+v", p.Finalizers, p.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGetShowsDegraded checks kubectl get hotkeypolicies: a policy can be
// Ready (published) and Degraded (its Redis unreachable) at once, and both
// columns show it.
func TestGetShowsDegraded(t *testing.T) {
	l := newLifecycleWith(t, controlplane.Options{})
	if err := l.cp.CreateNamespace(l.ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.HotKeyPolicy{}
	p.Namespace, p.Name = "shop", "catalogue"
	p.Spec.Target.Addresses = []string{"redis.shop.svc:6379"}
	if err := l.cp.Client.Create(l.ctx, p); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	p.Status.Conditions = []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPublished, Message: "published", LastTransitionTime: now},
		{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRedisUnavailable, Message: "dial tcp: no such host", LastTransitionTime: now},
	}
	if err := l.cp.Client.Status().Update(l.ctx, p); err != nil {
		t.Fatal(err)
	}
	out := l.sh.Run(t, docblock.Block{Name: "get hkp", Lang: "sh", Text: "kubectl -n shop get hkp catalogue\n"})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get hkp:\n%s", out)
	}
	// Columns are aligned; empty cells make whitespace splitting wrong.
	cols := map[string]string{}
	for _, name := range []string{"READY", "DEGRADED"} {
		i := strings.Index(lines[0], name)
		if i < 0 || i >= len(lines[1]) {
			continue
		}
		cols[name] = strings.Fields(lines[1][i:])[0]
	}
	if cols["READY"] != "True" || cols["DEGRADED"] != "True" {
		t.Errorf("kubectl get hkp shows READY=%q DEGRADED=%q, want True and True:\n%s", cols["READY"], cols["DEGRADED"], out)
	}
}

// nothingLeft checks that an uninstall left no heatsink object behind:
// CRDs, cluster-wide RBAC and webhooks, routing ConfigMaps.
func (l *lifecycle) nothingLeft(t *testing.T) {
	t.Helper()
	eventually.True(t, 2*time.Minute, "heatsink's CRDs are deleted", func() bool {
		for _, name := range []string{"hotkeypolicies.heatsink.dev", "hotkeyreports.heatsink.dev"} {
			err := l.cp.Client.Get(l.ctx, types.NamespacedName{Name: name}, crdObject())
			if !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
	var left []string
	crs := &rbacv1.ClusterRoleList{}
	crbs := &rbacv1.ClusterRoleBindingList{}
	vw := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	mw := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	cms := &corev1.ConfigMapList{}
	for _, list := range []client.ObjectList{crs, crbs, vw, mw} {
		if err := l.cp.Client.List(l.ctx, list); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.cp.Client.List(l.ctx, cms, client.MatchingLabels{controllers.LabelManagedBy: "heatsink"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range crs.Items {
		if strings.HasPrefix(c.Name, "heatsink-") {
			left = append(left, "ClusterRole "+c.Name)
		}
	}
	for _, c := range crbs.Items {
		if strings.HasPrefix(c.Name, "heatsink-") {
			left = append(left, "ClusterRoleBinding "+c.Name)
		}
	}
	for _, c := range vw.Items {
		if strings.HasPrefix(c.Name, "heatsink-") {
			left = append(left, "ValidatingWebhookConfiguration "+c.Name)
		}
	}
	for _, c := range mw.Items {
		if strings.HasPrefix(c.Name, "heatsink-") {
			left = append(left, "MutatingWebhookConfiguration "+c.Name)
		}
	}
	for _, c := range cms.Items {
		left = append(left, "ConfigMap "+c.Namespace+"/"+c.Name)
	}
	if len(left) > 0 {
		t.Errorf("left behind by the uninstall: %v", left)
	}
	ns := &corev1.Namespace{}
	if err := l.cp.Client.Get(l.ctx, types.NamespacedName{Name: namespace}, ns); err == nil && ns.DeletionTimestamp.IsZero() {
		t.Errorf("namespace %s is not being deleted", namespace)
	}
}

// TestHelmLifecycleAsDocumented runs docs/install.md with Helm: install,
// a policy, upgrade, uninstall (policies first, while the manager runs;
// then the release, CRDs, run-time Secrets and namespace), and checks that
// nothing is left and nothing is stuck.
func TestHelmLifecycleAsDocumented(t *testing.T) {
	l := newLifecycle(t)
	// The chart requires Kubernetes >= 1.30 and helm asks the server.
	if out := l.sh.Run(t, docblock.Block{Name: "version", Lang: "sh", Text: "kubectl get --raw /version\n"}); strings.Contains(out, `"gitVersion": "v0.0.0`) {
		t.Fatalf("the test's kube-apiserver does not report its version, so helm refuses the chart's kubeVersion: run `make envtest`, which rebuilds it stamped\n%s", out)
	}
	stop := l.startManager(t)
	l.run(t, "install-helm")
	l.pointWebhooksAtManager(t)
	l.applyPolicy(t)
	l.restoreWebhooks(t)
	l.run(t, "upgrade-helm")
	l.pointWebhooksAtManager(t)
	if out := l.sh.Run(t, docblock.Block{Name: "history", Lang: "sh", Text: "helm history heatsink -n heatsink-system\n"}); !strings.Contains(out, "Upgrade complete") {
		t.Errorf("the upgrade is not in the release history:\n%s", out)
	}
	if out := l.run(t, "uninstall-policies"); !strings.Contains(out, "No resources found") {
		t.Errorf("policies left after the documented delete:\n%s", out)
	}
	stop() // helm uninstall removes the manager's Pods
	l.run(t, "uninstall-helm")
	l.nothingLeft(t)
}

// TestKustomizeLifecycleAsDocumented is the same with kustomize.
func TestKustomizeLifecycleAsDocumented(t *testing.T) {
	l := newLifecycle(t)
	stop := l.startManager(t)
	l.run(t, "install-kustomize")
	l.pointWebhooksAtManager(t)
	l.applyPolicy(t)
	l.restoreWebhooks(t)
	l.run(t, "upgrade-kustomize")
	l.pointWebhooksAtManager(t)
	if out := l.run(t, "uninstall-policies"); !strings.Contains(out, "No resources found") {
		t.Errorf("policies left after the documented delete:\n%s", out)
	}
	stop()
	l.run(t, "uninstall-kustomize")
	l.nothingLeft(t)
}

// TestUninstallWithoutManager is the mistake: the manager removed first. The
// policy's finalizer holds it, and the CRD's deletion with it; the
// documented recovery lets both go.
func TestUninstallWithoutManager(t *testing.T) {
	l := newLifecycle(t)
	stop := l.startManager(t)
	l.applyPolicy(t)
	eventually.True(t, time.Minute, "the routing ConfigMap is published with its finalizer", func() bool {
		cm := &corev1.ConfigMap{}
		err := l.cp.Client.Get(l.ctx, types.NamespacedName{Namespace: "shop", Name: "catalogue-routing"}, cm)
		return err == nil && len(cm.Finalizers) > 0
	})
	// Uninstalled: the manager's Pods and its webhook configurations are gone.
	stop()
	for _, o := range l.cp.Env.WebhookInstallOptions.ValidatingWebhooks {
		if err := l.cp.Client.Delete(l.ctx, o); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	for _, o := range l.cp.Env.WebhookInstallOptions.MutatingWebhooks {
		if err := l.cp.Client.Delete(l.ctx, o); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	crd := crdObject()
	crd.SetName("hotkeypolicies.heatsink.dev")
	if err := l.cp.Client.Delete(l.ctx, crd); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, time.Minute, "the CRD's deletion reaches the policy", func() bool {
		p := &v1alpha1.HotKeyPolicy{}
		err := l.cp.Client.Get(l.ctx, types.NamespacedName{Namespace: "shop", Name: "catalogue"}, p)
		return err == nil && !p.DeletionTimestamp.IsZero()
	})
	// Stuck: the policy waits for a manager that is gone.
	if err := l.cp.Client.Get(l.ctx, types.NamespacedName{Name: crd.GetName()}, crd); err != nil || crd.GetDeletionTimestamp() == nil {
		t.Fatalf("the CRD should be held in Terminating by the policy's finalizer (%v)", err)
	}
	l.run(t, "uninstall-stuck")
	eventually.True(t, 2*time.Minute, "the CRD's deletion completes", func() bool {
		return apierrors.IsNotFound(l.cp.Client.Get(l.ctx, types.NamespacedName{Name: crd.GetName()}, crdObject()))
	})
	cm := &corev1.ConfigMap{}
	if err := l.cp.Client.Get(l.ctx, types.NamespacedName{Namespace: "shop", Name: "catalogue-routing"}, cm); err == nil && len(cm.Finalizers) > 0 {
		t.Errorf("the routing ConfigMap keeps its finalizer %v: its namespace could never be deleted", cm.Finalizers)
	}
}

// crdObject is an empty CustomResourceDefinition (the test scheme does not
// register apiextensions' types).
func crdObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	return u
}
